"""Server processes that leave nothing behind: each in its own process group, logging to a file, on a port
chosen here.

The process group is what makes "no orphan processes" hold: vLLM starts engine-core children, and stopping only
the parent can leave them behind. `stop()` signals the whole group, waits, then kills what is left.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

from ..core.errors import KvtierError
from . import fork_server

_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A free TCP port on 127.0.0.1 below the kernel's ephemeral range. A port is chosen here and bound later by
    the server; one from the ephemeral range (what binding port 0 returns) can meanwhile be taken by any process
    binding port 0 (vLLM's engine does, for its own sockets), and the server then fails with "address already in
    use". Below that range only explicit binds compete, and this process never hands out a port twice."""
    low = max(1024, min(_ephemeral_range()[0], 65536) - 1)
    start = max(1024, low - 12000)
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(start, low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise KvtierError(f"no free TCP port found in {start}-{low - 1} on 127.0.0.1")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ManagedProcess:
    """A command in its own session (so its process group holds everything it starts), logging to a file,
    ready when `ready()` says so. Subclasses say what to run and how to tell it is ready."""

    name = "process"
    ready_timeout_s = 600.0
    log_path: str
    fork = True  # may be forked from the run's fork server (a subclass's field can say no)
    process: subprocess.Popen | fork_server.Forked | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self):
        return self.launch().wait_ready()

    def launch(self):
        """Start the process without waiting for it to be ready (to start several at once; then `wait_ready`).
        Where the run has a fork server (kvtier.stack.fork_server: the Snakefile starts one for a local run) and
        `fork` allows, forked from it instead of a new Python; where it refuses, started anew, the reason in the
        log."""
        log = Path(self.log_path)
        log.parent.mkdir(parents=True, exist_ok=True)
        command, env = self.command(), self.environment()
        socket_path = os.environ.get(fork_server.ENV)
        run = fork_server.program(command) if socket_path and self.fork else None
        if run:
            forked = fork_server.launch(socket_path, run, env, str(log))
            if isinstance(forked, fork_server.Forked):
                self.process = forked
                return self
            with open(log, "a") as out:
                out.write(f"kvtier: started without the fork server: {forked}\n")
        with open(log, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        return self

    def wait_ready(self):
        log = Path(self.log_path)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()
                raise KvtierError(f"{self.name} exited with {code} before it was ready; log {log}:\n{_tail(log)}")
            if self.ready():
                return self
            time.sleep(0.5)
        self.stop()
        raise KvtierError(f"{self.name} not ready after {self.ready_timeout_s:g} s; log {log}:\n{_tail(log)}")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the whole group, give it `grace_s`, then SIGKILL what is left and wait until none is alive."""
        if self.process is None:
            return
        pgid = self.process.pid  # start_new_session: the group id is the leader's pid
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
            if _wait_group_gone(pgid, wait_s):
                break
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group. Zombies are left out: they are dead, and where the sandbox's init does
    not reap orphans they would otherwise look like survivors."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields after "pid (comm)": state, ppid, pgrp, ...
            members.append(int(stat.parent.name))
    return members


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
