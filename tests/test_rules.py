"""The workflow's rules as text: what every rule must carry, checked without running Snakemake."""

import re

from conftest import ROOT

RULES = ROOT / "workflow" / "rules"
# kvtier subcommands that burn CPU or disk: none may run beside a measured window.
HEAVY = ("render", "lmcache-build", "model", "tier-run", "r1-reads", "r1-resume")


def rules() -> dict[str, str]:
    blocks = {}
    for path in sorted(RULES.glob("*.smk")):
        for match in re.finditer(r"^rule (\w+):\n((?:    .*\n|\n)+)", path.read_text(), re.M):
            blocks[match.group(1)] = match.group(2)
    return blocks


def test_every_job_that_burns_cpu_or_disk_holds_the_measurement_slot():
    blocks = rules()
    heavy = {name for name, body in blocks.items() if re.search(rf'"kvtier ({"|".join(HEAVY)})\b', body)}
    assert heavy >= {"render_R2", "render_audit", "tier_run", "r1_reads", "lmcache_build", "model"}
    assert [name for name in heavy if "measurement=1" not in blocks[name]] == []


def test_every_rule_says_what_it_does_and_logs_it():
    blocks = rules()
    assert [name for name, body in blocks.items() if name != "all" and not (
        "    message:" in body and "    log:" in body and "{log:q}" in body)] == []
