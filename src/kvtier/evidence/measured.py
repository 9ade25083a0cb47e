"""Tier tables measured here, in the published R2 table's shape: one type for every such page (R2_local, R3).

A page is data, not a class: which run kinds' readings it shows (in its table's order), whose attribution and
correctness rows it lists, and which comparisons it makes, each a list of (tier, baseline) pairs computed by the
same code as the published R2 (kvtier.evidence.tables). Everything comes from a campaign's tables
(raw_data/runs/<campaign>/, made by kvtier.runs.campaign); windows whose attribution failed are missing from the
readings (never reported) and listed as invalid in the attribution table.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from ..core.table_io import read_table, write_table
from ..core.tiers import CROSS_INSTANCE, TIER_NAMES, TIERS
from . import tables
from .published import load_readings

READINGS_FILE, ATTRIBUTION_FILE, CORRECTNESS_FILE, CONDITIONS_FILE = (
    "R2_readings.csv", "attribution.csv", "correctness.csv", "conditions.json")


@dataclass(frozen=True)
class Comparison:
    name: str                           # the table's name, and its file's: <item>_<name>.csv
    pairs: tuple[tuple[str, str], ...]  # (tier, baseline), stacked in this order where both were measured


@dataclass(frozen=True)
class MeasuredItem:
    id: str
    tiers: tuple[str, ...]  # the run kinds whose readings the page shows, in its table's order
    windows: tuple[str, ...]  # the run kinds whose attribution and correctness the page lists
    comparisons: tuple[Comparison, ...]
    chart_title: str
    switch: str = ""  # the config key that adds the runs of `windows`, named when a campaign has none

    def output_files(self) -> dict[str, str]:
        names = ("table", *(c.name for c in self.comparisons), "attribution", "correctness")
        return {**{name: f"{self.id}_{name}.csv" for name in names}, "chart": f"{self.id}_chart"}


R2_LOCAL = MeasuredItem(
    "R2_local", tiers=tuple(t for t in TIERS if t in TIER_NAMES), windows=TIER_NAMES,
    comparisons=(Comparison("vs_recompute", tuple((t, "recompute") for t in ("engine", "dram", "local_disk",
                                                                              "shared_pool"))),
                 Comparison("pool_vs_local_disk", (("shared_pool", "local_disk"),))),
    chart_title="R2_local (measured here): tiered cold resume")
R3 = MeasuredItem(
    "R3", tiers=(CROSS_INSTANCE, "shared_pool", "recompute"), windows=(CROSS_INSTANCE,),
    comparisons=(Comparison("vs_recompute", ((CROSS_INSTANCE, "recompute"), ("shared_pool", "recompute"))),
                 Comparison("vs_same_instance", ((CROSS_INSTANCE, "shared_pool"),))),
    chart_title="R3 (measured here): resume from a pool another instance wrote", switch="runs.cross_instance")
ITEMS = {item.id: item for item in (R2_LOCAL, R3)}


@dataclass(frozen=True)
class Measured:
    item: MeasuredItem
    readings: pd.DataFrame  # long: tier x concurrency, valid windows only
    table: pd.DataFrame  # wide: one row per concurrency, as the published table
    comparisons: dict[str, pd.DataFrame]  # by Comparison.name
    attribution: pd.DataFrame
    correctness: pd.DataFrame
    conditions: dict


def only(frame: pd.DataFrame, tiers: tuple[str, ...]) -> pd.DataFrame:
    """The rows of these tiers (a campaign's tables hold every run kind)."""
    return frame[frame["tier"].isin(tiers)].reset_index(drop=True)


def item_of(item: MeasuredItem | str) -> MeasuredItem:
    if isinstance(item, MeasuredItem):
        return item
    if item not in ITEMS:
        raise KvtierError(f"no measured tier page {item!r} (pages: {', '.join(ITEMS)})")
    return ITEMS[item]


def load(campaign_dir: str | os.PathLike, item: MeasuredItem | str) -> Measured:
    """The page `item` from a campaign's tables."""
    item, campaign_dir = item_of(item), Path(campaign_dir)
    readings = only(load_readings(campaign_dir / READINGS_FILE), item.tiers)
    attribution = only(read_table(campaign_dir / ATTRIBUTION_FILE), item.windows)
    if attribution.empty:
        raise KvtierError(f"{campaign_dir}: the campaign has no {' or '.join(item.windows)} run"
                          + (f" ({item.switch})" if item.switch else ""))
    present = set(readings["tier"])
    return Measured(
        item=item,
        readings=readings,
        table=tables.wide_table(readings, [t for t in item.tiers if t in present]),
        comparisons={c.name: tables.compare(readings, c.pairs) for c in item.comparisons},
        attribution=attribution,
        correctness=only(read_table(campaign_dir / CORRECTNESS_FILE), item.windows),
        conditions=json.loads((campaign_dir / CONDITIONS_FILE).read_text()),
    )


def chart(measured: Measured):
    from .charts import tier_chart
    return tier_chart(measured.readings, measured.item.chart_title)


def write_evidence(measured: Measured, out_dir: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    """Write the page's tables (CSV) and chart (PNG + SVG) into `out_dir`; return the paths written."""
    from .charts import save_chart
    out_dir, files = Path(out_dir), measured.item.output_files()
    frames = {"table": measured.table, **measured.comparisons, "attribution": measured.attribution,
              "correctness": measured.correctness}
    written = [write_table(frame, out_dir / files[name]) for name, frame in frames.items()]
    return written + save_chart(chart(measured), out_dir / files["chart"], png_scale=png_scale)
