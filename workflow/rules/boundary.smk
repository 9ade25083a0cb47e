# Evidence B measured here: engine_only against offload over concurrency x context (kvtier.runs.boundary): one job
# runs every round (both schemes' servers started side by side once, each round's cells in its own order) and
# holds the whole `measurement` resource; then the tables.


rule boundary_cells:
    group:
        PROBES_GROUP
    message:
        "Boundary: engine_only and offload over concurrency x context, {params.rounds} rounds (up to"
        " {params.max_rounds} for an undecided cell), into {output.cells}"
    input:
        model=MODEL_INPUT,
        lmcache=LMCACHE_INPUT,
        gate=[ancient(flag) for flag in G1_FLAG],
    output:
        cells=directory(BOUNDARY_CELLS),
    params:
        boundary_dir=lambda wildcards, output: os.path.dirname(output.cells),
        rounds=BOUNDARY["rounds"],
        max_rounds=BOUNDARY["max_rounds"],
        cell_budget_s=BOUNDARY["cell_budget_s"],
        slas=[arg for metric, seconds in BOUNDARY["slas"].items() for arg in ("--sla", f"{metric}={seconds}")],
        settings=BOUNDARY_SETTINGS,
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/boundary/{RUNS['campaign']}/cells.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier boundary-run --rounds {params.rounds:q} --max-rounds {params.max_rounds:q}"
        " --cell-budget-s {params.cell_budget_s:q} {params.slas:q} --boundary-dir {params.boundary_dir:q}"
        " --settings {params.settings:q} > {log:q} 2>&1"


rule boundary:
    group:
        "pages"
    message:
        "Boundary {params.boundary_dir}: per-round cells, attribution and outputs"
    input:
        cells=rules.boundary_cells.output.cells,
    output:
        rounds=f"{BOUNDARY_DIR}/B_rounds.csv",
        attribution=f"{BOUNDARY_DIR}/B_attribution.csv",
        correctness=f"{BOUNDARY_DIR}/B_correctness.csv",
        replays=f"{BOUNDARY_DIR}/B_replays.csv",
        conditions=f"{BOUNDARY_DIR}/conditions.json",
    params:
        boundary_dir=lambda wildcards, output: os.path.dirname(output.rounds),
    resources:
        **SMALL_JOB,
    log:
        f"logs/boundary/{RUNS['campaign']}/tables.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier boundary {params.boundary_dir:q} > {log:q} 2>&1"


rule render_B:
    group:
        "pages"
    message:
        "B: where engine memory beats offload on this machine, from {input.rounds}"
    input:
        notebook="notebooks/B.ipynb",
        rounds=rules.boundary.output.rounds,
        attribution=rules.boundary.output.attribution,
        correctness=rules.boundary.output.correctness,
        replays=rules.boundary.output.replays,
        conditions=rules.boundary.output.conditions,
        published=f"{PUBLISHED}/B_readings.csv",
        claims=f"{PUBLISHED}/claims.yaml",
        sources=SOURCES,
        trace=BOUNDARY["profile_trace"],
        gate=G1_RECORD,
    output:
        html=report(f"{EVIDENCE}/B/B.html", **PAGE_REPORT["B"]),
        executed=f"{EVIDENCE}/B/B.ipynb",
        winners=f"{EVIDENCE}/B/B_winners.csv",
        crossovers=f"{EVIDENCE}/B/B_crossovers.csv",
        statements=f"{EVIDENCE}/B/B_statements.csv",
        manifest=f"{EVIDENCE}/B/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "B", input.notebook, os.path.dirname(output.html),
            {"boundary_dir": os.path.dirname(input.rounds), "published_dir": os.path.dirname(input.published),
             "claims": input.claims, "trace": input.trace,
             "slas": " ".join(f"{metric}={seconds}" for metric, seconds in BOUNDARY["slas"].items()),
             "chart_png_scale": RENDER["chart_png_scale"]},
            input[1:], gates=input.gate, **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_B.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
