"""One measurement at a time on a node, across processes: an exclusive advisory lock (flock) on a file in a
node-local directory, held for the whole of a measuring command.

Snakemake's `measurement` resource keeps one Snakemake process from running two measurements at once. It cannot
see another process: a second campaign started beside the first, a test run, or (on a cluster whose jobs may
share nodes) a job of the same pipeline that the scheduler placed on a node already measuring. Every measuring
`kvtier` command takes this lock first, and waits for it, saying who holds it. The kernel drops the lock when the
holder exits, however it exits, so a killed job never leaves it held.

The file is /var/tmp/kvtier-measurement.lock, or $KVTIER_MEASUREMENT_LOCK. /var/tmp, not /tmp: a Slurm node may
give every job a /tmp of its own (job_container/tmpfs), where two jobs would never see each other's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from .errors import KvtierError

DEFAULT_PATH = "/var/tmp/kvtier-measurement.lock"
ENV = "KVTIER_MEASUREMENT_LOCK"


def lock_path() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT_PATH)


def _open(path: Path) -> tuple[int, bool]:
    """The lock file's descriptor, and whether it may be written (holder notes). flock works on a read-only
    descriptor too: another user's lock file still serializes."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        try:
            return os.open(path, os.O_RDONLY), False
        except OSError as exc:
            raise KvtierError(f"measurement lock {path}: {exc.strerror}; set {ENV} to a file on a node-local "
                              "directory this user can write") from None
    except OSError as exc:
        raise KvtierError(f"measurement lock {path}: {exc.strerror}; set {ENV} to a file on a node-local "
                          "directory this user can write") from None
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)  # whoever creates it lets every user on the node lock it
    return fd, True


def holder(path: Path) -> str:
    """Who holds the lock, from the note its holder wrote: 'pid 123 on host (what) since T', or 'unknown'."""
    try:
        note = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "unknown"
    if not note:
        return "unknown"
    return f"pid {note.get('pid')} on {note.get('host')} ({note.get('what')}) since {note.get('since')}"


@contextlib.contextmanager
def hold(what: str, path: str | os.PathLike | None = None) -> Iterator[float]:
    """Hold the node's measurement lock for `what`; yields the seconds waited for it."""
    path = Path(path) if path else lock_path()
    fd, writable = _open(path)
    started, acquired = time.monotonic(), False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"kvtier: {what}: waiting for the measurement lock {path}, held by {holder(path)}",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        acquired, waited = True, time.monotonic() - started
        if writable:
            note = {"pid": os.getpid(), "host": socket.gethostname(), "what": what,
                    "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(note).encode(), 0)
        if waited >= 1:
            print(f"kvtier: {what}: measurement lock taken after {waited:.0f} s", file=sys.stderr, flush=True)
        yield waited
    finally:
        if acquired and writable:  # the note is the holder's: one still waiting leaves it alone
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        os.close(fd)  # releases the lock
