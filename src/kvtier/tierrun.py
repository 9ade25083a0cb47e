"""Tiered cold-resume runs: one tier, real vLLM (+ the real LMCache MP server), the cold-resume protocol.

    recompute    vLLM without prefix caching and without a connector: every resume prefills the whole context
    engine       vLLM's own prefix cache (the "VRAM" tier): nothing is evicted, the prefix is still resident
    dram         + LMCache L1 in host memory: the engine prefix cache is reset before each resume
    local_disk   + LMCache L2 (fs adapter) on a local directory: both servers restart on the same pool before
                 each resume (empty engine cache and empty L1) and the pool files leave the page cache
    shared_pool  the same on the shared-pool directory (a second local directory unless configured otherwise)

Each tier is one `kvtier bench` cold-resume run (populate once, then evict and resume at each concurrency),
with the servers' logs under `server_logs/` of its run directory and both /metrics snapshotted around every
resume, so attribution can prove which tier served the prefix.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .bench.runner import BenchConfig, Runner, reset_prefix_cache
from .errors import KvtierError
from .servers import LMCacheServer, VllmServer

TIER_NAMES = ("recompute", "engine", "dram", "local_disk", "shared_pool")
L2_TIERS = ("local_disk", "shared_pool")


@dataclass
class TierSettings:
    model_dir: str
    served_name: str = "kvtier-model"
    sessions: int = 32
    context_tokens: int = 4096
    followup_tokens: int = 32
    output_tokens: int = 16
    concurrency: list[int] = field(default_factory=lambda: [8, 16, 32])
    seed: int = 0
    max_model_len: int = 16384
    engine_kv_gib: float = 2.0
    lmcache_l1_gb: float = 2.0
    local_disk_path: str = "pool/local_disk"
    shared_pool_path: str = "pool/shared_pool"
    timeout_s: float = 600.0


def drop_page_cache(directory: str | os.PathLike) -> int:
    """Evict every file under `directory` from the OS page cache (posix_fadvise DONTNEED, no privileges
    needed), so the next read comes from the device. Returns the number of files."""
    count = 0
    for path in Path(directory).rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)  # dirty pages cannot be dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            count += 1
    return count


class TierStack:
    """The servers of one tier, restartable in place (same ports, same pool) for the L2 evictions."""

    def __init__(self, tier: str, settings: TierSettings, log_dir: Path):
        if tier not in TIER_NAMES:
            raise KvtierError(f"unknown tier {tier!r} (tiers: {', '.join(TIER_NAMES)})")
        if not (Path(settings.model_dir) / "config.json").is_file():
            raise KvtierError(f"model_dir {settings.model_dir!r}: no config.json there (generate one with "
                              "`kvtier model --out DIR`, or point model.path at a model directory)")
        self.tier, self.settings, self.log_dir = tier, settings, log_dir
        self.pool = None
        if tier in L2_TIERS:
            self.pool = Path(settings.local_disk_path if tier == "local_disk" else settings.shared_pool_path)
        self.lmcache = None
        if tier in ("dram", *L2_TIERS):
            self.lmcache = LMCacheServer(log_path=str(log_dir / "lmcache.log"), l1_size_gb=settings.lmcache_l1_gb,
                                         l2_path=str(self.pool) if self.pool else None)
        self.vllm = VllmServer(settings.model_dir, str(log_dir / "vllm.log"), served_name=settings.served_name,
                               max_model_len=settings.max_model_len, kv_cache_gib=settings.engine_kv_gib,
                               prefix_caching=tier != "recompute",
                               lmcache_port=self.lmcache.port if self.lmcache else None)

    def start(self) -> "TierStack":
        if self.pool is not None:
            if self.pool.exists():
                shutil.rmtree(self.pool)  # a tier run starts from an empty pool: its KV is what populate wrote
            self.pool.mkdir(parents=True)
        try:
            if self.lmcache:
                self.lmcache.start()
            self.vllm.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.vllm.stop()
        if self.lmcache:
            self.lmcache.stop()

    def metrics_urls(self) -> dict[str, str]:
        urls = {"vllm": f"{self.vllm.base_url}/metrics"}
        if self.lmcache:
            urls["lmcache"] = self.lmcache.metrics_url
        return urls

    def evict(self) -> None:
        """The eviction step of the cold-resume protocol, as this tier requires."""
        if self.tier in ("recompute", "engine"):
            return
        if self.tier == "dram":
            reset_prefix_cache(self.vllm.base_url)
            return
        # L2 tiers: restart both servers on the same pool (empty engine cache, empty L1), and make the pool's
        # files cold, so that the resume reads them from the device.
        self.stop()
        drop_page_cache(self.pool)
        if self.lmcache:
            self.lmcache.start()
        self.vllm.start()

    def __enter__(self) -> "TierStack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def run_tier(tier: str, settings: TierSettings, run_dir: str | os.PathLike) -> dict:
    """One tier's cold-resume run into `run_dir`; returns its summary. The servers are stopped whatever happens."""
    run_dir = Path(run_dir)
    log_dir = run_dir / "server_logs"
    with TierStack(tier, settings, log_dir) as stack:
        cfg = BenchConfig(base_url=stack.vllm.base_url, model=settings.served_name, workload="cold-resume",
                          sessions=settings.sessions, context_tokens=settings.context_tokens,
                          followup_tokens=settings.followup_tokens, output_tokens=settings.output_tokens,
                          concurrency=list(settings.concurrency), seed=settings.seed, timeout_s=settings.timeout_s,
                          metrics_urls=stack.metrics_urls(), evict=f"tier:{tier}")
        metadata = {"tier": tier, "pool": str(stack.pool) if stack.pool else None,
                    "servers": {"vllm": stack.vllm.command(), "lmcache": stack.lmcache.command() if stack.lmcache
                                else None}}
        return Runner(cfg, run_dir, evict=stack.evict, progress=False, labels={"tier": tier},
                      metadata=metadata).run()
