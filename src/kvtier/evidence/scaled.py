"""The published comparison in scale: the shared pool against the local disk, both on emulated devices whose read
caps keep the published hardware's ratio (kvtier.stack.emulated), measured by the campaign (R2_local), set beside
the published table (raw_data/published/R2_readings.csv) and beside what the sweep's service model predicted.

Per concurrency of both tables:
- published: the pool's TTFT p50 reduction against local NVMe, `1 - pool / local`, and its output tok/s gain,
  `pool / local - 1`, from the published readings; and local NVMe's TTFT against recompute's (the scale);
- measured: the same reduction and gain from the campaign's per-round ratios (kvtier.evidence.measured: the median
  over rounds with its 95 % interval), and the local disk's TTFT against recompute here;
- a verdict: REPRODUCED IN SCALE when the measured reduction's interval lies above 0 (the pool decidedly faster) and
  holds the published reduction; NOT REPRODUCED when the interval lies wholly on one side of the published
  reduction; UNDECIDED when it holds both the published reduction and 0 (the rounds cannot tell);
- predicted (where the sweep's model is given): the reduction the model expects at the caps in force, with the
  same concurrency's DRAM resume as the floor, and at other bandwidth ratios (the sensitivity of the prediction to
  the assumed hardware ratio). The model was fitted at the sweep's concurrency: other concurrencies extrapolate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from .measured import Measured
from .published import load_readings
from .sweep import ServiceModel

REPRODUCED, NOT_REPRODUCED, UNDECIDED = "REPRODUCED IN SCALE", "NOT REPRODUCED", "UNDECIDED"
CANDIDATE, BASELINE = "shared_pool", "local_disk"
# The bandwidth ratios (pool / local) the prediction is also given at: how much the answer rests on the assumed one.
SENSITIVITY_RATIOS = (1.4, 2.0, 2.5)


def published_comparison(readings_csv: str | Path) -> pd.DataFrame:
    """Per published concurrency with both tiers: the pool's TTFT reduction and tok/s gain against local NVMe (%),
    and local NVMe's TTFT against recompute where the table gives recompute."""
    readings = load_readings(readings_csv)
    wide = readings.pivot_table(index="concurrency", columns="tier", values=["ttft_p50_s", "output_tok_s"])
    out = []
    for c in wide.index:
        ttft, tok = wide["ttft_p50_s"].loc[c], wide["output_tok_s"].loc[c]
        if any(pd.isna(ttft.get(t)) for t in (CANDIDATE, BASELINE)):
            continue
        recompute = ttft.get("recompute")
        out.append({"concurrency": int(c), "published_ttft_reduction_pct": 100 * (1 - ttft[CANDIDATE] / ttft[BASELINE]),
                    "published_tok_gain_pct": 100 * (tok[CANDIDATE] / tok[BASELINE] - 1),
                    "published_local_vs_recompute": (ttft[BASELINE] / recompute
                                                     if recompute is not None and not pd.isna(recompute) else None)})
    if not out:
        raise KvtierError(f"{readings_csv}: no concurrency with both {CANDIDATE} and {BASELINE} readings")
    return pd.DataFrame(out)


def verdict(low_pct: float, high_pct: float, published_pct: float) -> str:
    if not (math.isfinite(low_pct) and math.isfinite(high_pct)):
        return UNDECIDED
    if published_pct < low_pct or published_pct > high_pct:
        return NOT_REPRODUCED
    return REPRODUCED if low_pct > 0 else UNDECIDED


def _reduction_pct(speedup: float) -> float:
    """A TTFT reduction (%) from a speedup (baseline / candidate TTFT)."""
    return 100 * (1 - 1 / speedup) if speedup > 0 else -math.inf


