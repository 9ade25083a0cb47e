"""Sequential rounds of a campaign: after its `rounds` rounds of every server unit, and after each further round, a
look at the comparisons that drive more rounds, and the units the next round measures.

A comparison drives rounds when it answers a question the pages ask with a direction: each tier against recompute
(R2_local, R3) by TTFT and by output tok/s (G3's default candidate and baseline among them), and the pool against
the local disk where both are emulated devices with caps of their own (the published comparison in scale). Two
sides built to read alike (the pool against local_disk on one device, R3's reader against the same instance) do
not: no number of rounds turns "no difference measured" into a decision there, and they would spend the whole
budget on every run. They are still judged, over whatever rounds their tiers got.

Each look judges every driving comparison at that look's level (kvtier.evidence.sequential: the error rate spent
over a fixed maximum of looks, so a comparison's interval holds its coverage however the rounds stopped). The
next round measures the units (kvtier.core.tiers.server_units) of every tier of an undecided comparison, and
recompute's unit with them (the baseline of most comparisons, and the reference of every greedy-output check),
in the order that round's rotation gives them (kvtier.runs.order). The rounds stop when nothing drives them, at
`max_rounds`, or once the rounds after the first look have taken `budget_s` seconds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from ..runs import campaign as campaign_runs
from ..runs import order
from . import sequential, stats, tables

LOOKS_DIR = "looks"  # <campaign>/looks/after-<k>.json: what the look after k rounds found and chose
DECIDED, ROUNDS_SPENT, MINUTES_SPENT, FIXED = (sequential.DECIDED, sequential.ROUNDS_SPENT, sequential.MINUTES_SPENT,
                                               "fixed rounds")
# Why an undecided comparison stopped when every comparison that drives rounds was decided: it drives none.
WITH_THE_CAMPAIGN = "stopped with the campaign's rounds (it drives none)"
REFERENCE = "recompute"  # the baseline of the tier comparisons and the reference of the greedy outputs


def look_file(after_rounds: int | str) -> str:
    """The look's file, relative to the campaign."""
    return f"{LOOKS_DIR}/after-{after_rounds}.json"


@dataclass(frozen=True)
class CampaignRounds:
    """`rounds` rounds of every unit, then up to `max_rounds` (None or equal: fixed rounds), one at a time, while
    the extra rounds have taken less than `budget_s` seconds."""
    rounds: int
    max_rounds: int | None = None
    budget_s: float | None = None

    def __post_init__(self):
        if self.rounds < 1:
            raise KvtierError(f"runs.rounds {self.rounds}: at least 1")
        if self.max_rounds is not None and self.max_rounds < self.rounds:
            raise KvtierError(f"runs.max_rounds {self.max_rounds}: at least runs.rounds ({self.rounds})")
        if self.sequential and self.rounds < 2:
            raise KvtierError(f"runs.rounds {self.rounds}: sequential rounds (runs.max_rounds {self.max_rounds}) "
                              "start from at least 2")
        if self.budget_s is not None and self.budget_s <= 0:
            raise KvtierError(f"runs.budget_s {self.budget_s}: seconds > 0")

    @property
    def most(self) -> int:
        return self.max_rounds or self.rounds

    @property
    def sequential(self) -> bool:
        return self.most > self.rounds

    @property
    def plan(self) -> sequential.Plan | None:
        return sequential.Plan(self.rounds, self.most) if self.sequential else None


@dataclass(frozen=True)
class Driver:
    """A comparison that drives rounds: `metric` of `tier` over `baseline`'s, paired by round, against `threshold`
    (a ratio: below it is better for a time, above it for a throughput)."""
    name: str
    tier: str
    baseline: str
    metric: str  # a column of R2_rounds.csv
    threshold: float = 1.0


def drivers(kinds: list[str], only: list[str] | None = None,
            pairs: list[tuple[str, str]] | tuple = ()) -> list[Driver]:
    """The driving comparisons of a campaign measuring `kinds`: every tier (of `only`, when given) against
    recompute, by TTFT p50 and by output tok/s (R2_local, R3), and each (tier, baseline) of `pairs` measured on
    both sides (the pool against the local disk where both are emulated devices with different caps: then the two
    sides are not built to read alike, and the published comparison in scale asks which is faster). G3's lines are
    judged on the same rounds (their intervals the plan's); its thresholds do not choose units, so that a changed
    threshold re-judges what was measured instead of asking to measure again."""
    unknown = sorted(set(only or ()) - set(kinds) | ({REFERENCE} & set(only or ())))
    if unknown:
        raise KvtierError(f"runs.sequential_tiers: {', '.join(unknown)} not a tier measured against {REFERENCE} "
                          f"(measured: {', '.join(kinds)})")
    against_recompute = [(tier, REFERENCE) for tier in kinds
                         if tier != REFERENCE and REFERENCE in kinds and (only is None or tier in only)]
    between = [(tier, base) for tier, base in pairs if tier in kinds and base in kinds and tier != base]
    return [Driver(f"{tier} vs {base}: {metric}", tier, base, metric)
            for tier, base in against_recompute + between for metric in ("ttft_p50_s", "output_tok_s")]


