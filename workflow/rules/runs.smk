# Measured tiered cold-resume runs: one job per server start and round (kvtier.core.tiers.server_units: a tier,
# or two tiers on the same servers; servers started, measured, stopped), and R3's run as two jobs (instance A
# populates the shared pool and hands off, instance B resumes from it), in the rotated order of CAMPAIGN_PLAN, then the
# campaign's tables. On a cluster, the tier runs between two R3 runs of a round go as one job (run_group).
# Measurements never overlap: each holds the whole `measurement` resource (WHOLE_SLOT, workflow/profiles/default)
# and the node's measurement lock (kvtier.core.node_lock). One rule per unit, since a unit's outputs are its tiers'
# run directories.


for _unit in [unit for unit in RUN_UNITS if unit != (CROSS_INSTANCE,)]:

    rule:
        name:
            "tier_run_" + "_".join(_unit)
        group:
            lambda wildcards, unit=_unit: run_group(int(wildcards.round), unit)
        message:
            f"Tier run {' then '.join(_unit)}, round {{wildcards.round}}: real vLLM (+ LMCache), the cold-resume "
            "protocol, into {output}"
        input:
            model=MODEL_INPUT,
            lmcache=LMCACHE_INPUT,
            gate=[ancient(flag) for flag in G1_FLAG],
            # The unit measured just before this one in its round's order (`unit` bound now, not at call time).
            after=lambda wildcards, unit=_unit: unit_before(wildcards, unit),
        output:
            **{tier: directory(TIER_RUN_DIR.format(round="{round}", tier=tier)) for tier in _unit},
        wildcard_constraints:
            round="[1-9][0-9]*",
        params:
            tiers=list(_unit),
            settings=TIER_SETTINGS,
        resources:
            **MEASURE_JOB,
            measurement=WHOLE_SLOT,
        log:
            f"logs/tier_run/{RUNS['campaign']}/round-{{round}}/{'+'.join(_unit)}.log",
        conda:
            "../../environment.yml"
        shell:
            "kvtier tier-run {params.tiers:q} --run-dir {output:q} --settings {params.settings:q} > {log:q} 2>&1"


# R3 as two jobs (kvtier.runs.cross_instance): on a cluster, two scheduler jobs, on two nodes where it has them.
# A's KV reaches B only through the shared pool; B refuses to run when its node does not see the files A left.
# No tier run can come between them: the next unit in the order waits for B.
rule r3_populate:
    message:
        "R3, round {wildcards.round}: instance A populates the shared pool, stops, and hands off ({output})"
    input:
        model=MODEL_INPUT,
        lmcache=LMCACHE_INPUT,
        gate=[ancient(flag) for flag in G1_FLAG],
        after=lambda wildcards: unit_before(wildcards, (CROSS_INSTANCE,)),
    output:
        directory(R3_HANDOFF_DIR),
    wildcard_constraints:
        round="[1-9][0-9]*",
    params:
        settings=TIER_SETTINGS,
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/tier_run/{RUNS['campaign']}/round-{{round}}/r3_populate.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier r3-populate --handoff-dir {output:q} --settings {params.settings:q} > {log:q} 2>&1"


rule r3_resume:
    message:
        "R3, round {wildcards.round}: instance B resumes from the pool instance A left, into {output}"
    input:
        handoff=rules.r3_populate.output[0],
    output:
        directory(TIER_RUN_DIR.format(round="{round}", tier=CROSS_INSTANCE)),
    wildcard_constraints:
        round="[1-9][0-9]*",
    params:
        settings=TIER_SETTINGS,
    resources:
        **MEASURE_JOB,
        measurement=WHOLE_SLOT,
    log:
        f"logs/tier_run/{RUNS['campaign']}/round-{{round}}/r3_resume.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier r3-resume --handoff-dir {input.handoff:q} --run-dir {output:q} --settings {params.settings:q} "
        "> {log:q} 2>&1"


# Sequential rounds (runs.max_rounds): the look after `after` rounds, on every run up to it. A checkpoint: the
# units of round `after` + 1 are what it names (CAMPAIGN_PLAN, common.smk). Defined only for sequential rounds: in a
# workflow without checkpoints `--allowed-rules` keeps every other rule out of the DAG (tests/test_slurm.py).
if CAMPAIGN_ROUNDS.sequential:

    checkpoint campaign_look:
        message:
            "Campaign {params.campaign}: the comparisons after {wildcards.after} rounds, and what the next round"
            " measures"
        input:
            runs=lambda wildcards: campaign_runs(int(wildcards.after)),
            previous=lambda wildcards: ([LOOK_FILE.format(after=int(wildcards.after) - 1)]
                                        if int(wildcards.after) > RUNS["rounds"] else []),
        output:
            LOOK_FILE,
        wildcard_constraints:
            after="[1-9][0-9]*",
        params:
            campaign=RUNS["campaign"],
            campaign_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
            settings=LOOK_SETTINGS,
            previous=lambda wildcards, input: ["--previous", *input.previous] if input.previous else [],
        resources:
            **SMALL_JOB,
        log:
            f"logs/campaign/{RUNS['campaign']}-look-after-{{after}}.log",
        conda:
            "../../environment.yml"
        shell:
            "kvtier campaign-look {params.campaign_dir:q} --after {wildcards.after:q} --settings {params.settings:q} "
            "{params.previous:q} --out {output:q} > {log:q} 2>&1"


rule campaign:
    group:
        GATE_GROUP["G2"]
    message:
        "Campaign {params.campaign}: readings, attribution and correctness from its tier runs"
    input:
        runs=lambda wildcards: campaign_runs(),
        looks=campaign_looks,
    output:
        readings=f"{CAMPAIGN_DIR}/R2_readings.csv",
        rounds=f"{CAMPAIGN_DIR}/R2_rounds.csv",
        attribution=f"{CAMPAIGN_DIR}/attribution.csv",
        correctness=f"{CAMPAIGN_DIR}/correctness.csv",
        conditions=f"{CAMPAIGN_DIR}/conditions.json",
    params:
        campaign=RUNS["campaign"],
        campaign_dir=lambda wildcards, output: os.path.dirname(output.readings),
        # (while a look is pending, a dry run's input is that look's file: one name, not a list)
        looks=lambda wildcards, input: [arg for look in ([input.looks] if isinstance(input.looks, str) else input.looks)
                                        for arg in ("--look", look)],
    resources:
        **SMALL_JOB,
    log:
        f"logs/campaign/{RUNS['campaign']}.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier campaign {params.campaign_dir:q} {params.looks:q} > {log:q} 2>&1"
