# The gated joint test (kvtier.gates; on with the campaign, GATES_ON): G1 arrival acceptance before any measurement
# (every measurement rule needs G1_FLAG), G2 single-node baseline and G3 main gate on what the run measured, G4 the
# stability soak after them (workflow/rules/soak.smk), then their page. A gate is two rules: one writes its verdict
# record whatever it says; `gate_proceed` writes the flag the next stage needs, or fails naming the gate, its failed
# lines and the record (Snakemake removes a failed job's outputs, so the record must come from a job of its own to
# survive a FAIL).


rule platform:
    message:
        "G1: the platform record (CPUs, memory, accelerators, the tier paths' mounts, versions, model hash)"
    input:
        # A generated model is made first; a model at `model.path` is probed where it is, and a missing one is
        # recorded as missing (G1 names it) instead of stopping the run before G1 can say so.
        model=MODEL_INPUT,
        lmcache=LMCACHE_INPUT,
    output:
        record=f"{GATES_DIR}/platform.json",
    params:
        argv=lambda wildcards, input, output: [
            "--out", output.record,
            *(["--model-dir", MODEL_DIR] if input.model or os.path.isfile(f"{MODEL_DIR}/config.json") else []),
            "--path", f"local_disk={RUNS['local_disk_path']}", "--path", f"shared_pool={RUNS['shared_pool_path']}",
            *(["--lmcache-build", os.path.dirname(input.lmcache[0])] if input.lmcache else []),
        ],
    resources:
        **MEASURE_JOB,
    log:
        f"logs/gates/{RUNS['campaign']}/platform.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier probe {params.argv:q} > {log:q} 2>&1"


rule gate_g1:
    group:
        GATE_GROUP["G1"]
    message:
        "G1 arrival acceptance: {input.platform} against gates.g1.expect ({params.lines} lines)"
    input:
        platform=rules.platform.output.record,
    output:
        record=f"{GATES_DIR}/G1.json",
    params:
        lines=len(GATES["g1"]["expect"]),
        # A function, so that braces in a line's value (a regular expression) are not read as wildcards.
        expect=lambda wildcards: json.dumps(GATES["g1"]["expect"]),
        emulation=f"emulated tiers: {EMULATION_SAYS}",  # or why not: what the emulated items rest on
    resources:
        **SMALL_JOB,
    log:
        f"logs/gates/{RUNS['campaign']}/G1.log",
    conda:
        "../../environment.yml"
    # The record is written on FAIL too; gate_proceed decides what happens next.
    shell:
        "kvtier gate-g1 --record {input.platform:q} --expect {params.expect:q} --note {params.emulation:q}"
        " --out {output.record:q} > {log:q} 2>&1"
        " || test -s {output.record:q}"


rule g2_storage:
    group:
        PROBES_GROUP
    message:
        "G2 storage baseline: fio write, read and 4 KiB random read on every tier path, "
        "{params.repetitions} repetitions, into {output.run}"
    input:
        gate=[ancient(flag) for flag in G1_FLAG],
    output:
        run=directory(G2_STORAGE_DIR),
    params:
        repetitions=GATES["g2"]["repetitions"],
        settings=G2_STORAGE_SETTINGS,
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/gates/{RUNS['campaign']}/G2_storage.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier g2-storage --run-dir {output.run:q} --settings {params.settings:q} > {log:q} 2>&1"


rule gate_g2:
    group:
        GATE_GROUP["G2"]
    message:
        "G2 single-node baseline: storage passes and baseline TTFT stable and over their floors"
    input:
        gate=[ancient(flag) for flag in G1_FLAG],
        storage=rules.g2_storage.output.run,
        # R1's fio reads of the pool path, except where the pool is emulated: R1 reads the paths as they are
        r1_reads=[f"{R1_DIR}/reads"] if R1_READS_POOL else [],
        rounds=rules.campaign.output.rounds,
    output:
        record=f"{GATES_DIR}/G2.json",
    params:
        argv=lambda wildcards, input, output: [
            "--storage", input.storage, "--rounds", input.rounds, "--out", output.record,
            *(["--r1-reads", input.r1_reads[0]] if input.r1_reads else []),
        ],
        settings=G2_SETTINGS,
    resources:
        **SMALL_JOB,
    log:
        f"logs/gates/{RUNS['campaign']}/G2.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier gate-g2 {params.argv:q} --settings {params.settings:q} > {log:q} 2>&1 || test -s {output.record:q}"


rule gate_g3:
    group:
        GATE_GROUP["G3"]
    message:
        "G3 main gate: {params.candidate} against {params.baseline} over the campaign's rounds"
    input:
        gate=f"{GATES_DIR}/G2.proceed",
        rounds=rules.campaign.output.rounds,
        correctness=rules.campaign.output.correctness,
        conditions=rules.campaign.output.conditions,
    output:
        record=f"{GATES_DIR}/G3.json",
    params:
        candidate=G3["candidate"],
        baseline=G3["baseline"],
        settings=G3_SETTINGS,
        why=lambda wildcards: G3["why"],  # free text: a function, so that braces are not wildcards
    resources:
        **SMALL_JOB,
    log:
        f"logs/gates/{RUNS['campaign']}/G3.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier gate-g3 --rounds {input.rounds:q} --correctness {input.correctness:q} --settings {params.settings:q}"
        " --conditions {input.conditions:q} --why {params.why:q}"
        " --out {output.record:q} > {log:q} 2>&1 || test -s {output.record:q}"


