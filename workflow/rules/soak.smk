# G4, the stability soak (kvtier.runs.soak; evidence R5), after G3 passed: the offload stack under open-loop
# sessions for soak.duration with soak.faults injected, then G4's verdict (kvtier.gates.g4), its flag, and the page.
# A soak that is stopped keeps its run directory (the rule's output is the summary the soak writes last, so Snakemake
# does not remove the directory): the rule resumes it (`--resume`) instead of starting anew.


rule soak:
    message:
        "G4 soak: the offload stack for {params.duration} under open-loop sessions, {params.faults} fault(s) "
        "scheduled, into {params.run}"
    input:
        model=MODEL_INPUT,
        lmcache=LMCACHE_INPUT,
        gate=f"{GATES_DIR}/G3.proceed",
    output:
        summary=f"{SOAK_DIR}/summary.json",
        platform=f"{SOAK_DIR}/probes/platform.json",
    params:
        run=lambda wildcards, output: os.path.dirname(output.summary),
        duration=SOAK["duration"],
        faults=len(SOAK["faults"]),
        settings=SOAK_SETTINGS,
        # A soak stopped part way (its run.json says incomplete) resumes where it stopped.
        resume=lambda wildcards, output: kvtier_soak.resumable(os.path.dirname(output.summary)),
    resources:
        **kvtier_cluster.runtime_for(SOAK_SECONDS, MEASURE_JOB),
        measurement=WHOLE_SLOT,
    log:
        f"logs/soak/{RUNS['campaign']}/soak.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier soak --run-dir {params.run:q} --settings {params.settings:q} {params.resume:q} > {log:q} 2>&1"


rule gate_g4:
    group:
        GATE_GROUP["G4"]
    message:
        "G4 stability soak: failures, drift, growth, the pool and every injected fault of {params.run}"
    input:
        summary=rules.soak.output.summary,
    output:
        record=f"{GATES_DIR}/G4.json",
    params:
        run=lambda wildcards, input: os.path.dirname(input.summary),
        settings=G4_SETTINGS,
    resources:
        **SMALL_JOB,
    log:
        f"logs/gates/{RUNS['campaign']}/G4.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier gate-g4 --soak-dir {params.run:q} --settings {params.settings:q} --out {output.record:q}"
        " > {log:q} 2>&1 || test -s {output.record:q}"


rule render_R5:
    group:
        "pages"
    message:
        "R5: the G4 soak's windows, faults and verdict, from {params.run}"
    input:
        notebook="notebooks/R5.ipynb",
        summary=rules.soak.output.summary,
        g4=rules.gate_g4.output.record,
        gate=GATES_BEFORE_SOAK,
    output:
        html=report(f"{EVIDENCE}/R5/R5.html", **PAGE_REPORT["R5"]),
        executed=f"{EVIDENCE}/R5/R5.ipynb",
        windows=f"{EVIDENCE}/R5/R5_windows.csv",
        faults=f"{EVIDENCE}/R5/R5_faults.csv",
        manifest=f"{EVIDENCE}/R5/manifest.json",
    params:
        run=lambda wildcards, input: os.path.dirname(input.summary),
        argv=lambda wildcards, input, output: render_args(
            "R5", input.notebook, os.path.dirname(output.html),
            {"soak_dir": os.path.dirname(input.summary), "g4_record": input.g4,
             "chart_png_scale": RENDER["chart_png_scale"]},
            [os.path.join(os.path.dirname(input.summary), name)
             for name in ("run.json", "requests.jsonl", "samples.jsonl", "events.jsonl")]
            + [input.summary, input.g4], gates=input.gate, **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R5.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
