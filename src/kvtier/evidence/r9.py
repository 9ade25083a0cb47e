"""R9's page (notebooks/R9.py): model-weight load time per tier path, cold and warm, from an R9 run
(kvtier.runs.r9's loads.jsonl).

Figures are medians over the repetitions. Every comparison is paired by repetition and carries its interval and a
word (kvtier.evidence.stats): the pool against local disk (per state, by vLLM's own loading-weights time), cold
against warm (per path: what the storage adds to a load), and vLLM's load against the raw read of the same files
(how far above the floor vLLM loads)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..bench.runner import read_completed
from ..core.errors import KvtierError
from ..core.table_io import write_table
from ..probes import platform_probe
from ..probes.platform_probe import PLATFORM_FILE
from ..stack.emulated import CAP_TOLERANCE
from . import stats

LOADS_FILE = "loads.jsonl"  # kvtier.runs.r9
READINGS = ("loading_weights_s", "ready_s", "raw_read_s", "raw_read_gb_s")
# How each start was made (kvtier.runs.r9, `start`): whole (a new Python, vLLM's import included in ready_s) or
# forked from the run's fork server (ready_s from the fork). A record without it is from a run that started whole.
WHOLE, FORKED = "whole", "forked"
OUTPUT_FILES = {"table": "R9_table.csv", "comparisons": "R9_comparisons.csv", "chart": "R9_chart"}


@dataclass(frozen=True)
class Loads:
    run: dict
    loads: pd.DataFrame  # one row per (rep, path, state)
    table: pd.DataFrame  # medians per (path, state)
    comparisons: pd.DataFrame
    emulation: dict | None = None  # the run's platform record's emulated tiers (kvtier.stack.emulated), if any


def load(run_dir: str | os.PathLike) -> Loads:
    run_dir = Path(run_dir)
    run = read_completed(run_dir)
    try:
        rows = [json.loads(line) for line in (run_dir / LOADS_FILE).read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise KvtierError(f"{run_dir / LOADS_FILE}: not readable JSON lines ({exc})") from None
    loads = pd.DataFrame(rows)
    missing = {"rep", "path", "state", *READINGS} - set(loads.columns)
    if loads.empty or missing:
        raise KvtierError(f"{run_dir / LOADS_FILE}: no loads" + (f" (missing {sorted(missing)})" if missing else ""))
    loads["start"] = loads["start"].fillna(WHOLE) if "start" in loads else WHOLE
    unknown = set(loads["start"]) - {WHOLE, FORKED}
    if unknown:
        raise KvtierError(f"{run_dir / LOADS_FILE}: start must be {WHOLE!r} or {FORKED!r}, not {sorted(unknown)}")
    platform = run_dir / PLATFORM_FILE
    emulation = platform_probe.read(platform).get("emulation") if platform.is_file() else None
    return Loads(run, loads, table(loads), comparisons(loads), emulation)


def _start_kinds(loads: pd.DataFrame) -> set[str]:
    return set(loads["start"]) if "start" in loads else {WHOLE}


def starts(loads: pd.DataFrame) -> str:
    """How the run's vLLM starts were made, as the page says it: what ready_s holds."""
    kinds = _start_kinds(loads)
    if kinds == {WHOLE}:
        return "every start whole (a new Python): ready_s includes vLLM's import, as a user's start does"
    if kinds == {FORKED}:
        return ("every start forked from the run's fork server (r9.fork_server): ready_s leaves vLLM's import out; "
                "the weights load after the fork as in a whole start")
    return (f"{(loads['start'] == FORKED).sum()} of {len(loads)} starts forked, the rest whole (the fork server "
            "refused them: the reason is in the server log): ready_s is not compared")


COLD, NOT_COLD, UNCHECKED = "within the cap: cold", "faster than the cap: not cold", "no cap here to check against"


