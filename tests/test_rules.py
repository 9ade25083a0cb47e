"""The workflow's rules as text: what every rule must carry, checked without running Snakemake."""

import re

from conftest import ROOT

RULES = ROOT / "workflow" / "rules"
# kvtier subcommands that burn CPU or disk: none may run beside a measured window.
HEAVY = ("render", "lmcache-build", "model", "tier-run", "r1-reads", "r1-resume")
# kvtier subcommands that measure (kvtier.cli.MEASURING), and the platform probe that G1 judges: on a cluster they
# take a whole node and the accelerators (kvtier.runs.cluster); every other job is a small one.


def rules() -> dict[str, str]:
    """{name: body} of every rule; a rule defined in a loop (`rule:` with `name:`) is named by its name's
    literal prefix (`"tier_run_" + ...` -> tier_run_)."""
    blocks = {}
    for path in sorted(RULES.glob("*.smk")):
        for match in re.finditer(r"^( *)rule( \w+)?:\n((?:\1    .*\n|\n)+)", path.read_text(), re.M):
            name = match.group(2) or re.search(r'name:\n\s+"(\w+)"', match.group(3)).group(1)
            blocks[name.strip()] = match.group(3)
    return blocks


def test_every_job_that_burns_cpu_or_disk_holds_the_measurement_slot():
    blocks = rules()
    heavy = {name for name, body in blocks.items() if re.search(rf'"kvtier ({"|".join(HEAVY)})\b', body)}
    assert heavy >= {"render_R2", "render_audit", "tier_run_", "r1_reads", "lmcache_build", "model"}
    # A measurement holds all of it; a render (RENDER_SLOT: none in a replay, which measures nothing), a build or a
    # model half, so that two of those run side by side but none beside a measurement (workflow/rules/common.smk).
    built = {"lmcache_build", "model", "model_r9"}
    slot = {name: "measurement=RENDER_SLOT" if name.startswith("render_") else
            "measurement=HALF_SLOT" if name in built else "measurement=WHOLE_SLOT" for name in heavy}
    assert [name for name in heavy if slot[name] not in blocks[name]] == []
    measuring = {name for name, body in blocks.items() if "measurement=WHOLE_SLOT" in body}
    assert measuring >= {"tier_run_", "r3_populate", "r3_resume", "r1_reads", "r1_resume", "r9_loads", "soak",
                         "boundary_cells", "g2_storage", "sweep_run"}


def test_every_rule_says_what_it_does_and_logs_it():
    blocks = rules()
    assert [name for name, body in blocks.items() if name != "all" and not (
        "    message:" in body and "    log:" in body and "{log:q}" in body)] == []


def test_every_rule_asks_a_cluster_for_its_kind_of_job():
    from kvtier.cli import MEASURING
    blocks = rules()
    measuring = {name for name, body in blocks.items()
                 if re.search(rf'"kvtier ({"|".join(MEASURING)}|probe)\b', body)}
    assert measuring >= {"tier_run_", "r3_populate", "r3_resume", "r1_reads", "r1_resume", "boundary_cells",
                         "g2_storage", "r9_loads", "platform"}
    # A job that runs for a set time (the soak) asks for it on top (kvtier.runs.cluster.runtime_for).
    kinds = {name: ("measurement" if re.search(r"\*\*(kvtier_cluster\.runtime_for\(\w+, )?MEASURE_JOB\)?,", body)
                    else "small" if "**SMALL_JOB," in body else None)
             for name, body in blocks.items() if name != "all"}
    assert {name: kind for name, kind in kinds.items() if kind != ("measurement" if name in measuring else "small")
            } == {}


def test_short_jobs_go_to_a_cluster_in_groups_and_measurements_only_with_measurements():
    """Every render and the index in `pages`, the builds and models in `prepare` (profiles/slurm merges its
    components into one job), each gate with the flag that follows it (and G2, G3 with the campaign table they
    read) in `gates`; no measurement in a group of short jobs, so each keeps a node of its own; the tier runs of a
    round in the stretch they are measured in (kvtier.runs.order.stretches, a further round's from the units its
    look chose: run_group), R3's two jobs in none, and the
    measurements outside the rounds together in `probes`."""
    blocks = rules()
    groups = {name: re.search(r'    group:\n\s+"(\w+)"', body) for name, body in blocks.items()}
    groups = {name: found.group(1) for name, found in groups.items() if found}
    assert {name for name in blocks if name.startswith("render_")} | {"index", "boundary", "package_manifest"} == {
        name for name, group in groups.items() if group == "pages"}
    assert {name for name, group in groups.items() if group == "prepare"} == {"lmcache_build", "model", "model_r9"}
    gates = {name: re.search(r'    group:\n\s+(.*GATE_GROUP.*)\n', body) for name, body in blocks.items()}
    assert {name: found.group(1) for name, found in gates.items() if found} == {
        "gate_g1": 'GATE_GROUP["G1"]', "gate_g2": 'GATE_GROUP["G2"]', "gate_g3": 'GATE_GROUP["G3"]',
        "gate_g4": 'GATE_GROUP["G4"]',
        "gate_proceed": 'lambda wildcards: "pages" if wildcards.gate == LAST_GATE else GATE_GROUP[wildcards.gate]',
        "campaign": 'GATE_GROUP["G2"]'}
    assert [name for name in groups if "**MEASURE_JOB," in blocks[name]] == []
    stretch = "lambda wildcards, unit=_unit: run_group(int(wildcards.round), unit)"
    measured = {name: re.search(r'    group:\n\s+(.*)\n', blocks[name]) for name in blocks
                if "**MEASURE_JOB," in blocks[name]}
    assert {name: found.group(1) for name, found in measured.items() if found} == {
        "tier_run_": stretch, **{name: "PROBES_GROUP" for name in ("r1_reads", "r1_resume", "g2_storage", "r9_loads",
                                                                   "boundary_cells")}}
