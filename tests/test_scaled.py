"""The published comparison in scale (kvtier.evidence.scaled): the published figures read off the published table,
the verdict rule on intervals whose answer is known, and the model's prediction with its sensitivity to the
assumed bandwidth ratio."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import measured, scaled
from kvtier.evidence.sweep import ServiceModel

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "raw_data" / "published" / "R2_readings.csv"
CAMPAIGN = ROOT / "tests" / "fixtures" / "campaign"


def test_the_published_reductions_and_scale_come_from_the_published_table():
    published = scaled.published_comparison(PUBLISHED).set_index("concurrency")
    # 1 - 7.53/10.17, 1 - 11.85/17.31, 1 - 26.35/35.73: the documents' "26-32 %"
    assert list(published["published_ttft_reduction_pct"].round(1)) == [26.0, 31.5, 26.3]
    assert list(published["published_tok_gain_pct"].round(1)) == [28.9, 39.7, 32.8]  # "29-40 %"
    assert published.loc[16, "published_local_vs_recompute"] == pytest.approx(17.31 / 149.48)
    assert pd.isna(published.loc[8, "published_local_vs_recompute"])  # the table gives no recompute there


@pytest.mark.parametrize("low, high, verdict", [
    (20, 40, scaled.REPRODUCED), (5, 20, scaled.NOT_REPRODUCED), (35, 60, scaled.NOT_REPRODUCED),
    (-10, 40, scaled.UNDECIDED), (-20, 10, scaled.NOT_REPRODUCED), (float("-inf"), 40, scaled.UNDECIDED),
])
def test_the_verdict_reads_the_interval_against_the_published_reduction_and_zero(low, high, verdict):
    assert scaled.verdict(low, high, 30.0) == verdict


def campaign(speedups: dict[int, tuple[float, float, float]], emulated: bool = True) -> measured.Measured:
    """The fixture campaign with the pool-against-local comparison and the table replaced: per concurrency the
    TTFT speedup (point, low, high); DRAM at 0.5 s, local at 1.0 s, recompute at 4.0 s."""
    base = measured.load(CAMPAIGN, "R2_local")
    pool = pd.DataFrame([{"concurrency": c, "ttft_p50_speedup": p, "ttft_speedup_low": lo, "ttft_speedup_high": hi,
                          "output_tok_s_ratio": p, "output_tok_s_ratio_low": lo, "output_tok_s_ratio_high": hi,
                          "rounds": 3, "interval": "Student's t"} for c, (p, lo, hi) in speedups.items()])
    table = pd.DataFrame([{"concurrency": c, "dram_ttft_p50_s": 0.5, "local_disk_ttft_p50_s": 1.0,
                           "recompute_ttft_p50_s": 4.0} for c in speedups])
    platform = {**base.conditions["platform"]}
    if emulated:
        platform["emulation"] = {"tiers": {"local_disk": {"in_force": {"read_bps": 200e6, "write_bps": 200e6}},
                                           "shared_pool": {"in_force": {"read_bps": 357e6, "write_bps": 357e6}}}}
    return dataclasses.replace(base, comparisons={**base.comparisons, "pool_vs_local_disk": pool}, table=table,
                               conditions={**base.conditions, "platform": platform})


def test_each_concurrency_of_both_tables_gets_the_measured_reduction_its_interval_and_a_verdict():
    local = campaign({8: (1.45, 1.3, 1.6), 16: (1.1, 0.95, 1.5), 32: (1.1, 1.05, 1.15), 64: (2.0, 1.9, 2.1)})
    assert scaled.emulated_caps(local) == {"local_disk": 200e6, "shared_pool": 357e6}
    rows = scaled.compare(local, scaled.published_comparison(PUBLISHED)).set_index("concurrency")
    assert list(rows.index) == [8, 16, 32]  # 64 is not in the published table
    assert rows.loc[8, "measured_ttft_reduction_pct"] == pytest.approx(100 * (1 - 1 / 1.45))
    assert rows.loc[8, "measured_low_pct"] == pytest.approx(100 * (1 - 1 / 1.3))
    assert list(rows["verdict"]) == [scaled.REPRODUCED, scaled.UNDECIDED, scaled.NOT_REPRODUCED]
    assert rows.loc[16, "local_vs_recompute"] == pytest.approx(0.25)
    assert rows.loc[16, "published_local_vs_recompute"] == pytest.approx(0.116, abs=0.001)
    assert scaled.emulated_caps(campaign({8: (1.0, 0.9, 1.1)}, emulated=False)) is None
    with pytest.raises(KvtierError, match="no concurrency measured here is in the published table"):
        scaled.compare(campaign({64: (1.0, 0.9, 1.1)}), scaled.published_comparison(PUBLISHED))


def test_the_prediction_grows_with_the_bandwidth_ratio_and_is_diluted_by_the_floor():
    model = ServiceModel(0.0, 1.0, 0.0, 4096, (10e6, 1e9), 12)
    local = campaign({8: (1.0, 0.9, 1.1), 16: (1.0, 0.9, 1.1)})
    rows = scaled.predicted(model, local, 200e6, 400e6, 2048).set_index("concurrency")
    # At concurrency 16: 16 x 2048 x 4 KiB = 134 MB in flight, 0.671 s at 200 MB/s, half at 400; floor 0.5 s.
    device = 16 * 2048 * 4096 / 200e6
    assert rows.loc[16, "predicted_ttft_reduction_pct"] == pytest.approx(100 * (device / 2) / (0.5 + device))
    assert rows.loc[16, "at_ratio_2_pct"] == pytest.approx(rows.loc[16, "predicted_ttft_reduction_pct"])
    assert rows.loc[16, "at_ratio_1.4_pct"] < rows.loc[16, "at_ratio_2_pct"] < rows.loc[16, "at_ratio_2.5_pct"]
    # Less in flight at concurrency 8, so the same floor takes a larger share: a smaller reduction.
    assert rows.loc[8, "predicted_ttft_reduction_pct"] < rows.loc[16, "predicted_ttft_reduction_pct"]
    assert not rows["extrapolated"].any()


def test_the_published_scale_is_reached_by_a_cap_or_said_to_be_out_of_reach():
    model = ServiceModel(0.0, 1.0, 0.0, 4096, (10e6, 1e9), 12)
    published = scaled.published_comparison(PUBLISHED)
    local = campaign({16: (1.0, 0.9, 1.1)})  # DRAM 0.5 s against recompute 4.0 s: the floor at 0.125 of it
    [row] = scaled.published_scale(model, local, published, 2048).itertuples()
    assert row.concurrency == 16 and row.floor_vs_recompute == pytest.approx(0.125)
    assert row.local_cap_for_it_mb_s is None  # 0.116 of recompute is under the floor: out of reach
    local = dataclasses.replace(local, table=local.table.assign(recompute_ttft_p50_s=8.0))
    [row] = scaled.published_scale(model, local, published, 2048).itertuples()
    # 0.116 x 8 s = 0.926 s: 0.426 s of device time for 16 x 2048 x 4 KiB
    target = 17.31 / 149.48 * 8.0
    assert row.local_cap_for_it_mb_s == pytest.approx(16 * 2048 * 4096 / (target - 0.5) / 1e6)


def test_a_replay_knows_the_campaign_was_emulated_from_its_record(tmp_path):
    import json
    assert scaled.recorded_emulated_tiers(tmp_path) == set()  # no record yet
    (tmp_path / "conditions.json").write_text(json.dumps({"platform": {"emulation": {"tiers": {
        "local_disk": {}, "shared_pool": {}}}}}))
    assert scaled.recorded_emulated_tiers(tmp_path) == {"local_disk", "shared_pool"}
    (tmp_path / "conditions.json").write_text("[]")
    assert scaled.recorded_emulated_tiers(tmp_path) == set()
    assert scaled.recorded_emulated_tiers(CAMPAIGN) == set()  # the fixture campaign ran on the paths as they are
