"""The G4 stability soak (evidence R5): the offload stack (vLLM + the LMCache server, L1 in DRAM and L2 on the pool
path) under open-loop arrivals for a configured duration, with faults injected on a schedule.

    <run_dir>/run.json         the soak's record: settings, segments (each with the soak-clock span it covered),
                               status (running | complete | incomplete), the pool and the servers' commands
    <run_dir>/requests.jsonl   one record per request (kvtier.bench.records), appended and flushed as each completes;
                               `labels.at_s` is the soak-clock second it was due
    <run_dir>/samples.jsonl    the telemetry (kvtier.runs.soak_monitor), one line per sample
    <run_dir>/events.jsonl     what happened to the stack: each fault as it fired, what it did, each server exit
                               seen, each restart and when the stack served again; appended and flushed
    <run_dir>/summary.json     written last, when the soak completes: its requests, failures and faults, counted
    <run_dir>/server_logs/     vLLM's and LMCache's logs, every start appended
    <run_dir>/probes/          the platform record (R4)

The soak clock runs only while a segment runs: a soak stopped (Ctrl-C, SIGTERM, a killed Snakemake) and resumed
with `resume=True` continues on the same clock and the same pool, sends every planned request that has no record
yet (those in flight when it stopped included), and fires the faults that had not fired. The windows and G4's
verdict are computed from these files by kvtier.evidence.r5 and kvtier.gates.g4.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import __version__
from ..bench import backend, metrics
from ..bench.http import Connection, Endpoint
from ..bench.records import RecordWriter, latest_per_request, new_record, read_records
from ..bench.runner import REQUESTS_FILE, RUN_FILE, now_utc, reset_prefix_cache, run_async, write_run
from ..bench.tokens import ServerTokenizer, alphabet, sequence
from ..core.atomic import write_text
from ..core.errors import KvtierError
from ..core.vcs import git_revision
from ..probes import pagecache
from ..stack import shm
from .campaign import L2_HITS, SOURCE, series_sum
from .soak_faults import Fault, PoolFileSystem, chunk_files, fill, flip_bytes, kill_group, schedule, seconds, unfill
from .soak_monitor import SAMPLES_FILE, Monitor, pool_usage
from .soak_workload import SoakWorkload, stream
from .tier_run import TierSettings, TierStack, probe_platform, refuse_existing, server_commands, wait_pool_settled

EVENTS_FILE = "events.jsonl"
SUMMARY_FILE = "summary.json"
# The soak's own requests are bounded, whatever the runs' timeout: a hung stack must not hang the soak.
PROBE_TIMEOUT_S = 120.0
UNBOUNDED_GB = 1e6  # the pool's budget while a round trip's probes are in it
HEALTH_TIMEOUT_S = 20.0
  # written when the soak completes: what the pipeline waits for
POOL_DIR = "kv"  # the L2 directory inside the pool path (beside it, on its file system: the pool_full filler)


@dataclass
class SoakSettings:
    """The soak: the servers (TierSettings fields; L2 on `shared_pool_path`), how long, what is sent, the telemetry's
    cadence, the pool's budget and the faults."""
    servers: dict
    duration: str | float = "10m"
    window_s: float = 60.0
    sample_s: float = 5.0
    workload: dict = field(default_factory=dict)
    pool_quota_gb: float | None = 0.5
    restart_on_failure: bool = True
    faults: list[dict] = field(default_factory=list)
    pool_fs_mb: int = 2048            # the pool's own file system, when a pool_full fault is scheduled (root)
    max_connections: int = 64
    recovery_timeout_s: float = 300.0  # a restarted stack must serve again within this, or the soak stops
    # A vLLM still serving nothing this long after a restart is restarted too (seen here: after LMCache was
    # SIGKILLed, vLLM hung every request, new ones included, until it was restarted itself). A healthy stack
    # answers the 8-token probe in under a second.
    stuck_after_s: float = 30.0

    def __post_init__(self):
        self.duration_s = seconds(self.duration, "soak.duration")
        if self.window_s <= 0 or self.sample_s <= 0 or self.sample_s > self.window_s:
            raise KvtierError(f"soak window_s {self.window_s} and sample_s {self.sample_s}: both > 0, a sample at "
                              "least once a window")
        if self.pool_quota_gb is not None and self.pool_quota_gb <= 0:
            raise KvtierError(f"soak pool_quota_gb {self.pool_quota_gb}: > 0, or null for no budget")
        self.fault_list = schedule(self.faults, self.duration_s)
        tier = self.tier_settings()
        try:
            self.load = SoakWorkload(**self.workload)
        except TypeError as exc:
            raise KvtierError(f"soak workload: {exc}") from None
        self.load.check(tier.max_model_len)

    def tier_settings(self) -> TierSettings:
        try:
            return TierSettings(**{**self.servers, "l2_quota_gb": self.pool_quota_gb})
        except TypeError as exc:
            raise KvtierError(f"soak servers: {exc}") from None


