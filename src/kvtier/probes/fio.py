"""The device limit beside R1's cold reads: fio's direct-read bandwidth on the pool directory at a queue depth.

fio reads one file of the same size as the chunks the LMCache worker loads, with O_DIRECT (no page cache) and
libaio at the given queue depth, in blocks of the chunk size. fio is a system tool (Debian: `apt-get install
fio`; `make env` installs it where it may).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ..core.errors import KvtierError

FILE_NAME = "kvtier-r1-fio.dat"


def executable() -> str:
    path = shutil.which("fio")
    if not path:
        raise KvtierError("fio not found on PATH: R1 measures the device limit with it (Debian/Ubuntu: "
                          "`apt-get install fio`, or `make env` as root); or set r1.enabled: false")
    return path


def version() -> str:
    return subprocess.run([executable(), "--version"], capture_output=True, text=True, check=True).stdout.strip()


def command(directory: str | os.PathLike, size_bytes: int, block_bytes: int, iodepth: int,
            ioengine: str = "libaio") -> list[str]:
    return [executable(), "--name=kvtier-r1", f"--directory={directory}", f"--filename={FILE_NAME}",
            f"--size={size_bytes}", f"--bs={block_bytes}", "--rw=read", "--direct=1", f"--ioengine={ioengine}",
            f"--iodepth={iodepth}", "--numjobs=1", "--invalidate=1", "--output-format=json"]


def parse(text: str, source: str = "fio") -> dict:
    """The read job's bandwidth from fio's JSON output (fio may print notices before the JSON)."""
    start = text.find("{")
    try:
        report = json.loads(text[start:]) if start >= 0 else None
        job = report["jobs"][0]
        read = job["read"]
        return {"fio_version": report.get("fio version"), "iodepth": int(job["job options"]["iodepth"]),
                "bytes": int(read["io_bytes"]), "seconds": read["runtime"] / 1000.0,
                "gb_per_s": read["bw_bytes"] / 1e9, "iops": read["iops"]}
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise KvtierError(f"{source}: not a fio JSON report with a read job ({exc!r}): {text[:300]!r}") from None


def direct_read(directory: str | os.PathLike, size_bytes: int, block_bytes: int, iodepth: int,
                timeout_s: float = 600.0) -> dict:
    """One direct sequential read of a `size_bytes` file in `directory` at `iodepth` (the file is laid out by fio
    on first use and kept for the next depths)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    argv = command(directory, size_bytes, block_bytes, iodepth)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise KvtierError(f"fio failed in {directory} (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return {**parse(done.stdout), "direct": True, "ioengine": "libaio", "block_bytes": block_bytes}
