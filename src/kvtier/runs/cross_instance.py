"""R3 across two processes (two scheduler jobs, on two nodes where the cluster has them): instance A populates
the shared pool and hands off through it; instance B, started after A stopped, resumes from what A left there.

    populate  instance A (its own vLLM + LMCache server, L2 on the shared pool, emptied first) populates every
              session, waits until the pool settles, stops, and writes its hand-off directory: the run so far
              (run.json with the populate phase done, requests.jsonl), A's platform record and server logs, and
              handoff.json (the pool, every chunk file A left with its size, A's host and servers, when A stopped)
              (the pipeline's round-<r>/cross_instance_handoff/)
    resume    instance B (another vLLM + LMCache pair on the same pool path) first checks that the pool holds
              every file of the hand-off at its size on B's node (a pool path that is not shared between
              nodes stops it here), then continues the same run at each concurrency: before the first resume
              only the pool's page cache is dropped (B started after A stopped, so its engine cache and L1 hold
              nothing of these sessions), before each later one B is evicted as the L2 tiers are

The run directory B completes is one `kvtier bench` run in two segments (A's populate, B's resumes; each segment
names its host and server), with the hand-off in its metadata (and the path of A's directory): a window counts for R3 when B's prompt came from
LMCache L2 (kvtier.runs.campaign.attribution), and A was not running to serve anything.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path

from ..bench.runner import REQUESTS_FILE, RUN_FILE, Runner, now_utc
from ..core.atomic import write_text
from ..core.config import read_json
from ..core.errors import KvtierError
from ..core.tiers import CROSS_INSTANCE
from ..probes import pagecache, quiet
from ..probes.platform_probe import PLATFORM_FILE
from .tier_run import (
    TierSettings,
    TierStack,
    bench_config,
    probe_platform,
    refuse_existing,
    server_commands,
    wait_pool_settled,
)

HANDOFF_FILE = "handoff.json"
POOL_FILE = "pool_after_populate.json"  # in B's run directory: what A left in the pool, and on which hosts


def pool_files(directory: str | os.PathLike) -> dict[str, int]:
    """{chunk file relative to the pool: size in bytes} of the finished chunk files (`.data`) in a pool."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): p.stat().st_size
            for p in sorted(directory.rglob("*.data")) if p.is_file()}


def populate(settings: TierSettings, handoff_dir: str | os.PathLike) -> dict:
    """Instance A: populate every session onto the shared pool, stop, and write the hand-off. Returns it."""
    handoff_dir = Path(handoff_dir)
    writer = TierStack("shared_pool", settings, handoff_dir / "server_logs")  # refuses a bad model, writing nothing
    refuse_existing(handoff_dir)
    probe_platform(settings, handoff_dir)
    with writer:  # launching it empties the pool: what B finds there is what A wrote
        cfg = bench_config(writer, settings, "cross-instance:shared_pool", metrics_urls=writer.metrics_urls())
        metadata = {"tier": CROSS_INSTANCE, "pool": str(writer.pool), "platform": PLATFORM_FILE,
                    "servers": {"writer": server_commands(writer)}}
        run = Runner(cfg, handoff_dir, progress=False, labels={"tier": CROSS_INSTANCE}, metadata=metadata,
                     stop_after="populate").run()
        state = wait_pool_settled(writer.pool)  # LMCache writes L2 behind the requests
    handoff = {"pool": str(writer.pool), "pool_state": state, "files": pool_files(writer.pool),
               "writer": {"host": platform.node(), "servers": server_commands(writer), "run_id": run["run_id"]},
               "writer_stopped": now_utc(), "phases_done": run["phases_done"]}
    if not handoff["files"]:
        raise KvtierError(f"{handoff_dir}: instance A left no chunk file in the pool {writer.pool}; nothing to hand "
                          "off (see its server logs)")
    write_text(handoff_dir / HANDOFF_FILE, json.dumps(handoff, indent=2) + "\n")
    return handoff


