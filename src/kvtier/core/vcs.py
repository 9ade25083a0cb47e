"""The source revision a result was made from, when the project is a git checkout."""

from __future__ import annotations

import os
import subprocess


def git_revision(cwd: str | os.PathLike = ".") -> str | None:
    """`git describe --always --dirty --abbrev=40`, or None outside a git checkout (e.g. an unpacked release)."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"], cwd=cwd,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
