# R1 measured here: both LMCache builds' cold loads beside fio and checkpoint saves (r1_reads), the resume of
# 12k-token sessions from L2 (r1_resume), and the page (render_R1). Both runs hold the `measurement` resource.


rule r1_reads:
    input:
        builds=expand("build/lmcache/{variant}/build.json", variant=("upstream", "patched")),
    output:
        run=directory(f"{R1_DIR}/reads"),
    params:
        settings=R1_READ_SETTINGS,
    resources:
        measurement=1,
    log:
        f"logs/r1/{RUNS['campaign']}/reads.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier r1-reads --run-dir {output.run} --settings {params.settings:q} > {log} 2>&1"


rule r1_resume:
    input:
        model=f"{MODEL_DIR}/config.json",
        lmcache=[f"{LMCACHE_BUILD}/build.json"] if LMCACHE_BUILD else [],
    output:
        run=directory(f"{R1_DIR}/resume"),
    params:
        settings=TIER_SETTINGS,
        resume=R1_RESUME_SETTINGS,
    resources:
        measurement=1,
    log:
        f"logs/r1/{RUNS['campaign']}/resume.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier r1-resume --run-dir {output.run} --settings {params.settings:q} --resume {params.resume:q}"
        " > {log} 2>&1"


rule render_R1:
    input:
        notebook="notebooks/R1.ipynb",
        reads=f"{R1_DIR}/reads",
        resume=f"{R1_DIR}/resume",
        claims=f"{PUBLISHED}/claims.yaml",
    output:
        html=f"{EVIDENCE}/R1/R1.html",
        executed=f"{EVIDENCE}/R1/R1.ipynb",
        targets=f"{EVIDENCE}/R1/R1_targets.csv",
        manifest=f"{EVIDENCE}/R1/manifest.json",
    params:
        r1_dir=lambda wildcards, input: os.path.dirname(input.reads),
        published=lambda wildcards, input: os.path.dirname(input.claims),
        out_dir=lambda wildcards, output: os.path.dirname(output.html),
        flags=RENDER_FLAGS,
        png_scale=RENDER["chart_png_scale"],
        inputs=lambda wildcards, input: " ".join(
            f"--input {path}"
            for path in [*(f"{os.path.dirname(input.reads)}/{name}" for name in R1_RAW_FILES), input.claims]
        ),
    log:
        "logs/render_R1.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render R1 --notebook {input.notebook} --out-dir {params.out_dir} {params.flags}"
        " --param r1_dir={params.r1_dir} --param out_dir={params.out_dir} --param published_dir={params.published}"
        " --param chart_png_scale={params.png_scale}"
        " {params.inputs} > {log} 2>&1"
