"""Sequential rounds of a campaign (kvtier.evidence.campaign_rounds): what a look decides and which units the next
round measures, on synthetic rounds. The real looks run in the test preset's pipeline (tests/test_workflow.py)."""

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import campaign_rounds as cr
from kvtier.evidence import measured, sequential, stats
from kvtier.gates import g3

from conftest import BIN

UNITS = [("recompute", "engine"), ("dram", "local_disk"), ("shared_pool",), ("cross_instance",)]
KINDS = [k for unit in UNITS for k in unit]
ROUNDS = cr.CampaignRounds(3, 6, 480)
T0 = datetime(2026, 12, 7, 10, 0, tzinfo=timezone.utc)


def frame(ttft: dict[str, list[float]], tok: dict[str, list[float]] | None = None, concurrency: int = 8):
    """R2_rounds.csv's shape: one row per tier and round."""
    rows = [{"round": r + 1, "tier": tier, "concurrency": concurrency, "ttft_p50_s": value,
             "output_tok_s": (tok or {}).get(tier, [100.0 / value] * len(values))[r]}
            for tier, values in ttft.items() for r, value in enumerate(values)]
    return pd.DataFrame(rows, columns=["round", "tier", "concurrency", "ttft_p50_s", "output_tok_s"])


# Recompute at 1 s; engine 10x faster in every round (decided at once), local_disk about 1.6x with one slow round
# (undecided after 3), the rest clearly faster.
ROUNDS_3 = {"recompute": [1.0, 1.0, 1.0], "engine": [0.1, 0.1, 0.1], "dram": [0.3, 0.31, 0.29],
            "local_disk": [0.5, 0.9, 0.55], "shared_pool": [0.4, 0.41, 0.39], "cross_instance": [0.4, 0.42, 0.41]}


def test_the_plan_is_refused_when_it_cannot_be_sequential():
    for args, match in [((0,), "runs.rounds 0: at least 1"), ((3, 2), "runs.max_rounds 2: at least runs.rounds"),
                        ((1, 4), "start from at least 2"), ((3, 6, 0), "runs.budget_s 0: seconds > 0")]:
        with pytest.raises(KvtierError, match=match):
            cr.CampaignRounds(*args)
    assert cr.CampaignRounds(3).plan is None and cr.CampaignRounds(3, 3).plan is None
    assert ROUNDS.plan == sequential.Plan(3, 6)


def test_every_tier_against_recompute_drives_rounds():
    pairs = {(d.tier, d.baseline, d.metric, d.threshold) for d in cr.drivers(KINDS)}
    assert pairs == {(t, "recompute", m, 1.0) for t in KINDS if t != "recompute" for m in ("ttft_p50_s", "output_tok_s")}
    assert cr.drivers(["dram", "local_disk"]) == [], "without recompute nothing is compared against it"
    # runs.sequential_tiers: only these tiers' comparisons drive rounds (the test preset's, to bound its cost).
    assert {d.tier for d in cr.drivers(KINDS, ["cross_instance"])} == {"cross_instance"}
    for only in (["pool"], ["recompute"]):
        with pytest.raises(KvtierError, match=f"runs.sequential_tiers: {only[0]} not a tier measured"):
            cr.drivers(KINDS, only)


def test_the_pool_against_the_local_disk_drives_rounds_where_it_is_named():
    """Where both L2 tiers are emulated devices with their own caps (the pipeline's DRIVING_PAIRS), the pool against
    the local disk asks a direction too: an undecided one chooses both tiers' units for the next round."""
    pair = [("shared_pool", "local_disk")]
    extra = {(d.tier, d.baseline, d.metric) for d in cr.drivers(KINDS, pairs=pair)} - {
        (d.tier, d.baseline, d.metric) for d in cr.drivers(KINDS)}
    assert extra == {("shared_pool", "local_disk", m) for m in ("ttft_p50_s", "output_tok_s")}
    assert cr.drivers(["recompute", "shared_pool"], pairs=pair) == cr.drivers(["recompute", "shared_pool"])
    # Every tier against recompute decided; the pool against the local disk (0.8-1.1 of it) is not.
    decided = dict(ROUNDS_3, local_disk=[0.5, 0.52, 0.49], shared_pool=[0.4, 0.57, 0.45])
    assert cr.decide(frame(decided), 3, ROUNDS, UNITS, cr.drivers(KINDS), now=T0)["stop"] == cr.DECIDED
    look = cr.decide(frame(decided), 3, ROUNDS, UNITS, cr.drivers(KINDS, pairs=pair), now=T0)
    assert look["stop"] is None
    assert {row["name"] for row in look["undecided"]} >= {"shared_pool vs local_disk: ttft_p50_s"}
    chosen = {k for unit in look["next_units"] for k in unit}
    assert {"shared_pool", "local_disk", "recompute"} <= chosen and "cross_instance" not in chosen


