"""The order in which a run measures what it compares, round after round: rotated, so that a drift of the
machine during a run (a disk writing back, a neighbour waking up) falls on every side alike and not on whichever
side always comes last. The statistics over the rounds are kvtier.evidence.stats'."""

from __future__ import annotations

from typing import Sequence


def rotation(items: Sequence, rounds: int) -> list[list]:
    """The order of `items` in each of `rounds` rounds: round 2s is the items rotated by s, round 2s + 1 the
    same reversed. Over 2 × len(items) rounds every item takes every position twice, and no item always follows
    the same neighbour; two items give A B, B A, B A, A B (ABBA)."""
    items = list(items)
    n = len(items)
    orders = []
    for r in range(rounds):
        shift = (r // 2) % n if n else 0
        order = items[shift:] + items[:shift]
        orders.append(order if r % 2 == 0 else order[::-1])
    return orders


def schedule(kinds: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, kind) of every run, in the order they are measured: round r (from 1) runs `kinds` in the r-th
    rotation."""
    return [(r + 1, kind) for r, order in enumerate(rotation(kinds, rounds)) for kind in order]


def before(plan: list[tuple[int, str]], round_: int, kind: str) -> list[tuple[int, str]]:
    """The run measured just before (round_, kind) in `plan`: one, or none for the first."""
    at = plan.index((round_, kind))
    return [plan[at - 1]] if at else []
