"""G2, the single-node baseline: what each tier path and the engine deliver before any KV is put on them, and
whether the repetitions agree.

A baseline figure (a path's fio read bandwidth at a queue depth, the recompute TTFT, the engine-hit floor) is
measured k times. Its line is PASS when the repetitions are stable, their coefficient of variation (sample
standard deviation / mean) at most `max_cv`, and, where a floor is configured, when their median meets it
(`at_least` for a bandwidth, `at_most` for a time). Fewer than two repetitions cannot show stability: FAIL, said so.

The figures, and where they come from (measured once in a run, never twice):
- per tier path, fio's direct sequential write and read bandwidth and 4 KiB random-read IOPS at each queue depth
  (kvtier.runs.g2_storage), the pool path's sequential reads taken from R1's fio rounds when R1 ran;
- per emulated tier path (kvtier.stack.emulated; its caps in the storage run's platform record), the best
  sequential read and write median against the cap configured: within 15 %, or the line names the path that is off;
- per concurrency, the campaign's recompute TTFT p50 (every token prefilled) and its engine-hit TTFT p50 (the KV
  already in vLLM's prefix cache: the floor no tier can go under), one value per round (R2_rounds.csv).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median, stdev

import pandas as pd

from ..bench.runner import read_completed
from ..core.errors import KvtierError
from ..probes import platform_probe
from ..probes.platform_probe import PLATFORM_FILE
from ..stack.emulated import CAP_TOLERANCE
from .bom import FAIL, PASS

# A storage pass (fio's rw): its name on the page, the reading judged, its unit and the key of its floor.
STORAGE = {"write": ("sequential write", "gb_per_s", "GB/s", "seq_write_gb_s"),
           "read": ("sequential read", "gb_per_s", "GB/s", "seq_read_gb_s"),
           "randread": ("4 KiB random read", "iops", "IOPS", "randread_4k_iops")}
# A campaign tier judged as a baseline: its name on the page and the key of its ceiling (a time: at most).
ENGINE = {"recompute": ("recompute TTFT p50", "recompute_ttft_p50_s"),
          "engine": ("engine-hit TTFT p50 (the floor)", "engine_ttft_p50_s")}
FLOOR_KEYS = tuple(v[3] for v in STORAGE.values()) + tuple(v[1] for v in ENGINE.values())
STORAGE_FILE = "storage.jsonl"  # kvtier.runs.g2_storage
R1_FIO_FILE, R1_POOL = "fio.jsonl", "shared_pool"  # kvtier.runs.r1: fio on the pool path


@dataclass(frozen=True)
class G2Settings:
    max_cv: float = 0.5
    floors: dict = field(default_factory=dict)  # FLOOR_KEYS -> value; a missing key: stability only

    def __post_init__(self):
        if not self.max_cv > 0:
            raise KvtierError(f"G2 max_cv {self.max_cv!r}: must be > 0")
        for key, value in self.floors.items():
            if key not in FLOOR_KEYS:
                raise KvtierError(f"G2 floors: unknown key {key!r} (known: {', '.join(FLOOR_KEYS)})")
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise KvtierError(f"G2 floors.{key} {value!r}: must be a number > 0")


def cv(values: list[float]) -> float:
    """Sample standard deviation over the mean; inf when the mean is 0."""
    if len(values) < 2:
        raise KvtierError(f"a coefficient of variation needs at least 2 repetitions, got {len(values)}")
    centre = mean(values)
    return stdev(values) / abs(centre) if centre else math.inf


def line(name: str, values: list[float], max_cv: float, floor: float | None = None,
         at_least: bool = True, unit: str = "") -> dict:
    """One baseline figure's repetitions judged: stable, and over (or under) its floor when one is given."""
    if not max_cv > 0:
        raise KvtierError(f"G2 max_cv {max_cv!r}: must be > 0")
    values = [float(v) for v in values if v is not None and not math.isnan(v)]
    row = {"name": name, "unit": unit, "repetitions": len(values), "median": median(values) if values else None,
           "cv": None, "max_cv": max_cv, "floor": floor, "floor_is": "at_least" if at_least else "at_most",
           "verdict": FAIL, "why": ""}
    if len(values) < 2:
        row["why"] = f"{len(values)} repetition(s): stability cannot be shown"
        return row
    row["cv"] = cv(values)
    problems = []
    if row["cv"] > max_cv:
        problems.append(f"unstable: cv {row['cv']:.3f} > {max_cv:g}")
    if floor is not None and (row["median"] < floor if at_least else row["median"] > floor):
        problems.append(f"median {row['median']:.4g} {unit} {'under' if at_least else 'over'} the floor {floor:g}")
    row["verdict"], row["why"] = (FAIL, "; ".join(problems)) if problems else (PASS, "")
    return row


def verdict(rows: list[dict]) -> str:
    return PASS if rows and all(r["verdict"] == PASS for r in rows) else FAIL


def _complete_records(run_dir: Path, name: str) -> list[dict]:
    read_completed(run_dir)
    path = run_dir / name
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise KvtierError(f"{path}: not readable JSON lines ({exc})") from None


