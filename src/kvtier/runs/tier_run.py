"""Tiered cold-resume runs: one tier, real vLLM (+ the real LMCache MP server), the cold-resume protocol.

    recompute    vLLM without a connector, its prefix cache emptied (or off) before each resume: every resume
                 prefills the whole context
    engine       vLLM's own prefix cache (the "VRAM" tier): nothing is evicted, the prefix is still resident
    dram         + LMCache L1 in host memory: the engine prefix cache is reset before each resume
    local_disk   + LMCache L2 (fs adapter) on a local directory: before each resume the engine's prefix cache
                 and LMCache's L1 are emptied (through their APIs, or by restarting both servers on the same
                 pool: `l2_eviction`) and the pool files leave the page cache
    shared_pool  the same on the shared-pool directory (a second local directory unless configured otherwise)

R3's run, `cross_instance`, is kvtier.runs.cross_instance's: two vLLM + LMCache pairs in turn on the shared
pool, A populates and hands off, B resumes.

Each tier is one `kvtier bench` cold-resume run (populate once, then evict and resume at each concurrency; recompute,
which keeps no KV, populates one session as a warm-up),
with the servers' logs under `server_logs/` of its run directory and both /metrics snapshotted around every
resume, so attribution can prove which tier served the prefix. Tiers one server start can measure
(kvtier.core.tiers.SHARED_SERVERS) run one after the other on the same servers (run_tiers): recompute on the
engine tier's vLLM, dram on local_disk's LMCache (its L2 written behind, never read by a dram resume); each run
records which servers it shared, and the second of a pair found them warm.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..bench.runner import BenchConfig, Runner, reset_prefix_cache
from ..core.errors import KvtierError
from ..core.tiers import CROSS_INSTANCE, L2_TIERS, SHARED_SERVERS, TIER_NAMES
from ..probes import pagecache, platform_probe, quiet
from ..probes.platform_probe import PLATFORM_FILE
from ..stack import lmcache_build
from ..stack.lmcache_server import LMCacheServer
from ..stack.model import kv_bytes_per_token
from ..stack.vllm_server import VllmServer

L2_EVICTIONS = ("clear", "restart")


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
    # The engine's KV capacity in tokens instead (sized from the model's config; --kv-cache-memory-bytes): the
    # boundary run sets it so that its working sets overflow the engine.
    engine_kv_tokens: int | None = None
    lmcache_l1_gb: float = 2.0
    local_disk_path: str = "pool/local_disk"
    shared_pool_path: str = "pool/shared_pool"
    timeout_s: float = 600.0
    # How vLLM runs: the CPU build here; on a cluster the configured command, platform and parallelism.
    platform: str = "cpu"
    vllm_command: list[str] = field(default_factory=list)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    dtype: str = "float32"
    vllm_extra_args: list[str] = field(default_factory=list)
    # Which LMCache the LMCache server runs: a kvtier build (build/lmcache/<variant>, see kvtier.stack.lmcache_build),
    # or the venv's own when empty; and the fs L2 adapter's read bound (a setting of the patched build).
    lmcache_build: str = ""
    l2_load_concurrency: int | None = None
    l2_use_odirect: bool = True  # the fs adapter's own O_DIRECT switch (reads and writes bypass the page cache)
    # A CRC-32 per chunk file, checked on every load, a mismatch a miss (patches/0003; None: the adapter's default,
    # off, and the only way of the upstream build, which hands a damaged chunk to the engine as KV).
    l2_verify_checksum: bool | None = None
    # Count the chunk files already in the pool at start as stored (patches/0004), so that a restarted LMCache's
    # eviction budget covers them too; None: the adapter's default, off.
    l2_adopt_existing: bool | None = None
    # How the LMCache server hands KV to the vLLM worker: a shared-memory L1 ("shm") or pickles over IPC.
    lmcache_transfer: str = "shm"
    # Quiet preconditions before every measured window (kvtier.probes.quiet.QuietBounds fields); None: no check.
    quiet: dict | None = None
    # How an L2 tier empties the engine's cache and LMCache's L1 before a resume: through the servers' APIs
    # ("clear": vLLM's /reset_prefix_cache and LMCache's /cache/clear) or by restarting both ("restart").
    l2_eviction: str = "clear"
    # The pool's byte budget (GB) under LMCache's own eviction (kvtier.stack.lmcache_server); None: unbounded, as
    # LMCache's fs adapter is by itself.
    l2_quota_gb: float | None = None

    def __post_init__(self):
        if self.l2_eviction not in L2_EVICTIONS:
            raise KvtierError(f"l2_eviction {self.l2_eviction!r}: one of {', '.join(L2_EVICTIONS)}")


def pool_state(directory: str | os.PathLike) -> dict:
    """Chunk files in a pool and their bytes; `pending` counts files still being written (the fs adapter
    writes a temporary name, then renames). A file removed while the pool is listed is left out."""
    files = pending = size = 0
    for path in Path(directory).rglob("*"):
        try:
            if not path.is_file():
                continue
            length = path.stat().st_size
        except FileNotFoundError:  # removed while listed: LMCache's eviction, a rename
            continue
        if path.name.endswith(".data"):
            files, size = files + 1, size + length
        else:
            pending += 1
    return {"files": files, "bytes": size, "pending": pending}


def wait_pool_settled(directory: str | os.PathLike, timeout_s: float = 120.0, quiet_s: float = 1.5) -> dict:
    """Wait until the pool holds no file in flight and has not changed for `quiet_s`."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while True:
        state = pool_state(directory)
        now = time.monotonic()
        if state != last:
            last, since = state, now
        elif not state["pending"] and now - since >= quiet_s:
            return state
        if now > deadline:
            raise KvtierError(f"pool {directory}: still changing after {timeout_s:g} s ({state})")
        time.sleep(0.25)


