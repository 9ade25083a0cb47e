"""LMCache's multi-process (MP) server as a managed process: L1 in host DRAM, optionally an fs L2 pool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core import web
from ..core.errors import KvtierError
from .fork_server import Forked
from .process import ManagedProcess, free_port

TRANSFERS = ("shm", "pickle")
SHM_DIR = "/dev/shm"
SHM_PREFIX = "lmcache_l1_pool_"  # LMCache 0.5.6 names every L1 segment so (engine_context._compute_shm_pool_info)


@dataclass
class LMCacheServer(ManagedProcess):
    """LMCache's multi-process (MP) server: L1 in host DRAM, optionally an fs L2 under `l2_path`. MP mode is
    the one that works with vLLM's CPU build (the in-process connector has no CPU path in 0.5.6)."""
    log_path: str
    l1_size_gb: float = 1.0
    l2_path: str | None = None
    l2_options: dict = field(default_factory=dict)   # more fs adapter settings, e.g. load_concurrency
    site: str | None = None       # a kvtier LMCache build's site directory: run that LMCache instead of the venv's
    # How KV reaches the vLLM worker: "shm" (L1 in a shared-memory segment the worker maps) or "pickle" (serialized
    # over the IPC socket; LMCache's default, two-thirds of a 12k-token L2 resume here).
    transfer: str = "shm"
    # A byte budget for the L2 pool (GB): LMCache's IsolatedLRU eviction keeps what this server stores there under
    # it (its fs adapter has no capacity of its own, so no other policy ever evicts from it). The budget lives in
    # the server's memory: it is set again at every start.
    l2_quota_gb: float | None = None
    port: int = 0
    http_port: int = 0
    extra_args: list[str] = field(default_factory=list)
    ready_timeout_s: float = 120.0
    process: subprocess.Popen | Forked | None = None
    name = "LMCache"

    def __post_init__(self) -> None:
        if self.transfer not in TRANSFERS:
            raise KvtierError(f"LMCache transfer {self.transfer!r}: one of {', '.join(TRANSFERS)}")
        self.port = self.port or free_port()
        self.http_port = self.http_port or free_port()

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"

    @property
    def shm_name(self) -> str:
        """The shared-memory segment of this server's L1 (unique per port: two servers never share one). LMCache
        puts its prefix in front of a name that lacks it, so the name given is the segment's own."""
        return f"{SHM_PREFIX}kvtier-{self.port}" if self.transfer == "shm" else ""

    def launch(self):
        self._remove_segment()  # a segment left by a server that was killed would be reused half-written
        return super().launch()

    def stop(self, grace_s: float = 30.0) -> None:
        super().stop(grace_s)
        self._remove_segment()

    def _remove_segment(self) -> None:
        if self.shm_name:
            Path(SHM_DIR, self.shm_name).unlink(missing_ok=True)

    def command(self) -> list[str]:
        lmcache = str(Path(sys.executable).with_name("lmcache"))
        cmd = [lmcache, "server", "--host", "127.0.0.1", "--port", str(self.port), "--l1-size-gb",
               f"{self.l1_size_gb:g}", "--eviction-policy", "LRU", "--supported-transfer-mode", "engine_driven",
               "--http-host", "127.0.0.1", "--http-port", str(self.http_port)]
        if self.shm_name:
            cmd += ["--shm-name", self.shm_name]
        if self.l2_path:
            adapter = {"type": "fs", "base_path": str(self.l2_path), **self.l2_options}
            if self.l2_quota_gb is not None:
                adapter["eviction"] = {"eviction_policy": "IsolatedLRU"}
            cmd += ["--l2-adapter", json.dumps(adapter)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "LMCACHE_DISABLE_BANNER": "1"}
        if self.site:  # first on the path: the build's lmcache package shadows the venv's
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(self.site).resolve()),
                                                              env.get("PYTHONPATH")]))
        return env

    def ready(self) -> bool:
        return web.answers(self.metrics_url)

    def wait_ready(self):
        super().wait_ready()
        if self.l2_path and self.l2_quota_gb is not None:
            self.set_l2_quota(self.l2_quota_gb)
        return self

    def set_l2_quota(self, limit_gb: float) -> None:
        """The L2 byte budget of un-salted traffic (all of kvtier's; PUT /quota/_default), enforced by IsolatedLRU
        at its next eviction cycle (about a second)."""
        url = f"http://127.0.0.1:{self.http_port}/quota/_default"
        try:
            answer = json.loads(web.request(url, payload={"limit_gb": limit_gb}, method="PUT", timeout_s=30))
        except web.ERRORS as exc:
            raise KvtierError(f"LMCache: PUT {url} failed ({exc}); log {self.log_path}") from None
        if answer.get("status") != "ok":
            raise KvtierError(f"LMCache: PUT {url} answered {answer}")

    def clear_l1(self) -> None:
        """Empty L1 through the server's own HTTP API (POST /cache/clear): what a restart would empty, without
        one. L2 is untouched, so the next lookup of a stored prefix is an L2 hit."""
        url = f"http://127.0.0.1:{self.http_port}/cache/clear"
        try:
            answer = json.loads(web.request(url, payload={"tier": "l1", "force": False}, timeout_s=60))
        except web.ERRORS as exc:
            raise KvtierError(f"LMCache: POST {url} failed ({exc}); log {self.log_path}") from None
        if answer.get("status") != "ok":
            raise KvtierError(f"LMCache: POST {url} answered {answer}")
