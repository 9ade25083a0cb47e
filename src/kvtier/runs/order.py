"""The order in which a run measures what it compares, round after round: rotated, so that a drift of the
machine during a run (a disk writing back, a neighbour waking up) falls on every side alike and not on whichever
side always comes last. The statistics over the rounds are kvtier.evidence.stats'."""

from __future__ import annotations

import itertools
from typing import Callable, Sequence


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


def units_in_order(units: Sequence, rounds: int) -> list[tuple[int, tuple[str, ...]]]:
    """(round, unit) of every server start, in the order they are measured: the units (a kind, or a tuple of
    kinds one server start measures, kvtier.core.tiers.server_units) rotated as `rotation` does. The kinds inside
    a unit keep their order: the first fills what the second needs (SHARED_SERVERS)."""
    units = [(u,) if isinstance(u, str) else tuple(u) for u in units]
    return [(r + 1, unit) for r, order in enumerate(rotation(units, rounds)) for unit in order]


def schedule(units: Sequence, rounds: int) -> list[tuple[int, str]]:
    """(round, kind) of every run, in the order they are measured (units_in_order, unit by unit)."""
    return [(r, kind) for r, unit in units_in_order(units, rounds) for kind in unit]


def before(plan: list[tuple[int, tuple[str, ...]]], round_: int, unit: Sequence[str]) -> list[tuple[int, str]]:
    """(round, kind) of the runs of the unit measured just before `unit` of `round_` in `plan`
    (units_in_order): none for the first."""
    keys = [(r, frozenset(u)) for r, u in plan]
    at = keys.index((round_, frozenset(unit)))
    return [(plan[at - 1][0], kind) for kind in plan[at - 1][1]] if at else []


def stretches(plan: list[tuple[int, tuple[str, ...]]], apart: Sequence[str]) -> dict[tuple[int, frozenset], str]:
    """{(round, frozenset(unit)): name} for the units of `plan` (units_in_order) that hold no kind of `apart`: the
    units measured one after another within a round share a name, and a unit of `apart` (R3's, which runs as two
    jobs of its own) ends a stretch. Round 1 recompute, dram, pool, R3 gives round1_1 to the first three; round 3
    dram, pool, R3, recompute gives round3_1 to dram and pool, round3_2 to recompute. On a cluster a stretch is one
    job (its `group:`): a round's tiers measured on one node, and one scheduler round trip for them all."""
    names = {}
    for round_, in_round in itertools.groupby(plan, key=lambda item: item[0]):
        stretch, open_ = 1, False
        for _, unit in in_round:
            if set(unit) & set(apart):
                stretch, open_ = stretch + open_, False
                continue
            names[(round_, frozenset(unit))] = f"round{round_}_{stretch}"
            open_ = True
    return names


class CampaignPlan:
    """A campaign's server starts round by round: `rounds` fixed rounds of every unit in the rotated order
    (units_in_order), then, up to `most`, each further round of the units the look after the round before chose
    (`chosen(after)`, in that round's order: kvtier.evidence.campaign_rounds), while it chose any. The pipeline's
    `chosen` reads a look's file, so asking for a further round waits for that look (a Snakemake checkpoint)."""

    def __init__(self, units: Sequence, rounds: int, most: int, chosen: Callable[[int], list[tuple[str, ...]]]):
        self.fixed = units_in_order(units, rounds)
        self.rounds, self.most, self.chosen = rounds, most, chosen

    def round(self, round_: int) -> list[tuple[int, tuple[str, ...]]]:
        """(round, unit) of one round, in the order measured."""
        if round_ <= self.rounds:
            return [(r, unit) for r, unit in self.fixed if r == round_]
        return [(round_, tuple(unit)) for unit in self.chosen(round_ - 1)]

    def plan(self, until: int | None = None) -> list[tuple[int, tuple[str, ...]]]:
        """(round, unit) of every server start up to round `until` (default: all), in order."""
        plan = list(self.fixed)
        for round_ in range(self.rounds + 1, (until or self.most) + 1):
            more = self.round(round_)
            if not more:
                break
            plan += more
        return plan

    def last_round(self) -> int:
        return max(r for r, _ in self.plan())

    def before(self, round_: int, unit: Sequence[str]) -> list[tuple[int, str]] | None:
        """(round, kind) of the runs measured just before `unit` of `round_`: in the fixed rounds the unit before
        it (the last of the round before for a round's first); in a further round the unit before it in that
        round, or None for its first (which waits for the look that chose it)."""
        found = before(self.fixed if round_ <= self.rounds else self.round(round_), round_, unit)
        return found if found or round_ <= self.rounds else None

    def group(self, round_: int, unit: Sequence[str], apart: Sequence[str]) -> str:
        """The cluster job group of a unit (stretches), for a further round from that round's own units."""
        plan = self.fixed if round_ <= self.rounds else self.round(round_)
        return stretches(plan, apart)[(round_, frozenset(unit))]