def compare(local: Measured, published: pd.DataFrame) -> pd.DataFrame:
    """Per concurrency measured here and published: the measured reduction and gain with their intervals, the
    published ones, the verdict, and the scale (local against recompute, here and published)."""
    pool = local.comparisons.get("pool_vs_local_disk")
    if pool is None or pool.empty:
        raise KvtierError("the campaign compared no shared_pool with local_disk (both tiers must be measured)")
    table = local.table.set_index("concurrency")
    out = []
    for _, row in pool.iterrows():
        c = int(row["concurrency"])
        match = published[published["concurrency"] == c]
        if match.empty:
            continue
        pub = match.iloc[0]
        low, high = _reduction_pct(row["ttft_speedup_low"]), _reduction_pct(row["ttft_speedup_high"])
        local_vs_recompute = None
        if {"local_disk_ttft_p50_s", "recompute_ttft_p50_s"} <= set(table.columns):
            local_vs_recompute = float(table.loc[c, "local_disk_ttft_p50_s"] / table.loc[c, "recompute_ttft_p50_s"])
        out.append({"concurrency": c,
                    "measured_ttft_reduction_pct": _reduction_pct(row["ttft_p50_speedup"]),
                    "measured_low_pct": low, "measured_high_pct": high,
                    "published_ttft_reduction_pct": float(pub["published_ttft_reduction_pct"]),
                    "verdict": verdict(low, high, float(pub["published_ttft_reduction_pct"])),
                    "measured_tok_gain_pct": 100 * (row["output_tok_s_ratio"] - 1),
                    "measured_tok_gain_low_pct": 100 * (row["output_tok_s_ratio_low"] - 1),
                    "measured_tok_gain_high_pct": 100 * (row["output_tok_s_ratio_high"] - 1),
                    "published_tok_gain_pct": float(pub["published_tok_gain_pct"]),
                    "local_vs_recompute": local_vs_recompute,
                    "published_local_vs_recompute": pub["published_local_vs_recompute"],
                    "rounds": int(row["rounds"]), "interval": row["interval"]})
    if not out:
        raise KvtierError("no concurrency measured here is in the published table: nothing to set beside it")
    return pd.DataFrame(out)


def predicted(model: ServiceModel, local: Measured, local_bps: float, pool_bps: float, context_tokens: int,
              ratios: tuple[float, ...] = SENSITIVITY_RATIOS) -> pd.DataFrame:
    """The reduction the sweep's model predicts per concurrency: at the caps in force, and with the pool at each
    other ratio of the local disk's cap. The floor is the campaign's own DRAM resume at that concurrency."""
    table = local.table.set_index("concurrency")
    if "dram_ttft_p50_s" not in table.columns:
        raise KvtierError("the prediction needs the campaign's DRAM resume (its floor): dram was not measured")
    out = []
    for c, floor in table["dram_ttft_p50_s"].dropna().items():
        on_local = model.ttft(context_tokens, c, local_bps, floor)
        row = {"concurrency": int(c), "predicted_local_s": on_local,
               "predicted_pool_s": model.ttft(context_tokens, c, pool_bps, floor),
               "extrapolated": model.extrapolates(local_bps) or model.extrapolates(pool_bps)}
        row["predicted_ttft_reduction_pct"] = 100 * (1 - row["predicted_pool_s"] / on_local)
        for r in ratios:
            row[f"at_ratio_{r:g}_pct"] = 100 * (1 - model.ttft(context_tokens, c, local_bps * r, floor) / on_local)
        out.append(row)
    return pd.DataFrame(out)


def published_scale(model: ServiceModel, local: Measured, published: pd.DataFrame, context_tokens: int
                    ) -> pd.DataFrame:
    """Per concurrency where the published table gives local NVMe against recompute: the local disk's read cap at
    which the model puts this campaign's local-disk resume at the same fraction of its recompute, or None where
    this engine's own floor (its DRAM resume, plus the cost of going to L2 at all) is already above it."""
    table = local.table.set_index("concurrency")
    out = []
    for _, pub in published.dropna(subset=["published_local_vs_recompute"]).iterrows():
        c = int(pub["concurrency"])
        if c not in table.index:
            continue
        floor, recompute = float(table.loc[c, "dram_ttft_p50_s"]), float(table.loc[c, "recompute_ttft_p50_s"])
        target = float(pub["published_local_vs_recompute"])
        cap = model.breakeven_bps(context_tokens, c, target * recompute, floor)
        out.append({"concurrency": c, "published_local_vs_recompute": target,
                    "floor_vs_recompute": floor / recompute, "local_cap_for_it_mb_s": None if cap is None else cap / 1e6})
    return pd.DataFrame(out)


def recorded_emulated_tiers(campaign_dir: str | Path) -> set[str]:
    """The tiers a campaign's record (conditions.json, its platform record) says were emulated; none where there is
    no record yet or it says nothing (what a replay renders the comparison in scale from)."""
    try:
        return set(_emulated_tiers(json.loads((Path(campaign_dir) / "conditions.json").read_text())))
    except (OSError, ValueError, AttributeError):
        return set()


def _emulated_tiers(conditions: dict) -> dict:
    """{tier: its record} of the emulated tiers in a campaign's conditions (its platform record)."""
    return ((conditions.get("platform") or {}).get("emulation") or {}).get("tiers") or {}


def emulated_caps(local: Measured) -> dict[str, float] | None:
    """The read caps in force for both tiers (bytes/s) in the campaign's platform record, or None where the tiers
    were not both emulated (then there is nothing to scale)."""
    tiers = _emulated_tiers(local.conditions)
    caps = {}
    for name in (BASELINE, CANDIDATE):
        in_force = (tiers.get(name) or {}).get("in_force") or {}
        if not in_force.get("read_bps"):
            return None
        caps[name] = float(in_force["read_bps"])
    return caps
