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
        argv=lambda wildcards, output: ["--evidence-dir", os.path.dirname(output.html),
                                        *(word for item in ITEMS for word in ("--item", item)),
                                        *(word for item, why in NOT_RUN.items() for word in ("--not-run", f"{item}={why}"))],
    resources:
        **SMALL_JOB,
    log:
        "logs/index.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier index {params.argv:q} > {log:q} 2>&1"


# R8, the package itself: the sha256 of every file the evidence rests on (raw data, patches, locks, workflow,
# notebooks, config, code, LMCache build records, every page), written last and stamped on every page.
rule package_manifest:
    group:
        "pages"
    message:
        "R8: the package manifest, its sha256 stamped on every page: {output.manifest}"
    input:
        index=rules.index.output.html,
        # After the last gate's flag, which is part of the package.
        last_gate=[f"{GATES_DIR}/{LAST_GATE}.proceed"] if GATES_ON else [],
    output:
        manifest=f"{EVIDENCE}/package_manifest.json",
    params:
        evidence_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    resources:
        **SMALL_JOB,
    log:
        "logs/package_manifest.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier manifest --root . --evidence-dir {params.evidence_dir:q} > {log:q} 2>&1"
