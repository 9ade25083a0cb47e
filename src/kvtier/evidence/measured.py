"""Tier tables measured here, in the published R2 table's shape: one type for every such page (R2_local, R3).

A page is data, not a class: which run kinds' readings it shows (in its table's order), whose attribution and
correctness rows it lists, and which comparisons it makes, each a list of (tier, baseline) pairs. Everything
comes from a campaign's tables (raw_data/runs/<campaign>/, made by kvtier.runs.campaign); windows whose
attribution failed are missing from the readings (never reported) and listed as invalid in the attribution table.

Readings are the median over the campaign's rounds. A comparison is taken round by round (both sides measured
in the same round) and summarised by kvtier.evidence.stats: the median ratio, its interval and a verdict word.
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
from . import campaign_rounds, sequential, stats, tables
from .published import load_readings

READINGS_FILE, ROUNDS_FILE, ATTRIBUTION_FILE, CORRECTNESS_FILE, CONDITIONS_FILE = (
    "R2_readings.csv", "R2_rounds.csv", "attribution.csv", "correctness.csv", "conditions.json")
# A comparison's columns: the TTFT speed-up (baseline / tier) and the output throughput ratio (tier / baseline),
# each with its interval and word, then the medians they come from.
COMPARISON_COLUMNS = [
    "concurrency", "tier", "baseline", "ttft_p50_speedup", "ttft_speedup_low", "ttft_speedup_high", "ttft_verdict",
    "output_tok_s_ratio", "output_tok_s_ratio_low", "output_tok_s_ratio_high", "output_tok_s_verdict",
    "rounds", "interval", "tier_ttft_p50_s", "baseline_ttft_p50_s", "stop", "to_decide"]


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
    readings: pd.DataFrame  # long: tier x concurrency, the median over rounds of valid windows only
    rounds: pd.DataFrame  # the same per round (round, tier, concurrency, ttft_p50_s, output_tok_s)
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
    by_round = only(read_table(campaign_dir / ROUNDS_FILE), item.tiers)
    present = set(readings["tier"])
    conditions = json.loads((campaign_dir / CONDITIONS_FILE).read_text())
    plan = campaign_rounds.plan_of(conditions)
    stop = (conditions.get("sequential") or {}).get("stop", campaign_rounds.FIXED)
    return Measured(
        item=item,
        readings=readings,
        rounds=by_round,
        table=tables.wide_table(readings, [t for t in item.tiers if t in present]),
        comparisons={c.name: compare_rounds(by_round, c.pairs, plan, stop) for c in item.comparisons},
        attribution=attribution,
        correctness=only(read_table(campaign_dir / CORRECTNESS_FILE), item.windows),
        conditions=conditions,
    )


def _judged(samples: list[float], plan: sequential.Plan | None) -> tuple[stats.Estimate, str, str]:
    """A ratio's interval and word (above 1 better), and what would decide it: under a sequential plan its
    interval at the campaign's last look (kvtier.evidence.sequential, an outlier round deciding nothing alone),
    else kvtier.evidence.stats'."""
    if not sequential.applies(plan, len(samples)):
        figure = stats.estimate(samples)
        return figure, stats.word(figure), ""
    judgement = sequential.judge(samples, 1.0, plan)
    word = stats.FASTER if judgement.side > 0 else stats.SLOWER if judgement.side < 0 else stats.NO_DIFFERENCE
    return judgement.figure, word, sequential.what_would_decide(judgement)


