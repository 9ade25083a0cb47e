"""Parse and validate the claims ledger (raw_data/published/claims.yaml).

A malformed ledger is refused as a whole, with the claim id and the field named, before anything is computed or
written: the shape is checked against workflow/schemas/claims.schema.yaml, then the meaning (each quote occurs
exactly once in its document, formulas name tables, columns and tiers that exist, references are mutual).

The ledger of the two shipped documents reads the tables kvtier.evidence.published knows (R2, B) and cites the
evidence items R1-R9. A ledger for any other document declares its own: `tables` (each table's file in the
readings folder, its keys and typed columns) and `evidence_items` (the ids its claims may cite).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from ..core.config import load_yaml
from ..core.errors import KvtierError
from ..core.hashing import sha256_file
from ..core.paths import schema_path
from ..evidence.published import PUBLISHED_TABLES, TableSpec, table_spec
from .formula import Formula, FormulaError, TableShape, parse

SOURCES_DIR = "sources"
EVIDENCE_ITEMS = tuple(f"R{i}" for i in range(1, 10))  # document 003's, cited by the shipped ledger


@dataclass(frozen=True)
class Definition:
    name: str
    formula: Formula
    over: list[int] | None


@dataclass
class Claim:
    id: str
    source: str
    quote: str
    evidence: list[str]
    quantity: dict
    claimed: object
    definitions: list[Definition]
    role: str
    rule: str
    decimals: object
    scale: str
    same_as: list[str] = field(default_factory=list)
    group: str | None = None
    note: str = ""

    @property
    def ambiguous(self) -> bool:
        return len(self.definitions) > 1


@dataclass
class Ledger:
    path: Path
    documents: dict[str, dict]
    texts: dict[str, str]
    shapes: dict[str, TableShape]
    unpublished: dict[str, dict]
    claims: list[Claim]
    not_claims: list[dict]
    boundary_statements: list[dict] = field(default_factory=list)
    tables: dict[str, TableSpec] = field(default_factory=lambda: dict(PUBLISHED_TABLES))

    @property
    def declares_tables(self) -> bool:
        """Whether the ledger brings its own tables (a document other than the two shipped)."""
        return self.tables != PUBLISHED_TABLES

    def by_id(self) -> dict[str, Claim]:
        return {c.id: c for c in self.claims}


def published_shapes(tables: dict[str, TableSpec] | None = None) -> dict[str, TableShape]:
    tables = PUBLISHED_TABLES if tables is None else tables
    return {name: TableShape(tuple(spec.values), spec.keys, True,
                             tuple(k for k in spec.keys if spec.columns[k].kind is str and spec.columns[k].tier))
            for name, spec in tables.items()}


class _Refuse:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, where: str, problem: str) -> KvtierError:
        return KvtierError(f"{self.path}: {where}: {problem}")


def _schema_error(raw: dict, error: jsonschema.ValidationError) -> tuple[str, str]:
    path = list(error.absolute_path)
    where = "top level"
    if len(path) >= 2 and path[0] == "claims" and isinstance(path[1], int):
        claim = raw["claims"][path[1]]
        ident = claim.get("id") if isinstance(claim, dict) else None
        where = f"claim {ident!r}" if ident else f"claims[{path[1]}]"
        path = path[2:]
    elif path:
        where, path = ".".join(map(str, path[:2])), path[2:]
    if error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return where, (f"unknown field {', '.join(map(repr, unknown))}"
                       + (f" in '{'.'.join(map(str, path))}'" if path else "")
                       + f" (allowed: {', '.join(sorted(error.schema.get('properties', {})))})")
    if error.validator == "required":
        missing = [f for f in error.validator_value if f not in error.instance]
        return where, f"missing field {', '.join(map(repr, missing))}"
    field_name = ".".join(map(str, path)) or "(value)"
    return where, f"field '{field_name}' = {error.instance!r}: {error.message}"


def load(path: str | os.PathLike, published_dir: str | os.PathLike | None = None,
         sources_dir: str | os.PathLike | None = None) -> Ledger:
    """The ledger at `path`, its documents read from `sources_dir` (default: `published_dir`/sources, where
    `published_dir` defaults to the ledger's folder)."""
    path = Path(path)
    published_dir = Path(published_dir) if published_dir else path.parent
    sources_dir = Path(sources_dir) if sources_dir else published_dir / SOURCES_DIR
    refuse = _Refuse(path)
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise refuse("top level", "expected a mapping with version, documents, unpublished_tables, claims")
    errors = sorted(jsonschema.Draft202012Validator(load_yaml(schema_path("claims"))).iter_errors(raw),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        where, problem = _schema_error(raw, errors[0])
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise refuse(where, problem + more)

    texts = {}
    for name, meta in raw["documents"].items():
        doc = sources_dir / name
        if not doc.is_file():
            raise refuse(f"documents.{name}", f"no such document {doc}")
        if sha256_file(doc) != meta["sha256"]:
            raise refuse(f"documents.{name}", f"{doc} does not hash to the recorded sha256")
        texts[name] = doc.read_text(encoding="utf-8")

    tables = _tables(raw, refuse)
    _check_evidence(raw, refuse)
    shapes = published_shapes(tables)
    for name, table in raw["unpublished_tables"].items():
        if name in shapes:
            raise refuse(f"unpublished_tables.{name}", "is a published table")
        # a ledger with its own tables names its own tiers; the shipped one's are kvtier's
        shapes[name] = TableShape(tuple(table["columns"]), tuple(table["keys"]), False,
                                  () if "tables" in raw else ("tier",))

    ids = [c["id"] for c in raw["claims"]]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise refuse(f"claim {duplicates[0]!r}", "field 'id': used by more than one claim")
    claims = [_claim(entry, texts, shapes, set(ids), refuse) for entry in raw["claims"]]
    _check_references(claims, refuse)

    for i, entry in enumerate(raw["not_claims"]):
        if entry["source"] not in texts:
            raise refuse(f"not_claims[{i}]", f"field 'source': unknown document {entry['source']!r}")
        try:
            if not re.search(entry["pattern"], texts[entry["source"]]):
                raise refuse(f"not_claims[{i}]", f"field 'pattern': {entry['pattern']!r} matches nothing in "
                                                 f"{entry['source']}")
        except re.error as exc:
            raise refuse(f"not_claims[{i}]", f"field 'pattern': not a regular expression: {exc}") from None
    statements = raw.get("boundary_statements", [])
    _check_statements(statements, texts, set(ids), refuse)
    return Ledger(path, raw["documents"], texts, shapes, raw["unpublished_tables"], claims, raw["not_claims"],
                  statements, tables)


def uncovered_digits(ledger: Ledger) -> list[str]:
    """Each digit of a document that no claim quotes and no `not_claims` entry explains, as "DOCUMENT, line N:
    ...context...": a figure the ledger has not registered."""
    missing = []
    for name, text in ledger.texts.items():
        covered = [False] * len(text)
        for claim in (c for c in ledger.claims if c.source == name):
            start = text.index(claim.quote)
            covered[start:start + len(claim.quote)] = [True] * len(claim.quote)
        for entry in (e for e in ledger.not_claims if e["source"] == name):
            for m in re.finditer(entry["pattern"], text):
                covered[m.start():m.end()] = [True] * (m.end() - m.start())
        missing += [f"{name}, line {text.count(chr(10), 0, i) + 1}: ...{text[max(0, i - 20):i + 20]}..."
                    for i, ch in enumerate(text) if ch.isdigit() and not covered[i]]
    return missing


def _tables(raw: dict, refuse) -> dict[str, TableSpec]:
    """The ledger's own tables, or the shipped documents' when it declares none."""
    if "tables" not in raw:
        return dict(PUBLISHED_TABLES)
    tables = {}
    for name, entry in raw["tables"].items():
        where = f"tables.{name}"
        unknown = [k for k in entry["keys"] if k not in entry["columns"]]
        if unknown:
            raise refuse(where, f"field 'keys': {', '.join(map(repr, unknown))} not among its columns "
                                f"({', '.join(entry['columns'])})")
        if all(k in entry["keys"] for k in entry["columns"]):
            raise refuse(where, "field 'columns': every column is a key; a table needs a value column")
        for column, c in entry["columns"].items():
            if c["type"] in ("tier", "text") and column not in entry["keys"]:
                raise refuse(where, f"field 'columns.{column}': type {c['type']!r} only for a key column "
                                    "(a value a claim is compared with is a number)")
        tables[name] = table_spec(name, entry)
    return tables


def _check_evidence(raw: dict, refuse) -> None:
    """Every claim cites evidence items the ledger knows: its `evidence_items`, or R1-R9."""
    known = raw.get("evidence_items", EVIDENCE_ITEMS)
    citing = [(f"claim {c['id']!r}", c) for c in raw["claims"]]
    citing += [(f"unpublished_tables.{name}", t) for name, t in raw["unpublished_tables"].items()]
    for where, entry in citing:
        unknown = [e for e in entry["evidence"] if e not in known]
        if unknown:
            raise refuse(where, f"field 'evidence': {', '.join(map(repr, unknown))} is not an evidence item "
                                f"(evidence_items: {', '.join(known)})")


def _check_statements(statements: list[dict], texts: dict[str, str], ids: set[str], refuse) -> None:
    """Each boundary statement quotes its document exactly once and names claims the ledger has; ids are unique."""
    seen = set()
    for entry in statements:
        where = f"boundary statement {entry['id']!r}"
        if entry["id"] in seen or entry["id"] in ids:
            raise refuse(where, "field 'id': used more than once (claims and statements share one namespace)")
        seen.add(entry["id"])
        if entry["source"] not in texts:
            raise refuse(where, f"field 'source': unknown document {entry['source']!r}")
        if texts[entry["source"]].count(entry["quote"]) != 1:
            raise refuse(where, f"field 'quote': {entry['quote']!r} must occur exactly once in {entry['source']}")
        unknown = [c for c in entry["claims"] if c not in ids]
        if unknown:
            raise refuse(where, f"field 'claims': no claim {', '.join(map(repr, unknown))}")


def _claim(entry: dict, texts: dict[str, str], shapes, ids: set[str], refuse) -> Claim:
    where = f"claim {entry['id']!r}"
    if entry["source"] not in texts:
        raise refuse(where, f"field 'source': unknown document {entry['source']!r} "
                            f"(documents: {', '.join(texts)})")
    occurrences = texts[entry["source"]].count(entry["quote"])
    if occurrences != 1:
        raise refuse(where, f"field 'quote': {entry['quote']!r} occurs {occurrences} times in {entry['source']}, "
                            "expected exactly once (quote enough words to point at one place)")
    if ("formula" in entry) == ("definitions" in entry):
        raise refuse(where, "missing field 'formula' (or 'definitions' for an ambiguous claim, not both)")
    raw_defs = entry.get("definitions") or [{"name": "as stated", "formula": entry["formula"],
                                               **({"over": entry["over"]} if "over" in entry else {})}]
    if "definitions" in entry and "over" in entry:
        raise refuse(where, "field 'over': give it inside each definition")
    definitions = []
    for i, d in enumerate(raw_defs):
        field_name = "formula" if "formula" in entry else f"definitions[{i}].formula"
        try:
            formula = parse(d["formula"], shapes, ids - {entry["id"]})
        except FormulaError as exc:
            raise refuse(where, f"field '{field_name}': {exc}") from None
        needs_over = formula.uses_c or formula.aggregate
        if needs_over and "over" not in d:
            raise refuse(where, f"field '{field_name}': uses c or {formula.aggregate or 'c'}() but gives no 'over'")
        if "over" in d and not needs_over:
            raise refuse(where, f"field '{field_name}': gives 'over' but never uses c")
        definitions.append(Definition(d["name"], formula, d.get("over")))
    rule, decimals = entry["compare"]["rule"], entry["compare"].get("decimals")
    claimed = entry["claimed"]
    if rule in ("round", "range") and decimals is None:
        raise refuse(where, f"field 'compare': rule {rule!r} needs 'decimals'")
    if rule == "range" and not (isinstance(claimed, list) and len(claimed) == 2
                                and all(isinstance(v, (int, float)) for v in claimed)):
        raise refuse(where, f"field 'claimed' = {claimed!r}: rule 'range' needs [low, high]")
    if rule in ("round", "at_least") and not isinstance(claimed, (int, float)):
        raise refuse(where, f"field 'claimed' = {claimed!r}: rule {rule!r} needs a number")
    if rule == "set" and not isinstance(claimed, list):
        raise refuse(where, f"field 'claimed' = {claimed!r}: rule 'set' needs a list")
    return Claim(id=entry["id"], source=entry["source"], quote=entry["quote"], evidence=entry["evidence"],
                 quantity=entry["quantity"], claimed=claimed, definitions=definitions,
                 role=entry.get("role", "defines"), rule=rule, decimals=decimals, scale=entry["scale"],
                 same_as=entry.get("same_as", []), group=entry.get("group"), note=entry.get("note", "").strip())


def _check_references(claims: list[Claim], refuse) -> None:
    by_id = {c.id: c for c in claims}
    for claim in claims:
        for other in claim.same_as:
            if other not in by_id:
                raise refuse(f"claim {claim.id!r}", f"field 'same_as': no claim {other!r}")
            if other == claim.id:
                raise refuse(f"claim {claim.id!r}", "field 'same_as': names the claim itself")
            if claim.id not in by_id[other].same_as:
                raise refuse(f"claim {other!r}", f"field 'same_as': must list {claim.id!r} back "
                                                 f"(claim {claim.id!r} says they quote the same figure)")
