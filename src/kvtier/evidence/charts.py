"""Charts of tier x concurrency readings (altair), exported to PNG and SVG with vl-convert."""

from __future__ import annotations

import os
from pathlib import Path

import altair as alt
import pandas as pd

from ..core.atomic import atomic_path
from ..core.tiers import LABELS, TIERS
from .tables import METRICS

METRIC_TITLES = {"ttft_p50_s": "TTFT p50 (s, log scale)", "output_tok_s": "output tok/s"}


def tier_chart(readings: pd.DataFrame, title: str) -> alt.HConcatChart:
    """TTFT p50 and output tok/s by concurrency, one series per tier; unmeasured cells are left out, not zeroed."""
    long = readings.melt(id_vars=["tier", "concurrency"], value_vars=list(METRICS),
                         var_name="metric", value_name="value").dropna(subset=["value"])
    long["tier_label"] = long["tier"].map(LABELS)
    tier_order = [LABELS[t] for t in TIERS if t in set(long["tier"])]
    panels = []
    for metric in METRICS:
        scale = alt.Scale(type="log") if metric == "ttft_p50_s" else alt.Scale(zero=True)
        panels.append(
            alt.Chart(long[long["metric"] == metric], title=METRIC_TITLES[metric])
            .mark_line(point=alt.OverlayMarkDef(size=60))
            .encode(
                x=alt.X("concurrency:O", title="concurrency", axis=alt.Axis(labelAngle=0)),
                y=alt.Y("value:Q", title=METRIC_TITLES[metric], scale=scale),
                color=alt.Color("tier_label:N", title="tier", sort=tier_order),
                tooltip=["tier", "concurrency", alt.Tooltip("value:Q", title=metric)],
            )
            .properties(width=260, height=220)
        )
    return alt.hconcat(*panels, title=title).configure_axis(labelFontSize=11, titleFontSize=12)


def save_chart(chart: alt.TopLevelMixin, stem: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    """Write `<stem>.png` and `<stem>.svg` atomically; return both paths."""
    written = []
    for fmt in ("png", "svg"):
        final = Path(f"{stem}.{fmt}")
        with atomic_path(final) as tmp:
            kwargs = {"scale_factor": png_scale} if fmt == "png" else {}
            chart.save(str(tmp), format=fmt, **kwargs)
        written.append(final)
    return written


def to_svg(chart: alt.TopLevelMixin) -> str:
    """The chart as SVG text, for showing it inline in a self-contained page (no JavaScript, no network)."""
    import vl_convert
    return vl_convert.vegalite_to_svg(chart.to_json())


def r1_chart(coldread: pd.DataFrame, fio: pd.DataFrame) -> alt.LayerChart:
    """R1: cold-read GB/s of one LMCache worker, patched at each load bound (and checking chunk checksums at the
    configured one, where measured) and upstream (one key at a time), beside fio's direct reads at the same queue
    depth (median bars, min-max whiskers over the rounds)."""
    rows = [{"depth": int(r.iodepth), "reader": "fio direct read (device limit)", "median": r.gb_per_s_median,
             "low": r.gb_per_s_min, "high": r.gb_per_s_max} for r in fio.itertuples()]
    names = {"upstream": "LMCache upstream (one key at a time)", "patched": "LMCache patched (load bound = depth)",
             "patched_checksum": "LMCache patched, each chunk's CRC-32 checked"}
    rows += [{"depth": 1 if r.build == "upstream" else int(r.load_concurrency), "reader": names[r.build],
              "median": r.gb_per_s_median, "low": r.gb_per_s_min, "high": r.gb_per_s_max}
             for r in coldread.itertuples()]
    frame = pd.DataFrame(rows)
    readers = ["fio direct read (device limit)", names["patched"], names["patched_checksum"], names["upstream"]]
    readers = [reader for reader in readers if reader in set(frame["reader"])]
    base = alt.Chart(frame, title="R1 (measured here): cold-read bandwidth, one worker vs the device")
    x = alt.X("depth:O", title="queue depth (fio) / load bound (patched)", axis=alt.Axis(labelAngle=0))
    offset = alt.XOffset("reader:N", sort=readers)
    bars = base.mark_bar().encode(
        x=x, xOffset=offset,
        y=alt.Y("median:Q", title="GB/s (median over rounds)", scale=alt.Scale(zero=True)),
        color=alt.Color("reader:N", sort=readers, title=None,
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=0)),
        tooltip=["reader", "depth", alt.Tooltip("median:Q", format=".3f"), alt.Tooltip("low:Q", format=".3f"),
                 alt.Tooltip("high:Q", format=".3f")])
    whiskers = base.mark_rule().encode(x=x, xOffset=offset, y="low:Q", y2="high:Q")
    return (bars + whiskers).properties(width=460, height=240).configure_axis(labelFontSize=11, titleFontSize=12)


