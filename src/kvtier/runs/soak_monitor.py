"""The soak's telemetry: a thread that samples, every `sample_s`, what the servers and the pool are doing, and
appends one JSON line per sample to samples.jsonl (flushed as written; a soak that is stopped keeps every sample
taken).

Each sample holds, on the soak clock (`t`, seconds):
    servers   per server process group (vLLM with its engine core, LMCache): alive, RSS bytes (all, anonymous,
              shared memory) and open file descriptors summed over its live processes
    counters  the cumulative /metrics series the windows are computed from (COUNTERS: prompt tokens by source,
              LMCache's L1 and L2 lookup hits, L2 stores and loads in chunks; `lmcache_mp_l2_usage_bytes`)
    pool      chunk files and bytes under the pool's directory, files still in flight, free bytes on its file
              system
    monitor   this thread's own CPU seconds so far, so that what the monitor costs is measured, not assumed

The windows (one row per minute by default) are computed from these lines and the request records by
kvtier.evidence.r5, never here: the raw samples are what a reviewer can recompute from.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Callable

from ..bench import metrics
from ..core import web
from ..stack.process import group_members
from .tier_run import pool_state

SAMPLES_FILE = "samples.jsonl"
# The /metrics series a sample keeps (by name prefix): enough for the windows, a few hundred bytes a sample.
COUNTERS = ("vllm:prompt_tokens_by_source_total", "vllm:request_success_total", "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total", "lmcache_mp_lookup_requested_tokens_total",
            "lmcache_mp_lookup_hit_l1_tokens_total", "lmcache_mp_lookup_hit_l2_tokens_total",
            "lmcache_mp_l2_store_submitted_objects_chunks_total", "lmcache_mp_l2_store_completed_objects_chunks_total",
            "lmcache_mp_l2_prefetch_load_completed_chunks_total", "lmcache_mp_l2_usage_bytes")
PAGE = os.sysconf("SC_PAGE_SIZE")


STATUS_FIELDS = {"RssAnon:": "anon_bytes", "RssShmem:": "shmem_bytes"}


def group_usage(pid: int | None) -> dict:
    """RSS bytes (all; anonymous, where a leak grows; shared memory, where LMCache's L1 lives), and open file
    descriptors, of a process group's live members (a server and its children)."""
    usage = {"alive": False, "processes": 0, "rss_bytes": 0, "anon_bytes": 0, "shmem_bytes": 0, "fds": 0}
    if pid is None:
        return usage
    members = group_members(pid)
    for member in members:
        try:
            rss = int(Path(f"/proc/{member}/statm").read_text().split()[1]) * PAGE
            status = {line.split()[0]: int(line.split()[1]) * 1024
                      for line in Path(f"/proc/{member}/status").read_text().splitlines()
                      if line.split()[:1] and line.split()[0] in STATUS_FIELDS}
            fds = len(os.listdir(f"/proc/{member}/fd"))
        except (OSError, ValueError, IndexError):
            continue  # exited between the listing and the read
        usage["rss_bytes"] += rss
        usage["fds"] += fds
        for field, key in STATUS_FIELDS.items():
            usage[key] += status.get(field, 0)
    usage.update(alive=bool(members), processes=len(members))
    return usage


def pool_usage(directory: str | os.PathLike) -> dict:
    """The pool's chunk files, bytes and files in flight (kvtier.runs.tier_run.pool_state), and the free bytes of
    the file system it is on."""
    try:
        stat = os.statvfs(directory)
        free = stat.f_bavail * stat.f_frsize
    except OSError:
        free = None
    return {**pool_state(directory), "free_bytes": free}


def counters(url: str, timeout_s: float = 2.0) -> dict[str, float] | None:
    """The COUNTERS series of one /metrics endpoint, or None when it does not answer."""
    try:
        text = metrics.fetch(url, timeout_s)
    except web.ERRORS:
        return None
    return {key: value for key, value in metrics.parse(text).items() if key.startswith(COUNTERS)}


class Monitor(threading.Thread):
    """Samples every `sample_s` until stopped. `clock` gives the soak-clock second; `servers` gives {name: (pid of
    the group leader or None, /metrics URL)} at the moment of each sample (a restarted server has a new pid)."""

    def __init__(self, path: str | os.PathLike, clock: Callable[[], float],
                 servers: Callable[[], dict[str, tuple[int | None, str]]], pool: str | os.PathLike,
                 sample_s: float = 5.0):
        super().__init__(name="kvtier-soak-monitor", daemon=True)
        self.path, self.clock, self.servers, self.pool, self.sample_s = Path(path), clock, servers, pool, sample_s
        self._halt = threading.Event()
        self.error: BaseException | None = None
        self.samples = 0

    def sample(self) -> dict:
        t, wall = self.clock(), time.time()
        servers, found = {}, {}
        for name, (pid, url) in self.servers().items():
            servers[name] = group_usage(pid)
            found[name] = counters(url) if servers[name]["alive"] else None
        return {"t": round(t, 3), "wall": round(wall, 3), "servers": servers, "counters": found,
                "pool": pool_usage(self.pool), "monitor_cpu_s": round(time.thread_time(), 4)}

    def run(self) -> None:
        try:
            with open(self.path, "ab", buffering=0) as out:
                while True:
                    out.write((json.dumps(self.sample(), separators=(",", ":")) + "\n").encode())
                    self.samples += 1
                    if self._halt.wait(self.sample_s):
                        out.write((json.dumps(self.sample(), separators=(",", ":")) + "\n").encode())
                        return
        except BaseException as exc:  # reported by the soak, which then stops: a soak without telemetry is void
            self.error = exc

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)
