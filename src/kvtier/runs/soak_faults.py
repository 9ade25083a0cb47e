"""The soak's faults: a schedule (soak-clock second -> fault), and what each fault does to the real stack.

    kill_lmcache   SIGKILL the LMCache server's process group; the soak restarts it on the same pool when
                   `restart_on_failure` is set (kvtier.runs.soak)
    kill_vllm      SIGKILL vLLM's process group (the server and its engine core); restarted the same way
    pool_full      fill the pool's file system (a size-limited one of its own: a loop-mounted ext4 image, which
                   takes O_DIRECT like the pool's disk) for `for_s` seconds, then free it: LMCache's writes fail
                   with ENOSPC; what it then does is observed, and requests must still be served
    corrupt_chunk  a probe prompt nobody has sent is sent once (its output is the recompute reference), its chunk
                   files are found in the pool, `bytes` bytes of each are flipped in place (same size), the
                   engine's and L1's copies are emptied, and the probe is sent again: served from the pool, is its
                   output still the reference? A control probe, stored alike and left intact, is resent beside it

The pool file system needs root (mount); without it a pool_full fault is recorded as skipped, with the reason.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import KvtierError
from ..stack.emulated import run_tool

KINDS = ("kill_lmcache", "kill_vllm", "pool_full", "corrupt_chunk")
FILLER = "kvtier-pool-full.fill"  # beside the pool's directory, on its file system


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    for_s: float = 60.0   # pool_full: how long the file system stays full
    bytes: int = 64       # corrupt_chunk: bytes flipped in each chunk file

    @property
    def name(self) -> str:
        return f"{self.kind} at {self.at_s:g} s"


def schedule(entries: list[dict], duration_s: float, source: str = "soak.faults") -> list[Fault]:
    """The faults of a config's list, in time order; refuses an unknown kind or field, or a time outside the soak."""
    faults = []
    for number, entry in enumerate(entries, start=1):
        where = f"{source}[{number}]"
        if not isinstance(entry, dict):
            raise KvtierError(f"{where}: a mapping with `at` and `kind`, got {entry!r}")
        unknown = set(entry) - {"at", "kind", "for", "bytes"}
        if unknown:
            raise KvtierError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (fields: at, kind, for, bytes)")
        if entry.get("kind") not in KINDS:
            raise KvtierError(f"{where}: kind {entry.get('kind')!r}: one of {', '.join(KINDS)}")
        at = seconds(entry.get("at"), f"{where}.at")
        if not 0 <= at < duration_s:
            raise KvtierError(f"{where}.at {entry.get('at')!r}: inside the soak's {duration_s:g} s")
        for_s = seconds(entry.get("for", 60), f"{where}.for")
        flipped = entry.get("bytes", 64)
        if not isinstance(flipped, int) or isinstance(flipped, bool) or flipped < 1:
            raise KvtierError(f"{where}.bytes {flipped!r}: an integer >= 1")
        faults.append(Fault(at, entry["kind"], for_s, flipped))
    return sorted(faults, key=lambda f: f.at_s)


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(value, what: str) -> float:
    """A duration: a number of seconds, or a string such as "90s", "10m", "72h"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out = float(value)
    elif isinstance(value, str) and value[:-1] and value[-1] in UNITS:
        try:
            out = float(value[:-1]) * UNITS[value[-1]]
        except ValueError:
            out = -1.0
    else:
        out = -1.0
    if out <= 0 and not (out == 0 and what.endswith(".at")):
        raise KvtierError(f"{what} {value!r}: a duration such as 90, \"90s\", \"10m\" or \"72h\"")
    return out


def kill_group(pid: int) -> None:
    """SIGKILL a server's whole process group (it was started in a session of its own)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------------------------------------
# The pool on a file system of its own


class PoolFileSystem:
    """A size-limited ext4 file system for the pool: an image file beside the mount point, loop-mounted there, so
    that `pool_full` fills it and nothing else. ext4 takes O_DIRECT, as the pool's disk does; no blocks are reserved
    for root (LMCache runs as whoever runs the soak)."""

    def __init__(self, mount_point: str | os.PathLike, size_mb: int):
        self.mount_point = Path(mount_point)
        self.image = self.mount_point.with_name(self.mount_point.name + ".img")
        self.size_mb = size_mb
        self.mounted = False

    @staticmethod
    def unavailable() -> str | None:
        """Why the pool cannot have a file system of its own here, or None."""
        if os.geteuid() != 0:
            return "needs root (a loop mount)"
        missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if not shutil.which(tool)]
        if missing:
            return f"needs {', '.join(missing)}"
        return None

    def mount(self, fresh: bool) -> None:
        """Mount the image (made anew when `fresh`, or when there is none) at the mount point."""
        why = self.unavailable()
        if why:
            raise KvtierError(f"pool file system at {self.mount_point}: {why}")
        if os.path.ismount(self.mount_point):
            raise KvtierError(f"{self.mount_point}: something is already mounted there")
        self.mount_point.mkdir(parents=True, exist_ok=True)
        if any(self.mount_point.iterdir()):
            raise KvtierError(f"{self.mount_point}: not empty; the pool's file system is mounted on an empty directory")
        if fresh or not self.image.exists():
            with open(self.image, "wb") as image:
                image.truncate(self.size_mb * 1024 * 1024)
            run_tool(["mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)])
        run_tool(["mount", "-o", "loop", str(self.image), str(self.mount_point)])
        self.mounted = True

    def unmount(self, keep_image: bool) -> None:
        if self.mounted or os.path.ismount(self.mount_point):
            run_tool(["umount", str(self.mount_point)])  # -o loop mounts free their loop device on umount
            self.mounted = False
        if not keep_image:
            self.image.unlink(missing_ok=True)



def fill(root: str | os.PathLike) -> int:
    """Fill the file system under `root` to its last byte with one file (FILLER); returns the file's size."""
    path = Path(root) / FILLER
    stat = os.statvfs(root)
    with open(path, "wb", buffering=0) as out:
        try:
            os.posix_fallocate(out.fileno(), 0, max(1, stat.f_bavail * stat.f_frsize - (1 << 20)))
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        out.seek(0, os.SEEK_END)
        block = b"\0" * (1 << 16)
        while True:  # what fallocate left (metadata, rounding): write until the disk says no more
            try:
                out.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        return os.fstat(out.fileno()).st_size


def unfill(root: str | os.PathLike) -> None:
    (Path(root) / FILLER).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------------------
# Corrupting chunks


def flip_bytes(path: str | os.PathLike, count: int, seed: str) -> dict:
    """Invert `count` bytes of a file in place at seeded offsets (its size unchanged), write them to the device,
    and return what was done: the file, the offsets, and its sha256 before and after."""
    path = Path(path)
    data = bytearray(path.read_bytes())
    if not data:
        raise KvtierError(f"{path}: an empty chunk file cannot be corrupted in place")
    rng = random.Random(seed)
    offsets = sorted(rng.sample(range(len(data)), min(count, len(data))))
    before = hashlib.sha256(data).hexdigest()
    for offset in offsets:
        data[offset] ^= 0xFF
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(data), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"file": path.name, "bytes": len(data), "flipped": len(offsets), "first_offset": offsets[0],
            "sha256_before": before, "sha256_after": hashlib.sha256(data).hexdigest()}


def chunk_files(directory: str | os.PathLike) -> set[str]:
    """Names of the finished chunk files under a pool directory."""
    return {p.name for p in Path(directory).rglob("*.data")}