def test_a_look_measures_again_only_the_units_of_what_is_undecided_with_recompute():
    look = cr.decide(frame(ROUNDS_3), 3, ROUNDS, UNITS, cr.drivers(KINDS), now=T0)
    assert look["stop"] is None and look["started_at"] == T0.isoformat()
    assert {(row["tier"], row["concurrency"]) for row in look["undecided"]} == {("local_disk", 8)}
    [row] = [r for r in look["undecided"] if r["name"] == "local_disk vs recompute: ttft_p50_s"]
    assert row["low"] < 1 < row["high"] and row["more_rounds"] is not None
    # Round 4's order is the rotation's for round 4, among the chosen units only.
    assert look["next_units"] == [list(u) for u in cr.order.rotation([UNITS[0], UNITS[1]], 4)[3]]


def test_the_rounds_stop_when_decided_at_the_maximum_or_when_the_budget_is_spent():
    decided = dict(ROUNDS_3, local_disk=[0.5, 0.52, 0.49])
    assert cr.decide(frame(decided), 3, ROUNDS, UNITS, cr.drivers(KINDS), now=T0)["stop"] == cr.DECIDED
    first = cr.decide(frame(ROUNDS_3), 3, ROUNDS, UNITS, cr.drivers(KINDS), now=T0)
    later = cr.decide(frame(ROUNDS_3), 4, ROUNDS, UNITS, cr.drivers(KINDS), first, now=T0 + timedelta(seconds=481))
    assert later["stop"] == cr.MINUTES_SPENT and later["next_units"] == [] and later["spent_s"] == 481
    assert later["started_at"] == first["started_at"], "the budget's clock starts at the first look"
    last = cr.decide(frame(ROUNDS_3), 6, ROUNDS, UNITS, cr.drivers(KINDS), first, now=T0 + timedelta(seconds=60))
    assert last["stop"] == cr.ROUNDS_SPENT and last["next_units"] == []
    with pytest.raises(KvtierError, match="between runs.rounds"):
        cr.decide(frame(ROUNDS_3), 2, ROUNDS, UNITS, cr.drivers(KINDS), now=T0)
    with pytest.raises(KvtierError, match="fixed rounds have no look"):
        cr.decide(frame(ROUNDS_3), 3, cr.CampaignRounds(3), UNITS, cr.drivers(KINDS), now=T0)


def test_a_tier_short_of_the_minimum_of_rounds_counts_as_undecided():
    short = {k: v[:2] for k, v in ROUNDS_3.items()}
    short["recompute"] = ROUNDS_3["recompute"]
    look = cr.decide(frame(short), 3, ROUNDS, UNITS, cr.drivers(KINDS), now=T0)
    assert {row["tier"] for row in look["undecided"]} == set(KINDS) - {"recompute"}
    assert [set(u) for u in look["next_units"]] != [] and len(look["next_units"]) == len(UNITS)


