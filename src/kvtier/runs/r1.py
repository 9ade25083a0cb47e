"""R1's measurements on this machine, into raw_data/runs/<campaign>/R1/: the probes run and their raw records.

`run_reads` (rule r1_reads, `kvtier r1-reads`) takes, in each round, and in the same run:
- coldread.jsonl: cold loads of N chunks by one LMCache fs L2 worker, per LMCache build (upstream and patched,
  in alternating order from round to round), each build in its own Python with that build first on the path, one
  for the whole run (kvtier.probes.coldread --serve, `ColdReader`): upstream once (it reads one key after another),
  patched once per load bound, the bounds being fio's queue depths and the configured bound (the patch at the
  matching queue depth); with
  `verify_checksum`, the patched build once more at the configured bound checking every chunk's CRC-32
  (patches/0003; build `patched_checksum`), on the same files, which were all written with their checksums: what
  the check costs on a cold read (in the same Python as the patched build's other loads of the round);
- fio.jsonl: fio's direct-read bandwidth on the same pool directory at each queue depth (the device limit);
- checkpoint.jsonl: a LoRA-sized sharded checkpoint saved with fsync to the local disk and to the pool path, by
  one writer and by parallel writers (kvtier.probes.ckptsave).

`run_resume` (rule r1_resume, `kvtier r1-resume`) is a local_disk tier run of a few sessions of 12k tokens, at
concurrency 1, with the configured LMCache build (resume/), followed by rawread.jsonl: the time to read the
pool's chunk files cold, whole, one after another: what the resume of those files costs at the least. Then an
engine tier run of the same sessions (engine_hit/): their resume with the KV already in vLLM's own prefix cache,
the part of a resume's TTFT that no storage tier can remove (request handling, the follow-up's forward pass).

Every record is appended and flushed as it is taken; run.json says whether the run completed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..bench.records import RecordWriter
from ..bench.runner import RUN_FILE, write_run
from ..core.errors import KvtierError
from ..probes import ckptsave, coldread, fio, pagecache, platform_probe, quiet
from ..probes.platform_probe import PLATFORM_FILE
from ..stack import lmcache_build
from .boundary import DECIDED, FIXED, MINUTES_SPENT, ROUNDS_SPENT  # the words B's rounds stop with
from .run_record import RunRecord
from .tier_run import run_tier

BUILDS = ("upstream", "patched")
CHECKSUM = "patched_checksum"  # the patched build checking each chunk's CRC-32 on load (patches/0003)
COLDREAD_FILE, FIO_FILE, CHECKPOINT_FILE, RAWREAD_FILE = ("coldread.jsonl", "fio.jsonl", "checkpoint.jsonl",
                                                          "rawread.jsonl")
COLDREAD_DIR = "kvtier-r1-coldread"
RESUME_POOL_DIR = "kvtier-r1-resume"
RESUME_RUN = "resume"
ENGINE_HIT_RUN = "engine_hit"


@dataclass(frozen=True)
class ReadSettings:
    pool_path: str
    local_disk_path: str
    builds: dict[str, str]  # build name -> build directory (kvtier.stack.lmcache_build), upstream and patched
    chunks: int = 256
    chunk_mib: float = 1.0
    load_concurrency: int = 16  # the configured bound (lmcache.load_concurrency); the sweep adds queue_depths
    use_odirect: bool = True  # the fs adapter reads with O_DIRECT (lmcache.use_odirect), both builds
    queue_depths: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    rounds: int = 5
    # Sequential rounds: after `rounds`, one more at a time of what the targets still undecided need, up to
    # `max_rounds` or until the run has taken `budget_s` (None: fixed rounds; the judge is evidence.r1's).
    max_rounds: int | None = None
    budget_s: float | None = None
    checkpoint: dict = field(default_factory=dict)  # kvtier.probes.ckptsave.CheckpointSpec fields
    timeout_s: float = 600.0
    quiet: dict | None = None  # wait for a quiet machine before each timed read or save (QuietBounds fields)
    verify_checksum: bool = False  # also load with the patched build's chunk checksums (lmcache.verify_checksum)

    def __post_init__(self):
        if set(self.builds) != set(BUILDS):
            raise KvtierError(f"R1 builds: need {', '.join(BUILDS)}, got {sorted(self.builds)}")
        for name, value in (("chunks", self.chunks), ("load_concurrency", self.load_concurrency),
                            ("rounds", self.rounds)):
            if not isinstance(value, int) or value < 1:
                raise KvtierError(f"R1 settings: {name} must be a positive integer, not {value!r}")
        if self.max_rounds is not None and (not isinstance(self.max_rounds, int) or self.max_rounds < self.rounds):
            raise KvtierError(f"R1 settings: max_rounds {self.max_rounds!r} must be an integer of at least rounds "
                              f"({self.rounds})")
        if (self.max_rounds or self.rounds) > self.rounds and self.rounds < 2:
            raise KvtierError(f"R1 settings: sequential rounds (max_rounds {self.max_rounds}) need at least 2 rounds "
                              f"first, not {self.rounds}")
        if self.budget_s is not None and (isinstance(self.budget_s, bool) or not isinstance(self.budget_s, (int, float))
                                          or self.budget_s <= 0):
            raise KvtierError(f"R1 settings: budget_s must be a positive number of seconds, not {self.budget_s!r}")
        if not self.queue_depths or any(not isinstance(q, int) or q < 1 for q in self.queue_depths):
            raise KvtierError(f"R1 settings: queue_depths must be positive integers, not {self.queue_depths!r}")
        if not self.chunk_mib > 0:
            raise KvtierError(f"R1 settings: chunk_mib must be positive, not {self.chunk_mib!r}")
        ckptsave.CheckpointSpec(**self.checkpoint)  # refuses a bad spec before anything runs
        quiet.hook(self.quiet)  # and bad quiet bounds

    def load_bounds(self) -> list[int]:
        """The patched build's load bounds: each of fio's queue depths, and the configured bound."""
        return sorted({*self.queue_depths, self.load_concurrency})

    def readers(self) -> list[str]:
        """What loads in each round: both builds, and the patched one checking checksums where asked."""
        return [*BUILDS, CHECKSUM] if self.verify_checksum else list(BUILDS)


def _build_site(build_dir: str) -> str:
    record = lmcache_build.read(build_dir)
    return str(Path(build_dir) / record["site"])


class ColdReader:
    """One Python with `build_dir`'s LMCache first on its path (kvtier.probes.coldread --serve) that makes every
    cold load of that build asked of it during a run, each by a new fs L2 worker as before: a Python per round
    would start torch and LMCache again each time (2-3 s here, more than a small round's loads). Closing it ends it;
    a worker that fails or falls silent is a KvtierError with the end of what it printed."""

    def __init__(self, build_dir: str, pool: Path, settings: ReadSettings):
        self.build_dir, self.settings = build_dir, settings
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_build_site(build_dir),
                                                                         os.environ.get("PYTHONPATH")])),
               "LMCACHE_DISABLE_BANNER": "1"}
        argv = [sys.executable, "-m", "kvtier.probes.coldread", "--serve", "--pool", str(pool),
                "--chunks", str(settings.chunks), "--chunk-mib", str(settings.chunk_mib),
                *(["--odirect"] if settings.use_odirect else []),
                *(["--quiet", json.dumps(settings.quiet)] if settings.quiet is not None else [])]
        self._stderr = tempfile.TemporaryFile(mode="w+")  # LMCache's log lines: kept for an error, never a pipe
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      text=True, env=env)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def running(self) -> bool:
        return self._proc.poll() is None

    def _read(self) -> None:
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # its output ended: it exited

    def loads(self, loads: list[tuple[int, bool]]) -> list[dict]:
        """One cold load per (load bound, checks checksums), in order."""
        return self._ask({"load_concurrency": [f"{bound}{coldread.CHECKED if checked else ''}"
                                               for bound, checked in loads]}, len(loads))

    def store(self, verify_checksum: bool = False) -> dict:
        """The chunks the pool lacks written (with their checksums where asked), nothing loaded."""
        return self._ask({"store_only": True, "verify_checksum": verify_checksum}, 1)[0]

    def _ask(self, request: dict, expected: int) -> list[dict]:
        what = "loads" if "load_concurrency" in request else "stores"
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        except OSError:
            raise self._failed(f"0 of {expected} {what}: it had exited") from None
        records, deadline = [], time.monotonic() + self.settings.timeout_s * expected
        while len(records) < expected:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise self._failed(f"{len(records)} of {expected} {what} within "
                                   f"{self.settings.timeout_s * expected:g} s") from None
            if line is None:
                raise self._failed(f"{len(records)} of {expected} {what}")
            if line.startswith("{"):
                records.append(json.loads(line))
        return records

    def _failed(self, what: str) -> KvtierError:
        self.close()
        self._stderr.seek(0)
        return KvtierError(f"cold load with {self.build_dir} failed (exit {self._proc.returncode}, {what}): "
                           f"{self._stderr.read().strip()[-800:]}")

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> ColdReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self._stderr.close()


def _round_loads(settings: ReadSettings, forward: bool,
                 only: dict[str, list[int]] | None = None) -> list[tuple[str, list[tuple[str, int, bool]]]]:
    """One round's cold loads, grouped by the build that makes them: [(build, [(reader, bound, checked)])]; with
    `only` ({reader: bounds}), just those. The order of readers and bounds alternates from round to round; the
    patched build's loads with and without checksums are adjacent either way, so one Python makes them all."""
    bounds = settings.load_bounds() if forward else settings.load_bounds()[::-1]
    groups: list[tuple[str, list[tuple[str, int, bool]]]] = []
    for reader in (settings.readers() if forward else settings.readers()[::-1]):
        build = "patched" if reader == CHECKSUM else reader
        loads = {"upstream": [1], "patched": bounds, CHECKSUM: [settings.load_concurrency]}[reader]
        if only is not None:
            loads = [bound for bound in loads if bound in only.get(reader, ())]
        if not loads:
            continue
        if not groups or groups[-1][0] != build:
            groups.append((build, []))
        groups[-1][1].extend((reader, bound, reader == CHECKSUM) for bound in loads)
    return groups


class _Looks:
    """The sequential plan of a reads run: after the first rounds, whether to stop. Each look (the targets still
    undecided after it) and why the rounds stopped go into run.json's `sequential`, written at every look."""

    def __init__(self, settings: ReadSettings, undecided: Callable[[Path], dict] | None, run: dict, run_dir: Path):
        most = settings.max_rounds or settings.rounds
        self.undecided = undecided if most > settings.rounds else None
        self.run, self.run_dir = run, run_dir
        self.record = run["sequential"] = {"rounds": settings.rounds, "max_rounds": most,
                                           "budget_s": settings.budget_s, "looks": [],
                                           "stop": FIXED if self.undecided is None else None}
        self.started = time.monotonic()
        self.needs: dict | None = None

    def stop_after(self, rounds: int) -> bool:
        """After `rounds` rounds: True to stop; otherwise `needs` says what the next round measures."""
        if self.undecided is None:
            return True
        needs = self.undecided(self.run_dir)
        seconds = round(time.monotonic() - self.started, 1)
        self.record["looks"].append({"after_rounds": rounds, "seconds": seconds, "undecided": needs["targets"]})
        if not needs["targets"]:
            self.record["stop"] = DECIDED
        elif rounds >= self.record["max_rounds"]:
            self.record["stop"] = ROUNDS_SPENT
        elif self.record["budget_s"] and seconds >= self.record["budget_s"]:
            self.record["stop"] = MINUTES_SPENT
        self.needs = needs
        write_run(self.run_dir, self.run)
        return self.record["stop"] is not None


def run_reads(settings: ReadSettings, run_dir: str | os.PathLike,
              undecided: Callable[[Path], dict] | None = None) -> dict:
    """R1 (a) and (b): interleaved rounds of cold loads per build, fio per queue depth, checkpoint saves. With a
    sequential plan (settings.max_rounds) and a judge (`undecided`: the reads directory -> {"targets", "loads",
    "depths"} still undecided, kvtier.evidence.r1.undecided_reads), more rounds of only what is undecided."""
    run_dir = Path(run_dir)
    fio_version = fio.version()  # refuses a missing fio before anything is written
    if settings.use_odirect:
        pagecache.require_odirect(settings.pool_path)  # and a pool that O_DIRECT cannot read
    sites = {name: _build_site(path) for name, path in settings.builds.items()}
    versions = {name: lmcache_build.read(path)["version"] for name, path in settings.builds.items()}
    spec = ckptsave.CheckpointSpec(**settings.checkpoint)
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunRecord(run_dir, "r1-reads", asdict(settings),
                    {"fio": fio_version, "lmcache_versions": versions, "sites": sites,
                     "checkpoint_spec": asdict(spec), "page_cache": coldread.page_cache(settings.use_odirect),
                     "platform": PLATFORM_FILE}) as run:
        platform_probe.write(run_dir / PLATFORM_FILE, {"local_disk": settings.local_disk_path,
                                                       "shared_pool": settings.pool_path, "run_dir": str(run_dir)},
                             lmcache_build=settings.builds["patched"])
        pool = Path(settings.pool_path) / COLDREAD_DIR
        shutil.rmtree(pool, ignore_errors=True)
        shards = ckptsave.state_dict_shards(spec)
        targets = {"local_disk": settings.local_disk_path, "shared_pool": settings.pool_path}
        check = quiet.hook(settings.quiet)  # built once, called before each timed read and save
        ledger = _Looks(settings, undecided, run, run_dir)
        try:
            with contextlib.ExitStack() as stack:
                readers = {build: stack.enter_context(ColdReader(path, pool, settings))
                           for build, path in settings.builds.items()}
                _measure_rounds(settings, run_dir, readers, pool, shards, targets, check, ledger)
        finally:
            shutil.rmtree(pool, ignore_errors=True)
    return json.loads((run_dir / RUN_FILE).read_text())


def _measure_rounds(settings: ReadSettings, run_dir: Path, readers: dict[str, ColdReader], pool: Path,
                    shards, targets: dict[str, str], check, ledger: _Looks) -> None:
    chunk_bytes = int(settings.chunk_mib * 2**20)
    if settings.verify_checksum:  # every file written with its checksum, so that each check has one to check
        readers["patched"].store(verify_checksum=True)
    with RecordWriter(run_dir / COLDREAD_FILE) as coldreads, RecordWriter(run_dir / FIO_FILE) as fios, \
            RecordWriter(run_dir / CHECKPOINT_FILE) as checkpoints:
        round_, needs = 0, None  # needs: after the first rounds, what the undecided targets measure
        while True:
            forward = round_ % 2 == 0  # alternate the order of builds and bounds from round to round
            for build, loads in _round_loads(settings, forward, needs and needs["loads"]):
                records = readers[build].loads([(bound, checked) for _, bound, checked in loads])
                for (reader, _, _), record in zip(loads, records):
                    coldreads.write({"round": round_, "build": reader, **record})
            for depth in (settings.queue_depths if needs is None else needs["depths"]):
                found = _quiet(check)
                fios.write({"round": round_, **fio.direct_read(pool, settings.chunks * chunk_bytes, chunk_bytes,
                                                               depth, settings.timeout_s), "quiet": found})
            for target, directory in (targets.items() if needs is None else ()):  # no target rests on them
                for writer in (ckptsave.WRITERS if forward else ckptsave.WRITERS[::-1]):
                    found = _quiet(check)
                    checkpoints.write({"round": round_, "target": target,
                                       **ckptsave.save(shards, directory, writer), "quiet": found})
            round_ += 1
            if round_ >= settings.rounds:
                if ledger.stop_after(round_):
                    break
                needs = ledger.needs


@dataclass(frozen=True)
class ResumeSettings:
    sessions: int = 9
    context_tokens: int = 12288
    rawread_rounds: int = 3

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise KvtierError(f"R1 resume settings: {name} must be a positive integer, not {value!r}")


def _quiet(check: Callable[[], dict] | None) -> dict | None:
    """Wait for a quiet machine with a kvtier.probes.quiet.hook and return what was found; None without one."""
    return check() if check else None


def raw_read(pool: Path, check: Callable[[], dict] | None = None) -> dict:
    """Read every chunk file of `pool` whole, one after another, right after dropping them from the page cache
    (and waiting for a quiet machine, with a quiet `check`)."""
    files = [p for p in pagecache.files_under(pool) if p.name.endswith(".data")]
    if not files:
        raise KvtierError(f"{pool}: no chunk files to read")
    pagecache.drop(pool)
    resident = pagecache.resident_bytes(pool)
    found = _quiet(check)
    total = 0
    start = time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while block := f.read(1 << 20):
                total += len(block)
    seconds = time.perf_counter() - start
    return {"files": len(files), "bytes": total, "seconds": seconds, "gb_per_s": total / seconds / 1e9,
            "resident_bytes_before": resident, "page_cache": "posix_fadvise DONTNEED", "quiet": found}


def run_resume(tier_settings, resume: ResumeSettings, run_dir: str | os.PathLike) -> dict:
    """A local_disk tier run of `resume.sessions` sessions of `resume.context_tokens` at concurrency 1 (each
    resume reads its chunks cold from L2), then the raw read time of the chunk files it resumed from, then an
    engine tier run of the same sessions (the floor: their resume with the KV in vLLM's prefix cache)."""
    run_dir = Path(run_dir)
    pool = Path(tier_settings.local_disk_path) / RESUME_POOL_DIR
    settings = dataclasses.replace(tier_settings, sessions=resume.sessions, context_tokens=resume.context_tokens,
                                   concurrency=[1], local_disk_path=str(pool))
    if settings.max_model_len < resume.context_tokens + settings.followup_tokens + settings.output_tokens:
        raise KvtierError(f"R1 resume: max_model_len {settings.max_model_len} is below a session's "
                          f"{resume.context_tokens} + {settings.followup_tokens} + {settings.output_tokens} tokens")
    if (run_dir / RUN_FILE).exists():
        raise KvtierError(f"{run_dir}: already holds a run; choose a new run directory")
    run_tier("local_disk", settings, run_dir / RESUME_RUN)
    with RunRecord(run_dir, "r1-resume", asdict(resume), {"tier_run": RESUME_RUN, "engine_hit_run": ENGINE_HIT_RUN,
                                                           "pool": str(pool)}):
        check = quiet.hook(tier_settings.quiet)
        with RecordWriter(run_dir / RAWREAD_FILE) as rawreads:
            for round_ in range(resume.rawread_rounds):
                rawreads.write({"round": round_, **raw_read(pool, check)})
        shutil.rmtree(pool, ignore_errors=True)
        run_tier("engine", settings, run_dir / ENGINE_HIT_RUN)
    return json.loads((run_dir / RUN_FILE).read_text())
