"""The device limit beside R1's cold reads and G2's baseline: fio's direct I/O on a tier path at a queue depth.

fio reads (or writes) one file in `directory`, with O_DIRECT (no page cache) and libaio at the given queue depth,
in blocks of the given size: R1 reads a file of the chunks' total size in blocks of one chunk (`direct_read`); G2
also writes it sequentially and reads it in random 4 KiB blocks (`direct`, with `rw`). fio is a system tool
(Debian: `apt-get install fio`; `make env` installs it where it may).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ..core.errors import KvtierError

FILE_NAME = "kvtier-r1-fio.dat"
# fio's --rw values used here, and the direction of each in fio's JSON report.
RW = {"read": "read", "write": "write", "randread": "read"}


def executable() -> str:
    path = shutil.which("fio")
    if not path:
        raise KvtierError("fio not found on PATH: R1 measures the device limit with it (Debian/Ubuntu: "
                          "`apt-get install fio`, or `make env` as root); or set r1.enabled: false")
    return path


def version() -> str:
    return subprocess.run([executable(), "--version"], capture_output=True, text=True, check=True).stdout.strip()


def command(directory: str | os.PathLike, size_bytes: int, block_bytes: int, iodepth: int,
            ioengine: str = "libaio", rw: str = "read") -> list[str]:
    if rw not in RW:
        raise KvtierError(f"fio rw {rw!r}: one of {', '.join(RW)}")
    return [executable(), "--name=kvtier-r1", f"--directory={directory}", f"--filename={FILE_NAME}",
            f"--size={size_bytes}", f"--bs={block_bytes}", f"--rw={rw}", "--direct=1", f"--ioengine={ioengine}",
            f"--iodepth={iodepth}", "--numjobs=1", "--invalidate=1", "--output-format=json"]


def parse(text: str, source: str = "fio", rw: str = "read") -> dict:
    """The job's bandwidth and IOPS in `rw`'s direction from fio's JSON output (fio may print notices first)."""
    direction = RW[rw]
    start = text.find("{")
    try:
        report = json.loads(text[start:]) if start >= 0 else None
        job = report["jobs"][0]
        done = job[direction]
        if not done["io_bytes"]:
            raise ValueError(f"no {direction} I/O")
        return {"fio_version": report.get("fio version"), "iodepth": int(job["job options"]["iodepth"]),
                "bytes": int(done["io_bytes"]), "seconds": done["runtime"] / 1000.0,
                "gb_per_s": done["bw_bytes"] / 1e9, "iops": done["iops"]}
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise KvtierError(f"{source}: not a fio JSON report with a {direction} job ({exc!r}): {text[:300]!r}") \
            from None


def direct(directory: str | os.PathLike, size_bytes: int, block_bytes: int, iodepth: int, rw: str = "read",
           timeout_s: float = 600.0) -> dict:
    """One direct `rw` pass over a `size_bytes` file in `directory` at `iodepth` (a read lays the file out on
    first use; it is kept for the next passes)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    argv = command(directory, size_bytes, block_bytes, iodepth, rw=rw)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise KvtierError(f"fio failed in {directory} (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return {**parse(done.stdout, rw=rw), "rw": rw, "direct": True, "ioengine": "libaio", "block_bytes": block_bytes}


def direct_read(directory: str | os.PathLike, size_bytes: int, block_bytes: int, iodepth: int,
                timeout_s: float = 600.0) -> dict:
    """One direct sequential read (R1's device limit)."""
    return direct(directory, size_bytes, block_bytes, iodepth, "read", timeout_s)
