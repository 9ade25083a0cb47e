"""Evidence B's boundary: where keeping the KV cache in the engine beats offloading it, on a measured grid.

A grid holds, per scheme (`engine_only`, `offload`, ...), concurrency and context length, one reading per round
(TTFT p50/p99 in seconds). Everything here is computed from the cells that were measured, never beyond them:

- per cell, the offload / engine TTFT p50 ratio over the rounds with its interval (kvtier.evidence.stats) and the
  winner: `offload` when the interval lies below 1, `engine_only` above 1, `tie` when it holds 1;
- per context length, each crossover located between two measured concurrencies where the winner changes (ties
  in between widen the bracket), or the plain statement that this context has none;
- per TTFT SLA, for each cell, whether each scheme meets it (MET when its interval lies at or under the SLA,
  NOT MET when above, UNDECIDED otherwise).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from ..core.table_io import read_table
from ..core.tiers import ENGINE_ONLY, OFFLOAD
from ..runs.boundary import ROUNDS_FILE
from . import stats, tables

ENGINE = ENGINE_ONLY
TIE = "tie"
GRID_COLUMNS = ("scheme", "concurrency", "context_tokens", "round")


def load_grid(boundary_dir: str | os.PathLike) -> pd.DataFrame:
    """A boundary run's grid (`<dir>/B_rounds.csv`), checked."""
    path = Path(boundary_dir) / ROUNDS_FILE
    if not path.is_file():
        raise KvtierError(f"{boundary_dir}: no boundary cells ({ROUNDS_FILE} missing; the pipeline's B run "
                          "writes it)")
    try:
        grid = read_table(path)
    except (ValueError, pd.errors.ParserError) as exc:
        raise KvtierError(f"{path}: not a readable CSV table ({exc})") from None
    check_grid(grid, str(path))
    return grid


def check_grid(grid: pd.DataFrame, source: str = "grid") -> None:
    missing = [c for c in (*GRID_COLUMNS, "ttft_p50_s") if c not in grid.columns]
    if missing:
        raise KvtierError(f"{source}: missing column(s) {', '.join(missing)}")
    if grid.empty:
        raise KvtierError(f"{source}: no cells")


AXES = ("concurrency", "context_tokens")  # the grid's two axes; a crossover runs along one, the other held fixed
AXIS_WORDS = {"concurrency": "concurrency", "context_tokens": "context"}
LOWER_IS_BETTER = {"ttft_p50_s": True, "ttft_p90_s": True, "ttft_p99_s": True, "output_tok_s": False}


def winners(grid: pd.DataFrame, candidate: str = OFFLOAD, baseline: str = ENGINE,
            metric: str = "ttft_p50_s") -> pd.DataFrame:
    """One row per (context, concurrency) measured for both schemes: the ratio candidate / baseline of `metric`
    paired by round, its interval, and the winner (lower TTFT wins; higher throughput wins)."""
    check_grid(grid)
    if metric not in LOWER_IS_BETTER or metric not in grid.columns:
        raise KvtierError(f"winners by {metric!r}: the grid has no such reading (one of "
                          f"{', '.join(c for c in LOWER_IS_BETTER if c in grid.columns)})")
    lower = LOWER_IS_BETTER[metric]
    rows = []
    cells = grid[["context_tokens", "concurrency"]].drop_duplicates().sort_values(["context_tokens", "concurrency"])
    for context, c in cells.itertuples(index=False):
        mine, theirs = (tables.per_round(grid, metric, scheme=s, concurrency=c, context_tokens=context)
                       for s in (candidate, baseline))
        if not stats.paired_ratios(mine, theirs):
            continue  # a scheme missing at this cell: no winner is claimed there
        ratio = stats.ratio(mine, theirs)
        below, above = (candidate, baseline) if lower else (baseline, candidate)
        winner = below if ratio.high < 1 else above if ratio.low > 1 else TIE
        rows.append({"context_tokens": int(context), "concurrency": int(c), "ratio": ratio.point,
                     "ratio_low": ratio.low, "ratio_high": ratio.high, "rounds": ratio.rounds,
                     "interval": ratio.method, "winner": winner})
    return pd.DataFrame(rows, columns=["context_tokens", "concurrency", "ratio", "ratio_low", "ratio_high",
                                       "rounds", "interval", "winner"])


@dataclass(frozen=True)
class Crossover:
    at: int  # the value of the axis held fixed (a context length when the crossover runs along concurrency)
    below: int  # the last measured value along `along` won by `before`
    above: int  # the first measured value won by `after`
    before: str
    after: str
    along: str = "concurrency"

    def text(self) -> str:
        fixed, moving = AXIS_WORDS[other_axis(self.along)], AXIS_WORDS[self.along]
        return (f"{fixed} {self.at}: {self.before} wins up to {moving} {self.below}, {self.after} "
                f"from {self.above}; the crossover lies between the two (not measured in between)")


