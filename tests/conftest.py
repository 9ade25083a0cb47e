"""Shared fixtures: the repository root, a scratch copy of the project, and a subprocess runner."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PUBLISHED = ROOT / "raw_data" / "published"
BIN = Path(sys.executable).parent

# The interrupt tests press Ctrl-C (SIGINT) on the commands they start. A shell script that starts pytest in the
# background leaves SIGINT ignored, and ignored signals stay ignored across exec: restore the terminal's default
# so that the children see Ctrl-C as a user would.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def tool_env() -> dict:
    """Environment for subprocesses: this interpreter's bin first, so `kvtier` and `snakemake` are ours."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(cmd: list[str], cwd: Path, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n"
                             f"--- stderr\n{proc.stderr}")
    return proc


NOT_PROJECT = {".venv", ".snakemake", ".git", "logs", "__pycache__", ".pytest_cache"}


def project_files() -> list[str]:
    """Files a fresh clone would have, plus files not yet committed (but never ignored ones)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return [f for f in out.split("\0") if f and ((ROOT / f).exists() or (ROOT / f).is_symlink())]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: an unpacked release
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                if p.is_file() and not NOT_PROJECT & set(p.relative_to(ROOT).parts)
                and (p.parts[len(ROOT.parts)] != "evidence" or p.name == "README.md")]


def copy_project(dest: Path) -> Path:
    for rel in project_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target, follow_symlinks=False)  # profiles/default is a link
    return dest


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    return copy_project(tmp_path / "kvtier")


# ---------------------------------------------------------------------------------------------------------------
# The real stack: a generated model and one vLLM CPU server per test session.

@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from kvtier.stack.model import ModelSpec, generate
    return generate(tmp_path_factory.mktemp("model") / "tiny", ModelSpec(seed=0, max_positions=8192))


@pytest.fixture(scope="session")
def vllm_server(tiny_model, tmp_path_factory):
    from kvtier.stack.vllm_server import VllmServer
    server = VllmServer(str(tiny_model), str(tmp_path_factory.mktemp("logs") / "vllm.log"), served_name="tiny",
                        max_model_len=8192, kv_cache_gib=1)
    with server:
        yield server


@pytest.fixture(scope="session")
def upstream_wheel(tmp_path_factory):
    """The real upstream LMCache wheel, fetched once (pip download, sha256 checked)."""
    from kvtier.stack import lmcache_build
    return lmcache_build.fetch(lmcache_build.Upstream(), tmp_path_factory.mktemp("upstream"))


@pytest.fixture(scope="session")
def lmcache_builds(upstream_wheel, tmp_path_factory) -> dict:
    """Both LMCache builds, made once: {"upstream" | "patched": (build directory, build record)}."""
    from kvtier.stack import lmcache_build
    root = tmp_path_factory.mktemp("builds")
    patches = sorted((ROOT / "patches").glob("*.patch"))
    return {name: (root / name, lmcache_build.build(upstream_wheel, lmcache_build.Upstream(), files, root / name))
            for name, files in (("upstream", []), ("patched", patches))}
