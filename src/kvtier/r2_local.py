"""R2_local: the published R2 table's shape, measured here (raw_data/runs/<campaign>/ from the tier runs).

Same readings shape as the published R2 (tier x concurrency: TTFT p50, output tok/s), so the same package code
builds the table and the comparisons: every tier against recompute, and the shared pool against local disk.
Windows whose attribution failed are missing from the readings (never reported), and listed as invalid.
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

OUTPUT_FILES = {"table": "R2_local_table.csv", "vs_recompute": "R2_local_vs_recompute.csv",
                "pool_vs_local": "R2_local_pool_vs_local_disk.csv", "attribution": "R2_local_attribution.csv",
                "correctness": "R2_local_correctness.csv", "chart": "R2_local_chart"}


@dataclass(frozen=True)
class Local:
    readings: pd.DataFrame
    table: pd.DataFrame
    vs_recompute: pd.DataFrame
    pool_vs_local: pd.DataFrame
    attribution: pd.DataFrame
    correctness: pd.DataFrame
    conditions: dict


def _compare(readings: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    present = set(readings.dropna(subset=["ttft_p50_s"])["tier"])
    frames = [tables.relative_to(readings, t, b) for t, b in pairs if t in present and b in present]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load(campaign_dir: str | os.PathLike) -> Local:
    campaign_dir = Path(campaign_dir)
    readings = load_readings(campaign_dir / "R2_readings.csv")
    others = [t for t in ("engine", "dram", "local_disk", "shared_pool") if t in set(readings["tier"])]
    return Local(
        readings=readings,
        table=tables.wide_table(readings),
        vs_recompute=_compare(readings, [(t, "recompute") for t in others]),
        pool_vs_local=_compare(readings, [("shared_pool", "local_disk")]),
        attribution=read_table(campaign_dir / "attribution.csv"),
        correctness=read_table(campaign_dir / "correctness.csv"),
        conditions=json.loads((campaign_dir / "conditions.json").read_text()),
    )


def conditions_markdown(local: Local) -> str:
    c = local.conditions
    w, host, model = c["workload"], c["host"], c["model"]
    generated = model.get("generated") or {}
    size = (f"generated Llama, {generated.get('layers')} layers, hidden {generated.get('hidden')}, "
            f"{generated.get('kv_heads')} KV heads × {generated.get('head_dim')}, {generated.get('dtype')}"
            if generated else "a configured model")
    lines = [
        f"- **Workload**: {w['sessions']} sessions × {w['context_tokens']} context tokens + {w['followup_tokens']} "
        f"follow-up tokens, {w['output_tokens']} output tokens, concurrency {', '.join(map(str, w['concurrency']))}",
        f"- **Model**: `{model['served']}` ({size}), max model length {model['max_model_len']}",
        f"- **Host**: {host['processor']}, {host['cpus']} CPUs, kernel {host['kernel']}, no accelerator",
        "- **Versions**: " + ", ".join(f"{k} {v}" for k, v in c["versions"].items() if v),
    ]
    for tier, pool in c["pools"].items():
        mount = pool.get("mount") or {}
        lines.append(f"- **{tier} pool**: `{pool['path']}` on {mount.get('device')} ({mount.get('fstype')}, "
                     f"mounted at {mount.get('mount_point')})")
    if c.get("pools_on_same_device"):
        lines.append("- **Note**: local_disk and shared_pool are the **same device** here (two directories on one "
                     "disk); their difference measures nothing about a network pool.")
    return "\n".join(lines)


def write_evidence(local: Local, out_dir: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    from .charts import save_chart, tier_chart
    from .evidence_io import write_table
    out_dir = Path(out_dir)
    written = [write_table(getattr(local, name), out_dir / OUTPUT_FILES[name])
               for name in ("table", "vs_recompute", "pool_vs_local", "attribution", "correctness")]
    chart = tier_chart(local.readings, "R2_local (measured here): tiered cold resume")
    return written + save_chart(chart, out_dir / OUTPUT_FILES["chart"], png_scale=png_scale)
