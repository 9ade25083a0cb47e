"""R4's page (notebooks/R4.py): the platform and stack record of every run of a campaign, side by side.

Every run directory keeps the platform record taken when it ran (`probes/platform.json`, kvtier.probes.platform_probe;
G1's is gates/platform.json). Each record is read through its schema (which refuses secret-named environment
variables: they are never recorded), flattened to dotted fields, and set side by side: the fields whose value
differs between runs get one column per run and are shown first; the fields every run shares are shown once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from ..probes import platform_probe

RECORD_NAMES = ("platform.json",)
LIST_CUTOFF = 12  # a longer list (CPU flags) is shown by its length and a hash-like summary, not element by element


def find(runs_dir: str | os.PathLike) -> dict[str, Path]:
    """{run directory relative to runs_dir: its platform record}, in path order."""
    runs_dir = Path(runs_dir)
    found = sorted(p for p in runs_dir.rglob("platform.json") if p.is_file())
    if not found:
        raise KvtierError(f"{runs_dir}: no platform records (probes/platform.json) under it")
    records = {}
    for path in found:
        where = path.parent.parent if path.parent.name == "probes" else path.parent
        records[where.relative_to(runs_dir).as_posix() or "."] = path
    return records


def flatten(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out = {}
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: "{}"}
    if isinstance(value, list):
        if len(value) > LIST_CUTOFF or not all(isinstance(v, (dict, list)) for v in value):
            return {prefix: _shown_list(value)}
        out = {f"{prefix}.#": len(value)}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}.{i}"))
        return out
    return {prefix: value}


def _shown_list(value: list) -> str:
    if len(value) <= LIST_CUTOFF:
        return ", ".join(map(str, value)) if value else "[]"
    return f"{len(value)} items: {', '.join(map(str, value[:LIST_CUTOFF]))}, …"


def side_by_side(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """One row per field, one column per run directory (a field a record lacks: empty)."""
    records = {name: flatten(platform_probe.read(path)) for name, path in find(runs_dir).items()}
    frame = pd.DataFrame(records)
    frame.index.name = "field"
    return frame.astype(object).where(frame.notna(), "")


def differing(frame: pd.DataFrame) -> pd.DataFrame:
    """The fields whose value is not the same in every run."""
    return frame[frame.astype(str).nunique(axis=1) > 1]


def shared(frame: pd.DataFrame) -> pd.Series:
    """The fields every run records alike, with their one value."""
    same = frame[frame.astype(str).nunique(axis=1) == 1]
    return same.iloc[:, 0].rename(f"value (all {frame.shape[1]} runs)")


def styled_differing(frame: pd.DataFrame):
    """Each differing row highlighted; in it, a cell that differs from the row's most common value in bold red."""
    diff = differing(frame)

    def mark(row: pd.Series) -> list[str]:
        common = row.astype(str).mode().iloc[0]
        return ["background: #fff3cd" + ("; color: #c0392b; font-weight: bold" if str(v) != common else "")
                for v in row]

    return diff.style.apply(mark, axis=1)
