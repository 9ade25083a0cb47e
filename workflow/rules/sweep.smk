# The bandwidth sweep measured here (evidence S; kvtier.runs.sweep): cold resumes from L2 on the emulated local_disk
# device at each read cap, beside recompute and DRAM, then the page. Only where the tiers are emulated (SWEEP_ON).


rule sweep_run:
    message:
        "S: cold resume from L2 at read caps {params.caps} of the emulated local_disk, beside recompute and DRAM"
    input:
        model=MODEL_INPUT,
        lmcache=LMCACHE_INPUT,
        gate=[ancient(flag) for flag in G1_FLAG],
    output:
        run=directory(SWEEP_DIR),
    params:
        caps=", ".join(SWEEP["read_caps"]),
        settings=TIER_SETTINGS,
        sweep=SWEEP_SPEC,
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/sweep/{RUNS['campaign']}/sweep.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier sweep-run --run-dir {output.run:q} --settings {params.settings:q} --sweep {params.sweep:q} "
        "> {log:q} 2>&1"


rule render_S:
    group:
        "pages"
    message:
        "S: the bandwidth sweep, its crossovers and the service model's held-out errors, from {input.sweep}"
    input:
        notebook="notebooks/S.ipynb",
        sweep=SWEEP_DIR,
        gate=G1_RECORD,
    output:
        html=report(f"{EVIDENCE}/S/S.html", **PAGE_REPORT["S"]),
        executed=f"{EVIDENCE}/S/S.ipynb",
        comparisons=f"{EVIDENCE}/S/S_comparisons.csv",
        crossovers=f"{EVIDENCE}/S/S_crossovers.csv",
        model=f"{EVIDENCE}/S/S_model.csv",
        chart=report(f"{EVIDENCE}/S/S_chart.svg", **CHART_REPORT["S"]),
        manifest=f"{EVIDENCE}/S/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "S", input.notebook, os.path.dirname(output.html),
            {"sweep_dir": input.sweep, "chart_png_scale": RENDER["chart_png_scale"]},
            [f"{input.sweep}/sweep.jsonl", f"{input.sweep}/run.json"], gates=input.gate, **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_S.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