def test_the_pages_and_g3_take_the_intervals_of_the_campaigns_plan():
    by_round = frame({k: v + v[:1] for k, v in ROUNDS_3.items()})  # 4 rounds
    fixed = measured.compare_rounds(by_round, (("dram", "recompute"),))
    plan = sequential.Plan(3, 6)
    planned = measured.compare_rounds(by_round, (("dram", "recompute"),), plan, cr.ROUNDS_SPENT)
    assert planned["ttft_speedup_low"][0] < fixed["ttft_speedup_low"][0] <= fixed["ttft_speedup_high"][0] \
        < planned["ttft_speedup_high"][0], "each look spends part of the error rate: wider than fixed rounds"
    assert "sequential" in planned["interval"][0] and list(planned["stop"]) == [cr.DECIDED]
    assert list(fixed["stop"]) == [cr.FIXED] and list(fixed["to_decide"]) == [""]
    undecided = measured.compare_rounds(by_round, (("local_disk", "recompute"),), plan, cr.DECIDED)
    assert undecided["ttft_verdict"][0] == stats.NO_DIFFERENCE
    assert undecided["stop"][0] == cr.WITH_THE_CAMPAIGN and "more round" in undecided["to_decide"][0]
    settings = g3.G3Settings("dram", "recompute")
    [fixed_line] = [r for r in g3.lines(by_round, settings) if "TTFT" in r["metric"]]
    [planned_line] = [r for r in g3.lines(by_round, settings, plan) if "TTFT" in r["metric"]]
    assert planned_line["low_pct"] < fixed_line["low_pct"] and "sequential" in planned_line["interval"]


def test_a_campaigns_record_of_its_rounds(tmp_path):
    assert cr.record([], 3) == {"stop": cr.FIXED, "rounds": 3}
    first = cr.decide(frame(ROUNDS_3), 3, ROUNDS, UNITS, cr.drivers(KINDS), now=T0)
    second = cr.decide(frame(dict(ROUNDS_3, local_disk=[0.5, 0.52, 0.49])), 4, ROUNDS, UNITS, cr.drivers(KINDS),
                       first, now=T0 + timedelta(seconds=200))
    (tmp_path / cr.LOOKS_DIR).mkdir()
    files = [tmp_path / cr.look_file(look["after_rounds"]) for look in (second, first)]
    for path, look in zip(files, (second, first)):
        path.write_text(json.dumps(look))
    record = cr.record(cr.read_looks(files), 4)
    assert record["stop"] == cr.DECIDED and [x["after_rounds"] for x in record["looks"]] == [3, 4]
    assert cr.plan_of({"sequential": record}) == sequential.Plan(3, 6)
    assert cr.plan_of({"sequential": cr.record([], 3)}) is None and cr.plan_of({}) is None
    (tmp_path / cr.look_file(5)).write_text("{")
    with pytest.raises(KvtierError, match="after-5.json: not a campaign look"):
        cr.read_looks([*files, tmp_path / cr.look_file(5)])


def test_the_look_command_refuses_bad_settings_naming_them(tmp_path):
    out = tmp_path / "look.json"
    for settings, named in [("[1]", "--settings"), ('{"rounds": 3}', "needs rounds, max_rounds, budget_s and units"),
                            ('{"rounds": 3, "max_rounds": 2, "budget_s": 1, "units": []}', "runs.max_rounds 2")]:
        done = subprocess.run([str(BIN / "kvtier"), "campaign-look", str(tmp_path), "--after", "3", "--settings", settings,
                               "--out", str(out)], capture_output=True, text=True)
        assert done.returncode != 0 and named in done.stderr, done.stderr
        assert not out.exists()


def test_the_plan_of_server_starts_grows_by_what_each_look_chose():
    looks = {2: [("dram", "local_disk"), ("recompute", "engine")], 3: []}
    asked = []

    def chosen(after):
        asked.append(after)
        return looks[after]

    plan = cr.order.CampaignPlan(UNITS, 2, 4, chosen)
    assert plan.plan(2) == cr.order.units_in_order(UNITS, 2) and asked == [], "the fixed rounds ask no look"
    assert plan.plan() == cr.order.units_in_order(UNITS, 2) + [(3, u) for u in looks[2]] and asked == [2, 3]
    assert plan.last_round() == 3
    # In a fixed round a unit waits for the one before it, the first of round 2 for the last of round 1; in a
    # further round the first waits for the look (None), the next for the unit before it in that round.
    first_of_2 = plan.round(2)[0][1]
    assert plan.before(2, first_of_2) == [(1, k) for k in plan.round(1)[-1][1]]
    assert plan.before(1, plan.round(1)[0][1]) == []
    assert plan.before(3, ("dram", "local_disk")) is None
    assert plan.before(3, ("recompute", "engine")) == [(3, "dram"), (3, "local_disk")]
    assert plan.group(3, ("recompute", "engine"), ("cross_instance",)) == "round3_1"
