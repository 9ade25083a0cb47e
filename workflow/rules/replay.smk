# Replay: regenerate published tables from the transcribed readings in raw_data/published.


rule render_R2:
    group:
        "pages"
    message:
        "R2: the published tiered cold-resume table regenerated from its readings"
    input:
        notebook="notebooks/R2.ipynb",
        readings=f"{PUBLISHED}/R2_readings.csv",
        conditions=f"{PUBLISHED}/R2_conditions.yaml",
        provenance=f"{PUBLISHED}/R2_provenance.yaml",
    output:
        html=report(f"{EVIDENCE}/R2/R2.html", **PAGE_REPORT["R2"]),
        executed=f"{EVIDENCE}/R2/R2.ipynb",
        table=f"{EVIDENCE}/R2/R2_table.csv",
        pool_vs_local=f"{EVIDENCE}/R2/R2_pool_vs_local_disk.csv",
        vs_recompute=f"{EVIDENCE}/R2/R2_vs_recompute.csv",
        png=report(f"{EVIDENCE}/R2/R2_chart.png", **CHART_REPORT["R2"]),
        svg=report(f"{EVIDENCE}/R2/R2_chart.svg", **CHART_REPORT["R2"]),
        manifest=f"{EVIDENCE}/R2/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "R2", input.notebook, os.path.dirname(output.html),
            {"published_dir": os.path.dirname(input.readings), "chart_png_scale": RENDER["chart_png_scale"]},
            [input.readings, input.conditions, input.provenance], **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R2.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
