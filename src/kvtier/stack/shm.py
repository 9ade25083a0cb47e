"""Shared-memory segments (/dev/shm) that servers leave behind when they are killed: vLLM's message queues
(`psm_*`, Python's multiprocessing.shared_memory) and LMCache's L1 (kvtier.stack.lmcache_server). A server that
stops cleanly unlinks its own; one that is SIGKILLed cannot, and each leftover holds memory until unlinked.

A segment is left over when no live process maps it. Only segments created after a given moment are considered, so
that what other programs on the machine hold is never touched.
"""

from __future__ import annotations

import os
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIXES = ("psm_", "lmcache_l1_pool_kvtier-")


def segments(since: float = 0.0, prefixes: tuple[str, ...] = PREFIXES) -> dict[str, float]:
    """{name: modification time} of the segments with those prefixes changed at or after `since` (epoch seconds)."""
    found = {}
    for path in SHM_DIR.glob("*"):
        if path.name.startswith(prefixes):
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if mtime >= since:
                found[path.name] = mtime
    return found


def mapped() -> set[str]:
    """Names of /dev/shm files some live process maps or holds open."""
    names = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for line in (proc / "maps").read_text().splitlines():
                at = line.find("/dev/shm/")
                if at >= 0:
                    names.add(line[at + 9:].split(" ", 1)[0])
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    names.add(target[9:].split(" ", 1)[0])
        except OSError:
            continue
    return names


def remove_orphans(since: float, prefixes: tuple[str, ...] = PREFIXES) -> list[str]:
    """Unlink the segments created since `since` that no live process maps; return their names."""
    held = mapped()
    removed = []
    for name in sorted(segments(since, prefixes)):
        if name not in held:
            (SHM_DIR / name).unlink(missing_ok=True)
            removed.append(name)
    return removed