def empty_directory(path: Path) -> None:
    """Remove everything under `path`, keeping the directory itself: it may be the mount point of an emulated
    device (kvtier.stack.emulated), which cannot be removed."""
    if not path.exists():
        return
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


class TierStack:
    """The servers of one tier, or of the tiers one server start measures (SHARED_SERVERS), restartable in place
    (same ports, same pool) for the L2 evictions."""

    def __init__(self, tiers: str | tuple[str, ...], settings: TierSettings, log_dir: Path, clear_pool: bool = True):
        tiers = (tiers,) if isinstance(tiers, str) else tuple(tiers)
        for tier in tiers:
            if tier == CROSS_INSTANCE:
                raise KvtierError(f"{CROSS_INSTANCE} is R3's run of two instances in turn: `kvtier r3-populate`, then "
                                  "`kvtier r3-resume` (kvtier.runs.cross_instance)")
            if tier not in TIER_NAMES:
                raise KvtierError(f"unknown tier {tier!r} (tiers: {', '.join(TIER_NAMES)})")
        if len(tiers) > 1 and tiers not in SHARED_SERVERS:
            raise KvtierError(f"tiers {', '.join(tiers)}: one server start measures only "
                              + ", or ".join(" then ".join(pair) for pair in SHARED_SERVERS))
        if not (Path(settings.model_dir) / "config.json").is_file():
            raise KvtierError(f"model_dir {settings.model_dir!r}: no config.json there (generate one with "
                              "`kvtier model --out DIR`, or point model.path at a model directory)")
        self.tiers, self.settings, self.log_dir, self.clear_pool = tiers, settings, log_dir, clear_pool
        self.pool = None
        l2 = [tier for tier in tiers if tier in L2_TIERS]
        if l2:
            self.pool = Path(settings.local_disk_path if l2[0] == "local_disk" else settings.shared_pool_path)
        self.lmcache = None
        if any(tier in ("dram", *L2_TIERS) for tier in tiers):
            build = lmcache_build.read(settings.lmcache_build) if settings.lmcache_build else None
            options = ({"load_concurrency": settings.l2_load_concurrency}
                       if settings.l2_load_concurrency is not None else {})
            if self.pool is not None and settings.l2_use_odirect:
                options["use_odirect"] = True
            for option in ("verify_checksum", "adopt_existing"):
                value = getattr(settings, f"l2_{option}")
                if self.pool is not None and value is not None:
                    options[option] = value
            self.lmcache = LMCacheServer(log_path=str(log_dir / "lmcache.log"), l1_size_gb=settings.lmcache_l1_gb,
                                         l2_path=str(self.pool) if self.pool else None, l2_options=options,
                                         site=str(Path(settings.lmcache_build) / build["site"]) if build else None,
                                         transfer=settings.lmcache_transfer,
                                         l2_quota_gb=settings.l2_quota_gb if self.pool else None)
        self.prefix_caching = tiers != ("recompute",)
        kv_bytes = (settings.engine_kv_tokens * kv_bytes_per_token(settings.model_dir, settings.dtype)
                    if settings.engine_kv_tokens else None)
        self.vllm = VllmServer(settings.model_dir, str(log_dir / "vllm.log"), served_name=settings.served_name,
                               max_model_len=settings.max_model_len, kv_cache_gib=settings.engine_kv_gib,
                               kv_cache_bytes=kv_bytes,
                               prefix_caching=self.prefix_caching,
                               lmcache_port=self.lmcache.port if self.lmcache else None,
                               platform=settings.platform, vllm_command=list(settings.vllm_command),
                               tensor_parallel_size=settings.tensor_parallel_size,
                               gpu_memory_utilization=settings.gpu_memory_utilization, dtype=settings.dtype,
                               extra_args=list(settings.vllm_extra_args))

    def start(self) -> "TierStack":
        return start_together(self)

    def launch(self) -> None:
        """Prepare the pool and start both servers' processes, without waiting for them: vLLM takes far longer
        to come up than LMCache (its connector reaches the LMCache server tens of seconds in, through a message
        queue that waits for it), so the two start side by side."""
        if self.pool is not None and self.clear_pool:
            empty_directory(self.pool)  # a tier run starts from an empty pool: its KV is what populate wrote
        if self.pool is not None:
            self.pool.mkdir(parents=True, exist_ok=True)
            if self.settings.l2_use_odirect:
                pagecache.require_odirect(self.pool)
        self._launch_servers()

    def _launch_servers(self) -> None:
        if self.lmcache:
            self.lmcache.launch()
        self.vllm.launch()

    def wait_ready(self) -> None:
        if self.lmcache:
            self.lmcache.wait_ready()
        self.vllm.wait_ready()

    def stop(self) -> None:
        self.vllm.stop()
        if self.lmcache:
            self.lmcache.stop()

    def metrics_urls(self) -> dict[str, str]:
        urls = {"vllm": f"{self.vllm.base_url}/metrics"}
        if self.lmcache:
            urls["lmcache"] = self.lmcache.metrics_url
        return urls

    def evict(self, tier: str | None = None) -> None:
        """The eviction step of the cold-resume protocol, as `tier` requires (the stack's only tier by default)."""
        if tier is None:
            if len(self.tiers) > 1:
                raise KvtierError(f"servers of {', '.join(self.tiers)}: name the tier to evict for")
            tier = self.tiers[0]
        if tier not in self.tiers:
            raise KvtierError(f"servers of {', '.join(self.tiers)}: no eviction for tier {tier!r}")
        if tier == "engine":
            return
        if tier == "recompute":
            if self.prefix_caching:  # the engine tier's servers: empty its prefix cache, so the resume prefills
                reset_prefix_cache(self.vllm.base_url)
            return
        if self.pool is not None:
            # LMCache writes L2 behind the request: let the pool settle, so that no store runs during a window
            # (for dram) and none is cut short into a miss (for the L2 tiers).
            wait_pool_settled(self.pool)
        if tier == "dram":
            reset_prefix_cache(self.vllm.base_url)
            return
        # L2 tiers: empty the engine's prefix cache and LMCache's L1, and make the pool's files cold, so that the
        # resume reads them from the device. `clear` empties both caches through the servers' own APIs;
        # `restart` restarts both servers on the same pool (slower: a vLLM start per window).
        if self.settings.l2_eviction == "clear":
            self.empty_caches()
            pagecache.drop(self.pool)
            return
        self.stop()
        pagecache.drop(self.pool)
        self._launch_servers()
        self.wait_ready()

    def empty_caches(self) -> None:
        """Empty vLLM's prefix cache and LMCache's L1 through the servers' own APIs (the pool, L2, is kept)."""
        reset_prefix_cache(self.vllm.base_url)
        if self.lmcache:
            self.lmcache.clear_l1()

    def __enter__(self) -> "TierStack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def start_together(*stacks: TierStack) -> TierStack:
    """Launch every stack's servers in order, then wait until all are ready; on any failure stop them all. Returns
    the first stack."""
    try:
        for stack in stacks:
            stack.launch()
        for stack in stacks:
            stack.wait_ready()
    except BaseException:
        for stack in reversed(stacks):
            stack.stop()
        raise
    return stacks[0]


