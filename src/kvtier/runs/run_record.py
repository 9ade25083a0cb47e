"""run.json of a probe run (R1's reads and resume, G2's storage, R9's loads): running until the body returns, then
complete, or incomplete with the error. A directory that already holds a run is refused, never overwritten."""

from __future__ import annotations

from pathlib import Path

from ..bench.runner import RUN_FILE, now_utc, write_run
from ..core.errors import KvtierError
from ..core.vcs import git_revision


class RunRecord:
    def __init__(self, run_dir: Path, kind: str, settings: dict, extra: dict):
        if (run_dir / RUN_FILE).exists():
            raise KvtierError(f"{run_dir}: already holds a run; choose a new run directory")
        self.run_dir = run_dir
        self.run = {"kind": kind, "status": "running", "start": now_utc(), "end": None, "error": None,
                    "git_revision": git_revision(), "settings": settings, **extra}
        write_run(self.run_dir, self.run)

    def __enter__(self) -> dict:
        return self.run

    def __exit__(self, exc_type, exc, tb) -> None:
        self.run["status"] = "complete" if exc_type is None else "incomplete"
        self.run["error"] = None if exc is None else f"{exc_type.__name__}: {exc}"
        self.run["end"] = now_utc()
        write_run(self.run_dir, self.run)
