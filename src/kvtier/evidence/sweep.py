"""The bandwidth sweep's answers (kvtier.runs.sweep): at each L2 read cap, is a cold resume from L2 faster than
recomputing the context, and where does it start to pay?

Per context, concurrency and cap, the ratio "resume TTFT p50 from L2 at the cap / recompute TTFT p50", one per
round (both measured in the same round, on the same sessions), judged against 1 like every comparison of the
package (kvtier.evidence.sequential.judge: Student's t over the rounds' log ratios, an outlier round flagged and
its effect shown): below 1 decided, offload pays; above 1 decided, recompute is faster; else undecided. The same
ratio against DRAM says how far the cap is from L1's speed.

The crossover bandwidth of a context and concurrency is bracketed between two measured caps: the highest at which
recompute was decided faster and the lowest at which offload was decided faster, when the first lies below the
second. A sweep whose answers are not ordered by the cap (offload decided faster at a cap below one where it was
decided slower) says so instead of bracketing.

The service model (`fit`) explains a cold resume's TTFT p50 from L2 as the same context's resume from DRAM (the
floor, measured: the lookup, the transfer into the engine, the follow-up's prefill, the first token), plus a fixed
cost of going to L2 at all (opening and checking the chunk files), plus the time the device makes the median
request wait: a share of the time it takes to read the KV in flight,
`concurrency x context x KV bytes per token / read cap`, less a head start (what the device lets through before
the cap binds: the block throttle admits a slice's worth of bytes at once, and loads overlap the engine's work):

    TTFT p50 = floor + l2_overhead + share x max(0, concurrency x context x kv_bytes_per_token / read_bps - head_start)

Its three parameters are fitted by least squares of the relative residuals on a stated subset of the sweep's cells
(medians over rounds) and judged on the cells held out, by the relative error of each prediction. Where it
predicts a TTFT equal to the measured recompute TTFT, the bandwidth below which offload stops paying follows; a
bandwidth outside the fitted range of caps is flagged as an extrapolation, never given as if measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..bench.runner import read_completed
from ..core.errors import KvtierError
from ..runs.sweep import DRAM, RECOMPUTE, SWEEP_FILE
from . import sequential, stats, tables

OFFLOAD_PAYS, RECOMPUTE_FASTER, UNDECIDED = "offload pays", "recompute faster", "undecided"
COLUMNS = ("context_tokens", "round", "run", "read_bps", "concurrency", "ttft_p50_s", "requests", "failed")


def _windows(run_dir: Path) -> pd.DataFrame:
    """The sweep's windows (one row each); refused, naming what is wrong, when the file holds none."""
    path = run_dir / SWEEP_FILE
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise KvtierError(f"{path}: not readable JSON lines ({exc})") from None
    frame = pd.DataFrame(rows)
    missing = set(COLUMNS) - set(frame.columns)
    if frame.empty or missing:
        raise KvtierError(f"{path}: no sweep windows" + (f" (missing {sorted(missing)})" if not frame.empty else ""))
    return frame