class _Events:
    """events.jsonl: one line per event, flushed as written, each with the soak-clock second and the wall time."""

    def __init__(self, path: Path, clock):
        self.path, self.clock = path, clock
        self.lock = threading.Lock()

    def __call__(self, kind: str, **fields) -> dict:
        event = {"t": round(self.clock(), 3), "wall": now_utc(), "kind": kind, **fields}
        with self.lock, open(self.path, "a") as out:
            out.write(json.dumps(event, default=str) + "\n")
            out.flush()
        return event


def wait_stored(pool: Path, before: set[str], appear_s: float = 20.0) -> None:
    """After a prompt was sent: wait until chunk files new since `before` appear (LMCache stores to L2 behind the
    request), then until the pool settles; if none appear within `appear_s`, return (nothing was stored)."""
    deadline = time.monotonic() + appear_s
    while not chunk_files(pool) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    wait_pool_settled(pool)


def unfinished(pool: Path) -> list[Path]:
    """Remove the files under the pool that are not finished chunk files (the fs adapter's temporary names),
    and return them: called only while no LMCache server writes there."""
    stale = [p for p in pool.rglob("*") if p.is_file() and not p.name.endswith(".data")]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def read_events(run_dir: str | os.PathLike) -> list[dict]:
    return list(read_records(Path(run_dir) / EVENTS_FILE))


