"""Termination signals unwound like Ctrl-C, so that what a process started is stopped and not left behind.

`kvtier` commands take SIGTERM (Snakemake cancelling a job, a scheduler's kill) this way: servers are stopped
and runs are marked incomplete. The workflow takes SIGTERM and SIGHUP this way too (Snakefile, `onstart`):
Snakemake's own SIGTERM waits for running jobs and SIGHUP (a closed login session) kills it outright, and either
way the jobs it submitted to a cluster would go on without it, holding nodes and servers. As Ctrl-C, Snakemake
cancels them (scancel) and stops its local jobs.
"""

from __future__ import annotations

import signal


def _raise(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on(*signals: int) -> None:
    """From now on, each of `signals` raises KeyboardInterrupt in the main thread."""
    for signum in signals or (signal.SIGTERM,):
        signal.signal(signum, _raise)
