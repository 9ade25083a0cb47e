# Measured evidence: the campaign's tables rendered in the published table's shape (R2_local), and R3.


rule render_R2_local:
    group:
        "pages"
    message:
        "R2_local: the tier runs of campaign {params.campaign} in the published R2 table's shape"
    input:
        notebook="notebooks/R2_local.ipynb",
        readings=f"{CAMPAIGN_DIR}/R2_readings.csv",
        rounds=f"{CAMPAIGN_DIR}/R2_rounds.csv",
        attribution=f"{CAMPAIGN_DIR}/attribution.csv",
        correctness=f"{CAMPAIGN_DIR}/correctness.csv",
        conditions=f"{CAMPAIGN_DIR}/conditions.json",
        # The published comparison in scale, where both L2 tiers are emulated, and the sweep whose model predicts it.
        published=[f"{PUBLISHED}/R2_readings.csv"] if SCALED_ON else [],
        sweep=[SWEEP_DIR] if SCALED_ON and SWEEP_ON else [],
        gate=G1_RECORD,
    output:
        html=report(f"{EVIDENCE}/R2_local/R2_local.html", **PAGE_REPORT["R2_local"]),
        executed=f"{EVIDENCE}/R2_local/R2_local.ipynb",
        table=f"{EVIDENCE}/R2_local/R2_local_table.csv",
        manifest=f"{EVIDENCE}/R2_local/manifest.json",
    params:
        campaign=RUNS["campaign"],
        argv=lambda wildcards, input, output: render_args(
            "R2_local", input.notebook, os.path.dirname(output.html),
            {"campaign_dir": os.path.dirname(input.readings), "published_readings": f"{PUBLISHED}/R2_readings.csv",
             "sweep_dir": input.sweep[0] if input.sweep else "", "chart_png_scale": RENDER["chart_png_scale"]},
            [input.readings, input.rounds, input.attribution, input.correctness, input.conditions, *input.published,
             *(f"{d}/{name}" for d in input.sweep for name in ("sweep.jsonl", "run.json")), *input.gate],
            gates=input.gate, **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R2_local.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"


rule render_R3:
    group:
        "pages"
    message:
        "R3: instance B resuming from the pool instance A wrote (campaign {params.campaign})"
    input:
        notebook="notebooks/R3.ipynb",
        readings=f"{CAMPAIGN_DIR}/R2_readings.csv",
        rounds=f"{CAMPAIGN_DIR}/R2_rounds.csv",
        attribution=f"{CAMPAIGN_DIR}/attribution.csv",
        correctness=f"{CAMPAIGN_DIR}/correctness.csv",
        conditions=f"{CAMPAIGN_DIR}/conditions.json",
        gate=G1_RECORD,
    output:
        html=report(f"{EVIDENCE}/R3/R3.html", **PAGE_REPORT["R3"]),
        executed=f"{EVIDENCE}/R3/R3.ipynb",
        table=f"{EVIDENCE}/R3/R3_table.csv",
        manifest=f"{EVIDENCE}/R3/manifest.json",
    params:
        campaign=RUNS["campaign"],
        argv=lambda wildcards, input, output: render_args(
            "R3", input.notebook, os.path.dirname(output.html),
            {"campaign_dir": os.path.dirname(input.readings), "chart_png_scale": RENDER["chart_png_scale"]},
            input[1:], gates=input.gate, **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R3.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"


rule render_R4:
    group:
        "pages"
    message:
        "R4: the platform and stack record of every run of campaign {params.campaign}, side by side"
    input:
        notebook="notebooks/R4.ipynb",
        runs=R4_INPUTS,
        campaign=rules.campaign.output.conditions,
        gate=G1_RECORD,
    output:
        html=report(f"{EVIDENCE}/R4/R4.html", **PAGE_REPORT["R4"]),
        executed=f"{EVIDENCE}/R4/R4.ipynb",
        table=f"{EVIDENCE}/R4/R4_platform.csv",
        manifest=f"{EVIDENCE}/R4/manifest.json",
    params:
        campaign=RUNS["campaign"],
        argv=lambda wildcards, input, output: render_args(
            "R4", input.notebook, os.path.dirname(output.html), {"runs_dir": CAMPAIGN_DIR},
            PLATFORM_RECORDS + [input.campaign],
            gates=input.gate, **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R4.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