def r9_chart(loads: pd.DataFrame) -> alt.LayerChart:
    """R9: vLLM's loading-weights time per tier path, cold and warm, beside the raw read of the same files (median
    bars, min-max whiskers over the repetitions)."""
    rows = []
    for (path, state), group in loads.groupby(["path", "state"], sort=False):
        for reading, label in (("loading_weights_s", "vLLM loading weights"), ("raw_read_s", "raw read (floor)")):
            rows.append({"case": f"{path}, {state}", "what": label, "median": group[reading].median(),
                         "low": group[reading].min(), "high": group[reading].max()})
    frame = pd.DataFrame(rows)
    whats = ["vLLM loading weights", "raw read (floor)"]
    base = alt.Chart(frame, title="R9 (measured here): model-weight load per tier path, cold and warm")
    x = alt.X("case:N", title=None, sort=list(dict.fromkeys(frame["case"])), axis=alt.Axis(labelAngle=0))
    offset = alt.XOffset("what:N", sort=whats)
    bars = base.mark_bar().encode(
        x=x, xOffset=offset, y=alt.Y("median:Q", title="seconds (median over repetitions)", scale=alt.Scale(zero=True)),
        color=alt.Color("what:N", sort=whats, title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["case", "what", alt.Tooltip("median:Q", format=".3f"), alt.Tooltip("low:Q", format=".3f"),
                 alt.Tooltip("high:Q", format=".3f")])
    whiskers = base.mark_rule().encode(x=x, xOffset=offset, y="low:Q", y2="high:Q")
    return (bars + whiskers).properties(width=460, height=240).configure_axis(labelFontSize=11, titleFontSize=12)


# R5's panels: (title, {column: series label}); each panel one y axis.
SOAK_PANELS = (
    ("TTFT (s)", {"ttft_p50_s": "p50", "ttft_p99_s": "p99"}),
    ("output tok/s", {"output_tok_s": "output tok/s"}),
    ("prompt tokens from", {"engine_frac": "engine", "l1_frac": "L1 (DRAM)", "l2_frac": "L2 (pool)",
                            "recompute_frac": "recomputed"}),
    ("anonymous RSS (MB)", {"vllm_anon_mb": "vLLM", "lmcache_anon_mb": "LMCache"}),
    ("pool (MB)", {"pool_mb": "pool bytes", "free_mb": "free on its file system"}),
)


def soak_chart(windows: pd.DataFrame, faults: pd.DataFrame) -> alt.VConcatChart:
    """R5: the soak's windows over the soak clock, one panel per reading that has values, every fault a vertical rule
    at the second it fired (labelled with its kind)."""
    marks = faults.loc[~faults["skipped"].astype(bool) & faults["fired_s"].notna(), ["fired_s", "kind"]] if not faults.empty else pd.DataFrame(
        columns=["fired_s", "kind"])
    # The axis covers the soak and every fault (one that fired late, after a long recovery, included).
    end = float(max([windows["end_s"].max(), *marks["fired_s"].tolist()]))
    panels = []
    for title, series in SOAK_PANELS:
        long = windows.melt(id_vars=["start_s", "end_s"], value_vars=list(series), var_name="column",
                            value_name="value").dropna(subset=["value"])
        if long.empty:  # nothing recorded for this reading (an empty panel has no size to draw)
            continue
        long["value"] = long["value"].astype(float)
        long["series"] = long["column"].map(series)
        long["mid_s"] = (long["start_s"] + long["end_s"]) / 2
        x = alt.X("mid_s:Q", title="soak clock (s)", scale=alt.Scale(domain=[0, end]))
        lines = alt.Chart(long).mark_line(point=alt.OverlayMarkDef(size=30)).encode(
            x=x, y=alt.Y("value:Q", title=title),
            color=alt.Color("series:N", title=None, sort=list(series.values()), legend=alt.Legend(orient="right")),
            tooltip=["series", alt.Tooltip("mid_s:Q", title="s"), alt.Tooltip("value:Q", format=".4g")])
        rules = alt.Chart(marks).mark_rule(color="#c0392b", strokeDash=[4, 3]).encode(
            x=alt.X("fired_s:Q", scale=alt.Scale(domain=[0, end])), tooltip=["kind"])
        labels = alt.Chart(marks).mark_text(align="left", dx=3, dy=-4, fontSize=9, color="#c0392b", baseline="top",
                                            y=0).encode(x="fired_s:Q", text="kind:N")
        panels.append(alt.layer(lines, rules, labels).resolve_scale(color="independent")
                      .properties(width=560, height=110))
    return (alt.vconcat(*panels, title="R5 (measured here): the G4 soak, window by window; faults in red")
            .resolve_scale(color="independent").configure_axis(labelFontSize=10, titleFontSize=11))
