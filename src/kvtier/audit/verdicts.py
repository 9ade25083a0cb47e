"""Decide each claim: evaluate its formula(s) on the readings and compare with the claimed figure.

    REPRODUCED     the recomputed value matches under the claim's rounding or range rule
    MISMATCH       the readings contradict it (claimed and recomputed values are both shown)
    NOT-DERIVABLE  the readings exist but no reading or ratio of readings yields the figure
    UNCHECKED      no raw data was published for it
    AMBIGUOUS      the text admits more than one definition: the value under each is shown
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..evidence import stats
from ..evidence.published import PUBLISHED_TABLES, TableSpec, load_table
from .formula import Ref, Unpublished, evaluate, labelled_values
from .ledger import Claim, Definition, Ledger
from .rules import Comparison, compare

VERDICTS = ("MISMATCH", "AMBIGUOUS", "NOT-DERIVABLE", "UNCHECKED", "REPRODUCED")  # the order a reader wants


def load_tables(published_dir: str | os.PathLike, specs: dict[str, TableSpec] | None = None
                ) -> dict[str, pd.DataFrame]:
    """The readings of every table in `specs` (a ledger's `tables`; default the shipped documents' R2 and B)."""
    published_dir = Path(published_dir)
    specs = PUBLISHED_TABLES if specs is None else specs
    return {name: load_table(published_dir / spec.file, spec) for name, spec in specs.items()}


@dataclass
class Outcome:
    """One definition of a claim, evaluated."""
    name: str
    formula: str
    values: list = field(default_factory=list)        # [(c or None, value)] that have readings
    missing: list = field(default_factory=list)       # labels of values without readings
    unpublished: str | None = None                    # a table the formula needs that was never published
    comparison: Comparison | None = None

    @property
    def evaluated(self) -> bool:
        return self.comparison is not None

    def as_dict(self) -> dict:
        return {"name": self.name, "formula": self.formula,
                "values": [{"c": c, "value": v} for c, v in self.values],
                "missing": self.missing, "unpublished_table": self.unpublished,
                "recomputed": self.comparison.shown if self.comparison else None,
                "matches": self.comparison.matches if self.comparison else None,
                "range_covers_values": self.comparison.covers if self.comparison else None}


class _Lookup:
    def __init__(self, tables: dict[str, pd.DataFrame], specs: dict[str, TableSpec] | None = None):
        specs = PUBLISHED_TABLES if specs is None else specs
        self.tables = {name: self._index(specs[name], frame) for name, frame in tables.items()}

    @staticmethod
    def _index(spec: TableSpec, frame):
        keys = list(spec.keys)
        return {tuple(row[k] for k in keys): row for row in frame.to_dict("records")}

    def __call__(self, ref: Ref, c):
        if ref.table not in self.tables:
            raise Unpublished(ref.table)
        row = self.tables[ref.table].get(ref.key)
        if row is None:
            return math.nan
        value = row[ref.column]
        return float(value) if value == value else math.nan


def _evaluate(claim: Claim, definition: Definition, lookup, claimed_of) -> Outcome:
    outcome = Outcome(definition.name, definition.formula.text)
    formula = definition.formula
    try:
        if formula.aggregate:
            labelled = [(None, v) for v in evaluate(formula, lookup, claimed_of, definition.over)]
        else:
            labelled = labelled_values(formula, lookup, claimed_of, definition.over)
    except Unpublished as exc:
        outcome.unpublished = exc.table
        return outcome
    for c, value in labelled:
        if isinstance(value, float) and math.isnan(value):
            outcome.missing.append(c)
        else:
            outcome.values.append((c, value))
    if outcome.values or formula.aggregate == "measured_at":
        outcome.comparison = compare(claim.rule, claim.claimed, [v for _, v in outcome.values], claim.decimals)
    return outcome


@dataclass
class ClaimResult:
    claim: Claim
    verdict: str
    outcomes: list[Outcome]
    summary: str                 # what was compared and how it came out
    definitions: list[str]       # one line per definition, for AMBIGUOUS claims
    local: dict | None = None

    @property
    def explanation(self) -> str:
        text = " | ".join([self.summary, *self.definitions])
        return f"{text} Note: {self.claim.note}" if self.claim.note else text

    def recomputed_text(self) -> str:
        """The recomputed value(s) as a reader would write them; one per definition for AMBIGUOUS claims."""
        if not self.claim.ambiguous:
            return _text(self.outcomes[0])
        return "; ".join(f"{o.name}: {_text(o)}" for o in self.outcomes)

    def as_dict(self) -> dict:
        c = self.claim
        single = None if c.ambiguous else self.outcomes[0]
        return {
            "id": c.id, "source": c.source, "quote": c.quote, "evidence": c.evidence, "verdict": self.verdict,
            "claimed": c.claimed,
            "recomputed": ({o.name: (o.comparison.shown if o.comparison else None) for o in self.outcomes}
                           if c.ambiguous else (single.comparison.shown if single.comparison else None)),
            "recomputed_text": self.recomputed_text(),
            "explanation": self.explanation,
            "quantity": c.quantity, "scale": c.scale, "role": c.role,
            "compare": {"rule": c.rule, "decimals": c.decimals},
            "definitions": [o.as_dict() for o in self.outcomes],
            "same_as": c.same_as, "group": c.group,
            **({"local": self.local} if self.local is not None else {}),
        }


def _text(outcome: Outcome) -> str:
    if outcome.comparison is not None:
        return outcome.comparison.text
    return f"no readings ({outcome.unpublished} unpublished)" if outcome.unpublished else "no readings"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _values_text(outcome: Outcome) -> str:
    parts = [f"c={c}: {_fmt(v)}" if c is not None else _fmt(v) for c, v in outcome.values]
    text = ", ".join(parts) if parts else "no values"
    if outcome.missing:
        text += f" (not measured at c={', '.join(map(str, outcome.missing))})"
    return text


def _unchecked_reason(outcome: Outcome, ledger: Ledger) -> str:
    if outcome.unpublished:
        table = ledger.unpublished[outcome.unpublished]
        return (f"no raw data was published for it: it needs table {outcome.unpublished} "
                f"({table['about'].strip()}), which the documents cite but never published")
    return f"the readings it needs were not published: {outcome.formula} has no value at any c"


def _decide(claim: Claim, outcomes: list[Outcome], ledger: Ledger) -> tuple[str, str, list[str]]:
    """(verdict, summary, one line per definition of an AMBIGUOUS claim)."""
    if claim.ambiguous:
        lines = []
        for o in outcomes:
            if o.evaluated:
                state = "reproduces the claim" if o.comparison.matches else "does not reproduce it"
                lines.append(f"{o.name}: {o.formula} = {_values_text(o)} → {o.comparison.text}, {state}")
            else:
                lines.append(f"{o.name}: {o.formula}: {_unchecked_reason(o, ledger)}")
        return "AMBIGUOUS", f"The text admits {len(outcomes)} definitions; claimed {_fmt(claim.claimed)}.", lines
    o = outcomes[0]
    if not o.evaluated:
        return "UNCHECKED", f"Claimed {_fmt(claim.claimed)}; {_unchecked_reason(o, ledger)}.", []
    detail = f" ({o.comparison.detail})" if o.comparison.detail else ""
    body = f"{o.formula} = {_values_text(o)}{detail}"
    if o.comparison.matches:
        return "REPRODUCED", f"Claimed {_fmt(claim.claimed)}; {body}.", []
    if claim.role == "nearest":
        return "NOT-DERIVABLE", (f"Claimed {_fmt(claim.claimed)}; no reading or ratio of readings yields it. "
                                 f"Nearest derivable quantity: {body}."), []
    return "MISMATCH", f"Claimed {_fmt(claim.claimed)}, recomputed {o.comparison.text}: {body}.", []


def _claimed_of(ledger: Ledger):
    by_id = ledger.by_id()

    def claimed(claim_id: str) -> float:
        return float(by_id[claim_id].claimed)
    return claimed


def _over_rounds(claim: Claim, definition: Definition, round_lookups: dict, claimed_of) -> list[dict]:
    """The definition evaluated in every round on its own, summarised per concurrency (kvtier.evidence.stats):
    the median over rounds, its interval, and whether the interval holds the claimed figure."""
    per_c: dict = {}
    for round_, lookup in round_lookups.items():
        for c, value in _evaluate(claim, definition, lookup, claimed_of).values:
            per_c.setdefault(c, {})[round_] = value
    rows = []
    for c, values in per_c.items():
        figure = stats.estimate(values.values(), log=False)  # a claim's figure may be a gain in %, of any sign
        rows.append({"c": c, **figure.record(), "interval_text": figure.text(),
                     "holds_claimed": _holds(figure, claim.claimed)})
    return rows


def _holds(figure: stats.Estimate, claimed) -> bool | None:
    """Whether the interval holds the claimed figure (or meets a claimed range); None with one round."""
    if figure.rounds < 2:
        return None
    low, high = (claimed[0], claimed[-1]) if isinstance(claimed, list) else (claimed, claimed)
    return bool(figure.low <= float(high) and float(low) <= figure.high)


def _local(claim: Claim, local_lookup, claimed_of, round_lookups: dict | None = None) -> dict:
    """A ratio claim re-evaluated on measured runs; absolute figures and conditions are never compared. With the
    campaign's rounds, each value also carries its interval over the rounds."""
    if claim.scale != "ratio":
        return {"status": "not compared", "why": f"{claim.scale} figure from different hardware"}
    needs = set().union(*(d.formula.tables() for d in claim.definitions))
    if needs - set(local_lookup.tables) or any(d.formula.claims for d in claim.definitions):
        return {"status": "not compared", "why": "needs readings the local runs do not have: "
                                                 + ", ".join(sorted(needs - set(local_lookup.tables)) or ["claims"])}
    definitions = []
    for d in claim.definitions:
        record = _evaluate(claim, d, local_lookup, claimed_of).as_dict()
        if round_lookups:
            record["over_rounds"] = _over_rounds(claim, d, round_lookups, claimed_of)
        definitions.append(record)
    return {"status": "evaluated", "definitions": definitions}


def audit(ledger: Ledger, tables: dict[str, pd.DataFrame],
          local_tables: dict[str, pd.DataFrame] | None = None,
          local_rounds: dict[int, dict[str, pd.DataFrame]] | None = None) -> list[ClaimResult]:
    """Decide every claim on the published tables; with `local_tables` (a campaign's medians) also re-evaluate
    the ratio claims there, and with `local_rounds` ({round: tables}) give each local value its interval."""
    lookup, claimed_of = _Lookup(tables, ledger.tables), _claimed_of(ledger)
    local_lookup = _Lookup(local_tables) if local_tables is not None else None
    round_lookups = {r: _Lookup(t) for r, t in (local_rounds or {}).items()}
    results = []
    for claim in ledger.claims:
        outcomes = [_evaluate(claim, d, lookup, claimed_of) for d in claim.definitions]
        verdict, summary, definitions = _decide(claim, outcomes, ledger)
        local = _local(claim, local_lookup, claimed_of, round_lookups) if local_lookup else None
        results.append(ClaimResult(claim, verdict, outcomes, summary, definitions, local))
    return results
