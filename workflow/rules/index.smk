# The evidence index: one line per rendered item, and a manifest of every input and output.


rule index:
    group:
        "pages"
    message:
        "The evidence index and manifest: {output.html}"
    input:
        expand(f"{EVIDENCE}/{{folder}}/manifest.json", folder=FOLDERS),
    output:
        html=f"{EVIDENCE}/index.html",
        manifest=f"{EVIDENCE}/manifest.json",
    params:
        argv=lambda wildcards, output: ["--evidence-dir", os.path.dirname(output.html), *(word for item in ITEMS for word in ("--item", item))],
    resources:
        **SMALL_JOB,
    log:
        "logs/index.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier index {params.argv:q} > {log:q} 2>&1"