def probe_platform(settings: TierSettings, run_dir: Path) -> dict:
    """The platform record of a run (R4), written before any server starts."""
    paths = {"local_disk": settings.local_disk_path, "shared_pool": settings.shared_pool_path,
             "model": settings.model_dir, "run_dir": str(run_dir)}
    return platform_probe.write(run_dir / PLATFORM_FILE, paths, settings.model_dir,
                                lmcache_build=settings.lmcache_build or None)


def bench_config(stack: TierStack, settings: TierSettings, evict: str, **extra) -> BenchConfig:
    return BenchConfig(base_url=stack.vllm.base_url, model=settings.served_name, workload="cold-resume",
                       sessions=settings.sessions, context_tokens=settings.context_tokens,
                       followup_tokens=settings.followup_tokens, output_tokens=settings.output_tokens,
                       concurrency=list(settings.concurrency), seed=settings.seed, timeout_s=settings.timeout_s,
                       evict=evict, **extra)


def server_commands(stack: TierStack) -> dict:
    return {"vllm": stack.vllm.command(), "lmcache": stack.lmcache.command() if stack.lmcache else None}


def run_tier(tier: str, settings: TierSettings, run_dir: str | os.PathLike) -> dict:
    """One tier's cold-resume run into `run_dir`; returns its summary. The servers are stopped whatever happens."""
    return run_tiers((tier,), settings, (run_dir,))[0]


