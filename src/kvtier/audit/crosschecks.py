"""Claims checked against each other, not only against readings.

    same_as  the same figure quoted in two places: do the figures agree (at the coarser precision), and do they
             describe the same quantity (metric, tier, baseline, concurrency)?
    group    a table attributed to an evidence item: how many of its cells agree with that item's readings?
    range    a range claim: does it cover exactly the readings it summarises (its ends are their rounded
             extremes), loosely (it is wider), or not (a reading falls outside it)?
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .rules import round_half_up
from .verdicts import ClaimResult


@dataclass(frozen=True)
class CrossCheck:
    kind: str
    subject: str          # claim ids or group name
    outcome: str          # AGREES | DIFFERS | PARTLY CHECKED | COVERS EXACTLY | COVERS LOOSELY | DOES NOT COVER
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def _precision(claim) -> list[int]:
    values = claim.claimed if isinstance(claim.claimed, list) else [claim.claimed]
    if claim.decimals is not None:
        d = claim.decimals
        return list(d) if isinstance(d, list) else [d] * len(values)
    return [len(repr(v).split(".")[1]) if isinstance(v, float) else 0 for v in values]


def _figures_agree(a, b) -> bool:
    va = a.claimed if isinstance(a.claimed, list) else [a.claimed]
    vb = b.claimed if isinstance(b.claimed, list) else [b.claimed]
    if len(va) != len(vb):
        return False
    for x, y, px, py in zip(va, vb, _precision(a), _precision(b)):
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return False
        elif round_half_up(float(x), min(px, py)) != round_half_up(float(y), min(px, py)):
            return False
    return True


QUANTITY_KEYS = ("metric", "unit", "tier", "baseline", "concurrency", "conditions")


def same_as(results: list[ClaimResult]) -> list[CrossCheck]:
    by_id = {r.claim.id: r.claim for r in results}
    checks = []
    for claim in (r.claim for r in results):
        for other_id in claim.same_as:
            if other_id < claim.id:
                continue  # each pair once
            other = by_id[other_id]
            subject = f"{claim.id} = {other_id}"
            if not _figures_agree(claim, other):
                checks.append(CrossCheck("same_as", subject, "DIFFERS",
                                         f"figures differ: {claim.claimed} vs {other.claimed}"))
                continue
            differing = [k for k in QUANTITY_KEYS if claim.quantity.get(k) != other.quantity.get(k)]
            if differing:
                what = "; ".join(f"{k}: {claim.quantity.get(k)!r} vs {other.quantity.get(k)!r}" for k in differing)
                checks.append(CrossCheck("same_as", subject, "DIFFERS",
                                         f"same figure {claim.claimed}, but not the same quantity ({what})"))
            else:
                checks.append(CrossCheck("same_as", subject, "AGREES", f"same figure {claim.claimed}, same quantity"))
    return checks


def groups(results: list[ClaimResult]) -> list[CrossCheck]:
    by_group: dict[str, list[ClaimResult]] = {}
    for r in results:
        if r.claim.group:
            by_group.setdefault(r.claim.group, []).append(r)
    checks = []
    for name, members in by_group.items():
        counts: dict[str, int] = {}
        for r in members:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        cited = sorted({e for r in members for e in r.claim.evidence})
        summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        if counts.get("MISMATCH"):
            outcome = "DIFFERS"
        elif set(counts) == {"REPRODUCED"}:
            outcome = "AGREES"
        else:
            outcome = "PARTLY CHECKED"
        checks.append(CrossCheck("group", name, outcome,
                                 f"{len(members)} cells attributed to {', '.join(cited) or 'no item'}: {summary}"))
    return checks


def ranges(results: list[ClaimResult]) -> list[CrossCheck]:
    checks = []
    for r in results:
        if r.claim.rule != "range":
            continue
        for o in r.outcomes:
            if o.comparison is None:
                continue
            label = r.claim.id if len(r.outcomes) == 1 else f"{r.claim.id} ({o.name})"
            values = ", ".join(f"{v:.4g}" for _, v in o.values)
            outcome = {"exactly": "COVERS EXACTLY", "loosely": "COVERS LOOSELY", "not": "DOES NOT COVER"}
            checks.append(CrossCheck("range", label, outcome[o.comparison.covers],
                                     f"claimed {r.claim.claimed[0]}–{r.claim.claimed[1]}; values {values} "
                                     f"(rounded: {o.comparison.text})"))
    return checks


def all_checks(results: list[ClaimResult]) -> list[CrossCheck]:
    return same_as(results) + groups(results) + ranges(results)
