# Measured tiered cold-resume runs: one job per server start and round (kvtier.core.tiers.server_units: a tier,
# two tiers on the same servers, or R3's cross-instance run; servers started, measured, stopped), in the rotated
# order of UNIT_PLAN, then the campaign's tables. Measurements never overlap on one host: each holds the whole
# `measurement` resource (limit 1 in workflow/profiles/default). One rule per unit, since a unit's outputs are
# its tiers' run directories.


for _unit in RUN_UNITS:

    rule:
        name:
            "tier_run_" + "_".join(_unit)
        message:
            f"Tier run {' then '.join(_unit)}, round {{wildcards.round}}: real vLLM (+ LMCache), the cold-resume "
            "protocol, into {output}"
        input:
            model=MODEL_INPUT,
            lmcache=[f"{LMCACHE_BUILD}/build.json"] if LMCACHE_BUILD else [],
            gate=[ancient(flag) for flag in G1_FLAG],
            # The unit measured just before this one in its round's order (`unit` bound now, not at call time).
            after=lambda wildcards, unit=_unit: [TIER_RUN_DIR.format(round=r, tier=k) for r, k in
                                                 kvtier_order.before(UNIT_PLAN, int(wildcards.round), unit)],
        output:
            **{tier: directory(TIER_RUN_DIR.format(round="{round}", tier=tier)) for tier in _unit},
        wildcard_constraints:
            round="[1-9][0-9]*",
        params:
            tiers=list(_unit),
            settings=TIER_SETTINGS,
        resources:
            measurement=1,
        log:
            f"logs/tier_run/{RUNS['campaign']}/round-{{round}}/{'+'.join(_unit)}.log",
        conda:
            "../../environment.yml"
        shell:
            "kvtier tier-run {params.tiers:q} --run-dir {output:q} --settings {params.settings:q} > {log:q} 2>&1"


rule campaign:
    message:
        "Campaign {params.campaign}: readings, attribution and correctness from its tier runs"
    input:
        runs=[TIER_RUN_DIR.format(round=r, tier=k) for r, k in SCHEDULE],
    output:
        readings=f"{CAMPAIGN_DIR}/R2_readings.csv",
        rounds=f"{CAMPAIGN_DIR}/R2_rounds.csv",
        attribution=f"{CAMPAIGN_DIR}/attribution.csv",
        correctness=f"{CAMPAIGN_DIR}/correctness.csv",
        conditions=f"{CAMPAIGN_DIR}/conditions.json",
    params:
        campaign=RUNS["campaign"],
        campaign_dir=lambda wildcards, output: os.path.dirname(output.readings),
    log:
        f"logs/campaign/{RUNS['campaign']}.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier campaign {params.campaign_dir:q} > {log:q} 2>&1"