def run_tiers(tiers: tuple[str, ...] | list[str], settings: TierSettings,
              run_dirs: tuple | list) -> list[dict]:
    """The cold-resume runs of the tiers one server start measures (one tier, or a SHARED_SERVERS pair in its
    order), one after the other on the same servers, each into its run directory; returns their summaries. The
    servers are stopped whatever happens."""
    tiers, run_dirs = tuple(tiers), [Path(d) for d in run_dirs]
    if len(tiers) != len(run_dirs):
        dirs = f"{len(run_dirs)} run director{'y' if len(run_dirs) == 1 else 'ies'}"
        raise KvtierError(f"tiers {', '.join(tiers)}: {dirs} for {len(tiers)} tier{'s' if len(tiers) > 1 else ''}")
    quiet.hook(settings.quiet)  # refuses bad quiet bounds before anything starts
    # Refuses a bad tier, pair or model, writing nothing; the servers' logs go with the run that starts them.
    stack = TierStack(tiers, settings, run_dirs[0] / "server_logs")
    for run_dir in run_dirs:
        refuse_existing(run_dir)
    summaries = []
    with stack:
        for at, (tier, run_dir) in enumerate(zip(tiers, run_dirs)):
            probe_platform(settings, run_dir)
            # Recompute keeps no KV: populating every session would cost as much as a resume window and change
            # nothing it measures, so one session warms the server instead.
            warmup = {"populate_sessions": 1} if tier == "recompute" else {}
            cfg = bench_config(stack, settings, f"tier:{tier}", metrics_urls=stack.metrics_urls(), **warmup)
            metadata = {"tier": tier, "pool": str(stack.pool) if stack.pool else None,
                        "servers": server_commands(stack), "platform": PLATFORM_FILE,
                        # The tiers these servers measured, and before this one; their logs are in the first's run.
                        "shared_servers": {"tiers": list(tiers), "measured_before": list(tiers[:at]),
                                           "server_logs": os.path.relpath(run_dirs[0] / "server_logs", run_dir)}}
            summaries.append(Runner(cfg, run_dir, evict=functools.partial(stack.evict, tier), progress=False,
                                    labels={"tier": tier}, metadata=metadata,
                                    quiet=quiet.hook(settings.quiet)).run())
    return summaries


def refuse_existing(run_dir: Path) -> None:
    if (run_dir / "run.json").exists():
        raise KvtierError(f"{run_dir}: already holds a run; choose a new run directory")
