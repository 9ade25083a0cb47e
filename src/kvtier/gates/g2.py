"""G2, the single-node baseline: what each tier path and the engine deliver before any KV is put on them, and
whether the repetitions agree.

A baseline figure (a path's fio read bandwidth at a queue depth, the recompute TTFT, the engine-hit floor) is
measured k times. Its line is PASS when the repetitions are stable, their coefficient of variation (sample
standard deviation / mean) at most `max_cv`, and, where a floor is configured, when their median meets it
(`at_least` for a bandwidth, `at_most` for a time). Fewer than two repetitions cannot show stability: FAIL, said so.
"""

from __future__ import annotations

import math
from statistics import mean, median, stdev

from ..core.errors import KvtierError
from .bom import FAIL, PASS


def cv(values: list[float]) -> float:
    """Sample standard deviation over the mean; inf when the mean is 0."""
    if len(values) < 2:
        raise KvtierError(f"a coefficient of variation needs at least 2 repetitions, got {len(values)}")
    centre = mean(values)
    return stdev(values) / abs(centre) if centre else math.inf


def line(what: str, values: list[float], max_cv: float, floor: float | None = None,
         at_least: bool = True, unit: str = "") -> dict:
    """One baseline figure's repetitions judged: stable, and over (or under) its floor when one is given."""
    if not max_cv > 0:
        raise KvtierError(f"G2 max_cv {max_cv!r}: must be > 0")
    values = [float(v) for v in values if v is not None and not math.isnan(v)]
    row = {"what": what, "unit": unit, "repetitions": len(values), "median": median(values) if values else None,
           "cv": None, "max_cv": max_cv, "floor": floor, "floor_is": "at_least" if at_least else "at_most",
           "verdict": FAIL, "why": ""}
    if len(values) < 2:
        row["why"] = f"{len(values)} repetition(s): stability cannot be shown"
        return row
    row["cv"] = cv(values)
    problems = []
    if row["cv"] > max_cv:
        problems.append(f"unstable: cv {row['cv']:.3f} > {max_cv:g}")
    if floor is not None and (row["median"] < floor if at_least else row["median"] > floor):
        problems.append(f"median {row['median']:.4g} {unit} {'under' if at_least else 'over'} the floor {floor:g}")
    row["verdict"], row["why"] = (FAIL, "; ".join(problems)) if problems else (PASS, "")
    return row


def verdict(rows: list[dict]) -> str:
    return PASS if rows and all(r["verdict"] == PASS for r in rows) else FAIL
