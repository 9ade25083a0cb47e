# Measured evidence: the campaign's tables rendered in the published table's shape (R2_local), and R3.


rule render_R2_local:
    input:
        notebook="notebooks/R2_local.ipynb",
        readings=f"{CAMPAIGN_DIR}/R2_readings.csv",
        attribution=f"{CAMPAIGN_DIR}/attribution.csv",
        correctness=f"{CAMPAIGN_DIR}/correctness.csv",
        conditions=f"{CAMPAIGN_DIR}/conditions.json",
    output:
        html=f"{EVIDENCE}/R2_local/R2_local.html",
        executed=f"{EVIDENCE}/R2_local/R2_local.ipynb",
        table=f"{EVIDENCE}/R2_local/R2_local_table.csv",
        manifest=f"{EVIDENCE}/R2_local/manifest.json",
    params:
        campaign=lambda wildcards, input: os.path.dirname(input.readings),
        out_dir=lambda wildcards, output: os.path.dirname(output.html),
        flags=RENDER_FLAGS,
        png_scale=RENDER["chart_png_scale"],
    log:
        "logs/render_R2_local.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render R2_local --notebook {input.notebook} --out-dir {params.out_dir} {params.flags}"
        " --param campaign_dir={params.campaign} --param out_dir={params.out_dir}"
        " --param chart_png_scale={params.png_scale}"
        " --input {input.readings} --input {input.attribution} --input {input.correctness}"
        " --input {input.conditions} > {log} 2>&1"


rule render_R3:
    input:
        notebook="notebooks/R3.ipynb",
        readings=f"{CAMPAIGN_DIR}/R2_readings.csv",
        attribution=f"{CAMPAIGN_DIR}/attribution.csv",
        correctness=f"{CAMPAIGN_DIR}/correctness.csv",
        conditions=f"{CAMPAIGN_DIR}/conditions.json",
    output:
        html=f"{EVIDENCE}/R3/R3.html",
        executed=f"{EVIDENCE}/R3/R3.ipynb",
        table=f"{EVIDENCE}/R3/R3_table.csv",
        manifest=f"{EVIDENCE}/R3/manifest.json",
    params:
        campaign=lambda wildcards, input: os.path.dirname(input.readings),
        out_dir=lambda wildcards, output: os.path.dirname(output.html),
        flags=RENDER_FLAGS,
        png_scale=RENDER["chart_png_scale"],
    log:
        "logs/render_R3.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render R3 --notebook {input.notebook} --out-dir {params.out_dir} {params.flags}"
        " --param campaign_dir={params.campaign} --param out_dir={params.out_dir}"
        " --param chart_png_scale={params.png_scale}"
        " --input {input.readings} --input {input.attribution} --input {input.correctness}"
        " --input {input.conditions} > {log} 2>&1"
