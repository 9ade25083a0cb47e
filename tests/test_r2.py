"""R2's derived figures, checked against values worked out by hand from the published table."""

import math

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import r2, tables

from conftest import PUBLISHED

DERIVED = r2.load(PUBLISHED)


def test_pool_vs_local_disk_by_hand():
    got = DERIVED.pool_vs_local.set_index("concurrency")
    # (10.17 - 7.53) / 10.17, (17.31 - 11.85) / 17.31, (35.73 - 26.35) / 35.73
    assert list(got["ttft_p50_reduction_pct"]) == pytest.approx([25.95870, 31.54246, 26.25245], abs=1e-4)
    # 56.6 / 43.9, 74.9 / 53.6, 71.6 / 53.9
    assert list(got["output_tok_s_gain_pct"]) == pytest.approx([28.92938, 39.73881, 32.83859], abs=1e-4)
    assert list(got.index) == [8, 16, 32]


def test_against_recompute_only_where_recompute_was_measured():
    got = DERIVED.vs_recompute
    assert list(got["concurrency"]) == [16, 16]
    assert list(got["tier"]) == ["shared_pool", "local_disk"]
    # 149.48 / 11.85 and 149.48 / 17.31; tok/s 74.9 / 4.1 and 53.6 / 4.1
    assert list(got["ttft_p50_speedup"]) == pytest.approx([12.61435, 8.63547], abs=1e-4)
    assert list(got["tier_output_tok_s"] / got["baseline_output_tok_s"]) == pytest.approx([18.26829, 13.07317],
                                                                                          abs=1e-4)


def test_wide_table_keeps_the_report_shape_and_missing_cells():
    table = DERIVED.table
    assert list(table.columns) == ["concurrency",
                                   "shared_pool_ttft_p50_s", "local_disk_ttft_p50_s", "recompute_ttft_p50_s",
                                   "shared_pool_output_tok_s", "local_disk_output_tok_s", "recompute_output_tok_s"]
    assert math.isnan(table.loc[0, "recompute_ttft_p50_s"]) and table.loc[1, "recompute_output_tok_s"] == 4.1


def test_headline():
    assert r2.headline(DERIVED) == {
        "shared_pool vs local_disk, TTFT p50 reduction (%)": "26.0 – 31.5",
        "shared_pool vs local_disk, output tok/s gain (%)": "28.9 – 39.7",
        "shared_pool vs recompute at concurrency 16, TTFT p50 speed-up (x)": "12.61",
        "local_disk vs recompute at concurrency 16, TTFT p50 speed-up (x)": "8.64",
    }


def test_changing_one_reading_changes_exactly_its_figures():
    readings = DERIVED.readings.copy()
    readings.loc[(readings["tier"] == "local_disk") & (readings["concurrency"] == 8), "ttft_p50_s"] = 15.06
    changed = r2.derive(readings).pool_vs_local.set_index("concurrency")
    assert changed.loc[8, "ttft_p50_reduction_pct"] == pytest.approx(50.0)
    before = DERIVED.pool_vs_local.set_index("concurrency")
    pd.testing.assert_frame_equal(changed.loc[[16, 32]], before.loc[[16, 32]])


def test_comparing_with_an_absent_tier_is_refused():
    with pytest.raises(KvtierError, match="no readings for tier 'dram'"):
        tables.relative_to(DERIVED.readings, "dram", "recompute")
