"""Compare recomputed values with a claimed figure under the claim's stated rounding or range rule.

    round     one value; rounded half-up to `decimals`, it equals the claimed number
    range     claimed [low, high]; min and max of the values, rounded to `decimals` (one per end, or one for
              both), equal the claimed ends. How the range covers the values is reported beside it:
              exactly (its ends are the rounded extremes), loosely (wider than that) or not (a value
              falls outside it even after rounding).
    exact     one value equals the claimed number or text (transcriptions, counts)
    at_least  every value is >= the claimed threshold (gates)
    set       the values, as a set, equal the claimed list
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

RULES = ("round", "range", "exact", "at_least", "set")


def round_half_up(value: float, decimals: int) -> float:
    """Round as people do on paper (2.5 -> 3), on the decimal text of the float, not its binary value."""
    return float(Decimal(repr(value)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class Comparison:
    matches: bool
    shown: object          # the recomputed value(s) as compared (rounded where the rule rounds)
    covers: str | None = None   # range rule only: "exactly", "loosely" or "not"
    detail: str = ""
    text: str = ""              # `shown` as a reader would write it (claimed precision)


def _decimals_pair(decimals) -> tuple[int, int]:
    return (decimals, decimals) if isinstance(decimals, int) else tuple(decimals)


def compare(rule: str, claimed, values: list, decimals=None) -> Comparison:
    if rule == "round":
        if len(values) != 1:
            return Comparison(False, values, detail=f"expected one value, got {len(values)}")
        shown = round_half_up(values[0], decimals)
        return Comparison(shown == claimed, shown, detail=f"{values[0]:.6g} rounds to {shown:.{decimals}f}",
                          text=f"{shown:.{decimals}f}")
    if rule == "range":
        lo_dec, hi_dec = _decimals_pair(decimals)
        lo, hi = min(values), max(values)
        shown = [round_half_up(lo, lo_dec), round_half_up(hi, hi_dec)]
        text = f"{shown[0]:.{lo_dec}f}–{shown[1]:.{hi_dec}f}"
        # Within rounding: a claimed end of 26 (0 decimals) stands for anything below 26.5.
        inside = (claimed[0] - 0.5 * 10 ** -lo_dec <= lo) and (hi < claimed[1] + 0.5 * 10 ** -hi_dec)
        covers = "exactly" if shown == list(claimed) else ("loosely" if inside else "not")
        how = {"exactly": "covers them exactly", "loosely": "is wider than they are",
               "not": "leaves some of them out"}[covers]
        return Comparison(shown == list(claimed), shown, covers, text=text,
                          detail=f"values {lo:.6g} to {hi:.6g} round to {text}; the claimed range {how}")
    if rule == "exact":
        if len(values) != 1:
            return Comparison(False, values, detail=f"expected one value, got {len(values)}")
        value = values[0]
        same = value == claimed or (isinstance(value, float) and isinstance(claimed, (int, float))
                                    and math.isclose(value, claimed, rel_tol=1e-12, abs_tol=1e-12))
        return Comparison(same, value, text=str(value))
    if rule == "at_least":
        low = min(values)
        return Comparison(low >= claimed, values, text=f"smallest {low:.4g}",
                          detail=f"smallest value {low:.6g} {'meets' if low >= claimed else 'falls short of'} {claimed}")
    if rule == "set":
        return Comparison(sorted(values) == sorted(claimed), sorted(values), text=str(sorted(values)))
    raise ValueError(f"unknown rule {rule!r}")