def load_storage(storage_dir: str | Path, r1_reads_dir: str | Path | None = None) -> pd.DataFrame:
    """Every storage pass of the run: G2's own (storage.jsonl) and R1's fio reads of the pool path, one row per
    pass with path, rw, iodepth, rep, gb_per_s, iops and source."""
    rows = [{**r, "source": "G2 storage"} for r in _complete_records(Path(storage_dir), STORAGE_FILE)]
    if r1_reads_dir is not None:
        rows += [{**r, "rep": r["round"], "path": R1_POOL, "rw": r.get("rw", "read"), "source": "R1 fio"}
                 for r in _complete_records(Path(r1_reads_dir), R1_FIO_FILE)]
    frame = pd.DataFrame(rows)
    missing = {"path", "rw", "iodepth", "rep", "gb_per_s", "iops"} - set(frame.columns)
    if frame.empty or missing:
        raise KvtierError(f"{storage_dir}: no storage passes recorded" + (f" (missing {sorted(missing)})"
                                                                          if not frame.empty else ""))
    unknown = set(frame["rw"]) - set(STORAGE)
    if unknown:
        raise KvtierError(f"{storage_dir}: unknown fio passes {sorted(unknown)}")
    return frame


def storage_lines(passes: pd.DataFrame, settings: G2Settings) -> list[dict]:
    """One line per (path, pass, queue depth): its repetitions stable, and over the pass's floor if configured."""
    rows = []
    for (path, rw, depth, source), group in passes.groupby(["path", "rw", "iodepth", "source"], sort=True):
        label, reading, unit, key = STORAGE[rw]
        row = line(f"{path} {label} qd{depth}", list(group.sort_values("rep")[reading]), settings.max_cv,
                   settings.floors.get(key), at_least=True, unit=unit)
        rows.append({**row, "kind": "storage", "path": path, "rw": rw, "iodepth": int(depth), "source": source})
    return rows


CAP_PASSES = {"read": "read_bps", "write": "write_bps"}


def emulation_lines(storage_dir: str | Path, passes: pd.DataFrame) -> list[dict]:
    """Where G2's storage run ran inside emulated tiers (its platform record says so): one line per emulated path
    and direction, its best sequential median (over queue depths) against the cap configured, within
    CAP_TOLERANCE, or FAIL naming the path that is off. None where nothing was emulated."""
    platform = Path(storage_dir) / PLATFORM_FILE
    emulation = platform_probe.read(platform).get("emulation") if platform.is_file() else None
    rows = []
    for path, tier in sorted(((emulation or {}).get("tiers") or {}).items()):
        for rw, key in CAP_PASSES.items():
            cap = tier["configured"].get(key)
            own = passes[(passes["path"] == path) & (passes["rw"] == rw) & (passes["source"] == "G2 storage")]
            if not cap or own.empty:
                continue
            best = own.groupby("iodepth")["gb_per_s"].median().max() * 1e9
            ratio = best / cap
            ok = abs(ratio - 1) <= CAP_TOLERANCE
            rows.append({"name": f"{path} sequential {rw} against its emulated cap", "unit": "MB/s",
                         "repetitions": int(own["rep"].nunique()), "median": best / 1e6, "cv": None, "max_cv": None,
                         "floor": cap / 1e6, "floor_is": f"within ±{CAP_TOLERANCE:.0%}",
                         "verdict": PASS if ok else FAIL,
                         "why": "" if ok else (f"{path} is off: {best / 1e6:.4g} MB/s measured against the "
                                               f"{cap / 1e6:.4g} MB/s configured ({ratio:.2f} of it)"),
                         "kind": "emulated cap", "path": path, "rw": rw, "iodepth": None, "source": "G2 storage",
                         "cap_ratio": ratio, "in_force": tier["in_force"].get(key)})
    return rows


def engine_lines(by_round: pd.DataFrame, settings: G2Settings) -> list[dict]:
    """One line per (baseline tier, concurrency): the campaign's TTFT p50 per round, stable, and under its ceiling
    if configured."""
    rows = []
    for tier, (label, key) in ENGINE.items():
        measured = by_round[by_round["tier"] == tier]
        if measured.empty:
            raise KvtierError(f"G2: the campaign has no {tier} rounds (tiers: {', '.join(sorted(set(by_round['tier'])))})")
        for c, group in measured.groupby("concurrency", sort=True):
            row = line(f"{label} at concurrency {int(c)}", list(group.sort_values("round")["ttft_p50_s"]),
                       settings.max_cv, settings.floors.get(key), at_least=False, unit="s")
            rows.append({**row, "kind": "engine", "tier": tier, "concurrency": int(c), "source": "campaign rounds"})
    return rows


def text(rows: list[dict]) -> str:
    out = [f"G2 single-node baseline: {verdict(rows)} ({sum(r['verdict'] == PASS for r in rows)} of {len(rows)} "
           "lines pass)"]
    for r in rows:
        cv = "n/a" if r["cv"] is None else f"{r['cv']:.3f}"
        median_ = "n/a" if r["median"] is None else f"{r['median']:.4g}"
        out.append(f"  {r['verdict']}  {r['name']}: median {median_} {r['unit']} over {r['repetitions']}, cv {cv}"
                   + (f"  ({r['why']})" if r["why"] else ""))
    return "\n".join(out)
