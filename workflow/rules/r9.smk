# R9 measured here: vLLM loading one generated model's weights from the local-disk and pool paths, cold and warm,
# beside the raw read of its weight files (kvtier.runs.r9), then the page.


rule model_r9:
    group:
        "prepare"
    message:
        "R9's model, generated locally and larger than the served one: {output.config}"
    output:
        config=f"{R9_MODEL_DIR}/config.json",
    params:
        argv=lambda wildcards, output: [
            "--out", os.path.dirname(output.config),
            *(word for key, value in R9["generate"].items() for word in (f"--{key.replace('_', '-')}", value)),
        ],
    resources:
        **SMALL_JOB,
        measurement=HALF_SLOT,
    log:
        "logs/model_r9.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier model {params.argv:q} > {log:q} 2>&1"


rule r9_loads:
    group:
        PROBES_GROUP
    message:
        f"R9: vLLM loading {R9_MODEL_DIR} from each tier path, cold and warm, {{params.repetitions}} repetitions"
    input:
        model=built([rules.model_r9.output.config]),
        gate=[ancient(flag) for flag in G1_FLAG],
    output:
        run=directory(R9_DIR),
    params:
        repetitions=R9["repetitions"],
        settings=json.dumps({**json.loads(R9_SETTINGS), "model_dir": R9_MODEL_DIR}),
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/r9/{RUNS['campaign']}/loads.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier r9-loads --run-dir {output.run:q} --settings {params.settings:q} > {log:q} 2>&1"


rule render_R9:
    group:
        "pages"
    message:
        "R9: model-weight load per tier path, cold and warm, from {input.loads}"
    input:
        notebook="notebooks/R9.ipynb",
        loads=rules.r9_loads.output.run,
        claims=f"{PUBLISHED}/claims.yaml",
        gate=G1_RECORD,
    output:
        html=report(f"{EVIDENCE}/R9/R9.html", **PAGE_REPORT["R9"]),
        executed=f"{EVIDENCE}/R9/R9.ipynb",
        table=f"{EVIDENCE}/R9/R9_table.csv",
        comparisons=f"{EVIDENCE}/R9/R9_comparisons.csv",
        chart=report(f"{EVIDENCE}/R9/R9_chart.svg", **CHART_REPORT["R9"]),
        manifest=f"{EVIDENCE}/R9/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "R9", input.notebook, os.path.dirname(output.html),
            {"r9_dir": input.loads, "claims": input.claims, "chart_png_scale": RENDER["chart_png_scale"]},
            [f"{input.loads}/loads.jsonl", f"{input.loads}/run.json", input.claims], gates=input.gate,
            **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R9.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
