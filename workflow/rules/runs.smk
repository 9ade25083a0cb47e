# Measured tiered cold-resume runs: one job per tier (and R3's cross-instance run) and round (servers started,
# measured, stopped), in the rotated order of SCHEDULE, then the campaign's tables. Measurements never overlap on
# one host: each holds the whole `measurement` resource (limit 1 in workflow/profiles/default).


rule tier_run:
    message:
        "Tier run {wildcards.tier}, round {wildcards.round}: real vLLM (+ LMCache), the cold-resume protocol, "
        "into {output.run}"
    input:
        model=f"{MODEL_DIR}/config.json",
        lmcache=[f"{LMCACHE_BUILD}/build.json"] if LMCACHE_BUILD else [],
        after=lambda w: [TIER_RUN_DIR.format(round=r, tier=k) for r, k in
                         kvtier_order.before(SCHEDULE, int(w.round), w.tier)],
    output:
        run=directory(TIER_RUN_DIR),
    wildcard_constraints:
        tier="recompute|engine|dram|local_disk|shared_pool|cross_instance",
        round="[1-9][0-9]*",
    params:
        settings=TIER_SETTINGS,
    resources:
        measurement=1,
    log:
        f"logs/tier_run/{RUNS['campaign']}/round-{{round}}/{{tier}}.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier tier-run {wildcards.tier:q} --run-dir {output.run:q} --settings {params.settings:q} > {log:q} 2>&1"


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
