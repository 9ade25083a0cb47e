"""Evidence B's boundary: where keeping the KV cache in the engine beats offloading it, on a measured grid.

A grid holds, per scheme (`engine_only`, `offload`, ...), concurrency and context length, one reading per round
(TTFT p50/p99 in seconds). Everything here is computed from the cells that were measured, never beyond them:

- per cell, the offload / engine TTFT ratio over the rounds with its interval and the winner: `offload` when the
  interval lies below 1, `engine_only` above 1, `tie` when it holds 1. A round's ratio is the median of the
  per-request TTFT ratios where the grid pairs requests (`ttft_paired_ratio`: both schemes serve the same
  conversations in the same order), else the ratio of the two TTFT p50s; the interval is the sequential one
  (kvtier.evidence.sequential) when the grid was measured under a sequential plan, else kvtier.evidence.stats;
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
from ..runs.boundary import REPLAY_COLUMNS, ROUNDS_FILE
from . import sequential, stats, tables

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


def plan_of(grid: pd.DataFrame) -> sequential.Plan | None:
    """The sequential plan a grid was measured under (its min_rounds and max_rounds columns), or None for fixed
    rounds (a grid from before sequential rounds, or max_rounds equal to min_rounds)."""
    if not {"min_rounds", "max_rounds"} <= set(grid.columns) or grid.empty:
        return None
    low, high = int(grid["min_rounds"].min()), int(grid["max_rounds"].max())
    return sequential.Plan(low, high) if 2 <= low < high else None


PAIRED = "ttft_paired_ratio"  # B_rounds.csv: per round, the median of the per-request TTFT ratios (runs.boundary)
PAIRED_WORDS = "median of the per-request TTFT ratios"
WINNER_COLUMNS = ["context_tokens", "concurrency", "ratio", "ratio_low", "ratio_high", "rounds", "interval", "winner",
                  "statistic", "stop", "outlier_rounds", "without_outliers", "to_decide", "requests_per_round"]


def winners(grid: pd.DataFrame, candidate: str = OFFLOAD, baseline: str = ENGINE,
            metric: str = "ttft_p50_s", plan: sequential.Plan | None = None) -> pd.DataFrame:
    """One row per (context, concurrency) measured for both schemes: the ratio candidate / baseline of `metric`
    paired by round, its interval, and the winner (lower TTFT wins; higher throughput wins). Under a sequential
    plan (`plan`, or the grid's own: plan_of) the interval is the sequential one of kvtier.evidence.sequential.
    A round that is an outlier (Hampel's rule on the logs) is named, the interval without it shown, and the cell
    is decided only when both intervals agree; an undecided cell says about how many more rounds would decide
    it; `stop` says why its rounds stopped."""
    check_grid(grid)
    if metric not in LOWER_IS_BETTER or metric not in grid.columns:
        raise KvtierError(f"winners by {metric!r}: the grid has no such reading (one of "
                          f"{', '.join(c for c in LOWER_IS_BETTER if c in grid.columns)})")
    plan = plan or plan_of(grid)
    lower = LOWER_IS_BETTER[metric]
    rows = []
    cells = grid[["context_tokens", "concurrency"]].drop_duplicates().sort_values(["context_tokens", "concurrency"])
    for context, c in cells.itertuples(index=False):
        mine, theirs = (tables.per_round(grid, metric, scheme=s, concurrency=c, context_tokens=context)
                       for s in (candidate, baseline))
        samples = stats.paired_ratios(mine, theirs)
        if not samples:
            continue  # a scheme missing at this cell: no winner is claimed there
        paired = sorted(set(mine) & set(theirs))
        by_request = (tables.per_round(grid, PAIRED, scheme=candidate, concurrency=c, context_tokens=context)
                      if metric == "ttft_p50_s" and baseline == ENGINE and PAIRED in grid.columns else {})
        if by_request:  # request by request: the same conversations, turns and order on both sides of a round
            paired = sorted(by_request)
            samples = [by_request[r] for r in paired]
        fits = sequential.applies(plan, len(samples))
        verdict = sequential.judge(samples, 1.0, plan if fits else None)
        ratio = verdict.figure
        below, above = (candidate, baseline) if lower else (baseline, candidate)
        winner = below if verdict.side < 0 else above if verdict.side > 0 else TIE
        here = grid[(grid["context_tokens"] == context) & (grid["concurrency"] == c)]
        stop = here["stop"].iloc[0] if "stop" in here.columns and here["stop"].notna().any() else "fixed rounds"
        if winner != TIE and stop in (sequential.ROUNDS_SPENT, sequential.MINUTES_SPENT):
            # The cell's rounds went on for an SLA line still undecided (boundary-run --sla); this one is decided.
            stop = f"{sequential.DECIDED} (the cell's SLA lines: {stop})"
        counted = "paired_requests" if by_request else "requests"
        requests = here[counted].dropna() if counted in here.columns else pd.Series(dtype=float)
        rows.append({"context_tokens": int(context), "concurrency": int(c), "ratio": ratio.point,
                     "ratio_low": ratio.low, "ratio_high": ratio.high, "rounds": ratio.rounds,
                     "interval": ratio.method, "winner": winner, "stop": stop,
                     "statistic": PAIRED_WORDS if by_request else f"{metric} ratio of the schemes",
                     "outlier_rounds": (f"round{'s' * (len(verdict.outliers) > 1)} "
                                        + ", ".join(str(int(paired[i])) for i in verdict.outliers)
                                        if verdict.outliers else ""),
                     "without_outliers": (f"{verdict.without.point:.3g} [{verdict.without.low:.3g}, "
                                          f"{verdict.without.high:.3g}]" if verdict.without else ""),
                     "to_decide": sequential.what_would_decide(verdict) if ratio.rounds > 1 else "",
                     "requests_per_round": (f"{int(requests.min())}" if requests.min() == requests.max() else
                                            f"{int(requests.min())}–{int(requests.max())}") if len(requests) else ""})
    return pd.DataFrame(rows, columns=WINNER_COLUMNS)


def undecided_cells(grid: pd.DataFrame, plan: sequential.Plan,
                    slas: list[tuple[str, float]] = ()) -> set[tuple[int, int]]:
    """(context, concurrency) of the cells whose winner is still a tie under `plan` (what a sequential boundary run
    measures again), of those with fewer rounds than the plan's minimum, and of those where a scheme's verdict
    against one of `slas` is still UNDECIDED."""
    every = {(int(x), int(c)) for x, c in grid[["context_tokens", "concurrency"]].drop_duplicates()
             .itertuples(index=False)}
    if grid.empty or grid["ttft_p50_s"].isna().all():
        return every
    won = winners(grid, plan=plan)
    decided = {(int(x), int(c)) for x, c, w in zip(won["context_tokens"], won["concurrency"], won["winner"])
               if w != TIE}
    if slas:
        regions = sla_regions(grid, list(slas), plan)
        decided -= {(int(x), int(c)) for x, c, v in zip(regions["context_tokens"], regions["concurrency"],
                                                        regions["verdict"]) if v == stats.UNDECIDED}
    return every - decided


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


NO_CROSSOVER = "none"


def crossover_table(won: pd.DataFrame) -> pd.DataFrame:
    """One row per line of the grid, along each axis: the crossovers found there as brackets
    ("engine_only → offload between 2 and 4"), or "none" (with why): what `kvtier compare-runs` sets side by side."""
    rows = []
    for along in AXES:
        for at, found in crossovers(won, along).items():
            rows.append({"along": along, "at": at,
                         "crossover": "; ".join(f"{x.before} → {x.after} between {x.below} and {x.above}"
                                                for x in found) or NO_CROSSOVER,
                         "why": "" if found else no_crossover_reason(won, along, at)})
    return pd.DataFrame(rows, columns=["along", "at", "crossover", "why"])


def with_differ(correctness: pd.DataFrame) -> pd.DataFrame:
    """B_correctness with `differ`: per cell and round, how many greedy outputs of offload were not engine_only's."""
    return correctness.assign(differ=(correctness["compared"] - correctness["identical"]).astype(int))


def mismatches(correctness: pd.DataFrame) -> pd.DataFrame:
    """The rounds of the cells where offload's greedy outputs differed from engine_only's, request by request."""
    found = with_differ(correctness)
    return found[found["differ"] > 0].reset_index(drop=True)


BATCH_DEPENDENCE = "identical alone: batch dependence of the kernels, not a wrong KV"
DIFFERS_ALONE = "differs alone too: the KV offload loaded gives another answer than recompute at batch one"


def replay_word(row) -> str:
    """What one request replayed alone says (kvtier.runs.boundary_replay): a mismatch identical alone is the
    kernels' batch dependence; one that still differs is a KV that gives another answer. Only when offload's
    replay found prompt tokens in LMCache (vLLM's own prefix cache was reset) does it tell anything."""
    if isinstance(row["failed"], str) and row["failed"]:  # read back from CSV, none failed is empty
        return f"the replay failed on {row['failed']}: cannot tell"
    if pd.isna(row["offload_alone_cached_tokens"]) or not row["offload_alone_cached_tokens"]:
        return "LMCache no longer held the prompt, both replays recomputed it: cannot tell"
    loaded = f"offload loaded {int(row['offload_alone_cached_tokens'])} prompt tokens from LMCache"
    if row["why"] == "control":
        return (f"control, identical in the cell and alone ({loaded})" if row["identical_alone"] else
                f"control differs alone ({loaded}): the replay cannot tell batch dependence from the KV")
    return f"{BATCH_DEPENDENCE if row['identical_alone'] else DIFFERS_ALONE} ({loaded})"


def with_explanation(replays: pd.DataFrame) -> pd.DataFrame:
    """B_replays with `explanation`: what each replay says (replay_word)."""
    return replays.assign(explanation=[replay_word(row) for _, row in replays.iterrows()])


def outputs_word(correctness: pd.DataFrame, context: int, concurrency: int,
                 replays: pd.DataFrame | None = None) -> str:
    """A cell's greedy outputs over its rounds: "identical", "N of M differ (rounds r, ...)" with what replaying
    them alone found, or "not compared". A cell stays "not a valid measurement" unless every one of its
    mismatches was identical alone."""
    here = correctness[(correctness["context_tokens"] == context) & (correctness["concurrency"] == concurrency)]
    if here.empty or not here["compared"].sum():
        return "not compared"
    differ = here[here["compared"] > here["identical"]]
    if differ.empty:
        return "identical"
    n = int((differ["compared"] - differ["identical"]).sum())
    head = (f"{n} of {int(here['compared'].sum())} differ (round{'s' * (len(differ) > 1)} "
            f"{', '.join(str(int(r)) for r in differ['round'])})")
    mine = pd.DataFrame() if replays is None or replays.empty else with_explanation(replays[
        (replays["context_tokens"] == context) & (replays["concurrency"] == concurrency)
        & (replays["why"] == "mismatch")])
    batch = int(mine["explanation"].str.startswith(BATCH_DEPENDENCE).sum()) if not mine.empty else 0
    if n and batch == n:
        return f"{head}: each {BATCH_DEPENDENCE} (replayed alone)"
    found = f"; replayed alone, {batch} of {len(mine)} shown to be batch dependence" if not mine.empty else ""
    return f"{head}{found}: not a valid measurement until explained"


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


def sla_regions(grid: pd.DataFrame, slas: list[tuple[str, float]],
                plan: sequential.Plan | None = None) -> pd.DataFrame:
    """For each SLA (metric, seconds), each cell and each scheme: MET / NOT MET / UNDECIDED from the scheme's
    interval over the rounds (under a sequential plan, `plan` or the grid's own, that of its last look), with its
    median."""
    check_grid(grid)
    plan = plan or plan_of(grid)
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
            fits = sequential.applies(plan, len(values))
            figure = sequential.interval(list(values.values()), plan) if fits else stats.estimate(values.values())
            rows.append({"metric": metric, "sla_s": limit, "scheme": scheme, "context_tokens": int(context),
                         "concurrency": int(c), "value": figure.point, "low": figure.low, "high": figure.high,
                         "verdict": stats.target(figure, limit, at_least=False)})
    return pd.DataFrame(rows, columns=["metric", "sla_s", "scheme", "context_tokens", "concurrency", "value",
                                       "low", "high", "verdict"])


# ------------------------------------------------------------------------------------------------------------
# The page (notebooks/B.py)

ATTRIBUTION_FILE, CORRECTNESS_FILE, CONDITIONS_FILE = "B_attribution.csv", "B_correctness.csv", "conditions.json"
REPLAYS_FILE = "B_replays.csv"  # absent from runs made before the replays: none replayed
SHARES = ("engine_frac", "l1_frac", "l2_frac", "recompute_frac")


@dataclass
class Measured:
    """A boundary run's tables (kvtier.runs.boundary.aggregate) and what the page derives from them."""
    grid: pd.DataFrame
    attribution: pd.DataFrame
    correctness: pd.DataFrame
    conditions: dict
    won: pd.DataFrame
    replays: pd.DataFrame  # requests replayed alone (kvtier.runs.boundary_replay), with their explanation


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
    won = winners(grid)
    correctness = found[CORRECTNESS_FILE]
    replays = (read_table(boundary_dir / REPLAYS_FILE) if (boundary_dir / REPLAYS_FILE).is_file()
               else pd.DataFrame(columns=REPLAY_COLUMNS))
    replays = with_explanation(replays)
    won["outputs"] = [outputs_word(correctness, x, c, replays)
                      for x, c in zip(won["context_tokens"], won["concurrency"])]
    return Measured(grid, found[ATTRIBUTION_FILE], correctness, found[CONDITIONS_FILE], won, replays)


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


def heatmap(won: pd.DataFrame, title: tuple[str, ...] | None = None):
    """The grid as a heatmap of the ratio (below 1: offload faster), each cell labelled with its winner, and the
    two measured cells that bracket each crossover outlined."""
    import altair as alt
    if title is None:
        by_request = "statistic" in won.columns and (won["statistic"] == PAIRED_WORDS).all() and len(won)
        title = ("offload / engine_only", *(("per-request TTFT ratios:", "median, then over rounds") if by_request
                                            else ("TTFT p50, median over rounds",)))
    brackets = bracket_cells(won)
    differ = (won["outputs"].str.contains("until explained") if "outputs" in won.columns
              else pd.Series(False, index=won.index))
    shown = won.assign(label=won["ratio"].map(lambda r: f"{r:.2f}") + "\n" + won["winner"] + differ.map(
                           {True: " †", False: ""}),
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
        title=alt.TitleParams(list(title), subtitle="outlined: the measured cells that bracket a crossover"
                              + ("; †: greedy outputs differ, not valid until explained" if differ.any() else "")),
        width=90 * max(1, won["concurrency"].nunique()), height=60 * max(1, won["context_tokens"].nunique()))


def write_evidence(measured: Measured, out_dir: str | os.PathLike, slas: list[tuple[str, float]],
                   png_scale: float = 2.0, statements: list[dict] | None = None) -> list[Path]:
    """The page's tables (CSV) and heatmap (PNG + SVG) into `out_dir`, with document 000's statement verdicts
    (kvtier.audit.shapes records) when given; the paths written."""
    from ..core.table_io import write_table
    from .charts import save_chart
    out_dir = Path(out_dir)
    frames = {"B_cells.csv": cell_medians(measured.grid), "B_winners.csv": measured.won,
              "B_sla.csv": sla_regions(measured.grid, slas),
              "B_attribution.csv": attribution_medians(measured.attribution),
              "B_crossovers.csv": crossover_table(measured.won),
              "B_correctness.csv": with_differ(measured.correctness), "B_replays.csv": measured.replays}
    if statements is not None:
        frames["B_statements.csv"] = pd.DataFrame(
            [{"id": r["id"], "check": r["check"], "metric": r["metric"], "verdict": r["verdict"],
              "reasons": " | ".join(r["reasons"])} for r in statements],
            columns=["id", "check", "metric", "verdict", "reasons"])
    written = [write_table(frame, out_dir / name) for name, frame in frames.items()]
    return written + save_chart(heatmap(measured.won), out_dir / "B_chart", png_scale=png_scale)
