"""Two runs of the package side by side: every measured comparison's verdict word in each evidence folder.

What a user who reruns the package on their own machine asks first: do my pages say what the shipped ones say?
Each measured comparison (a row of an evidence table that carries a word: a tier against recompute, a build
against the device limit, a cell's winner, a gate's line) is matched by its key in both folders and marked:

- `same`: the same word;
- `decided vs undecided`: one side decided (faster, MET, PASS, ...) and the other did not (no difference
  measured, UNDECIDED, a tie, one round);
- `opposite`: decided both times, in opposite directions (faster against slower, MET against NOT MET, AGREES
  against CONTRADICTS, a crossover from engine_only to offload against one the other way);
- `other`: two different words that are neither (e.g. a tie against "one round: not decided", or a crossover
  bracketed between other measured cells);
- `only in A` / `only in B`: a row one folder has and the other lacks (another grid, another config).

Where a word comes from is the table's own (kvtier.evidence.stats, kvtier.evidence.boundary, kvtier.gates): this
module only reads the rendered CSVs, so it compares a package built anywhere, by any version that wrote them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from ..core.table_io import read_table
from ..evidence import stats

SAME, UNDECIDED_SIDE, OPPOSITE, OTHER, ONLY_A, ONLY_B = (
    "same", "decided vs undecided", "opposite", "other", "only in A", "only in B")
MARKS = (SAME, UNDECIDED_SIDE, OPPOSITE, OTHER, ONLY_A, ONLY_B)

# Each word's direction: +1 and -1 are decided (and opposite to each other), 0 is undecided.
DIRECTION = {
    stats.FASTER: 1, stats.SLOWER: -1, "shorter": 1, "longer": -1,  # R9 reads "longer" for a slower load
    stats.MET: 1, stats.NOT_MET: -1, "PASS": 1, "FAIL": -1,
    "offload": 1, "engine_only": -1,  # B's winners
    stats.NO_DIFFERENCE: 0, stats.UNDECIDED: 0, stats.ONE_ROUND: 0, "tie": 0,
    "AGREES": 1, "CONTRADICTS": -1, "NOT SHOWN": 0, "MIXED": 0,  # document 000's statements (kvtier.audit.shapes)
    "none": 0,  # a line of B's grid with no crossover
}
BRACKET = re.compile(r"^(?P<before>\w+) → (?P<after>\w+) between \d+ and \d+$")  # B_crossovers.csv


def direction(word: str) -> int | None:
    """A word's direction (DIRECTION), or a crossover's: +1 when every bracket of the line runs from engine_only
    to offload as the axis rises, -1 when every one runs the other way, 0 when they mix; None: no direction."""
    if word in DIRECTION:
        return DIRECTION[word]
    brackets = [BRACKET.match(part.strip()) for part in word.split(";")]
    if not all(brackets):
        return None
    ways = {1 if m["before"] == "engine_only" else -1 for m in brackets}
    return ways.pop() if len(ways) == 1 else 0


@dataclass(frozen=True)
class Table:
    """An evidence table with measured comparisons: its path under the evidence folder, the columns that name a
    row, and the columns that hold a verdict word."""
    path: str
    keys: tuple[str, ...]
    words: tuple[str, ...]


_TIER_ROW = ("concurrency", "tier", "baseline")
_TIER_WORDS = ("ttft_verdict", "output_tok_s_verdict")
TABLES = (
    Table("R1/R1_targets.csv", ("target",), ("verdict",)),
    Table("R2_local/R2_local_vs_recompute.csv", _TIER_ROW, _TIER_WORDS),
    Table("R2_local/R2_local_pool_vs_local_disk.csv", _TIER_ROW, _TIER_WORDS),
    Table("R3/R3_vs_recompute.csv", _TIER_ROW, _TIER_WORDS),
    Table("R3/R3_vs_same_instance.csv", _TIER_ROW, _TIER_WORDS),
    Table("B/B_winners.csv", ("context_tokens", "concurrency"), ("winner",)),
    Table("B/B_crossovers.csv", ("along", "at"), ("crossover",)),
    Table("B/B_statements.csv", ("id",), ("verdict",)),
    Table("B/B_sla.csv", ("metric", "sla_s", "scheme", "context_tokens", "concurrency"), ("verdict",)),
    Table("R9/R9_comparisons.csv", ("comparison", "reading"), ("word",)),
    # G1's lines check the platform record against a bill, not a measurement: left out (R6 shows them).
    Table("gates/gate_lines.csv", ("gate", "line"), ("verdict",)),
)
MEASURED_GATES = ("G2", "G3", "G4")


@dataclass(frozen=True)
class Comparison:
    table: str
    key: str  # the row's key columns, "name=value" joined
    column: str
    a: str | None  # the word in A, None when A has no such row
    b: str | None
    mark: str


def mark(a: str | None, b: str | None) -> str:
    if a is None:
        return ONLY_B
    if b is None:
        return ONLY_A
    if a == b:
        return SAME
    da, db = direction(a), direction(b)
    if da is None or db is None:
        return OTHER
    if da and db:
        return OPPOSITE if da != db else OTHER
    return UNDECIDED_SIDE if da or db else OTHER


def _cell(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if isinstance(value, float) and math.isnan(value) else str(value)


FAULT_AT = re.compile(r"^(?P<fault>\w+) at [\d.]+ s$")  # G4's line of one injected fault: "kill_vllm at 10 s"


def _fault_lines(frame: pd.DataFrame) -> list[str]:
    """G4's fault lines named by the fault and its occurrence ("kill_vllm #1"), not the second it fired at: two
    soaks on different schedules still compare each fault's recovery."""
    seen: Counter = Counter()
    names = []
    for gate, line in zip(frame["gate"], frame["line"]):
        match = FAULT_AT.match(str(line)) if gate == "G4" else None
        if match:
            seen[match["fault"]] += 1
            line = f"{match['fault']} #{seen[match['fault']]}"
        names.append(line)
    return names


