"""A gate's verdict record: one JSON file per gate (workflow/schemas/gate.schema.yaml), written by `kvtier gate-g1`,
`gate-g2` and `gate-g3`, read by the next gate's rule, the gates page and every page rendered after a gate.

A gate's verdict is PASS, FAIL (a line missed its bound) or UNDECIDED (no line missed, but a line's interval
straddles its threshold: the rounds could not tell; G3 only). `proceed` is what stands between a gate and what comes
after it in the pipeline: on PASS it writes the gate's flag file; on FAIL it refuses, naming the gate, its failed
lines and the record's path, so that nothing that needs the flag starts, unless the run was configured to go on
after a failed gate (`gates.stop_on_fail: false`). An UNDECIDED gate lets the run go on unless
`gates.stop_on_undecided` is true: it has not been passed, but nothing was shown to fail either. Whenever the flag
is written for a gate that did not PASS it says so, and every page rendered after it is marked
(kvtier.evidence.render).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import __version__
from ..bench.runner import now_utc
from ..core.atomic import write_text
from ..core.config import check_schema, read_json
from ..core.errors import KvtierError
from ..core.hashing import file_record
from ..evidence import stats
from .bom import FAIL, PASS

SCHEMA = "gate"
TITLES = {"G1": "G1 arrival acceptance", "G2": "G2 single-node baseline", "G3": "G3 main gate",
          "G4": "G4 stability soak"}
UNDECIDED = stats.UNDECIDED
FAILED_WORDS = (FAIL, stats.NOT_MET, UNDECIDED)


def make(gate: str, verdict: str, lines: list[dict], inputs: list[str | os.PathLike], settings: dict,
         notes: list[str] | None = None) -> dict:
    record = {"gate": gate, "title": TITLES.get(gate, gate), "verdict": verdict, "lines": lines,
              "inputs": [{k: v for k, v in file_record(p).items() if k != "bytes"} for p in sorted(map(str, inputs))],
              "settings": settings, "notes": list(notes or []),
              "checked_at": now_utc(),
              "kvtier": __version__}
    return validate(record)


def validate(record: dict, source: str = "gate record") -> dict:
    return check_schema(record, SCHEMA, source, "not a gate verdict record")


def write(path: str | os.PathLike, record: dict) -> Path:
    validate(record, str(path))
    return write_text(path, json.dumps(record, indent=2, default=str, ensure_ascii=False) + "\n")


def read(path: str | os.PathLike) -> dict:
    return validate(read_json(path, "gate record"), str(path))


def failed_lines(record: dict) -> list[str]:
    return [f"{line['name']}: {line['verdict']}" + (f" ({line['why']})" if line.get("why") else "")
            for line in record["lines"] if line["verdict"] in FAILED_WORDS]


def failure_message(record: dict, path: str | os.PathLike) -> str:
    failed = failed_lines(record)
    shown = "\n".join(f"  - {line}" for line in failed[:20])
    more = f"\n  ... and {len(failed) - 20} more" if len(failed) > 20 else ""
    why = " (gates.stop_on_undecided is true)" if record["verdict"] == UNDECIDED else ""
    word = "FAILED" if record["verdict"] == FAIL else record["verdict"]
    return (f"{record['title']} {word} ({len(failed)} of {len(record['lines'])} lines): later stages are not "
            f"run{why}.\n"
            f"{shown}{more}\nthe verdict record: {path}")


def stops(verdict: str, stop_on_fail: bool = True, stop_on_undecided: bool = False) -> bool:
    """Whether a gate with this verdict stops the pipeline under these settings."""
    return (verdict == FAIL and stop_on_fail) or (verdict == UNDECIDED and stop_on_undecided)


def proceed(record_path: str | os.PathLike, flag_path: str | os.PathLike, stop_on_fail: bool = True,
            stop_on_undecided: bool = False) -> dict:
    """Write `flag_path` when the gate at `record_path` passed, or when it did not and the run goes on regardless
    (`stops`); raise KvtierError naming the lines that did not pass otherwise (and write nothing). The flag's
    `after_failed_gate` is true for any verdict but PASS."""
    record = read(record_path)
    if stops(record["verdict"], stop_on_fail, stop_on_undecided):
        raise KvtierError(failure_message(record, record_path))
    flag = {"gate": record["gate"], "verdict": record["verdict"], "record": str(record_path),
            "after_failed_gate": record["verdict"] != PASS}
    write_text(flag_path, json.dumps(flag, indent=2) + "\n")
    return flag


def failed_gates(record_paths: list[str | os.PathLike]) -> list[dict]:
    """The records among `record_paths` whose gate failed: what a page rendered after them must say."""
    return [{"gate": r["gate"], "title": r["title"], "verdict": r["verdict"], "record": str(p),
             "failed": failed_lines(r)}
            for p in record_paths for r in [read(p)] if r["verdict"] != PASS]