def compare_rounds(by_round: pd.DataFrame, pairs: tuple[tuple[str, str], ...], plan: sequential.Plan | None = None,
                   stop: str = campaign_rounds.FIXED) -> pd.DataFrame:
    """Each (tier, baseline) pair at each concurrency where both have a valid TTFT in at least one common round:
    the per-round speed-up and throughput ratio summarised by kvtier.evidence.stats (under the campaign's
    sequential `plan`, by kvtier.evidence.sequential), stacked in the pairs' order; `stop`: why the campaign's
    rounds stopped, said of a comparison its rounds did not decide."""
    rows = []
    for tier, baseline in pairs:
        common = sorted(set(by_round.loc[by_round["tier"] == tier, "concurrency"])
                        & set(by_round.loc[by_round["tier"] == baseline, "concurrency"]))
        for c in common:
            ttft = {side: tables.per_round(by_round, "ttft_p50_s", tier=side, concurrency=c) for side in (tier, baseline)}
            if not stats.paired_ratios(ttft[baseline], ttft[tier]):
                continue
            speedup, ttft_word, to_decide = _judged(stats.paired_ratios(ttft[baseline], ttft[tier]), plan)
            tok = {side: tables.per_round(by_round, "output_tok_s", tier=side, concurrency=c) for side in (tier, baseline)}
            tok_ratios = stats.paired_ratios(tok[tier], tok[baseline])
            throughput, tok_word, _ = _judged(tok_ratios, plan) if tok_ratios else (None, None, "")
            decided = ttft_word in (stats.FASTER, stats.SLOWER)
            rows.append({
                "concurrency": int(c), "tier": tier, "baseline": baseline,
                "ttft_p50_speedup": speedup.point, "ttft_speedup_low": speedup.low,
                "ttft_speedup_high": speedup.high, "ttft_verdict": ttft_word,
                "output_tok_s_ratio": throughput.point if throughput else None,
                "output_tok_s_ratio_low": throughput.low if throughput else None,
                "output_tok_s_ratio_high": throughput.high if throughput else None,
                "output_tok_s_verdict": tok_word,
                "rounds": speedup.rounds, "interval": speedup.method,
                "tier_ttft_p50_s": stats.estimate(ttft[tier].values()).point,
                "baseline_ttft_p50_s": stats.estimate(ttft[baseline].values()).point,
                "stop": (stop if not plan else campaign_rounds.DECIDED if decided
                         else campaign_rounds.WITH_THE_CAMPAIGN if stop == campaign_rounds.DECIDED else stop),
                "to_decide": "" if decided else to_decide,
            })
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def verdict_text(frame: pd.DataFrame) -> str:
    """One line per compared window: the verdict word, then the speed-up with its interval, for a page to print;
    then how the intervals were made (one line per method: rows may have different numbers of valid rounds)."""
    if frame.empty:
        return "nothing to compare: no round has a valid window on both sides"
    lines = []
    for r in frame.itertuples():
        throughput = ("output tok/s not measured" if r.output_tok_s_verdict is None or pd.isna(r.output_tok_s_ratio)
                      else f"output tok/s {r.output_tok_s_verdict.upper()}, ratio {r.output_tok_s_ratio:.3g} "
                           f"[{r.output_tok_s_ratio_low:.3g}, {r.output_tok_s_ratio_high:.3g}]")
        how = f"{r.rounds} rounds, {r.stop}" if getattr(r, "stop", None) else f"{r.rounds} rounds"
        decide = f"; to decide: {r.to_decide}" if getattr(r, "to_decide", None) else ""
        lines.append(f"{r.tier} vs {r.baseline}, concurrency {r.concurrency}: TTFT {r.ttft_verdict.upper()}, "
                     f"speed-up {r.ttft_p50_speedup:.3g}x [{r.ttft_speedup_low:.3g}, {r.ttft_speedup_high:.3g}]; "
                     f"{throughput} ({how}{decide})")
    return "\n".join(lines + [f"({method})" for method in dict.fromkeys(frame["interval"])])


def styled(frame: pd.DataFrame):
    """A comparison as a page shows it: three significant digits, no index."""
    return frame.style.hide(axis="index").format(precision=3)


def rounds_table(measured: Measured) -> pd.DataFrame:
    """Every round's readings, one row per tier x concurrency, one column per metric and round."""
    rounds = measured.rounds
    wide = rounds.pivot(index=["tier", "concurrency"], columns="round", values=["ttft_p50_s", "output_tok_s"])
    wide.columns = [f"{metric} r{round_}" for metric, round_ in wide.columns]
    order = list(dict.fromkeys(zip(rounds["tier"], rounds["concurrency"])))  # the campaign's tier order
    return wide.reindex(pd.MultiIndex.from_tuples(order, names=["tier", "concurrency"]))


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
