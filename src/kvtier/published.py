"""Read the transcribed published readings (raw_data/published/*_readings.csv), refusing anything malformed.

An empty cell is a reading the report did not publish: it becomes NaN, never zero.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import pandas as pd

from .errors import KvtierError
from .tiers import TIERS

READING_COLUMNS = {
    # column: (type, must be present in every row)
    "tier": (str, True),
    "concurrency": (int, True),
    "ttft_p50_s": (float, False),
    "output_tok_s": (float, False),
}


def _parse_cell(path: Path, line: int, column: str, text: str):
    kind, required = READING_COLUMNS[column]
    text = text.strip()
    if text == "":
        if required:
            raise KvtierError(f"{path}, line {line}: column '{column}' is empty; it is required")
        return math.nan
    if kind is str:
        if text not in TIERS:
            raise KvtierError(f"{path}, line {line}: column '{column}' = {text!r} is not a tier "
                              f"(one of: {', '.join(TIERS)})")
        return text
    try:
        value = kind(text)
    except ValueError:
        raise KvtierError(f"{path}, line {line}: column '{column}' = {text!r} is not "
                          f"{'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(value) or value <= 0:
        raise KvtierError(f"{path}, line {line}: column '{column}' = {text!r} must be a positive number "
                          "(leave the cell empty for a reading that was not published)")
    return value


def load_readings(path: str | os.PathLike) -> pd.DataFrame:
    """One row per tier x concurrency, columns as READING_COLUMNS, in file order."""
    path = Path(path)
    try:
        f = open(path, encoding="utf-8", newline="")
    except FileNotFoundError:
        raise KvtierError(f"{path}: file not found") from None
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise KvtierError(f"{path}: empty file, expected a header {','.join(READING_COLUMNS)}")
        header = [h.strip() for h in header]
        missing = [c for c in READING_COLUMNS if c not in header]
        unknown = [c for c in header if c not in READING_COLUMNS]
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
            row = {col: _parse_cell(path, line, col, text) for col, text in zip(header, cells)}
            key = (row["tier"], row["concurrency"])
            if key in seen:
                raise KvtierError(f"{path}, line {line}: tier {key[0]!r} at concurrency {key[1]} "
                                  f"already given on line {seen[key]}")
            seen[key] = line
            rows.append(row)
    if not rows:
        raise KvtierError(f"{path}: no readings")
    return pd.DataFrame(rows, columns=list(READING_COLUMNS)).astype({"concurrency": "int64"})
