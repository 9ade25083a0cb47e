"""G2 stability and G3's interval verdicts on synthetic repetitions whose answer is known, and G3 on a real
campaign's rounds (the campaign fixture, test preset)."""

from pathlib import Path

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.core.table_io import read_table
from kvtier.evidence import stats
from kvtier.gates import g2, g3

CAMPAIGN = Path(__file__).parent / "fixtures" / "campaign"


def test_g2_stable_repetitions_over_their_floor_pass():
    row = g2.line("local_disk read qd16", [2.0, 2.1, 1.9, 2.0], max_cv=0.1, floor=1.5, unit="GB/s")
    assert row["verdict"] == "PASS" and row["cv"] == pytest.approx(0.0408, abs=1e-3) and row["median"] == 2.0


@pytest.mark.parametrize("values, floor, at_least, why", [
    ([1.0, 2.0, 3.0], None, True, "unstable: cv 0.500 > 0.1"),
    ([1.0, 1.01, 0.99], 1.5, True, "under the floor 1.5"),
    ([1.0, 1.01, 0.99], 0.5, False, "over the floor 0.5"),
    ([1.0], None, True, "1 repetition(s): stability cannot be shown"),
])
def test_g2_fails_naming_why(values, floor, at_least, why):
    row = g2.line("x", values, max_cv=0.1, floor=floor, at_least=at_least)
    assert row["verdict"] == "FAIL" and why in row["why"]
    with pytest.raises(KvtierError, match="max_cv 0"):
        g2.line("x", values, max_cv=0)


def test_g2_judges_each_emulated_path_against_its_cap_and_names_the_one_that_is_off(tmp_path):
    import json

    from kvtier.probes import platform_probe
    from kvtier.stack import emulated
    record = platform_probe.probe({"local_disk": str(tmp_path)})
    caps = {"local_disk": 100_000_000, "shared_pool": 200_000_000}
    record["emulation"] = {"cgroup_version": 1, "not_emulated": emulated.NOT_EMULATED, "tiers": {
        name: {"path": f"pools/{name}", "device": "/dev/loop7", "dev": "7:7", "size_bytes": 1 << 30,
               "configured": {"read_bps": cap, "write_bps": cap, "read_iops": None, "write_iops": None},
               "in_force": {"read_bps": cap, "write_bps": cap}} for name, cap in caps.items()}}
    (tmp_path / platform_probe.PLATFORM_FILE).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / platform_probe.PLATFORM_FILE).write_text(json.dumps(record))
    # local_disk within its cap at its better queue depth; shared_pool's reads at 0.7 of its cap.
    passes = pd.DataFrame([{"path": path, "rw": rw, "iodepth": depth, "rep": rep, "gb_per_s": gb, "iops": 1.0,
                            "source": "G2 storage"}
                           for path, rw, depth, gb in (("local_disk", "read", 1, 0.06), ("local_disk", "read", 8, 0.104),
                                                       ("local_disk", "write", 8, 0.097),
                                                       ("shared_pool", "read", 8, 0.14),
                                                       ("shared_pool", "write", 8, 0.19))
                           for rep in (0, 1)])
    lines = {(r["path"], r["rw"]): r for r in g2.emulation_lines(tmp_path, passes)}
    assert {k: r["verdict"] for k, r in lines.items()} == {
        ("local_disk", "read"): "PASS", ("local_disk", "write"): "PASS", ("shared_pool", "read"): "FAIL",
        ("shared_pool", "write"): "PASS"}
    assert lines[("local_disk", "read")]["cap_ratio"] == pytest.approx(1.04)
    assert lines[("shared_pool", "read")]["why"] == ("shared_pool is off: 140 MB/s measured against the 200 MB/s "
                                                     "configured (0.70 of it)")
    record["emulation"] = None
    (tmp_path / platform_probe.PLATFORM_FILE).write_text(json.dumps(record))
    assert g2.emulation_lines(tmp_path, passes) == []  # nothing emulated: no such line


def rounds(candidate: list[float], baseline: list[float], tok: tuple[list, list] | None = None) -> pd.DataFrame:
    tok = tok or ([100.0] * len(candidate), [100.0] * len(baseline))
    return pd.DataFrame([{"round": r + 1, "tier": tier, "concurrency": 8, "ttft_p50_s": t, "output_tok_s": s}
                         for tier, ttfts, toks in (("shared_pool", candidate, tok[0]),
                                                   ("local_disk", baseline, tok[1]))
                         for r, (t, s) in enumerate(zip(ttfts, toks))])


SETTINGS = g3.G3Settings("shared_pool", "local_disk", ttft_reduction_min_pct=25, tok_gain_min_pct=10)


def test_g3_a_clear_reduction_and_gain_pass():
    rows = g3.lines(rounds([6.0, 6.1, 5.9, 6.0], [10.0, 10.2, 9.8, 10.0],
                           ([140, 141, 139, 140], [100, 101, 99, 100])), SETTINGS)
    assert [r["verdict"] for r in rows] == [stats.MET, stats.MET]
    assert rows[0]["point_pct"] == pytest.approx(40.0) and rows[0]["low_pct"] > 25
    assert g3.verdict(rows) == "PASS" and "2 of 2 lines MET" in g3.text(rows, SETTINGS)


def test_g3_a_point_over_the_threshold_with_an_interval_across_it_is_not_a_pass():
    rows = g3.lines(rounds([7.0, 5.0, 8.0, 6.0], [10.0, 10.0, 10.0, 10.0],
                           ([130, 115, 125, 120], [100, 100, 100, 100])), SETTINGS)
    ttft = rows[0]
    assert ttft["point_pct"] > 25 and ttft["low_pct"] < 25 and ttft["verdict"] == stats.UNDECIDED
    # not passed, and not failed either: nothing missed its threshold
    assert rows[1]["verdict"] == stats.MET and g3.verdict(rows) == "UNDECIDED"
    assert "1 of 2 lines MET" in g3.text(rows, SETTINGS)
    # a line that misses makes the gate FAIL whatever else is undecided
    assert g3.verdict([ttft, {**rows[1], "verdict": stats.NOT_MET}]) == "FAIL"
    assert g3.verdict([]) == "FAIL"


def test_g3_no_effect_is_not_met_and_bad_settings_are_refused():
    rows = g3.lines(rounds([10.0, 10.1, 9.9], [10.0, 10.0, 10.0]), SETTINGS)
    assert rows[0]["verdict"] == stats.NOT_MET and g3.verdict(rows) == "FAIL"
    with pytest.raises(KvtierError, match="both 'local_disk'"):
        g3.lines(rounds([1.0], [1.0]), g3.G3Settings("local_disk", "local_disk"))
    with pytest.raises(KvtierError, match="no readings of tier 'engine'"):
        g3.lines(rounds([1.0], [1.0]), g3.G3Settings("engine", "local_disk"))


def test_g3_on_a_real_campaign_the_pool_against_recompute():
    by_round = read_table(CAMPAIGN / "R2_rounds.csv")
    rows = g3.lines(by_round, g3.G3Settings("shared_pool", "recompute"))
    assert {r["concurrency"] for r in rows} == set(by_round.loc[by_round["tier"] == "shared_pool", "concurrency"])
    reduction = [r for r in rows if r["metric"].startswith("TTFT")]
    # The pool resumes from L2 where recompute prefills again: a reduction well past 25 % at every concurrency.
    assert all(r["point_pct"] > 25 for r in reduction)