def other_axis(axis: str) -> str:
    """The axis held fixed while a crossover runs along `axis`."""
    if axis not in AXES:
        raise KvtierError(f"a crossover runs along one of {', '.join(AXES)}, not {axis!r}")
    return AXES[1 - AXES.index(axis)]


def crossovers(won: pd.DataFrame, along: str = "concurrency") -> dict[int, list[Crossover]]:
    """Per value of the other axis (per context length, by default), every change of winner between measured
    values along `along`, bracketed by the last cell won by one scheme and the first won by the other; ties
    never make a crossover on their own."""
    fixed = other_axis(along)
    out: dict[int, list[Crossover]] = {}
    for at, rows in won.groupby(fixed):
        found, last = [], None  # last: (value along the axis, scheme) of the latest decided cell
        rows = rows.sort_values(along)
        for value, winner in zip(rows[along], rows["winner"]):
            if winner == TIE:
                continue
            if last is not None and winner != last[1]:
                found.append(Crossover(int(at), last[0], int(value), last[1], winner, along))
            last = (int(value), winner)
        out[int(at)] = found
    return out


def no_crossover_reason(won: pd.DataFrame, along: str, at: int) -> str:
    """Why the line of the grid at `at` (on the other axis) has no crossover along `along`: the one scheme that
    won or tied every decided cell, or that no cell was decided."""
    decided = set(won.loc[won[other_axis(along)] == at, "winner"]) - {TIE}
    return (f"{decided.pop()} wins or ties at every measured {AXIS_WORDS[along]}" if len(decided) == 1
            else "no cell decided")


def crossover_text(won: pd.DataFrame, along: str = "concurrency") -> str:
    fixed, lines = other_axis(along), []
    for at, found in crossovers(won, along).items():
        if found:
            lines += [x.text() for x in found]
        else:
            lines.append(f"{AXIS_WORDS[fixed]} {at}: no crossover on this grid ({no_crossover_reason(won, along, at)})")
    return "\n".join(lines)


def parse_slas(text: str) -> list[tuple[str, float]]:
    """SLAs written as words `metric=seconds` (how a rule passes them to page B): [(metric, seconds)]."""
    slas = []
    for word in text.split():
        metric, sep, seconds = word.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = None
        times = [m for m, lower in LOWER_IS_BETTER.items() if lower]  # an SLA in seconds bounds a time
        if not sep or value is None or metric not in times:
            raise KvtierError(f"SLA {word!r}: expected METRIC=SECONDS with METRIC one of {', '.join(times)}")
        slas.append((metric, value))
    return slas


def sla_regions(grid: pd.DataFrame, slas: list[tuple[str, float]]) -> pd.DataFrame:
    """For each SLA (metric, seconds), each cell and each scheme: MET / NOT MET / UNDECIDED from the scheme's
    interval over the rounds, with its median."""
    check_grid(grid)
    rows = []
    for metric, limit in slas:
        if limit <= 0:
            raise KvtierError(f"SLA {metric} <= {limit!r} s: must be > 0")
        if metric not in grid.columns:
            raise KvtierError(f"SLA on {metric!r}: the grid has no such column")
        keys = grid[["scheme", "context_tokens", "concurrency"]].drop_duplicates()
        for scheme, context, c in keys.sort_values(["context_tokens", "concurrency", "scheme"]).itertuples(
                index=False):
            values = tables.per_round(grid, metric, scheme=scheme, concurrency=c, context_tokens=context)
            if not values:
                continue
            figure = stats.estimate(values.values())
            rows.append({"metric": metric, "sla_s": limit, "scheme": scheme, "context_tokens": int(context),
                         "concurrency": int(c), "value": figure.point, "low": figure.low, "high": figure.high,
                         "verdict": stats.target(figure, limit, at_least=False)})
    return pd.DataFrame(rows, columns=["metric", "sla_s", "scheme", "context_tokens", "concurrency", "value",
                                       "low", "high", "verdict"])


# ------------------------------------------------------------------------------------------------------------
# The page (notebooks/B.py)

ATTRIBUTION_FILE, CORRECTNESS_FILE, CONDITIONS_FILE = "B_attribution.csv", "B_correctness.csv", "conditions.json"
SHARES = ("engine_frac", "l1_frac", "l2_frac", "recompute_frac")