def comparisons(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (context, concurrency, cap): the L2 resume's TTFT against recompute and against DRAM, each a
    ratio over the rounds with its interval, and the verdict against recompute."""
    out = []
    caps = rows[rows["read_bps"].notna()]
    for (context, c, bps), group in caps.groupby(["context_tokens", "concurrency", "read_bps"], sort=True):
        at_cap = tables.per_round(group, "ttft_p50_s")
        row = {"context_tokens": int(context), "concurrency": int(c), "read_mb_s": bps / 1e6,
               "ttft_p50_s": float(group["ttft_p50_s"].median())}
        for name, baseline in (("recompute", RECOMPUTE), ("dram", DRAM)):
            samples = stats.paired_ratios(at_cap, tables.per_round(rows, "ttft_p50_s", run=baseline,
                                                                   context_tokens=context, concurrency=c))
            if not samples:
                raise KvtierError(f"sweep: no {baseline} window paired with the cap {bps / 1e6:g} MB/s at "
                                  f"{context} tokens, concurrency {c}")
            judged = sequential.judge(samples, 1.0, None)
            row.update({f"vs_{name}": judged.figure.point, f"vs_{name}_low": judged.figure.low,
                        f"vs_{name}_high": judged.figure.high, "rounds": judged.figure.rounds})
            if name == "recompute":
                row["verdict"] = (OFFLOAD_PAYS if judged.side < 0 else RECOMPUTE_FASTER if judged.side > 0
                                  else UNDECIDED)
                row["interval"] = judged.figure.method
        out.append(row)
    return pd.DataFrame(out)


def crossovers(compared: pd.DataFrame) -> pd.DataFrame:
    """Per (context, concurrency): between which measured caps offload starts to pay, or why no bracket."""
    out = []
    for (context, c), group in compared.groupby(["context_tokens", "concurrency"], sort=True):
        group = group.sort_values("read_mb_s")
        slower = group.loc[group["verdict"] == RECOMPUTE_FASTER, "read_mb_s"]
        faster = group.loc[group["verdict"] == OFFLOAD_PAYS, "read_mb_s"]
        low = high = None
        if slower.empty and faster.empty:
            says = "no cap decided either way"
        elif slower.empty:
            says = f"offload paid at every cap decided, down to {faster.min():g} MB/s"
            high = faster.min()
        elif faster.empty:
            says = f"recompute was faster at every cap decided, up to {slower.max():g} MB/s"
            low = slower.max()
        elif slower.max() < faster.min():
            low, high = slower.max(), faster.min()
            says = f"offload starts to pay between {low:g} and {high:g} MB/s"
        else:
            says = (f"not ordered by bandwidth: recompute decided faster at {slower.max():g} MB/s, offload at "
                    f"{faster.min():g} MB/s")
        out.append({"context_tokens": int(context), "concurrency": int(c), "slower_up_to_mb_s": low,
                    "pays_from_mb_s": high, "crossover": says})
    return pd.DataFrame(out)


@dataclass(frozen=True)
class ServiceModel:
    """TTFT p50 = floor + l2 overhead + share x max(0, in-flight bytes / read cap - head start); fitted on
    `fitted_on` cells. The floor is the same context's resume from DRAM, measured (what no device goes under)."""
    l2_overhead_s: float
    share: float
    head_start_s: float
    kv_bytes_per_token: int
    caps_fitted: tuple[float, float]  # the lowest and highest read cap (bytes/s) it was fitted on
    fitted_on: int

    def device_s(self, context: float, concurrency: float, read_bps: float) -> float:
        """What reading from L2 through the capped device adds to the floor."""
        moved = concurrency * context * self.kv_bytes_per_token / read_bps
        return self.l2_overhead_s + self.share * max(0.0, moved - self.head_start_s)

    def ttft(self, context: float, concurrency: float, read_bps: float, floor_s: float) -> float:
        return floor_s + self.device_s(context, concurrency, read_bps)

    def breakeven_bps(self, context: float, concurrency: float, recompute_s: float, floor_s: float) -> float | None:
        """The read cap at which the model's L2 resume takes as long as `recompute_s`; None where even an
        unbounded device would not beat recompute (the floor is not under it)."""
        spare = recompute_s - floor_s - self.l2_overhead_s
        if spare <= 0 or self.share <= 0:
            return None
        return concurrency * context * self.kv_bytes_per_token / (spare / self.share + self.head_start_s)

    def extrapolates(self, read_bps: float) -> bool:
        low, high = self.caps_fitted
        return not low <= read_bps <= high


def cells(rows: pd.DataFrame) -> pd.DataFrame:
    """The sweep's L2 cells: per (context, concurrency, cap), the median TTFT p50 over rounds, with recompute's
    and DRAM's (the floor) at the same context and concurrency."""
    caps = rows[rows["read_bps"].notna()]
    out = caps.groupby(["context_tokens", "concurrency", "read_bps"], as_index=False)["ttft_p50_s"].median()
    for run, column in ((RECOMPUTE, "recompute_s"), (DRAM, "floor_s")):
        baseline = rows[rows["run"] == run].groupby(["context_tokens", "concurrency"])["ttft_p50_s"].median()
        out[column] = [baseline.get((x, c)) for x, c in zip(out["context_tokens"], out["concurrency"])]
    return out


# The head start is fitted on a grid (the model is linear in the share once it is fixed).
HEAD_START_GRID_S = np.arange(0.0, 2.0, 0.005)


def fit(cells_: pd.DataFrame, kv_bytes_per_token: int) -> ServiceModel:
    """Least squares of the relative residuals (a 5-s cell must not outweigh a 50-ms one: the noise of a TTFT grows
    with it, and the model is judged by its relative error) over the L2 overhead, the share and the head start."""
    if len(cells_) < 4:
        raise KvtierError(f"the service model has 3 parameters: {len(cells_)} cell(s) cannot fit and check it")
    if cells_["floor_s"].isna().any():
        raise KvtierError("the service model needs each cell's DRAM resume (its floor): a cell has none")
    moved = (cells_["concurrency"].to_numpy(float) * cells_["context_tokens"].to_numpy(float) * kv_bytes_per_token
             / cells_["read_bps"].to_numpy(float))
    if len(set(moved.round(9))) < 2:
        raise KvtierError("the service model cannot be fitted on these cells: they vary neither the context nor "
                          "the cap (fit on at least two contexts or caps)")
    measured = cells_["ttft_p50_s"].to_numpy(float)
    floor = cells_["floor_s"].to_numpy(float)
    best = None
    target = (measured - floor) / measured
    for head_start in HEAD_START_GRID_S:
        waited = np.maximum(0.0, moved - head_start)
        if not waited.any():
            continue
        design = np.column_stack([1 / measured, waited / measured])
        (overhead, share), *_ = np.linalg.lstsq(design, target, rcond=None)
        overhead, share = max(0.0, float(overhead)), max(0.0, float(share))
        residual = (floor + overhead + share * waited) / measured - 1
        loss = float(residual @ residual)
        if best is None or loss < best[0]:
            best = (loss, overhead, share, float(head_start))
    if best is None:
        raise KvtierError("the service model cannot be fitted on these cells")
    return ServiceModel(best[1], best[2], best[3], int(kv_bytes_per_token),
                        (float(cells_["read_bps"].min()), float(cells_["read_bps"].max())), len(cells_))


def held_out_errors(model: ServiceModel, held_out: pd.DataFrame) -> pd.DataFrame:
    """Predicted against measured for every cell given, with the relative error."""
    out = held_out.copy()
    out["predicted_s"] = [model.ttft(x, c, bps, floor) for x, c, bps, floor in zip(
        out["context_tokens"], out["concurrency"], out["read_bps"], out["floor_s"])]
    out["error"] = out["predicted_s"] / out["ttft_p50_s"] - 1
    out["extrapolated"] = [model.extrapolates(bps) for bps in out["read_bps"]]
    return out


OUTPUT_FILES = {"comparisons": "S_comparisons.csv", "crossovers": "S_crossovers.csv", "model": "S_model.csv",
                "chart": "S_chart"}
# How the model is judged (stated on the page): fitted on the first and last contexts at every other cap (from
# the slowest), judged on every other cell: the middle contexts at every cap, the others' remaining caps.
TARGET_ERROR = 0.20


def split(cells_: pd.DataFrame) -> pd.Series:
    """Which cells the model is fitted on (True) and which it must predict (False)."""
    contexts = sorted(set(cells_["context_tokens"]))
    fit_contexts = {contexts[0], contexts[-1]} if len(contexts) >= 3 else set(contexts)
    fit_caps = set(sorted(set(cells_["read_bps"]))[::2])
    return cells_["context_tokens"].isin(fit_contexts) & cells_["read_bps"].isin(fit_caps)


@dataclass(frozen=True)
class Sweep:
    run: dict
    rows: pd.DataFrame          # one row per measured window
    comparisons: pd.DataFrame   # per (context, concurrency, cap): against recompute and DRAM, with the verdict
    crossovers: pd.DataFrame    # per (context, concurrency): where offload starts to pay
    model: ServiceModel | None  # None where the cells cannot fit it (say why: `model_note`)
    predictions: pd.DataFrame   # every cell: measured, predicted, relative error, fitted or held out
    model_note: str


def analyse(run_dir: str | Path) -> Sweep:
    run_dir = Path(run_dir)
    return from_rows(read_completed(run_dir), _windows(run_dir))


def from_rows(run: dict, rows: pd.DataFrame) -> Sweep:
    """The sweep's answers from its run record (for `kv_bytes_per_token`) and its windows."""
    compared = comparisons(rows)
    all_cells = cells(rows)
    train = split(all_cells)
    model, note = None, ""
    try:
        model = fit(all_cells[train], run["kv_bytes_per_token"])
    except KvtierError as exc:
        note = str(exc)
    predictions = pd.DataFrame()
    if model is not None:
        predictions = held_out_errors(model, all_cells)
        predictions["used"] = ["fitted" if t else "held out" for t in train]
        held = predictions[predictions["used"] == "held out"]
        note = (f"fitted on {int(train.sum())} cells, judged on {len(held)} held out: median |error| "
                f"{held['error'].abs().median():.1%}, worst {held['error'].abs().max():.1%} (target "
                f"±{TARGET_ERROR:.0%})" if len(held) else f"fitted on {int(train.sum())} cells; none held out")
    return Sweep(run, rows, compared, crossovers(compared), model, predictions, note)


def chart(measured: Sweep):
    """TTFT p50 from L2 against the read cap (both log), one line per context, at the sweep's highest concurrency;
    recompute and DRAM as dashed rules."""
    import altair as alt
    top = int(measured.rows["concurrency"].max())
    lines = measured.comparisons[measured.comparisons["concurrency"] == top].assign(
        context=lambda f: f["context_tokens"].astype(str) + " tokens")
    baselines = (measured.rows[measured.rows["read_bps"].isna() & (measured.rows["concurrency"] == top)]
                 .groupby(["context_tokens", "run"], as_index=False)["ttft_p50_s"].median()
                 .assign(context=lambda f: f["context_tokens"].astype(str) + " tokens"))
    x = alt.X("read_mb_s:Q", title="L2 read cap (MB/s, log)", scale=alt.Scale(type="log"))
    y = alt.Y("ttft_p50_s:Q", title="resume TTFT p50 (s, log; median over rounds)", scale=alt.Scale(type="log"))
    color = alt.Color("context:N", title="context",
                      sort=sorted(set(lines["context"]), key=lambda text: int(text.split()[0])))
    caps = alt.Chart(lines).mark_line(point=True).encode(x=x, y=y, color=color,
                                                         tooltip=["context", "read_mb_s", "ttft_p50_s", "verdict"])
    rules = alt.Chart(baselines).mark_rule().encode(
        y="ttft_p50_s:Q", color=color, strokeDash=alt.StrokeDash("run:N", title="baseline"),
        tooltip=["context", "run", "ttft_p50_s"])
    title = alt.TitleParams(f"S: resume TTFT from L2 by read cap (concurrency {top})",
                            subtitle="dashed: recompute and DRAM at the same context")
    return ((caps + rules).properties(width=480, height=280, title=title)
            .configure_axis(labelFontSize=11, titleFontSize=12))


def write_evidence(measured: Sweep, out_dir: str | Path, png_scale: float = 2.0) -> list[Path]:
    from ..core.table_io import write_table
    from .charts import save_chart
    out_dir = Path(out_dir)
    return [write_table(measured.comparisons, out_dir / OUTPUT_FILES["comparisons"]),
            write_table(measured.crossovers, out_dir / OUTPUT_FILES["crossovers"]),
            write_table(measured.predictions, out_dir / OUTPUT_FILES["model"]),
            *save_chart(chart(measured), out_dir / OUTPUT_FILES["chart"], png_scale)]