def read_handoff(handoff_dir: str | os.PathLike) -> dict:
    path = Path(handoff_dir) / HANDOFF_FILE
    handoff = read_json(path, "R3 hand-off (handoff.json)")
    missing = {"pool", "pool_state", "files", "writer", "writer_stopped"} - handoff.keys()
    if missing:
        raise KvtierError(f"{path}: not a hand-off of `kvtier r3-populate`: missing {', '.join(sorted(missing))}")
    return handoff


def check_pool(handoff: dict, pool: Path) -> None:
    """Refuse to resume unless `pool`, as this node sees it, holds every chunk file of the hand-off at its size."""
    if Path(handoff["pool"]).resolve() != pool.resolve():
        raise KvtierError(f"instance A wrote the pool {handoff['pool']}, but this run's shared pool is {pool}: both "
                          "instances must use the same runs.shared_pool_path")
    found = pool_files(pool)
    missing = [name for name in handoff["files"] if name not in found]
    changed = [name for name, size in handoff["files"].items() if name in found and found[name] != size]
    if missing or changed:
        raise KvtierError(
            f"the pool {pool} on {platform.node()} does not hold what instance A left on {handoff['writer']['host']}:"
            f" {len(missing)} of {len(handoff['files'])} chunk files missing, {len(changed)} of another size (is the"
            " pool path on a file system both nodes share? did another run empty it in between?)")


class _ReaderEviction:
    """Instance B's eviction before each resume. Before the first, B has never seen a session (it started after A
    stopped: its engine cache and L1 are empty), so only the pool's page cache is dropped; before every later
    resume B holds the sessions from the previous one, so it is evicted like an L2 tier (`l2_eviction`)."""

    def __init__(self, reader: TierStack):
        self.reader, self.calls = reader, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == 1:
            pagecache.drop(self.reader.pool)
        else:
            self.reader.evict()


def resume(settings: TierSettings, handoff_dir: str | os.PathLike, run_dir: str | os.PathLike) -> dict:
    """Instance B: continue A's run from the pool A left, into `run_dir`; returns the run's summary."""
    handoff_dir, run_dir = Path(handoff_dir), Path(run_dir)
    handoff = read_handoff(handoff_dir)
    reader = TierStack("shared_pool", settings, run_dir / "server_logs", clear_pool=False)
    refuse_existing(run_dir)
    check_pool(handoff, reader.pool)
    # The run so far (A's populate) continues in B's run directory; A's platform record, server logs and hand-off
    # stay in the hand-off directory, which B's run names.
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in (RUN_FILE, REQUESTS_FILE):
        shutil.copy2(handoff_dir / name, run_dir / name)
    probe_platform(settings, run_dir)
    write_text(run_dir / POOL_FILE, json.dumps({"after_populate_by": "writer", **handoff["pool_state"],
                                                "writer_host": handoff["writer"]["host"],
                                                "reader_host": platform.node()}, indent=2) + "\n")
    with reader:
        cfg = bench_config(reader, settings, "cross-instance:shared_pool", metrics_urls=reader.metrics_urls())
        metadata = {"tier": CROSS_INSTANCE, "pool": str(reader.pool), "platform": PLATFORM_FILE,
                    "servers": {"writer": handoff["writer"]["servers"], "reader": server_commands(reader)},
                    "handoff": {"writer_host": handoff["writer"]["host"], "reader_host": platform.node(),
                                "writer_stopped": handoff["writer_stopped"], "reader_started": now_utc(),
                                "files": len(handoff["files"]), "bytes": handoff["pool_state"]["bytes"],
                                "record": os.path.relpath(handoff_dir / HANDOFF_FILE, run_dir)}}
        return Runner(cfg, run_dir, evict=_ReaderEviction(reader), resume=True, progress=False,
                      labels={"tier": CROSS_INSTANCE}, metadata=metadata, quiet=quiet.hook(settings.quiet)).run()
