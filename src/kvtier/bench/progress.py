"""A one-line progress display on a terminal; silent when stderr is not a TTY (logs, CI, Snakemake)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.name, self.total, self.ok, self.failed, self._last = "", 0, 0, 0, 0.0

    def start(self, name: str, total: int) -> None:
        self.name, self.total, self.ok, self.failed = name, total, 0, 0
        self._draw(force=True)

    def update(self, ok: bool) -> None:
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        self._draw(force=self.ok + self.failed == self.total)

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < 0.1):
            return
        self._last = now
        done = self.ok + self.failed
        width = 30
        filled = int(width * done / self.total) if self.total else width
        self.stream.write(f"\r{self.name:<14} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total}"
                          f"  ok {self.ok}  failed {self.failed} ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
