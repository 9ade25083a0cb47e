"""G2's storage baseline (rule g2_storage, `kvtier g2-storage`): what each tier path delivers before any KV is put
on it, into raw_data/runs/<campaign>/G2/storage/.

Per repetition, and per tier path (in an order alternated from one repetition to the next): fio's direct
sequential write, then sequential read, then 4 KiB random read, at each configured queue depth, on one file per
path (kvtier.probes.fio), each pass after the quiet check. A path whose sequential reads R1 already measured in
the same run (its fio rounds on the pool path) is not read sequentially again (`read_paths` leaves it out); G2's
verdict takes those rounds from R1's fio.jsonl (kvtier.gates.g2.load_storage).

storage.jsonl holds one record per pass, appended and flushed as it is taken; run.json says whether the run
completed; probes/platform.json records the platform and the paths' mounts.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..bench.records import RecordWriter
from ..bench.runner import RUN_FILE
from ..core.errors import KvtierError
from ..probes import fio, pagecache, platform_probe, quiet
from ..probes.platform_probe import PLATFORM_FILE
from .run_record import RunRecord

STORAGE_FILE = "storage.jsonl"
SCRATCH_DIR = "kvtier-g2-fio"
# What each fio direction is called on the page and in the verdict, and the file size it covers.
SEQUENTIAL_BLOCK = 1 << 20
RANDOM_BLOCK = 4 << 10


@dataclass(frozen=True)
class StorageSettings:
    paths: dict[str, str]  # tier name -> directory (local_disk, shared_pool)
    read_paths: list[str] | None = None  # tiers whose sequential reads are measured here (None: every path)
    queue_depths: list[int] = field(default_factory=lambda: [1, 8, 32])
    repetitions: int = 3
    size_mib: int = 256  # the sequential passes' file
    random_mib: int = 64  # the part of it the random 4 KiB reads cover
    timeout_s: float = 600.0
    quiet: dict | None = None

    def __post_init__(self):
        if not self.paths:
            raise KvtierError("G2 storage: no tier path to measure")
        for name, value in (("repetitions", self.repetitions), ("size_mib", self.size_mib),
                            ("random_mib", self.random_mib)):
            if not isinstance(value, int) or value < 1:
                raise KvtierError(f"G2 storage settings: {name} must be a positive integer, not {value!r}")
        if self.random_mib > self.size_mib:
            raise KvtierError(f"G2 storage settings: random_mib {self.random_mib} exceeds size_mib {self.size_mib}")
        if not self.queue_depths or any(not isinstance(q, int) or q < 1 for q in self.queue_depths):
            raise KvtierError(f"G2 storage settings: queue_depths must be positive integers, not "
                              f"{self.queue_depths!r}")
        unknown = set(self.read_paths or []) - set(self.paths)
        if unknown:
            raise KvtierError(f"G2 storage settings: read_paths {sorted(unknown)} are not among the paths "
                              f"{sorted(self.paths)}")
        quiet.hook(self.quiet)  # refuses bad quiet bounds before anything runs

    def passes(self, path: str) -> list[tuple[str, int, int]]:
        """(rw, size, block) in the order they run on `path`: the write lays out the file the reads read."""
        size, random = self.size_mib << 20, self.random_mib << 20
        reads = self.read_paths is None or path in self.read_paths
        return [("write", size, SEQUENTIAL_BLOCK), *([("read", size, SEQUENTIAL_BLOCK)] if reads else []),
                ("randread", random, RANDOM_BLOCK)]


def run_storage(settings: StorageSettings, run_dir: str | os.PathLike) -> dict:
    run_dir = Path(run_dir)
    fio_version = fio.version()  # refuses a missing fio before anything is written
    for directory in settings.paths.values():
        Path(directory).mkdir(parents=True, exist_ok=True)
        pagecache.require_odirect(directory)  # the passes are direct: a path O_DIRECT cannot take is refused
    run_dir.mkdir(parents=True, exist_ok=True)
    scratch = {name: Path(directory) / SCRATCH_DIR for name, directory in settings.paths.items()}
    with RunRecord(run_dir, "g2-storage", asdict(settings), {"fio": fio_version, "platform": PLATFORM_FILE}):
        platform_probe.write(run_dir / PLATFORM_FILE, {**settings.paths, "run_dir": str(run_dir)})
        check = quiet.hook(settings.quiet)
        try:
            with RecordWriter(run_dir / STORAGE_FILE) as out:
                names = list(settings.paths)
                for rep in range(settings.repetitions):
                    for name in (names if rep % 2 == 0 else names[::-1]):
                        for rw, size, block in settings.passes(name):
                            for depth in settings.queue_depths:
                                found = check() if check else None
                                out.write({"rep": rep, "path": name, **fio.direct(
                                    scratch[name], size, block, depth, rw, settings.timeout_s), "quiet": found})
        finally:
            for directory in scratch.values():
                shutil.rmtree(directory, ignore_errors=True)
    return json.loads((run_dir / RUN_FILE).read_text())