class Soak:
    def __init__(self, settings: SoakSettings, run_dir: str | os.PathLike, resume: bool = False):
        self.settings, self.run_dir, self.resume = settings, Path(run_dir), resume
        tier = settings.tier_settings()
        self.pool_root = Path(tier.shared_pool_path)
        self.tier = TierSettings(**{**asdict(tier), "shared_pool_path": str(self.pool_root / POOL_DIR)})
        self.pool = self.pool_root / POOL_DIR
        self.pool_fs = None
        self.stack: TierStack | None = None
        self.restart_lock = threading.Lock()
        self.faults_fired: set[int] = set()
        self.active_fault: int | None = None  # the fault the watcher blames a server's exit on: the latest fired
        self.generation = 0  # bumped by every restart: a kept-alive connection from before one is not reused
        self.recovering = False  # a server is being restarted, or the stack checked: the soak does not end meanwhile
        self.base_s = 0.0
        self.started_wall = time.time()
        self._t0 = None  # the soak clock starts when the stack serves

    # -- the clock and the record ------------------------------------------------------------------------------

    def clock(self) -> float:
        return self.base_s + (time.monotonic() - self._t0 if self._t0 is not None else 0.0)

    def _start_record(self) -> dict:
        run_file = self.run_dir / RUN_FILE
        if self.resume:
            if not run_file.is_file():
                raise KvtierError(f"{self.run_dir}: no {RUN_FILE} to resume")
            run = json.loads(run_file.read_text())
            if run.get("kind") != "soak":
                raise KvtierError(f"{run_file}: not a soak's record")
            if run["status"] == "complete":
                raise KvtierError(f"{self.run_dir}: the soak is complete; choose a new run directory to soak again")
            if run["config"]["duration_s"] != self.settings.duration_s:
                raise KvtierError(f"{self.run_dir}: the soak was planned for {run['config']['duration_s']:g} s, "
                                  f"not {self.settings.duration_s:g} s; resume it with its own settings")
            self.base_s = max((s.get("soak_to_s") or s["soak_from_s"] for s in run["segments"]), default=0.0)
            self.faults_fired = {e["fault"] for e in read_events(self.run_dir) if e["kind"] == "fault"}
            run["segments"].append(self._segment())
            run["status"] = "running"
            return run
        refuse_existing(self.run_dir)
        if (self.run_dir / REQUESTS_FILE).exists():
            raise KvtierError(f"{self.run_dir}: already holds requests; resume it (--resume) or choose a new directory")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        return {"run_id": self.run_dir.name, "kind": "soak", "kvtier_version": __version__,
                "source_revision": git_revision(), "host": platform.node(), "python": platform.python_version(),
                "config": {**asdict(self.settings), "duration_s": self.settings.duration_s,
                           "fault_list": [asdict(f) for f in self.settings.fault_list]},
                "status": "running", "start": now_utc(), "end": None, "segments": [self._segment()],
                "metadata": {}}

    def _segment(self) -> dict:
        return {"start": now_utc(), "end": None, "status": "running", "host": platform.node(),
                "soak_from_s": self.base_s, "soak_to_s": None}

    # -- the stack ----------------------------------------------------------------------------------------------

    def _prepare_pool(self, run: dict) -> None:
        """The pool's own file system when a pool_full fault is scheduled and this machine can mount one; otherwise
        the configured directory as it is, and the reason recorded."""
        wants = any(f.kind == "pool_full" for f in self.settings.fault_list)
        why = PoolFileSystem.unavailable() if wants else "no pool_full fault scheduled"
        run["metadata"]["pool_fs"] = {"own": False, "why_not": why}
        if wants and not why:
            self.pool_fs = PoolFileSystem(self.pool_root, self.settings.pool_fs_mb)
            self.pool_fs.mount(fresh=not self.resume)
            run["metadata"]["pool_fs"] = {"own": True, "size_mb": self.settings.pool_fs_mb, "type": "ext4 (loop)"}

    def _servers(self) -> dict[str, tuple[int | None, str]]:
        stack = self.stack
        out = {"vllm": (stack.vllm.process.pid if stack.vllm.process else None, f"{stack.vllm.base_url}/metrics")}
        if stack.lmcache:
            out["lmcache"] = (stack.lmcache.process.pid if stack.lmcache.process else None, stack.lmcache.metrics_url)
        return out

    def _process(self, name: str):
        return self.stack.vllm if name == "vllm" else self.stack.lmcache

    def restart(self, name: str, why: str, fault: int | None) -> None:
        """Start a server again in place (same port, same pool), and say when it is ready."""
        with self.restart_lock:
            server = self._process(name)
            began = self.clock()
            server.stop(grace_s=5)
            # What the dead server's processes left in /dev/shm: a SIGKILLed vLLM never unlinks its queues.
            removed = shm.remove_orphans(self.started_wall)
            # A killed LMCache leaves the chunk files it was writing half-written under temporary names: nothing
            # will finish them, and the pool would never look settled.
            stale = unfinished(self.pool) if name == "lmcache" else []
            self.events("restart", server=name, why=why, fault=fault, removed_segments=removed,
                        removed_unfinished=len(stale))
            server.launch()
            server.wait_ready()
            self.generation += 1
            self.events("ready", server=name, fault=fault, took_s=round(self.clock() - began, 3))

    # -- the faults -----------------------------------------------------------------------------------------------

    async def _faults(self, loop) -> None:
        for index, fault in enumerate(self.settings.fault_list):
            if index in self.faults_fired:
                continue
            delay = fault.at_s - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.recovering:  # each fault on a serving stack: one that fires mid-restart tests nothing
                began = self.clock()
                while self.recovering:
                    await asyncio.sleep(0.5)
                self.events("postponed", fault=index, name=fault.name, waited_s=round(self.clock() - began, 3),
                            why="the stack was still recovering from the fault before")
            self.active_fault = index
            self.faults_fired.add(index)
            if fault.kind in ("kill_lmcache", "kill_vllm"):
                name = fault.kind.removeprefix("kill_")
                process = self._process(name).process
                pid = process.pid if process else None
                self.events("fault", fault=index, name=fault.name, server=name, pid=pid)
                if pid is not None:
                    kill_group(pid)
                    # Until the watcher has restarted it and the stack serves again (it clears the flag).
                    self.recovering = self.settings.restart_on_failure
            elif fault.kind == "pool_full":
                await self._pool_full(loop, index, fault)
            else:
                await self._corrupt(loop, index, fault)

    async def _pool_full(self, loop, index: int, fault: Fault) -> None:
        if self.pool_fs is None:
            self.events("fault", fault=index, name=fault.name, skipped=True,
                        why=f"the pool has no file system of its own: {PoolFileSystem.unavailable() or 'not mounted'}")
            return
        taken = await loop.run_in_executor(None, fill, self.pool_root)
        self.events("fault", fault=index, name=fault.name, filled_bytes=taken, free_bytes=pool_usage(self.pool)["free_bytes"])
        await asyncio.sleep(fault.for_s)
        await loop.run_in_executor(None, unfill, self.pool_root)
        self.events("cleared", fault=index, free_bytes=pool_usage(self.pool)["free_bytes"])

    async def _corrupt(self, loop, index: int, fault: Fault) -> None:
        """The corrupted-chunk fault: a probe whose chunks are damaged, and an intact control."""
        began = self.clock()
        damaged = []

        gone = []

        def damage(chunks: dict[str, list[str]]) -> None:
            for name in chunks["corrupted"]:
                try:
                    damaged.append(flip_bytes(self.pool / name, fault.bytes, f"soak/{index}/{name}"))
                except FileNotFoundError:
                    gone.append(name)  # removed by LMCache before it could be damaged

        # The control goes first and comes back first, so that the damaged prompt's files are the newest.
        probes = await self._round_trip(loop, f"{index}", ("control", "corrupted"), damage)
        self.events("fault", fault=index, name=fault.name, damaged=damaged, gone_before_damage=gone, probes=probes,
                    paused_s=round(self.clock() - began, 3))

    async def _round_trip(self, loop, tag: str, roles: tuple[str, ...], damage=None) -> dict:
        """Through the pool and back, with arrivals paused so that the chunk files written are the probes' alone:
        each role's prompt (never sent before) is sent once, its output the recompute reference; its new chunk files
        are noted; `damage` may then alter them; the engine's and L1's copies are emptied and the prompts sent again.
        Returns per role: its chunks, both outputs, and what the resend took from the pool (LMCache's L2 lookup hits
        and vLLM's tokens from the connector)."""
        self.sending.clear()
        while self.in_flight:
            await asyncio.sleep(0.05)
        budget = self.settings.pool_quota_gb
        try:
            if budget is not None:  # no eviction while the probes' files are compared; the budget is back after
                await loop.run_in_executor(None, self.stack.lmcache.set_l2_quota, UNBOUNDED_GB)
            await loop.run_in_executor(None, wait_pool_settled, self.pool)
            probes = {}
            for role in roles:
                before = chunk_files(self.pool)
                prompt = sequence(random.Random(f"soak-probe/{tag}/{role}"), self.ids,
                                  self.settings.load.context_tokens)
                first = await self._probe(f"probe/{tag}/{role}/first", prompt)
                await loop.run_in_executor(None, wait_stored, self.pool, before)
                probes[role] = {"first": first, "chunks": sorted(chunk_files(self.pool) - before), "prompt": prompt}
            if damage is not None:
                await loop.run_in_executor(None, damage, {role: p["chunks"] for role, p in probes.items()})
            await loop.run_in_executor(None, pagecache.drop, self.pool)
            await self._reset_prefix_cache(loop)
            await loop.run_in_executor(None, self.stack.lmcache.clear_l1)
            outcome = {}
            urls = {"vllm": f"{self.stack.vllm.base_url}/metrics", "lmcache": self.stack.lmcache.metrics_url}
            for role, probe in probes.items():
                present = sum((self.pool / name).is_file() for name in probe["chunks"])
                before = {k: metrics.parse(await loop.run_in_executor(None, metrics.fetch, u)) for k, u in urls.items()}
                again = await self._probe(f"probe/{tag}/{role}/again", probe["prompt"])
                after = {k: metrics.parse(await loop.run_in_executor(None, metrics.fetch, u)) for k, u in urls.items()}
                delta = {k: metrics.deltas(before[k], after[k]) for k in urls}
                outcome[role] = {
                    "chunks": probe["chunks"], "first_output": probe["first"]["output_text"],
                    "again_output": again["output_text"], "error": again["error"],
                    "first_error": probe["first"]["error"], "files_present_before_resend": present,
                    "l2_hit_tokens": series_sum(delta["lmcache"], L2_HITS),
                    "external_tokens": series_sum(delta["vllm"], SOURCE, 'source="external_kv_transfer"'),
                    "identical": (again["error"] is None and probe["first"]["error"] is None
                                  and again["output_text"] == probe["first"]["output_text"])}
            return outcome
        finally:
            if budget is not None:
                await loop.run_in_executor(None, self.stack.lmcache.set_l2_quota, budget)
            self.sending.set()

    async def _reset_prefix_cache(self, loop, attempts: int = 30, wait_s: float = 1.0) -> None:
        """vLLM refuses the reset while a request still holds blocks (after a restart, one the client gave up on
        may still run): try again every `wait_s`, up to `attempts` times."""
        for attempt in range(1, attempts + 1):
            try:
                await loop.run_in_executor(None, reset_prefix_cache, self.stack.vllm.base_url)
                return
            except KvtierError as exc:
                if "still held" not in str(exc) or attempt == attempts:
                    raise
                await asyncio.sleep(wait_s)

    async def _probe(self, request_id: str, prompt: list[int], timeout_s: float = PROBE_TIMEOUT_S) -> dict:
        """One request of the soak's own (a health check, a round trip through the pool), recorded with phase
        `probe`; bounded by `timeout_s`: a stack that hangs must not hang the soak."""
        payload = backend.body("completions", self.tier.served_name, prompt, self.settings.load.output_tokens)
        prepared = backend.prepare(self.endpoint, "completions", request_id, "probe", payload, {"probe": True})
        timeout_s = min(timeout_s, self.tier.timeout_s)
        conn = Connection(self.endpoint, 10.0, timeout_s)
        try:
            record = await backend.execute(conn, prepared, new_record(self.run_dir.name, self.segment, request_id,
                                                                       "probe", None, {"probe": True}), timeout_s)
        finally:
            conn.close()
        self.writer.write(record)
        return record

    # -- the watcher --------------------------------------------------------------------------------------------

    async def _watch(self, loop) -> None:
        """Every second: a server whose processes have all exited is recorded, and started again when
        `restart_on_failure` is set; then the stack must answer a request within `recovery_timeout_s`."""
        while True:
            await asyncio.sleep(1.0)
            for name in self._servers():
                process = self._process(name).process
                if process is None or process.poll() is None or self.restart_lock.locked():
                    continue
                fault = self.active_fault
                self.events("exit", server=name, code=process.returncode, fault=fault)
                if not self.settings.restart_on_failure:
                    self._process(name).process = None
                    continue
                self.recovering = True
                try:
                    await loop.run_in_executor(None, self.restart, name, "exited", fault)
                    await self._serving_again(loop, fault)
                finally:
                    self.recovering = False

    async def _serving_again(self, loop, fault: int | None) -> None:
        """After a restart: a short request (bounded by HEALTH_TIMEOUT_S) until one succeeds. A vLLM that serves
        nothing `stuck_after_s` after its LMCache came back (every request hangs) is restarted as well, once; the
        stack must serve within `recovery_timeout_s`, or the soak stops."""
        began = self.clock()
        deadline = began + self.settings.recovery_timeout_s
        restarted_vllm = False
        while True:
            if not restarted_vllm and self.clock() >= began + self.settings.stuck_after_s:
                restarted_vllm = True
                await loop.run_in_executor(None, self.restart, "vllm", "serves nothing after the restart", fault)
            # Until then, each probe ends by the time vLLM would count as stuck: it is restarted then, not a whole
            # probe later.
            left = began + self.settings.stuck_after_s - self.clock()
            timeout_s = HEALTH_TIMEOUT_S if restarted_vllm else min(HEALTH_TIMEOUT_S, max(left, 1.0))
            record = await self._probe(f"health/{time.time_ns()}", self.ids[:8], timeout_s=timeout_s)
            if record["error"] is None:
                self.events("serving", fault=fault)
                await self._pool_serving_again(loop, fault)
                return
            if self.clock() > deadline:
                raise KvtierError(f"the stack does not serve after a restart ({self.settings.recovery_timeout_s:g} s): "
                                  f"{record['error']}; logs in {self.run_dir / 'server_logs'}")
            await asyncio.sleep(2.0)

    async def _pool_serving_again(self, loop, fault: int | None, attempts: int = 6, gap_s: float = 5.0) -> None:
        """Does the pool still serve, and serve right? A prompt through it and back, again every `gap_s` until one
        comes back from the pool (vLLM's connector may serve before it has reached a restarted LMCache)."""
        for attempt in range(1, attempts + 1):
            checked = (await self._round_trip(loop, f"after-{fault}-{attempt}", ("after",)))["after"]
            if checked["external_tokens"] or attempt == attempts:
                self.events("pool_check", fault=fault, probe=checked, attempt=attempt)
                return
            await asyncio.sleep(gap_s)

    # -- the arrivals -------------------------------------------------------------------------------------------

    async def _send(self) -> None:
        done = {r["request_id"] for r in read_records(self.run_dir / REQUESTS_FILE)}
        idle: list[tuple[int, Connection]] = []
        slots = asyncio.Semaphore(self.settings.max_connections)
        tasks = set()

        def connection() -> tuple[int, Connection]:
            while idle:
                generation, conn = idle.pop()
                if generation == self.generation:
                    return generation, conn
                conn.close()  # opened to a server since restarted
            return self.generation, Connection(self.endpoint, 10.0, self.tier.timeout_s)

        async def one(prepared) -> None:
            generation, conn = connection()
            self.in_flight += 1
            try:
                record = new_record(self.run_dir.name, self.segment, prepared.request_id, "soak", None,
                                    prepared.labels)
                self.writer.write(await backend.execute(conn, prepared, record, self.tier.timeout_s))
            finally:
                self.in_flight -= 1
                if conn.writer is not None:
                    idle.append((generation, conn))
                slots.release()

        try:
            for item in stream(self.settings.load, self.ids, self.settings.duration_s):
                if item.request_id in done:
                    continue
                delay = item.arrival_s - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self.sending.wait()
                await slots.acquire()
                payload = backend.body("completions", self.tier.served_name, item.prompt, item.output_tokens)
                prepared = backend.prepare(self.endpoint, "completions", item.request_id, "soak", payload,
                                           {**item.labels, "prompt_tokens_sent": len(item.prompt)})
                task = asyncio.ensure_future(one(prepared))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            remaining = self.settings.duration_s - self.clock()
            if remaining > 0:  # the soak lasts its duration even when the last arrival came early
                await asyncio.sleep(remaining)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            # Stopped: the requests still in flight have no record, and a resumed soak sends them again.
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for _, conn in idle:
                conn.close()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self.sending = asyncio.Event()
        self.sending.set()
        self.in_flight = 0
        helpers = [asyncio.ensure_future(self._faults(loop)), asyncio.ensure_future(self._watch(loop))]
        sender = asyncio.ensure_future(self._send())
        try:
            while not sender.done():
                await asyncio.wait([sender, *helpers], return_when=asyncio.FIRST_COMPLETED)
                for helper in helpers:
                    if helper.done() and helper.exception():
                        raise helper.exception()
                if self.monitor.error:
                    raise KvtierError(f"soak telemetry stopped: {self.monitor.error}")
            sender.result()
            # The duration is up: the faults due in it that have not finished, and a recovery under way, are seen
            # to their end, so that G4 can judge them.
            faults, watch = helpers
            while (not faults.done() or self.recovering) and not watch.done():
                await asyncio.sleep(0.5)
            for helper in helpers:
                if helper.done() and helper.exception():
                    raise helper.exception()
        finally:
            for task in [sender, *helpers]:
                task.cancel()
            await asyncio.gather(sender, *helpers, return_exceptions=True)

    # -- the run ------------------------------------------------------------------------------------------------

    def run(self) -> dict:
        run = self._start_record()
        self.segment = len(run["segments"])
        self.events = _Events(self.run_dir / EVENTS_FILE, self.clock)
        try:
            self._prepare_pool(run)
            # Taken at every segment's start: a resumed soak may run on another node (R4 shows the latest).
            probe_platform(self.tier, self.run_dir)
            self.stack = TierStack("shared_pool", self.tier, self.run_dir / "server_logs", clear_pool=not self.resume)
            run["metadata"].update({"pool": str(self.pool), "pool_quota_gb": self.settings.pool_quota_gb,
                                    "servers": server_commands(self.stack)})
            write_run(self.run_dir, run)
            self.stack.start()
            self.endpoint = Endpoint.parse(self.stack.vllm.base_url)
            self.ids = alphabet(ServerTokenizer(self.stack.vllm.base_url, self.tier.served_name), self.tier.seed)
            self._t0 = time.monotonic()  # the soak clock runs from here, on from where the last segment stopped
            self.events("segment", segment=self.segment, resumed=self.resume)
            self.monitor = Monitor(self.run_dir / SAMPLES_FILE, self.clock, self._servers, self.pool,
                                   self.settings.sample_s)
            self.monitor.start()
            with RecordWriter(self.run_dir / REQUESTS_FILE) as self.writer:
                run_async(self._main())
        except BaseException:
            run["status"] = run["segments"][-1]["status"] = "incomplete"
            self._close(run)  # what went wrong there is in run.json; the error that stopped the soak is raised
            raise
        run["status"] = run["segments"][-1]["status"] = "complete"
        run["end"] = now_utc()
        problems = self._close(run)
        if problems:
            raise KvtierError(f"{self.run_dir}: the soak completed, but cleaning up failed: {'; '.join(problems)}")
        write_text(self.run_dir / SUMMARY_FILE, json.dumps(summary(self.run_dir, run), indent=2) + "\n")
        return run

    def _close(self, run: dict) -> list[str]:
        """Stop the telemetry and the servers, unmount the pool's file system, and write the record: each step
        whatever the others did, so that nothing is left running or mounted. Returns what went wrong."""
        problems = []

        def step(what: str, action) -> None:
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - every step runs; each failure is reported
                problems.append(f"{what}: {exc}")

        if getattr(self, "monitor", None) is not None:
            step("stopping the telemetry", self.monitor.stop)
        if self.stack is not None:
            def stop_servers():
                with self.restart_lock:  # a restart in another thread finishes first, then both are stopped
                    self.stack.stop()
            step("stopping the servers", stop_servers)
            step("removing their shared memory", lambda: run["metadata"].setdefault("removed_segments", []).extend(
                shm.remove_orphans(self.started_wall)))
        if self.pool_fs is not None:
            step("freeing the pool", lambda: unfill(self.pool_root))
            step("unmounting the pool", lambda: self.pool_fs.unmount(keep_image=run["status"] != "complete"))
        segment = run["segments"][-1]
        segment["end"] = now_utc()
        segment["soak_to_s"] = round(self.clock(), 3)
        if problems:
            run.setdefault("cleanup_problems", []).extend(problems)
        write_run(self.run_dir, run)
        return problems


