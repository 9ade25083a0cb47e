"""Quiet preconditions: before a measured window opens, the machine must not be busy with something else.

A window measured while the kernel is still writing back gigabytes (an install, a build, the previous tier's
pool) or while another job burns the CPUs measures that, not the tier. So before every measured window:
`sync`, then wait, with a timeout, until

- the kernel's dirty and writeback pages (/proc/meminfo `Dirty` + `Writeback`) are under `max_dirty_mib`,
- the share of all CPUs busy over a short sample (/proc/stat) is under `max_cpu_busy`, and
- the tasks runnable at the end of that sample, this check left out, per CPU (/proc/stat `procs_running`: the
  run queue now) are under `max_runnable_per_cpu`.

Not the load average (/proc/loadavg): it counts tasks blocked on I/O as well as runnable ones and decays over a
minute, so the threads that had just waited on an emulated tier's capped reads (LMCache loads 16 chunks at a time)
kept it over its bound for up to a minute after they ended: in one run of the bandwidth sweep its windows waited
160 s in all at 4096 tokens for a machine that was idle.

What the check found is returned as a record for run.json: whether the machine was quiet, how long the wait
took, and the readings. A window that did not get quiet within the timeout is still measured, and says so.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..core.errors import KvtierError

MEMINFO, STAT = "/proc/meminfo", "/proc/stat"


@dataclass(frozen=True)
class QuietBounds:
    max_dirty_mib: float = 64.0
    max_cpu_busy: float = 0.25  # fraction of all CPUs, over `sample_s`
    max_runnable_per_cpu: float = 1.0  # tasks runnable now besides the check, per CPU
    sample_s: float = 0.2
    timeout_s: float = 120.0

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise KvtierError(f"quiet bounds: {name} must be a positive number, not {value!r}")
        if self.max_cpu_busy > 1:
            raise KvtierError(f"quiet bounds: max_cpu_busy is a fraction of all CPUs (0-1], not {self.max_cpu_busy}")


@dataclass
class Sources:
    """Where the readings come from: the kernel's files, or fakes in tests."""
    meminfo: str = MEMINFO
    stat: str = STAT
    sync: Callable[[], None] = os.sync
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    cpus: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))


def dirty_bytes(meminfo: str = MEMINFO) -> int:
    """Dirty + Writeback, in bytes."""
    values = {}
    for line in Path(meminfo).read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Dirty", "Writeback"):
            values[name] = int(rest.split()[0]) * 1024  # kB
    if len(values) != 2:
        raise KvtierError(f"{meminfo}: no Dirty and Writeback lines")
    return values["Dirty"] + values["Writeback"]


def _cpu_stat(stat: str) -> tuple[int, int, int]:
    """(busy, total) jiffies of all CPUs since boot, idle and iowait not busy; and the tasks runnable now."""
    lines = Path(stat).read_text().splitlines()
    fields = [int(v) for v in lines[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    running = [int(line.split()[1]) for line in lines if line.startswith("procs_running ")]
    if not running:
        raise KvtierError(f"{stat}: no procs_running line")
    return sum(fields) - idle, sum(fields), running[0]


def reading(src: Sources, sample_s: float) -> dict:
    """One reading of all three, the CPU share sampled over `sample_s`, the run queue at its end."""
    busy0, total0, _ = _cpu_stat(src.stat)
    src.sleep(sample_s)
    busy1, total1, running = _cpu_stat(src.stat)
    spent = total1 - total0
    return {"dirty_mib": dirty_bytes(src.meminfo) / 2**20,
            "cpu_busy": (busy1 - busy0) / spent if spent > 0 else 0.0,
            "runnable_per_cpu": max(running - 1, 0) / max(src.cpus, 1)}  # the check itself is running


def _over(now: dict, bounds: QuietBounds) -> list[str]:
    checks = (("dirty_mib", bounds.max_dirty_mib, "MiB dirty + writeback"), ("cpu_busy", bounds.max_cpu_busy,
              "of the CPUs busy"), ("runnable_per_cpu", bounds.max_runnable_per_cpu, "tasks runnable per CPU"))
    return [f"{now[key]:.3g} {what} (bound {limit:g})" for key, limit, what in checks if now[key] > limit]


def summary(found: list[tuple[str, dict | None]]) -> dict:
    """How many of these measurements opened on a quiet machine: `found` is (what was measured, the record
    wait_quiet returned, or None where no check was made)."""
    checked = [(what, record) for what, record in found if record]
    return {"measurements": len(found), "checked": len(checked),
            "quiet": sum(1 for _, record in checked if record["quiet"]),
            "waited_s_max": max((record["waited_s"] for _, record in checked), default=None),
            "not_quiet": [{"what": what, "because": "; ".join(record["over"])}
                          for what, record in checked if not record["quiet"]]}


def hook(bounds: dict | None) -> Callable[[], dict] | None:
    """A check to call before each window, from a config's bounds (QuietBounds fields), or None when the config
    switched it off (`bounds` None). Bad bounds are refused here, before anything runs."""
    if bounds is None:
        return None
    try:
        checked = QuietBounds(**bounds)
    except TypeError as exc:
        raise KvtierError(f"quiet bounds {bounds}: {exc}") from None
    return functools.partial(wait_quiet, checked)


def wait_quiet(bounds: QuietBounds | None = None, src: Sources | None = None) -> dict:
    """sync, then wait until every reading is under its bound or the timeout passes; the record of what was found."""
    bounds, src = bounds or QuietBounds(), src or Sources()
    start = src.clock()
    src.sync()
    while True:
        now = reading(src, bounds.sample_s)
        over = _over(now, bounds)
        waited = src.clock() - start
        if not over or waited >= bounds.timeout_s:
            return {"quiet": not over, "waited_s": round(waited, 3), **{k: round(v, 4) for k, v in now.items()},
                    "over": over, "bounds": asdict(bounds)}
