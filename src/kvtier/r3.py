"""R3: the shared pool across instances, measured here (raw_data/runs/<campaign>/cross_instance/).

Instance A (vLLM + its own LMCache server) populates every session; instance B (another vLLM + LMCache pair on
the same pool directory) resumes them. The published R3 is only the sentence "cross-instance hot sharing
verified"; here it is B's readings in the R2 table's shape, beside the same-instance shared pool and recompute,
with B's attribution (its LMCache's L2 hits, A idle) and greedy-output correctness against recompute.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import tables
from .evidence_io import read_table
from .published import load_readings
from .r2_local import compare, only
from .tierrun import CROSS_INSTANCE

TIERS = (CROSS_INSTANCE, "shared_pool", "recompute")
OUTPUT_FILES = {"table": "R3_table.csv", "vs_recompute": "R3_vs_recompute.csv",
                "vs_same_instance": "R3_vs_same_instance.csv", "attribution": "R3_attribution.csv",
                "correctness": "R3_correctness.csv", "chart": "R3_chart"}


@dataclass(frozen=True)
class Shared:
    readings: pd.DataFrame
    table: pd.DataFrame
    vs_recompute: pd.DataFrame
    vs_same_instance: pd.DataFrame
    attribution: pd.DataFrame
    correctness: pd.DataFrame
    conditions: dict


def load(campaign_dir: str | os.PathLike) -> Shared:
    campaign_dir = Path(campaign_dir)
    readings = only(load_readings(campaign_dir / "R2_readings.csv"), TIERS)
    attribution = only(read_table(campaign_dir / "attribution.csv"), (CROSS_INSTANCE,))
    if attribution.empty:
        raise FileNotFoundError(f"{campaign_dir}: the campaign has no {CROSS_INSTANCE} run (runs.cross_instance)")
    present = [t for t in TIERS if t in set(readings["tier"])]
    return Shared(
        readings=readings,
        table=tables.wide_table(readings, present),
        vs_recompute=compare(readings, [(t, "recompute") for t in (CROSS_INSTANCE, "shared_pool")]),
        vs_same_instance=compare(readings, [(CROSS_INSTANCE, "shared_pool")]),
        attribution=attribution,
        correctness=only(read_table(campaign_dir / "correctness.csv"), (CROSS_INSTANCE,)),
        conditions=json.loads((campaign_dir / "conditions.json").read_text()),
    )


def verdict(shared: Shared) -> dict:
    """Whether B resumed what A wrote: every window valid (B's prefix from L2, A idle), every output identical."""
    pool = shared.conditions.get("cross_instance", {}).get("pool_after_populate") or {}
    windows = len(shared.attribution)
    valid = int(shared.attribution["valid"].sum())
    identical = bool(len(shared.correctness) and shared.correctness["all_identical"].all())
    return {"windows": windows, "valid_windows": valid, "outputs_identical": identical,
            "l2_hit_tokens": [int(v) for v in shared.attribution["l2_hit_tokens"]],
            "prompt_tokens": [int(v) for v in shared.attribution["prompt_tokens"]],
            "writer_files": pool.get("files"), "writer_bytes": pool.get("bytes"),
            "verified": bool(windows and valid == windows and identical and pool.get("files"))}


def verdict_text(shared: Shared) -> str:
    v = verdict(shared)
    mib = f"{v['writer_bytes'] / 2**20:.1f} MiB" if v["writer_bytes"] else "no bytes"
    hits = ", ".join(f"{h}/{p}" for h, p in zip(v["l2_hit_tokens"], v["prompt_tokens"]))
    head = "VERIFIED" if v["verified"] else "NOT VERIFIED"
    return (f"{head}: instance A wrote {v['writer_files']} chunk files ({mib}) to the pool; instance B resumed "
            f"from them in {v['valid_windows']} of {v['windows']} windows (B's LMCache L2 hit tokens / prompt "
            f"tokens per window: {hits}); B's greedy outputs "
            f"{'equal' if v['outputs_identical'] else 'do NOT all equal'} those of recompute.")


def write_evidence(shared: Shared, out_dir: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    from .charts import save_chart, tier_chart
    from .evidence_io import write_table
    out_dir = Path(out_dir)
    written = [write_table(getattr(shared, name), out_dir / OUTPUT_FILES[name])
               for name in ("table", "vs_recompute", "vs_same_instance", "attribution", "correctness")]
    chart = tier_chart(shared.readings, "R3 (measured here): resume from a pool another instance wrote")
    return written + save_chart(chart, out_dir / OUTPUT_FILES["chart"], png_scale=png_scale)
