"""Tier x concurrency tables computed from readings (published or measured): the shape every R2-like item shows.

Readings are long: one row per tier x concurrency with `ttft_p50_s` and `output_tok_s` (NaN = not measured).
"""

from __future__ import annotations

import pandas as pd

from ..core.errors import KvtierError
from ..core.tiers import TIERS

METRICS = ("ttft_p50_s", "output_tok_s")


def _tiers_in(readings: pd.DataFrame) -> list[str]:
    present = set(readings["tier"])
    return [t for t in TIERS if t in present]


def wide_table(readings: pd.DataFrame, tiers: list[str] | None = None) -> pd.DataFrame:
    """One row per concurrency; columns `<tier>_<metric>`, TTFT columns first, as the report prints them."""
    tiers = tiers or _tiers_in(readings)
    wide = readings.pivot(index="concurrency", columns="tier", values=list(METRICS)).sort_index()
    columns = {f"{tier}_{metric}": wide[(metric, tier)] for metric in METRICS for tier in tiers}
    return pd.DataFrame(columns, index=wide.index).reset_index()


def relative_to(readings: pd.DataFrame, tier: str, baseline: str) -> pd.DataFrame:
    """`tier` against `baseline` at each concurrency where both were measured.

    ttft_p50_reduction_pct = 100 * (baseline - tier) / baseline   (share of the baseline's TTFT saved)
    ttft_p50_speedup       = baseline / tier                       (how many times faster the first token is)
    output_tok_s_gain_pct  = 100 * (tier / baseline - 1)           (throughput gained over the baseline)
    """
    for name in (tier, baseline):
        if name not in set(readings["tier"]):
            raise KvtierError(f"no readings for tier {name!r} (have: {', '.join(_tiers_in(readings))})")
    both = readings[readings["tier"] == tier].merge(readings[readings["tier"] == baseline], on="concurrency",
                                                     suffixes=("_tier", "_base"))
    both = both.dropna(subset=["ttft_p50_s_tier", "ttft_p50_s_base"], how="any")
    out = pd.DataFrame({  # derived figures first, the readings they come from after
        "concurrency": both["concurrency"].astype("int64"),
        "tier": tier,
        "baseline": baseline,
        "ttft_p50_reduction_pct": 100 * (both["ttft_p50_s_base"] - both["ttft_p50_s_tier"])
        / both["ttft_p50_s_base"],
        "ttft_p50_speedup": both["ttft_p50_s_base"] / both["ttft_p50_s_tier"],
        "output_tok_s_gain_pct": 100 * (both["output_tok_s_tier"] / both["output_tok_s_base"] - 1),
        "tier_ttft_p50_s": both["ttft_p50_s_tier"],
        "baseline_ttft_p50_s": both["ttft_p50_s_base"],
        "tier_output_tok_s": both["output_tok_s_tier"],
        "baseline_output_tok_s": both["output_tok_s_base"],
    })
    return out.sort_values("concurrency").reset_index(drop=True)


def value_range(frame: pd.DataFrame, column: str) -> tuple[float, float]:
    values = frame[column].dropna()
    if values.empty:
        raise KvtierError(f"no values in column {column!r} to take a range of")
    return float(values.min()), float(values.max())


def per_round(frame: pd.DataFrame, metric: str, **where) -> dict[int, float]:
    """{round: value of `metric`} of the rows matching every column = value in `where` (one row per round);
    a missing value is left out, never read as zero."""
    rows = frame
    for column, value in where.items():
        rows = rows[rows[column] == value]
    return {int(r): float(v) for r, v in zip(rows["round"], rows[metric]) if pd.notna(v)}
