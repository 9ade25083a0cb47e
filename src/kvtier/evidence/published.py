"""Read transcribed published tables (raw_data/published/*_readings.csv), refusing anything malformed.

Each table has a spec: its columns, their types, which identify a row (the keys), and whether a value must be
positive. An empty cell is a reading the report did not publish: it becomes NaN, never zero. The two documents'
tables are R2 and B below; a claims ledger for another document declares its own (`table_spec`).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from ..core.tiers import TIERS


@dataclass(frozen=True)
class Column:
    kind: type                # str (a tier name, or any text when not `tier`), int or float
    required: bool = False    # an empty cell is refused
    positive: bool = True     # numbers must be > 0 (a signed percentage is not)
    tier: bool = True         # a str column holds tier names (checked against kvtier.core.tiers)


@dataclass(frozen=True)
class TableSpec:
    name: str
    file: str
    columns: dict[str, Column]
    keys: tuple[str, ...]

    @property
    def values(self) -> list[str]:
        return [c for c in self.columns if c not in self.keys]


R2_SPEC = TableSpec(
    name="R2", file="R2_readings.csv", keys=("tier", "concurrency"),
    columns={"tier": Column(str, required=True), "concurrency": Column(int, required=True),
             "ttft_p50_s": Column(float), "output_tok_s": Column(float)})

B_SPEC = TableSpec(
    name="B", file="B_readings.csv", keys=("concurrency",),
    columns={"concurrency": Column(int, required=True), "vram_ttft_s": Column(float),
             "offload_ttft_s": Column(float), "improvement_pct": Column(float, positive=False)})

PUBLISHED_TABLES = {spec.name: spec for spec in (R2_SPEC, B_SPEC)}

# A ledger's column types (workflow/schemas/claims.schema.yaml, `tables`) as Columns.
COLUMN_TYPES = {"tier": (str, True), "text": (str, False), "integer": (int, False), "number": (float, False)}


def table_spec(name: str, entry: dict) -> TableSpec:
    """A table a claims ledger declares: {file, keys, columns: {name: {type, required, positive}}} (schema-checked
    before this is called); keys are required whatever the entry says."""
    columns = {}
    for column, c in entry["columns"].items():
        kind, tier = COLUMN_TYPES[c["type"]]
        columns[column] = Column(kind, required=c.get("required", False) or column in entry["keys"],
                                 positive=c.get("positive", True), tier=tier)
    return TableSpec(name=name, file=entry["file"], columns=columns, keys=tuple(entry["keys"]))


def _parse_cell(path: Path, line: int, column: str, spec: Column, text: str):
    text = text.strip()
    if text == "":
        if spec.required:
            raise KvtierError(f"{path}, line {line}: column '{column}' is empty; it is required")
        return math.nan
    if spec.kind is str:
        if spec.tier and text not in TIERS:
            raise KvtierError(f"{path}, line {line}: column '{column}' = {text!r} is not a tier "
                              f"(one of: {', '.join(TIERS)})")
        return text
    try:
        value = spec.kind(text)
    except ValueError:
        raise KvtierError(f"{path}, line {line}: column '{column}' = {text!r} is not "
                          f"{'an integer' if spec.kind is int else 'a number'}") from None
    if not math.isfinite(value) or (spec.positive and value <= 0):
        raise KvtierError(f"{path}, line {line}: column '{column}' = {text!r} must be a "
                          f"{'positive ' if spec.positive else ''}finite number "
                          "(leave the cell empty for a reading that was not published)")
    return value


def load_table(path: str | os.PathLike, spec: TableSpec) -> pd.DataFrame:
    """One row per key, columns as the spec, in file order."""
    path = Path(path)
    try:
        f = open(path, encoding="utf-8", newline="")
    except FileNotFoundError:
        raise KvtierError(f"{path}: file not found") from None
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise KvtierError(f"{path}: empty file, expected a header {','.join(spec.columns)}")
        header = [h.strip() for h in header]
        missing = [c for c in spec.columns if c not in header]
        unknown = [c for c in header if c not in spec.columns]
        if missing or unknown:
            raise KvtierError(f"{path}: header {','.join(header)!r}: "
                              + "; ".join(filter(None, [
                                  f"missing column(s) {', '.join(missing)}" if missing else "",
                                  f"unknown column(s) {', '.join(unknown)}" if unknown else ""])))
        rows, seen = [], {}
        for line, cells in enumerate(reader, start=2):
            if not cells or all(c.strip() == "" for c in cells):
                continue
            if len(cells) != len(header):
                raise KvtierError(f"{path}, line {line}: {len(cells)} cells, the header has {len(header)}")
            row = {col: _parse_cell(path, line, col, spec.columns[col], text) for col, text in zip(header, cells)}
            key = tuple(row[k] for k in spec.keys)
            if key in seen:
                named = " at ".join(f"{k} {v!r}" if isinstance(v, str) else f"{k} {v}"
                                    for k, v in zip(spec.keys, key))
                raise KvtierError(f"{path}, line {line}: {named} already given on line {seen[key]}")
            seen[key] = line
            rows.append(row)
    if not rows:
        raise KvtierError(f"{path}: no readings")
    ints = {c: "int64" for c, col in spec.columns.items() if col.kind is int}
    return pd.DataFrame(rows, columns=list(spec.columns)).astype(ints)


def load_readings(path: str | os.PathLike) -> pd.DataFrame:
    """R2-shaped readings: one row per tier x concurrency (ttft_p50_s, output_tok_s)."""
    return load_table(path, R2_SPEC)


# A measured campaign's readings per round (kvtier.runs.campaign's R2_rounds.csv): R2's shape, one per round.
R2_ROUNDS_SPEC = TableSpec(
    name="R2_rounds", file="R2_rounds.csv", keys=("round", "tier", "concurrency"),
    columns={"round": Column(int, required=True), **R2_SPEC.columns})


def load_rounds(path: str | os.PathLike) -> dict[int, pd.DataFrame]:
    """{round: R2-shaped readings of that round} from a campaign's R2_rounds.csv."""
    frame = load_table(path, R2_ROUNDS_SPEC)
    return {int(r): rows.drop(columns="round").reset_index(drop=True)
            for r, rows in frame.groupby("round", sort=True)}
