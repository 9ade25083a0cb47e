# R1 measured here: both LMCache builds' cold loads beside fio and checkpoint saves (r1_reads), the resume of
# 12k-token sessions from L2 (r1_resume), and the page (render_R1). All three hold the `measurement` resource.


rule r1_reads:
    group:
        PROBES_GROUP
    message:
        "R1 reads: both LMCache builds' cold loads beside fio, and checkpoint saves, into {output.run}"
    input:
        builds=built(expand("build/lmcache/{variant}/build.json", variant=("upstream", "patched"))),
        gate=[ancient(flag) for flag in G1_FLAG],
    output:
        run=directory(f"{R1_DIR}/reads"),
    params:
        settings=R1_READ_SETTINGS,
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/r1/{RUNS['campaign']}/reads.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier r1-reads --run-dir {output.run:q} --settings {params.settings:q} > {log:q} 2>&1"


rule r1_resume:
    group:
        PROBES_GROUP
    message:
        "R1 resume: 12k-token sessions from L2 beside the raw read of their chunks, into {output.run}"
    input:
        model=MODEL_INPUT,
        lmcache=LMCACHE_INPUT,
        gate=[ancient(flag) for flag in G1_FLAG],
    output:
        run=directory(f"{R1_DIR}/resume"),
    params:
        settings=TIER_SETTINGS,
        resume=R1_RESUME_SETTINGS,
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/r1/{RUNS['campaign']}/resume.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier r1-resume --run-dir {output.run:q} --settings {params.settings:q} --resume {params.resume:q}"
        " > {log:q} 2>&1"


rule render_R1:
    group:
        "pages"
    message:
        "R1: the parallel-read patch against upstream and the device, from {input.reads}"
    input:
        notebook="notebooks/R1.ipynb",
        reads=f"{R1_DIR}/reads",
        resume=f"{R1_DIR}/resume",
        claims=f"{PUBLISHED}/claims.yaml",
        gate=G1_RECORD,
    output:
        html=report(f"{EVIDENCE}/R1/R1.html", **PAGE_REPORT["R1"]),
        executed=f"{EVIDENCE}/R1/R1.ipynb",
        targets=f"{EVIDENCE}/R1/R1_targets.csv",
        manifest=f"{EVIDENCE}/R1/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "R1", input.notebook, os.path.dirname(output.html),
            {"r1_dir": os.path.dirname(input.reads), "published_dir": os.path.dirname(input.claims),
             "chart_png_scale": RENDER["chart_png_scale"]},
            [*(f"{os.path.dirname(input.reads)}/{name}" for name in R1_RAW_FILES), input.claims],
            gates=input.gate, **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R1.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