rule gate_proceed:
    group:
        lambda wildcards: "pages" if wildcards.gate == LAST_GATE else GATE_GROUP[wildcards.gate]
    message:
        "{wildcards.gate}: may what comes after it start? ({input.record})"
    input:
        record=f"{GATES_DIR}/{{gate}}.json",
        # Nothing is measured after the last gate: every page is rendered first (its FAIL on them), then its verdict
        # is the run's exit status.
        pages=lambda wildcards: [f"{EVIDENCE}/index.html"] if wildcards.gate == LAST_GATE else [],
    output:
        flag=f"{GATES_DIR}/{{gate}}.proceed",
    wildcard_constraints:
        gate="G[1-4]",
    resources:
        **SMALL_JOB,
        # Whether a FAIL stops the run: a resource, not a param, because Snakemake reruns a job whose params changed
        # but not one whose resources did. Switching gates.stop_on_fail must not rewrite G1's flag: Snakemake does
        # not look again at the jobs downstream of a job it reruns (they take the flag as `ancient`), so a G2 or
        # G3 setting changed in the same run would go unseen.
        # G3 may say otherwise (gates.g3.emulated: the published gate in scale reports, it does not stop the run).
        stop_on_fail=lambda wildcards: int(G3.get("stop_on_fail", GATES["stop_on_fail"]) if wildcards.gate == "G3"
                                           else GATES["stop_on_fail"]),
        stop_on_undecided=int(GATES["stop_on_undecided"]),
    log:
        f"logs/gates/{RUNS['campaign']}/{{gate}}.proceed.log",
    conda:
        "../../environment.yml"
    # The message goes to the terminal as well as the log: it is what the user reads when a run stops (the
    # pipeline's exit status is kvtier's: Snakemake runs its shell commands with pipefail).
    shell:
        "kvtier gate-proceed {input.record:q} --flag {output.flag:q} --stop-on-fail {resources.stop_on_fail}"
        " --stop-on-undecided {resources.stop_on_undecided}"
        " 2>&1 | tee {log:q}"


rule render_gates:
    group:
        "pages"
    message:
        "Gates: G1 to G3 verdicts with their figures and records"
    input:
        notebook="notebooks/gates.ipynb",
        g1=rules.gate_g1.output.record,
        g2=rules.gate_g2.output.record,
        g3=rules.gate_g3.output.record,
        g4=[f"{GATES_DIR}/G4.json"] if SOAK_ON else [],
        platform=rules.platform.output.record,
    output:
        html=report(f"{EVIDENCE}/gates/gates.html", **PAGE_REPORT["G"]),
        executed=f"{EVIDENCE}/gates/gates.ipynb",
        lines=f"{EVIDENCE}/gates/gate_lines.csv",
        manifest=f"{EVIDENCE}/gates/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "gates", input.notebook, os.path.dirname(output.html),
            {"gates_dir": os.path.dirname(input.g1)},
            input[1:], **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_gates.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"


rule render_R6:
    group:
        "pages"
    message:
        "R6: G1 arrival acceptance, the platform against its bill of materials"
    input:
        notebook="notebooks/R6.ipynb",
        g1=rules.gate_g1.output.record,
        platform=rules.platform.output.record,
    output:
        html=report(f"{EVIDENCE}/R6/R6.html", **PAGE_REPORT["R6"]),
        executed=f"{EVIDENCE}/R6/R6.ipynb",
        lines=f"{EVIDENCE}/R6/R6_lines.csv",
        manifest=f"{EVIDENCE}/R6/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "R6", input.notebook, os.path.dirname(output.html), {"gates_dir": os.path.dirname(input.g1)},
            input[1:], **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R6.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"


rule render_R7:
    group:
        "pages"
    message:
        "R7: G2 single-node baseline, what each tier path and the engine deliver"
    input:
        notebook="notebooks/R7.ipynb",
        g2=rules.gate_g2.output.record,
        g1=rules.gate_g1.output.record,
    output:
        html=report(f"{EVIDENCE}/R7/R7.html", **PAGE_REPORT["R7"]),
        executed=f"{EVIDENCE}/R7/R7.ipynb",
        deliverable=f"{EVIDENCE}/R7/R7_deliverable.csv",
        manifest=f"{EVIDENCE}/R7/manifest.json",
    params:
        argv=lambda wildcards, input, output: render_args(
            "R7", input.notebook, os.path.dirname(output.html), {"gates_dir": os.path.dirname(input.g2)},
            [input.g2], gates=[input.g1], **RENDER_OPTIONS,
        ),
    resources:
        **SMALL_JOB,
        measurement=RENDER_SLOT,
    log:
        "logs/render_R7.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier render {params.argv:q} > {log:q} 2>&1"
