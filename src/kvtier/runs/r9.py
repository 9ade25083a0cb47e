"""R9 on this machine (rule r9_loads, `kvtier r9-loads`): how long vLLM takes to load one model's weights from each
tier path, cold and warm, beside the raw read time of the weight files (the floor), into
raw_data/runs/<campaign>/R9/.

The model (a generated one, large enough that reading its weights is not lost in start-up noise) is copied to
each tier path first. Then, per repetition and per path (the order alternated from one repetition to the next):
- **cold**: the copy's pages are dropped from the page cache (kvtier.probes.pagecache.drop; what stayed resident
  is recorded), vLLM is started on it and stopped; then the pages are dropped again (what stayed resident is
  recorded again) and the weight files are read whole, one after another (the raw read: what loading them costs
  at the least);
- **warm**: the files are read again (now from the page cache), and vLLM is started on them and stopped.

Each start records vLLM's own "Loading weights took N seconds", the time from launch to a server that answers
(time to ready) and how it was started: whole, a new Python (by default: ready_s includes vLLM's import, as a
user's start does), or forked from the run's fork server where `fork` asks for it (ready_s from the fork).
loads.jsonl holds one record per case, appended and flushed as it is taken; run.json says whether the run
completed; the copies are removed whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..bench.records import RecordWriter
from ..bench.runner import RUN_FILE
from ..core.errors import KvtierError
from ..probes import pagecache, platform_probe, quiet
from ..probes.platform_probe import PLATFORM_FILE
from ..stack.fork_server import Forked
from ..stack.vllm_server import VllmServer
from .run_record import RunRecord

LOADS_FILE = "loads.jsonl"
COPY_DIR = "kvtier-r9-model"
STATES = ("cold", "warm")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
LOADING_WEIGHTS = re.compile(r"Loading weights took ([0-9.]+) seconds")
READ_BLOCK = 8 << 20


@dataclass(frozen=True)
class LoadSettings:
    model_dir: str
    paths: dict[str, str]  # tier name -> directory the model is copied to
    repetitions: int = 3
    max_model_len: int = 512
    kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE takes whole GiB
    platform: str = "cpu"
    vllm_command: list[str] = field(default_factory=list)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    dtype: str = "float32"
    vllm_extra_args: list[str] = field(default_factory=list)
    timeout_s: float = 600.0
    quiet: dict | None = None
    # Forked from the run's fork server where it has one: ready_s then leaves vLLM's import out. Off: every start
    # is whole, as a user's is.
    fork: bool = False

    def __post_init__(self):
        if not self.paths:
            raise KvtierError("R9: no tier path to load from")
        if not isinstance(self.fork, bool):
            raise KvtierError(f"R9 settings: fork must be true or false, not {self.fork!r}")
        if not isinstance(self.repetitions, int) or self.repetitions < 1:
            raise KvtierError(f"R9 settings: repetitions must be a positive integer, not {self.repetitions!r}")
        if not (Path(self.model_dir) / "config.json").is_file():
            raise KvtierError(f"R9 settings: {self.model_dir} holds no model (no config.json)")
        quiet.hook(self.quiet)


def weight_files(model_dir: str | os.PathLike) -> list[Path]:
    files = sorted(p for p in Path(model_dir).iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        raise KvtierError(f"{model_dir}: no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    return files


def raw_read(files: list[Path]) -> dict:
    """Read every file whole, one after another, through the page cache: seconds and bytes."""
    start, total = time.perf_counter(), 0
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(READ_BLOCK):
                total += len(chunk)
    seconds = time.perf_counter() - start
    return {"raw_read_s": seconds, "raw_read_bytes": total, "raw_read_gb_s": total / seconds / 1e9}


def loading_weights_s(log: Path, offset: int) -> float | None:
    """vLLM's own figure, from the part of its log this start wrote."""
    with open(log, "rb") as f:
        f.seek(offset)
        found = LOADING_WEIGHTS.findall(f.read().decode(errors="replace"))
    return float(found[-1]) if found else None


def start_and_stop(settings: LoadSettings, model_dir: Path, log: Path) -> dict:
    offset = log.stat().st_size if log.exists() else 0
    server = VllmServer(str(model_dir), str(log), served_name=COPY_DIR, max_model_len=settings.max_model_len,
                        kv_cache_gib=settings.kv_cache_gib, platform=settings.platform,
                        vllm_command=list(settings.vllm_command),
                        tensor_parallel_size=settings.tensor_parallel_size,
                        gpu_memory_utilization=settings.gpu_memory_utilization, dtype=settings.dtype,
                        extra_args=list(settings.vllm_extra_args), ready_timeout_s=settings.timeout_s,
                        fork=settings.fork)
    start = time.perf_counter()
    try:
        server.start()
        ready_s = time.perf_counter() - start
        forked = isinstance(server.process, Forked)
    finally:
        server.stop()
    return {"ready_s": ready_s, "start": "forked" if forked else "whole",
            "loading_weights_s": loading_weights_s(log, offset)}


def run_loads(settings: LoadSettings, run_dir: str | os.PathLike) -> dict:
    run_dir = Path(run_dir)
    source_files = weight_files(settings.model_dir)
    weights_bytes = sum(p.stat().st_size for p in source_files)
    run_dir.mkdir(parents=True, exist_ok=True)
    copies = {name: Path(directory) / COPY_DIR for name, directory in settings.paths.items()}
    with RunRecord(run_dir, "r9-loads", asdict(settings), {"weights_bytes": weights_bytes,
                                                           "platform": PLATFORM_FILE}):
        platform_probe.write(run_dir / PLATFORM_FILE, {**settings.paths, "run_dir": str(run_dir)},
                             model_dir=settings.model_dir)
        check = quiet.hook(settings.quiet)
        log_dir = run_dir / "server_logs"
        log_dir.mkdir(exist_ok=True)
        try:
            for copy in copies.values():
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(settings.model_dir, copy)
            with RecordWriter(run_dir / LOADS_FILE) as out:
                names = list(copies)
                for rep in range(settings.repetitions):
                    for name in (names if rep % 2 == 0 else names[::-1]):
                        files = weight_files(copies[name])
                        log = log_dir / f"{name}.log"
                        # cold: the copy out of the page cache, vLLM started on it; then the raw read, cold too
                        pagecache.drop(copies[name])
                        found = check() if check else None
                        resident = pagecache.resident_bytes(copies[name])
                        started = start_and_stop(settings, copies[name], log)
                        pagecache.drop(copies[name])
                        # what the raw read could find in this machine's page cache (a cold read faster than the
                        # device with none resident came from below it: a hypervisor's cache, say)
                        resident_raw = pagecache.resident_bytes(copies[name])
                        floor = raw_read(files)
                        out.write({"rep": rep, "path": name, "state": "cold", "weights_bytes": weights_bytes,
                                   "resident_before_bytes": resident, "resident_before_raw_bytes": resident_raw,
                                   **started, **floor, "quiet": found})
                        # warm: the files just read are in the page cache; read again, then vLLM on them
                        found = check() if check else None
                        floor = raw_read(files)
                        resident = pagecache.resident_bytes(copies[name])
                        started = start_and_stop(settings, copies[name], log)
                        out.write({"rep": rep, "path": name, "state": "warm", "weights_bytes": weights_bytes,
                                   "resident_before_bytes": resident, **started, **floor, "quiet": found})
        finally:
            for copy in copies.values():
                shutil.rmtree(copy, ignore_errors=True)
    return json.loads((run_dir / RUN_FILE).read_text())
