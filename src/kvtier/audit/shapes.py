"""Document 000's boundary statements against a measured boundary map (evidence B), by shape only.

The document says where keeping the KV cache in the engine ("VRAM scheme") beats offloading it: at low
concurrency and short context, with offload ahead at high concurrency or long context. Its bounds (8, 16, 32K)
and seconds come from other hardware and a 480B model; a local map can only say whether the same *shape* holds
here. Each statement of the ledger's `boundary_statements` is checked one way:

- along_concurrency / along_context: every line of the grid (a context, or a concurrency) is read from its low
  values up. A line AGREES when its winner changes from `low_end` to the other scheme and never back; it
  CONTRADICTS when it changes only the other way; MIXED when both. A line with no change says which scheme won
  (or that no cell was decided). The statement AGREES when some lines agree and none contradict, CONTRADICTS in
  the mirror case, MIXED when lines disagree, and NOT SHOWN when no line has a crossover.
- low_corner: the cell at the lowest context and concurrency measured; the statement ("offload may be no better,
  or worse, there") AGREES when `low_end` wins or the schemes tie, CONTRADICTS when the other scheme wins.

A cell's winner is kvtier.evidence.boundary's: decided by the interval of the per-round ratio, never by the point.
"""

from __future__ import annotations

import pandas as pd

from ..core.errors import KvtierError
from ..evidence.boundary import AXIS_WORDS, TIE, crossovers, no_crossover_reason, other_axis, winners

AGREES, CONTRADICTS, MIXED, NOT_SHOWN = "AGREES", "CONTRADICTS", "MIXED", "NOT SHOWN"
CHECKS = {"along_concurrency": "concurrency", "along_context": "context_tokens"}


def evaluate(statement: dict, grid: pd.DataFrame) -> dict:
    """One statement (a ledger entry) on a measured grid: its verdict word and one line of reasons per grid line."""
    won = winners(grid, metric=statement["metric"])
    if won.empty:
        raise KvtierError(f"boundary statement {statement['id']!r}: no cell measured for both schemes")
    low_end = statement["low_end"]
    if statement["check"] == "low_corner":
        corner = won.sort_values(["context_tokens", "concurrency"]).iloc[0]
        verdict = CONTRADICTS if corner["winner"] not in (low_end, TIE) else AGREES
        reasons = [f"context {corner['context_tokens']}, concurrency {corner['concurrency']}: "
                   f"{corner['winner']} (offload / engine_only {statement['metric']} {corner['ratio']:.3g} "
                   f"[{corner['ratio_low']:.3g}, {corner['ratio_high']:.3g}])"]
        return _record(statement, verdict, reasons)
    if statement["check"] not in CHECKS:
        raise KvtierError(f"boundary statement {statement['id']!r}: unknown check {statement['check']!r} "
                          f"(one of {', '.join([*CHECKS, 'low_corner'])})")
    along = CHECKS[statement["check"]]
    words, reasons = [], []
    for at, found in crossovers(won, along).items():
        if not found:
            reasons.append(f"{AXIS_WORDS[other_axis(along)]} {at}: no crossover "
                           f"({no_crossover_reason(won, along, at)})")
            continue
        directions = {AGREES if x.before == low_end else CONTRADICTS for x in found}
        word = directions.pop() if len(directions) == 1 else MIXED
        words.append(word)
        reasons.append(f"{word}: " + "; ".join(x.text() for x in found))
    kinds = set(words)
    verdict = NOT_SHOWN if not kinds else kinds.pop() if kinds in ({AGREES}, {CONTRADICTS}) else MIXED
    return _record(statement, verdict, reasons)


def _record(statement: dict, verdict: str, reasons: list[str]) -> dict:
    return {"id": statement["id"], "check": statement["check"], "metric": statement["metric"],
            "low_end": statement["low_end"], "verdict": verdict, "reasons": reasons,
            "claims": list(statement["claims"]), "quote": statement["quote"]}


def evaluate_all(statements: list[dict], grid: pd.DataFrame) -> list[dict]:
    return [evaluate(s, grid) for s in statements]


def text(records: list[dict]) -> str:
    """One block per statement: the verdict, the quote, the claims it backs, and a line per grid line."""
    blocks = []
    for r in records:
        lines = [f"{r['id']}: {r['verdict']} ({r['check']}, by {r['metric']}, {r['low_end']} at the low end)",
                 f"  quote: {r['quote']}"]
        if r["claims"]:
            lines.append(f"  backs claims: {', '.join(r['claims'])}")
        lines += [f"  - {reason}" for reason in r["reasons"]]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def table(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{**{k: r[k] for k in ("id", "verdict", "check", "metric", "low_end", "quote")},
                          "claims": " ".join(r["claims"]), "reasons": " | ".join(r["reasons"])} for r in records],
                        columns=["id", "verdict", "check", "metric", "low_end", "quote", "claims", "reasons"])
