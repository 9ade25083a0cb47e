"""`kvtier advise`: which scheme meets a TTFT SLA at a workload's operating points, on a measured boundary grid.

Document 000's method, turned into a tool: set the SLA, profile the workload (kvtier.bench.profile), measure both
schemes on the platform (evidence B), then read the answer off the measured map. An operating point (the
workload's concurrency peak at its context p50, p90 or p99) is answered only between measured cells: the cells
that bracket it in concurrency and in context. A scheme meets the SLA there when it meets it at every bracketing
cell (TTFT grows with concurrency and context, so the worst bracketing cell bounds the point), and the margin is
the SLA minus the worst cell's interval top. A point outside the grid is never extrapolated: document 000 itself
says that carrying a boundary across platforms has no basis.
"""

from __future__ import annotations

import bisect

import pandas as pd

from ..core.errors import KvtierError
from ..runs.boundary import cell_dir
from . import boundary, stats, tables

OUTSIDE = "outside the measured grid: measure on your platform"


def _bracket(values: list[int], x: float) -> list[int] | None:
    """The measured values that bracket x (one when x is measured), or None outside their range."""
    if not values or x < values[0] or x > values[-1]:
        return None
    i = bisect.bisect_left(values, x)
    return [values[i]] if values[i] == x else [values[i - 1], values[i]]


def operating_points(profile: dict) -> list[dict]:
    """The workload's points: its concurrency peak at its context p50, p90 and p99."""
    peak = profile["concurrency"]["peak"]
    return [{"name": f"context {q}", "concurrency": peak, "context_tokens": profile["context_tokens"][q]}
            for q in ("p50", "p90", "p99")]


def advise(grid: pd.DataFrame, profile: dict, slas: list[tuple[str, float]]) -> list[dict]:
    """Per operating point and SLA: for each scheme MET / NOT MET / UNDECIDED with its margin, or OUTSIDE."""
    if not slas:
        raise KvtierError("advise needs at least one SLA (--sla-ttft-p50 and/or --sla-ttft-p99)")
    regions = boundary.sla_regions(grid, slas)
    schemes = sorted(set(grid["scheme"]))
    out = []
    for point in operating_points(profile):
        for metric, limit in slas:
            record = {"point": point["name"], "concurrency": point["concurrency"],
                      "context_tokens": point["context_tokens"], "metric": metric, "sla_s": limit}
            cs = _bracket(sorted(set(int(c) for c in grid["concurrency"])), point["concurrency"])
            ls = _bracket(sorted(set(int(c) for c in grid["context_tokens"])), point["context_tokens"])
            if cs is None or ls is None:
                out.append({**record, "answer": OUTSIDE, "schemes": {}})
                continue
            verdicts = {}
            for scheme in schemes:
                cells = regions[(regions["metric"] == metric) & (regions["scheme"] == scheme)
                                & regions["concurrency"].isin(cs) & regions["context_tokens"].isin(ls)]
                if len(cells) < len(cs) * len(ls):
                    verdicts[scheme] = {"verdict": stats.UNDECIDED, "why": "a bracketing cell was not measured"}
                    continue
                words = set(cells["verdict"])
                verdict = (stats.MET if words == {stats.MET} else stats.NOT_MET if stats.NOT_MET in words
                           else stats.UNDECIDED)
                worst = cells.loc[cells["high"].idxmax()]
                verdicts[scheme] = {"verdict": verdict, "margin_s": limit - float(worst["high"]),
                                    "worst_cell": {"concurrency": int(worst["concurrency"]),
                                                   "context_tokens": int(worst["context_tokens"]),
                                                   "value": float(worst["value"]), "high": float(worst["high"])}}
            meeting = [s for s, v in verdicts.items() if v["verdict"] == stats.MET]
            answer = (f"{' and '.join(meeting)} meet(s) the SLA" if meeting else "no scheme meets the SLA")
            out.append({**record, "answer": answer, "schemes": verdicts,
                        "bracket": {"concurrency": cs, "context_tokens": ls}})
    return out


def any_met(advice: list[dict]) -> bool:
    return any(v["verdict"] == stats.MET for a in advice for v in a["schemes"].values())


def text(advice: list[dict]) -> str:
    lines = []
    for a in advice:
        head = (f"{a['point']} ({a['context_tokens']:.0f} tokens) at concurrency {a['concurrency']}, "
                f"{a['metric']} <= {a['sla_s']:g} s: {a['answer']}")
        lines.append(head)
        for scheme, v in a["schemes"].items():
            if "margin_s" in v:
                w = v["worst_cell"]
                lines.append(f"  {scheme}: {v['verdict']}, margin {v['margin_s']:+.3f} s (worst bracketing cell "
                             f"c{w['concurrency']} x {w['context_tokens']} tokens: {w['value']:.3f} s, "
                             f"interval top {w['high']:.3f} s)")
            else:
                lines.append(f"  {scheme}: {v['verdict']} ({v['why']})")
    return "\n".join(lines)


def service_model(measured: boundary.Measured, min_recompute: float = 0.9):
    """This machine's service rates, read off its own boundary run, for profiling a log without end times
    (kvtier.bench.profile.ServiceModel): the engine_only cell at the lowest concurrency, in the longest context
    where the engine recomputed at least `min_recompute` of the prompt tokens (a full prefill, no cache help).
    Prefill rate: prompt tokens per request / TTFT p50; time per output token: concurrency / output tok/s (the
    window's decode shared by its c requests, prefill included, so an upper bound). Returns the model and one
    line saying where it came from."""
    from ..bench.profile import ServiceModel
    shares = boundary.attribution_medians(measured.attribution)
    full = shares[(shares["scheme"] == boundary.ENGINE) & (shares["recompute_frac"] >= min_recompute)]
    if full.empty:
        raise KvtierError(f"no engine_only cell recomputed ≥ {min_recompute:.0%} of its prompt tokens: no prefill "
                          "rate to read off this grid")
    c = int(full["concurrency"].min())
    chosen = full[full["concurrency"] == c].sort_values("context_tokens").iloc[-1]
    context = int(chosen["context_tokens"])
    cell = dict(scheme=boundary.ENGINE, concurrency=c, context_tokens=context)
    # The measured turns of a cell: every conversation's later turns (its opening turn is sent unmeasured).
    turns = (measured.conditions.get("turns_per_cell") or {}).get(cell_dir(context, c),
                                                                 measured.conditions["workload"]["turns"])
    requests = measured.conditions["sessions_per_cell"][cell_dir(context, c)] * (turns - 1)
    prompt = stats.estimate(tables.per_round(measured.attribution, "prompt_tokens", **cell).values()).point / requests
    ttft = stats.estimate(tables.per_round(measured.grid, "ttft_p50_s", **cell).values()).point
    tok_s = stats.estimate(tables.per_round(measured.grid, "output_tok_s", **cell).values()).point
    model = ServiceModel(prompt / ttft, c / tok_s)
    return model, (f"service model read off this grid's engine_only cell at concurrency {c}, context {context} "
                   f"(recompute share {chosen['recompute_frac']:.2f}): "
                   f"{prompt:.0f} prompt tokens per request / TTFT p50 {ttft:.3f} s = {model.prefill_tok_s:.0f} "
                   f"tok/s prefill; {c} / {tok_s:.1f} output tok/s = {model.time_per_output_token_s:.4f} s per "
                   "output token")