@dataclass
class Measured:
    """A boundary run's tables (kvtier.runs.boundary.aggregate) and what the page derives from them."""
    grid: pd.DataFrame
    attribution: pd.DataFrame
    correctness: pd.DataFrame
    conditions: dict
    won: pd.DataFrame


def load(boundary_dir: str | os.PathLike) -> Measured:
    import json
    boundary_dir = Path(boundary_dir)
    grid = load_grid(boundary_dir)
    found = {}
    for name in (ATTRIBUTION_FILE, CORRECTNESS_FILE, CONDITIONS_FILE):
        path = boundary_dir / name
        if not path.is_file():
            raise KvtierError(f"{boundary_dir}: {name} missing (`kvtier boundary {boundary_dir}` writes it)")
        found[name] = json.loads(path.read_text()) if name.endswith(".json") else read_table(path)
    return Measured(grid, found[ATTRIBUTION_FILE], found[CORRECTNESS_FILE], found[CONDITIONS_FILE], winners(grid))


def cell_medians(grid: pd.DataFrame) -> pd.DataFrame:
    """Per cell and scheme, the median over the rounds of every reading (valid rounds only)."""
    metrics = [c for c in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "output_tok_s") if c in grid.columns]
    keys = ["context_tokens", "concurrency", "scheme"]
    return grid.groupby(keys)[metrics].median().reset_index().sort_values(keys).reset_index(drop=True)


def attribution_medians(attribution: pd.DataFrame) -> pd.DataFrame:
    """Per cell and scheme, the median over the rounds of where the prompt tokens came from, and how many rounds
    were valid: why a cell went one way (the engine ran out of room: its recompute share rises)."""
    keys = ["context_tokens", "concurrency", "scheme"]
    shares = attribution.groupby(keys)[list(SHARES)].median()
    valid = attribution.groupby(keys)["valid"].agg(lambda v: f"{int(v.sum())}/{len(v)}").rename("valid rounds")
    return shares.join(valid).reset_index()


def bracket_cells(won: pd.DataFrame) -> set[tuple[int, int]]:
    """The (context, concurrency) cells that bracket a crossover along concurrency: the heatmap outlines them."""
    return {(x.at, c) for found in crossovers(won).values() for x in found for c in (x.below, x.above)}


def heatmap(won: pd.DataFrame, title: tuple[str, ...] = ("offload / engine_only", "TTFT p50, median over rounds")):
    """The grid as a heatmap of the ratio (below 1: offload faster), each cell labelled with its winner, and the
    two measured cells that bracket each crossover outlined."""
    import altair as alt
    brackets = bracket_cells(won)
    shown = won.assign(label=won["ratio"].map(lambda r: f"{r:.2f}") + "\n" + won["winner"],
                       crossover=[(ctx, c) in brackets for ctx, c in zip(won["context_tokens"], won["concurrency"])])
    base = alt.Chart(shown).encode(
        x=alt.X("concurrency:O", title="concurrency", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("context_tokens:O", title="context (tokens)", sort="descending"))
    cells = base.mark_rect().encode(
        color=alt.Color("ratio:Q", title="ratio", scale=alt.Scale(type="log", scheme="redblue", domainMid=1,
                                                                   reverse=True)),
        tooltip=["context_tokens", "concurrency", alt.Tooltip("ratio:Q", format=".3f"),
                 alt.Tooltip("ratio_low:Q", format=".3f"), alt.Tooltip("ratio_high:Q", format=".3f"), "winner"])
    outline = base.transform_filter(alt.datum.crossover).mark_rect(fill=None, stroke="black", strokeWidth=3)
    text = base.mark_text(fontSize=12, lineBreak="\n").encode(text="label:N")
    return (cells + outline + text).properties(  # the title on lines of its own: a small grid is narrow
        title=alt.TitleParams(list(title), subtitle="outlined: the measured cells that bracket a crossover"),
        width=90 * max(1, won["concurrency"].nunique()), height=60 * max(1, won["context_tokens"].nunique()))


def write_evidence(measured: Measured, out_dir: str | os.PathLike, slas: list[tuple[str, float]],
                   png_scale: float = 2.0) -> list[Path]:
    """The page's tables (CSV) and heatmap (PNG + SVG) into `out_dir`; the paths written."""
    from ..core.table_io import write_table
    from .charts import save_chart
    out_dir = Path(out_dir)
    frames = {"B_cells.csv": cell_medians(measured.grid), "B_winners.csv": measured.won,
              "B_sla.csv": sla_regions(measured.grid, slas),
              "B_attribution.csv": attribution_medians(measured.attribution)}
    written = [write_table(frame, out_dir / name) for name, frame in frames.items()]
    return written + save_chart(heatmap(measured.won), out_dir / "B_chart", png_scale=png_scale)
