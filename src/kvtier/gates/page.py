"""What the gates page (notebooks/gates.py) and R5 show, from the verdict records of one run
(kvtier.gates.record): the gates in order with their verdicts, then each gate's lines, and what each tier path
delivers (G2)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..core.errors import KvtierError
from ..core.table_io import write_table
from ..evidence import stats
from . import record
from .bom import FAIL, PASS, shown
from .g2 import STORAGE

ORDER = ("G1", "G2", "G3", "G4")
LINES_FILE = "gate_lines.csv"


def load(gates_dir: str | os.PathLike) -> dict[str, dict]:
    """{gate: record} of the gates that have a record in `gates_dir`, in order; G1 must be there."""
    gates_dir = Path(gates_dir)
    records = {g: record.read(gates_dir / f"{g}.json") for g in ORDER if (gates_dir / f"{g}.json").is_file()}
    if "G1" not in records:
        raise KvtierError(f"{gates_dir}: no G1.json (the pipeline's gate_g1 rule writes it)")
    return records


def summary(records: dict[str, dict]) -> pd.DataFrame:
    rows = []
    for gate in ORDER:
        if gate not in records:
            rows.append({"gate": gate, "title": record.TITLES[gate], "verdict": "not run", "lines passed": "",
                         "failed": ""})
            continue
        r = records[gate]
        failed = record.failed_lines(r)
        rows.append({"gate": gate, "title": r["title"], "verdict": r["verdict"],
                     "lines passed": f"{len(r['lines']) - len(failed)} of {len(r['lines'])}",
                     "failed": "; ".join(failed[:3]) + (" …" if len(failed) > 3 else "")})
    return pd.DataFrame(rows)


def g1_table(g1: dict) -> pd.DataFrame:
    return pd.DataFrame([{"field": r["field"], "expected": f"{r['op']} {shown(r['expected'])}",
                          "found": r["note"] or shown(r["found"]), "verdict": r["verdict"], "why": r["why"]}
                         for r in g1["lines"]])


# How a G2 line's floor reads: a bandwidth at least, a time at most, an emulated cap "within ±15 %" of its value.
FLOOR_SIGN = {"at_least": "≥", "at_most": "≤"}


def g2_lines(g2: dict) -> pd.DataFrame:
    return pd.DataFrame([{"line": r["name"], "median": r["median"], "unit": r["unit"], "repetitions": r["repetitions"],
                          "cv": r["cv"], "max cv": r["max_cv"],
                          "floor": "" if r["floor"] is None else f"{FLOOR_SIGN.get(r['floor_is'], r['floor_is'])} "
                                                                 f"{r['floor']:g}",
                          "source": r.get("source", ""), "verdict": r["verdict"], "why": r["why"]}
                         for r in g2["lines"]])


def deliverable(g2: dict) -> pd.DataFrame:
    """What each tier path delivers before any KV is put on it: the median of each pass per queue depth, one row per
    (path, pass), one column per queue depth."""
    rows = [{"path": r["path"], "pass": f"{STORAGE[r['rw']][0]} ({r['unit']})", "order": list(STORAGE).index(r["rw"]),
             "queue depth": r["iodepth"], "median": r["median"]}
            for r in g2["lines"] if r.get("kind") == "storage"]
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows)
    wide = frame.pivot_table(index=["path", "order", "pass"], columns="queue depth", values="median")
    wide = wide.reset_index(level="order", drop=True)
    wide.columns = [f"qd{c}" for c in wide.columns]
    return wide


def g3_table(g3: dict) -> pd.DataFrame:
    """G3's measured lines: each figure with its interval and threshold."""
    return pd.DataFrame([{"concurrency": r["concurrency"], "figure": r["metric"], "point": r["point_pct"],
                          "interval": f"[{r['low_pct']:.1f}, {r['high_pct']:.1f}]", "rounds": r["rounds"],
                          "threshold": f"≥ {r['threshold_pct']:g}", "verdict": r["verdict"]}
                         for r in g3["lines"] if "point_pct" in r])


def g3_correctness(g3: dict) -> pd.DataFrame:
    """G3's correctness lines (records made before them have none): per tier, its greedy outputs against
    recompute's."""
    return pd.DataFrame([{"line": r["name"], "identical": r["figure"], "rounds": r["rounds"], "detail": r["detail"],
                          "verdict": r["verdict"]} for r in g3["lines"] if "point_pct" not in r],
                        columns=["line", "identical", "rounds", "detail", "verdict"])


def g4_table(g4: dict) -> pd.DataFrame:
    return pd.DataFrame([{"line": r["name"], "figure": r.get("figure"), "limit": r.get("limit"),
                          "verdict": r["verdict"], "why": r.get("why", "")} for r in g4["lines"]])


def all_lines(records: dict[str, dict]) -> pd.DataFrame:
    """Every gate's lines in one table (the page's gate_lines.csv): gate, line, verdict, and the line's figure."""
    rows = []
    for gate, r in records.items():
        for line in r["lines"]:
            figure = line.get("median", line.get("point_pct", line.get("found", line.get("figure"))))
            # as text: G1's values are text, numbers and lists; the others' numbers are printed as Python does
            rows.append({"gate": gate, "line": line["name"], "verdict": line["verdict"],
                         "figure": "" if figure is None else shown(figure),
                         "unit": line.get("unit", "%" if gate == "G3" else "")})
    return pd.DataFrame(rows)


def write_evidence(records: dict[str, dict], out_dir: str | os.PathLike) -> list[Path]:
    return [write_table(all_lines(records), Path(out_dir) / LINES_FILE)]


def styled_verdicts(frame: pd.DataFrame, column: str = "verdict"):
    """Red for a failed word, green for a passed one."""
    colours = {PASS: "#1e8449", stats.MET: "#1e8449", FAIL: "#c0392b", stats.NOT_MET: "#c0392b",
               stats.UNDECIDED: "#b9770e"}  # G4's UNDECIDED is the same word
    return (frame.style.hide(axis="index").format(precision=3, na_rep="")
            .map(lambda v: f"color: {colours[v]}; font-weight: bold" if v in colours else "", subset=[column]))
