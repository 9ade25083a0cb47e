# The evidence index: one line per rendered item, and a manifest of every input and output.


rule index:
    input:
        expand(f"{EVIDENCE}/{{folder}}/manifest.json", folder=FOLDERS),
    output:
        html=f"{EVIDENCE}/index.html",
        manifest=f"{EVIDENCE}/manifest.json",
    params:
        evidence=lambda wildcards, output: os.path.dirname(output.html),
        item_flags=" ".join(f"--item {item}" for item in ITEMS),
    log:
        "logs/index.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier index --evidence-dir {params.evidence} {params.item_flags} > {log} 2>&1"
