# Audit: every registered claim of the published documents, recomputed from the readings, with a verdict.


rule render_audit:
    input:
        notebook="notebooks/audit.ipynb",
        claims=f"{PUBLISHED}/claims.yaml",
        r2=f"{PUBLISHED}/R2_readings.csv",
        b=f"{PUBLISHED}/B_readings.csv",
        sources=SOURCES,
    output:
        html=f"{EVIDENCE}/audit/audit.html",
        executed=f"{EVIDENCE}/audit/audit.ipynb",
        verdicts=f"{EVIDENCE}/audit/verdicts.json",
        verdicts_csv=f"{EVIDENCE}/audit/verdicts.csv",
        cross_checks=f"{EVIDENCE}/audit/cross_checks.json",
        cross_checks_csv=f"{EVIDENCE}/audit/cross_checks.csv",
        manifest=f"{EVIDENCE}/audit/manifest.json",
    params:
        published=lambda wildcards, input: os.path.dirname(input.claims),
        out_dir=lambda wildcards, output: os.path.dirname(output.html),
        inputs=lambda wildcards, input: " ".join(f"--input {path}" for path in input[1:]),
        flags=RENDER_FLAGS,
    log:
        "logs/render_audit.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render audit --notebook {input.notebook} --out-dir {params.out_dir} {params.flags}"
        " --param claims={input.claims} --param published_dir={params.published}"
        " --param out_dir={params.out_dir} {params.inputs} > {log} 2>&1"
