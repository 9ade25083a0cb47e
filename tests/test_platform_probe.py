"""The platform probe (R4): its record validates, secrets never reach it, the devices behind paths are named."""

import json
import os
import sys

import pytest

from kvtier.core.errors import KvtierError
from kvtier.probes import platform_probe
from kvtier.stack.model import config_hash

from conftest import ROOT, run

SECRET = "do-not-record-7f3a"
SECRET_NAMES = ["HF_TOKEN", "VLLM_API_KEY", "LMCACHE_SECRET_ACCESS", "SLURM_DB_PASSWORD", "CUDA_token_file",
                "AWS_SECRET_ACCESS_KEY"]


def test_the_standalone_script_records_the_platform_and_never_a_secret(tmp_path, tiny_model):
    pool = tmp_path / "pool"
    pool.mkdir()
    env = {**os.environ, **{name: SECRET for name in SECRET_NAMES}, "VLLM_CPU_KVCACHE_SPACE": "3",
           "OMP_NUM_THREADS": "2"}
    out = tmp_path / "run" / "probes" / "platform.json"
    import subprocess
    done = subprocess.run([sys.executable, str(ROOT / "probes" / "platform_probe.py"), "--out", str(out),
                           "--path", f"shared_pool={pool}", "--path", f"later={tmp_path / 'not' / 'yet'}",
                           "--model-dir", str(tiny_model)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert SECRET not in text
    record = platform_probe.read(out)
    assert record["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert record["environment"]["OMP_NUM_THREADS"] == "2"
    assert not set(SECRET_NAMES) & set(record["environment"])
    assert record["model"]["config_hash"] == config_hash(tiny_model)
    assert record["model"]["num_hidden_layers"] == 4
    storage = record["storage"]
    assert storage["shared_pool"]["exists"] and storage["shared_pool"]["mount"]["fstype"]
    assert storage["later"]["exists"] is False and storage["later"]["probed"] == str(tmp_path)
    st = os.stat(pool)
    assert storage["shared_pool"]["st_dev"] == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    assert record["cpu"]["usable_cpus"] == len(os.sched_getaffinity(0))
    assert record["memory"]["total_bytes"] > 0
    assert record["software"]["packages"]["lmcache"] and record["software"]["lmcache"]["patch_set"]


def test_secret_names_are_refused_whatever_their_prefix():
    env = {"VLLM_API_KEY": "x", "HF_TOKEN": "x", "LMCACHE_PASSWORD": "x", "VLLM_LOGGING_LEVEL": "INFO",
           "HOME": "/home/someone", "NCCL_DEBUG": "WARN"}
    assert platform_probe.environment(env) == {"NCCL_DEBUG": "WARN", "VLLM_LOGGING_LEVEL": "INFO"}


def test_an_accelerator_tool_on_path_is_run_and_parsed(tmp_path, monkeypatch):
    # A stand-in nvidia-smi (measuring instrument: this machine has no accelerator) printing its CSV format.
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '0, NVIDIA H200, 143771 MiB, 570.86, 00000000:18:00.0'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = platform_probe.accelerators()
    assert found["present"] and found["tools"]["nvidia-smi"]["exit_code"] == 0
    assert found["devices"] == [{"vendor": "nvidia", "index": "0", "name": "NVIDIA H200", "memory": "143771 MiB",
                                 "driver": "570.86", "bus_id": "00000000:18:00.0"}]


def test_a_damaged_record_is_refused_naming_the_field(tmp_path):
    good = platform_probe.probe({"here": str(tmp_path)})
    bad = json.loads(json.dumps(good))
    bad["cpu"]["usable_cpus"] = "two"
    path = tmp_path / "platform.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(KvtierError, match=r"platform.json: 'two' is not of type 'integer' at cpu/usable_cpus"):
        platform_probe.read(path)
    bad = json.loads(json.dumps(good))
    bad["environment"]["HF_TOKEN"] = "leaked"
    path.write_text(json.dumps(bad))
    with pytest.raises(KvtierError, match="HF_TOKEN"):
        platform_probe.read(path)


def test_bad_arguments_are_refused_and_nothing_is_written(tmp_path):
    out = tmp_path / "p.json"
    proc = run(["kvtier", "probe", "--out", str(out), "--path", "nameless"], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "--path 'nameless'" in proc.stderr
    proc = run(["kvtier", "probe", "--out", str(out), "--model-dir", str(tmp_path)], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "no config.json there" in proc.stderr
    assert not list(tmp_path.iterdir())