def undecided(by_round: pd.DataFrame, found: list[Driver], plan: sequential.Plan) -> list[dict]:
    """Every driving comparison, per concurrency measured on both sides, still undecided at this look (fewer
    paired rounds than the plan's minimum counts as undecided): what it reads and about how many more rounds
    would decide it."""
    rows = []
    for driver in found:
        tiers = set(by_round["tier"])
        if driver.tier not in tiers or driver.baseline not in tiers:
            continue
        for c in sorted(set(by_round.loc[by_round["tier"] == driver.tier, "concurrency"])):
            mine, theirs = (tables.per_round(by_round, driver.metric, tier=t, concurrency=c)
                            for t in (driver.tier, driver.baseline))
            samples = [v for v in stats.paired_ratios(mine, theirs) if v > 0]
            if len(samples) < plan.min_rounds:
                rows.append({"name": driver.name, "tier": driver.tier, "baseline": driver.baseline,
                             "concurrency": int(c), "rounds": len(samples), "figure": None, "low": None,
                             "high": None, "threshold": driver.threshold, "more_rounds": None})
                continue
            judgement = sequential.judge(samples, driver.threshold, plan if len(samples) <= plan.max_rounds
                                         else None)
            if judgement.decided:
                continue
            figure = judgement.figure
            rows.append({"name": driver.name, "tier": driver.tier, "baseline": driver.baseline,
                         "concurrency": int(c), "rounds": figure.rounds, "figure": figure.point, "low": figure.low,
                         "high": figure.high, "threshold": driver.threshold, "more_rounds": judgement.more_rounds})
    return rows


def next_units(units: list[tuple[str, ...]], open_tiers: set[str], next_round: int) -> list[tuple[str, ...]]:
    """The units the next round measures, in that round's rotated order: those holding a tier of an undecided
    comparison, and recompute's with them."""
    if not open_tiers:
        return []
    wanted = open_tiers | {REFERENCE}
    chosen = [tuple(u) for u in units if set(u) & wanted]
    return [tuple(u) for u in order.rotation(chosen, next_round)[next_round - 1]]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def look(campaign_dir: str | os.PathLike, after_rounds: int, rounds: CampaignRounds, units: list[tuple[str, ...]],
         found: list[Driver], previous: dict | None = None, now: datetime | None = None) -> dict:
    """The look after `after_rounds` rounds at a campaign's runs so far (none later than `after_rounds`): decide."""
    runs = [r for r in campaign_runs.runs_of(campaign_dir) if r.round <= after_rounds]
    if not runs:
        raise KvtierError(f"{campaign_dir}: no finished tier run to look at after {after_rounds} rounds")
    by_round = campaign_runs.collect(Path(campaign_dir), runs)["R2_rounds"]
    return decide(by_round, after_rounds, rounds, units, found, previous, now)


def decide(by_round: pd.DataFrame, after_rounds: int, rounds: CampaignRounds, units: list[tuple[str, ...]],
           found: list[Driver], previous: dict | None = None, now: datetime | None = None) -> dict:
    """The look after `after_rounds` rounds: every driving comparison judged on `by_round` (R2_rounds.csv's
    shape), and the units of the next round (none: the rounds stop, and `stop` says why). `previous`: the look
    before (its clock start carries the budget)."""
    plan = rounds.plan
    if plan is None:
        raise KvtierError(f"runs.max_rounds {rounds.max_rounds}: fixed rounds have no look")
    if not rounds.rounds <= after_rounds <= rounds.most:
        raise KvtierError(f"a look after {after_rounds} rounds: between runs.rounds ({rounds.rounds}) and "
                          f"runs.max_rounds ({rounds.most})")
    now = now or _now()
    started = datetime.fromisoformat(previous["started_at"]) if previous else now
    spent = (now - started).total_seconds()
    still = undecided(by_round, found, plan)
    stop = (DECIDED if not still else ROUNDS_SPENT if after_rounds >= rounds.most
            else MINUTES_SPENT if rounds.budget_s is not None and spent >= rounds.budget_s else None)
    open_tiers = {t for row in still for t in (row["tier"], row["baseline"])}
    chosen = [] if stop else next_units(units, open_tiers, after_rounds + 1)
    return {"after_rounds": after_rounds, "min_rounds": rounds.rounds, "max_rounds": rounds.most,
            "budget_s": rounds.budget_s, "started_at": started.isoformat(), "at": now.isoformat(),
            "spent_s": round(spent, 1), "plan": plan.text(), "drivers": [d.name for d in found],
            "undecided": still, "next_units": [list(u) for u in chosen], "stop": stop}


def chosen_units(path: str | os.PathLike) -> list[tuple[str, ...]]:
    """The units a look named for the next round (its file), in that round's order."""
    try:
        return [tuple(unit) for unit in json.loads(Path(path).read_text())["next_units"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise KvtierError(f"{path}: not a campaign look ({exc})") from exc


def read_looks(paths: list[str | os.PathLike]) -> list[dict]:
    """The looks in these files (kvtier campaign-look's), in order."""
    found = []
    for path in map(Path, paths):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise KvtierError(f"{path}: not a campaign look ({exc})") from exc
    return sorted(found, key=lambda item: item["after_rounds"])


def record(looks: list[dict], rounds_run: int) -> dict:
    """What the campaign's conditions say of its rounds: fixed, or the plan, every look, and why they stopped."""
    if not looks:
        return {"stop": FIXED, "rounds": rounds_run}
    last = looks[-1]
    return {"stop": last["stop"] or ROUNDS_SPENT, "rounds": rounds_run, "min_rounds": last["min_rounds"],
            "max_rounds": last["max_rounds"], "budget_s": last["budget_s"], "spent_s": last["spent_s"],
            "plan": last["plan"],
            "looks": [{"after_rounds": item["after_rounds"], "undecided": len(item["undecided"]),
                       "next_units": item["next_units"], "stop": item["stop"]} for item in looks]}


def plan_of(conditions: dict) -> sequential.Plan | None:
    """The sequential plan a campaign ran under (its conditions' `sequential`), or None for fixed rounds."""
    found = conditions.get("sequential") or {}
    if "min_rounds" not in found:
        return None
    return sequential.Plan(int(found["min_rounds"]), int(found["max_rounds"]))