def summary(run_dir: Path, run: dict) -> dict:
    """What a finished soak did, counted from its files: requests by outcome, faults fired, segments."""
    records = latest_per_request(read_records(run_dir / REQUESTS_FILE))
    soak = [r for r in records if r["phase"] == "soak"]
    events = read_events(run_dir)
    return {"run_id": run["run_id"], "status": run["status"], "duration_s": run["config"]["duration_s"],
            "segments": len(run["segments"]), "requests": len(soak),
            "failed": sum(r["error"] is not None for r in soak),
            "probes": sum(r["phase"] == "probe" for r in records),
            "faults_fired": sorted({e["fault"] for e in events if e["kind"] == "fault"}),
            "restarts": sum(e["kind"] == "restart" for e in events)}


def resumable(run_dir: str | os.PathLike) -> list[str]:
    """The `kvtier soak` flag for a run directory: `--resume` for a soak that was stopped, `--replace` for a finished
    one the pipeline runs again (its settings changed: like every rule's outputs, it is made anew), none for
    nothing there."""
    run_file = Path(run_dir) / RUN_FILE
    if not run_file.is_file():
        return []
    try:
        status = json.loads(run_file.read_text()).get("status")
    except ValueError:
        return ["--replace"]
    return ["--replace"] if status == "complete" else ["--resume"]


def run_soak(settings: SoakSettings, run_dir: str | os.PathLike, resume: bool = False) -> dict:
    """Soak into `run_dir` (or resume the soak there); returns its run record. Servers are stopped and the pool's
    file system unmounted whatever happens."""
    return Soak(settings, run_dir, resume).run()