def cold_reads(measured: Loads) -> pd.DataFrame:
    """Per path, whether its cold raw reads were cold: the fastest against the path's emulated read cap (a read
    from the device cannot beat it by more than the cap's tolerance), and how much of the copy this machine's page
    cache held before them. Without a cap (the path as it is) a cold read faster than the device's direct reads
    (G2) can come from below this machine's page cache, e.g. a hypervisor's cache of a virtual disk: the page
    says so instead of judging."""
    cold = measured.loads[measured.loads["state"] == "cold"]
    tiers = (measured.emulation or {}).get("tiers") or {}
    rows = []
    for path, group in cold.groupby("path", sort=False):
        fastest = float(group["raw_read_gb_s"].max()) * 1e9
        cap = ((tiers.get(path) or {}).get("in_force") or {}).get("read_bps")
        resident = (group["resident_before_raw_bytes"].max() if "resident_before_raw_bytes" in group
                    else float("nan"))
        rows.append({"path": path, "cold_reads": len(group), "fastest_mb_s": fastest / 1e6,
                     "median_mb_s": float(group["raw_read_gb_s"].median()) * 1e3,
                     "cap_mb_s": cap / 1e6 if cap else None,
                     "resident_before_mib": resident / 2**20,
                     "verdict": UNCHECKED if not cap else COLD if fastest <= cap * (1 + CAP_TOLERANCE) else NOT_COLD})
    return pd.DataFrame(rows)


def table(loads: pd.DataFrame) -> pd.DataFrame:
    grouped = loads.groupby(["path", "state"], sort=False)
    frame = grouped[list(READINGS)].median()
    frame["repetitions"] = grouped.size()
    frame["resident_before_mib"] = grouped["resident_before_bytes"].median() / 2**20
    return frame.reset_index()


def _by_rep(loads: pd.DataFrame, reading: str, **where) -> dict[int, float]:
    chosen = loads
    for key, value in where.items():
        chosen = chosen[chosen[key] == value]
    return dict(zip(chosen["rep"], chosen[reading]))


def comparisons(loads: pd.DataFrame) -> pd.DataFrame:
    """One row per comparison: what against what, the median ratio, its interval and its word (a ratio above 1:
    the first is slower by that factor)."""
    rows = []
    paths, states = list(dict.fromkeys(loads["path"])), list(dict.fromkeys(loads["state"]))

    def add(what: str, reading: str, mine: dict, theirs: dict) -> None:
        if not stats.paired_ratios(mine, theirs):
            return
        figure = stats.ratio(mine, theirs)
        rows.append({"comparison": what, "reading": reading, **figure.record(),
                     "word": stats.word(figure) if figure.rounds > 1 else stats.ONE_ROUND})

    # ready_s only where every start was made the same way: a forked start leaves vLLM's import out
    ready = ("ready_s",) if len(_start_kinds(loads)) == 1 else ()
    if {"shared_pool", "local_disk"} <= set(paths):
        for state in states:
            for reading in ("loading_weights_s", *ready):
                add(f"shared_pool / local_disk, {state}", reading,
                    _by_rep(loads, reading, path="shared_pool", state=state),
                    _by_rep(loads, reading, path="local_disk", state=state))
    if {"cold", "warm"} <= set(states):
        for path in paths:
            add(f"{path}: cold / warm", "loading_weights_s", _by_rep(loads, "loading_weights_s", path=path,
                                                                    state="cold"),
                _by_rep(loads, "loading_weights_s", path=path, state="warm"))
    for path in paths:
        for state in states:
            add(f"{path}, {state}: vLLM's load / raw read", "loading_weights_s",
                _by_rep(loads, "loading_weights_s", path=path, state=state),
                _by_rep(loads, "raw_read_s", path=path, state=state))
    frame = pd.DataFrame(rows)
    if not frame.empty:
        # here a ratio above 1 means the numerator took longer: its word is the reverse of a speed-up's
        frame["word"] = frame["word"].replace({stats.FASTER: "longer", stats.SLOWER: "shorter"})
    return frame


def chart(measured: Loads):
    from .charts import r9_chart
    return r9_chart(measured.loads)


def write_evidence(measured: Loads, out_dir: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    from .charts import save_chart
    out_dir = Path(out_dir)
    return [write_table(measured.table, out_dir / OUTPUT_FILES["table"]),
            write_table(measured.comparisons, out_dir / OUTPUT_FILES["comparisons"]),
            *save_chart(chart(measured), out_dir / OUTPUT_FILES["chart"], png_scale)]
