# Replay: regenerate published tables from the transcribed readings in raw_data/published.


rule render_R2:
    input:
        notebook="notebooks/R2.ipynb",
        readings=f"{PUBLISHED}/R2_readings.csv",
        conditions=f"{PUBLISHED}/R2_conditions.yaml",
        provenance=f"{PUBLISHED}/R2_provenance.yaml",
    output:
        html=f"{EVIDENCE}/R2/R2.html",
        executed=f"{EVIDENCE}/R2/R2.ipynb",
        table=f"{EVIDENCE}/R2/R2_table.csv",
        pool_vs_local=f"{EVIDENCE}/R2/R2_pool_vs_local_disk.csv",
        vs_recompute=f"{EVIDENCE}/R2/R2_vs_recompute.csv",
        png=f"{EVIDENCE}/R2/R2_chart.png",
        svg=f"{EVIDENCE}/R2/R2_chart.svg",
        manifest=f"{EVIDENCE}/R2/manifest.json",
    params:
        published=lambda wildcards, input: os.path.dirname(input.readings),
        out_dir=lambda wildcards, output: os.path.dirname(output.html),
        flags=RENDER_FLAGS,
        png_scale=RENDER["chart_png_scale"],
    log:
        "logs/render_R2.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render R2 --notebook {input.notebook} --out-dir {params.out_dir} {params.flags}"
        " --param published_dir={params.published} --param out_dir={params.out_dir}"
        " --param chart_png_scale={params.png_scale}"
        " --input {input.readings} --input {input.conditions} --input {input.provenance} > {log} 2>&1"
