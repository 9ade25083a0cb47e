"""R2 replay: the published tiered cold-resume table, and the figures the report derives from it.

The report (document 003, section "原始读数") prints TTFT p50 and output tok/s for the FX100 pool, one local NVMe
drive and full recompute at concurrency 8/16/32; its text derives from them the pool's gain over local NVMe and
the speed-up over recompute.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.table_io import write_table
from . import tables
from .published import load_readings

READINGS_FILE = "R2_readings.csv"
CONDITIONS_FILE = "R2_conditions.yaml"
PROVENANCE_FILE = "R2_provenance.yaml"

# The report's own column labels and printed precision, so the table can be regenerated character for character.
REPORT_TIERS = (("shared_pool", "FX100"), ("local_disk", "本地 NVMe 单盘"), ("recompute", "整段重算"))
REPORT_METRICS = (("ttft_p50_s", "TTFT p50 (s)", 2), ("output_tok_s", "tok/s", 1))
REPORT_CONCURRENCY_LABEL = "并发"
REPORT_MISSING = "—"


@dataclass(frozen=True)
class R2:
    readings: pd.DataFrame
    table: pd.DataFrame               # the published table, one row per concurrency
    pool_vs_local: pd.DataFrame       # shared_pool against local_disk
    vs_recompute: pd.DataFrame        # shared_pool and local_disk against recompute, where recompute was measured


def derive(readings: pd.DataFrame) -> R2:
    tiers = [tier for tier, _ in REPORT_TIERS]
    return R2(
        readings=readings,
        table=tables.wide_table(readings, tiers),
        pool_vs_local=tables.relative_to(readings, "shared_pool", "local_disk"),
        vs_recompute=pd.concat([tables.relative_to(readings, t, "recompute") for t in ("shared_pool", "local_disk")],
                               ignore_index=True),
    )


def load(published_dir: str | os.PathLike) -> R2:
    return derive(load_readings(Path(published_dir) / READINGS_FILE))


def report_table(r2: R2) -> pd.DataFrame:
    """The table as the report prints it: original labels and precision, '—' for unmeasured cells (as text)."""
    columns = {REPORT_CONCURRENCY_LABEL: [str(int(c)) for c in r2.table["concurrency"]]}
    for metric, metric_label, decimals in REPORT_METRICS:
        for tier, label in REPORT_TIERS:
            columns[f"{label} {metric_label}"] = [REPORT_MISSING if math.isnan(v) else f"{v:.{decimals}f}"
                                                  for v in r2.table[f"{tier}_{metric}"]]
    return pd.DataFrame(columns)


def report_markdown(r2: R2) -> str:
    """report_table as the markdown the report is written in."""
    table = report_table(r2)
    rows = [list(table.columns), ["---"] * len(table.columns), *table.itertuples(index=False)]
    return "".join("| " + " | ".join(row) + " |\n" for row in rows)


def headline(r2: R2) -> dict[str, str]:
    """The derived figures the report's text quotes, recomputed: ranges over concurrency, rounded for display."""
    red_lo, red_hi = tables.value_range(r2.pool_vs_local, "ttft_p50_reduction_pct")
    gain_lo, gain_hi = tables.value_range(r2.pool_vs_local, "output_tok_s_gain_pct")
    figures = {
        "shared_pool vs local_disk, TTFT p50 reduction (%)": f"{red_lo:.1f} – {red_hi:.1f}",
        "shared_pool vs local_disk, output tok/s gain (%)": f"{gain_lo:.1f} – {gain_hi:.1f}",
    }
    for row in r2.vs_recompute.itertuples():
        figures[f"{row.tier} vs recompute at concurrency {row.concurrency}, TTFT p50 speed-up (x)"] = \
            f"{row.ttft_p50_speedup:.2f}"
    return figures


OUTPUT_FILES = {
    "table": "R2_table.csv",
    "pool_vs_local": "R2_pool_vs_local_disk.csv",
    "vs_recompute": "R2_vs_recompute.csv",
    "chart": "R2_chart",  # .png and .svg
}
CHART_TITLE = "R2 (published readings): tiered cold resume, Qwen3-Coder-480B-FP8, TP=8, 8 × MI308X"


def chart(r2: R2):
    from .charts import tier_chart
    return tier_chart(r2.readings, CHART_TITLE)


def write_evidence(r2: R2, out_dir: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    """Write R2's tables (CSV) and chart (PNG + SVG) into `out_dir`; return the paths written."""
    from .charts import save_chart
    out_dir = Path(out_dir)
    written = [write_table(getattr(r2, name), out_dir / OUTPUT_FILES[name])
               for name in ("table", "pool_vs_local", "vs_recompute")]
    written += save_chart(chart(r2), out_dir / OUTPUT_FILES["chart"], png_scale=png_scale)
    return written


def conditions_markdown(conditions: dict, provenance: dict) -> str:
    """The stated conditions and the provenance of the readings, as a markdown list for the page."""
    sw = conditions["software"]
    tiers = conditions["tiers"]
    source = provenance["source"]
    return "\n".join([
        f"- **Source**: `{source['document']}` (sha256 `{source['sha256'][:12]}…`), section “{source['section']}”",
        f"- **Data level**: {provenance['level']} — {provenance['level_note']}",
        f"- **Model**: {conditions['model']['name']}, tensor parallelism {conditions['deployment']['tensor_parallel']}",
        f"- **Accelerators**: {conditions['accelerators']['count']} × {conditions['accelerators']['model']} "
        f"({conditions['accelerators']['memory_per_device']} each)",
        f"- **Software**: ROCm {sw['rocm']}, vLLM {sw['vllm']}, LMCache {sw['lmcache']}; {sw['lmcache_patches']}",
        f"- **local_disk**: {tiers['local_disk']['device']}",
        f"- **shared_pool**: {tiers['shared_pool']['device']}",
        f"- **Workload**: {conditions['workload']['kind']}, concurrency "
        f"{', '.join(map(str, conditions['workload']['concurrency']))} "
        f"(recompute at {', '.join(map(str, conditions['workload']['recompute_concurrency']))} only)",
        f"- **Not stated**: {conditions['workload']['not_stated']}",
    ])
