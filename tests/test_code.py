"""The code itself: ruff (pinned in requirements.lock, rules in pyproject.toml) finds nothing."""

import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).with_name("ruff")
    proc = subprocess.run([str(ruff), "check", "--no-cache", str(ROOT)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_would_catch_an_unused_import(tmp_path):
    # The check above can fail: the same configuration flags a planted fault.
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    ruff = Path(sys.executable).with_name("ruff")
    proc = subprocess.run([str(ruff), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "F401" in proc.stdout