def words(evidence_dir: Path, table: Table) -> dict[tuple[str, str], str] | None:
    """{(row key, word column): word} of one table, or None when the folder has no such table."""
    path = Path(evidence_dir) / table.path
    if not path.exists():
        return None
    try:
        frame = read_table(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise KvtierError(f"{path}: not a readable CSV table ({exc})") from None
    missing = [c for c in (*table.keys, *table.words) if c not in frame.columns]
    if missing:
        raise KvtierError(f"{path}: missing column(s) {', '.join(missing)} (expected {', '.join(table.keys)} "
                          f"and {', '.join(table.words)})")
    if table.path.startswith("gates/"):
        frame = frame[frame["gate"].isin(MEASURED_GATES)]
        frame = frame.assign(line=_fault_lines(frame))
    found = {}
    for _, row in frame.iterrows():
        key = ", ".join(f"{c}={_cell(row[c])}" for c in table.keys)
        for column in table.words:
            word = _cell(row[column])
            if (key, column) in found:
                raise KvtierError(f"{path}: two rows with the key {key}: a table of comparisons has one row each")
            if word:
                found[(key, column)] = word
    return found


def compare(evidence_a: Path, evidence_b: Path) -> tuple[list[Comparison], list[str]]:
    """Every comparison of both folders, and the tables that neither holds (said, not silently skipped)."""
    for folder in (evidence_a, evidence_b):
        if not Path(folder).is_dir():
            raise KvtierError(f"{folder}: no such evidence folder")
    rows, absent = [], []
    for table in TABLES:
        a, b = words(evidence_a, table), words(evidence_b, table)
        if a is None and b is None:
            absent.append(table.path)
            continue
        a, b = a or {}, b or {}
        for key, column in sorted(set(a) | set(b)):
            wa, wb = a.get((key, column)), b.get((key, column))
            rows.append(Comparison(table.path, key, column, wa, wb, mark(wa, wb)))
    if not rows:
        raise KvtierError(f"neither {evidence_a} nor {evidence_b} holds a measured comparison (none of "
                          f"{', '.join(t.path for t in TABLES)}): is each the evidence folder of a run?")
    return rows, absent


def counts(rows: list[Comparison]) -> Counter:
    return Counter(row.mark for row in rows)


def same_share(rows: list[Comparison]) -> float:
    """The share of comparisons present in both folders that kept their word."""
    both = [row for row in rows if row.mark not in (ONLY_A, ONLY_B)]
    return sum(row.mark == SAME for row in both) / len(both) if both else math.nan


def text(evidence_a: str, evidence_b: str, rows: list[Comparison], absent: list[str], show_same: bool) -> str:
    lines = [f"A: {evidence_a}", f"B: {evidence_b}", ""]
    for row in rows:
        if row.mark == SAME and not show_same:
            continue
        lines.append(f"{row.mark:<22} {row.table} [{row.key}] {row.column}: "
                     f"{row.a if row.a is not None else '-'} | {row.b if row.b is not None else '-'}")
    if absent:
        lines.append(f"in neither folder: {', '.join(absent)}")
    tally = counts(rows)
    both = sum(n for m, n in tally.items() if m not in (ONLY_A, ONLY_B))
    share = same_share(rows)
    lines += ["", f"{len(rows)} comparisons, {both} in both folders: "
              + ", ".join(f"{tally.get(m, 0)} {m}" for m in MARKS),
              f"same word: {tally.get(SAME, 0)} of {both}" + (f" ({100 * share:.1f} %)" if both else "")]
    return "\n".join(lines)
