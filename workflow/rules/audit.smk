# Audit: every registered claim of the published documents, recomputed from the readings, with a verdict.


rule render_audit:
    group:
        "pages"
    message:
        "A: every registered claim recomputed from the published readings, with a verdict"
    input:
        notebook="notebooks/audit.ipynb",
        claims=f"{PUBLISHED}/claims.yaml",
        r2=f"{PUBLISHED}/R2_readings.csv",
        b=f"{PUBLISHED}/B_readings.csv",
        sources=SOURCES,
    output:
        html=report(f"{EVIDENCE}/audit/audit.html", **PAGE_REPORT["A"]),
        executed=f"{EVIDENCE}/audit/audit.ipynb",
        verdicts=f"{EVIDENCE}/audit/verdicts.json",
        verdicts_csv=f"{EVIDENCE}/audit/verdicts.csv",
        cross_checks=f"{EVIDENCE}/audit/cross_checks.json",
        cross_checks_csv=f"{EVIDENCE}/audit/cross_checks.csv",
        manifest=f"{EVIDENCE}/audit/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "audit", input.notebook, os.path.dirname(output.html),
            {"claims": input.claims, "published_dir": os.path.dirname(input.claims)},
            input[1:], **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_audit.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
