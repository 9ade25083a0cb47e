"""Tier runs on the real stack: interrupted, or with a server killed mid-run, they leave no process behind and
no run directory that looks complete."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtier.runs.campaign import attribution
from kvtier.stack.process import group_members

from conftest import copy_project, processes_mentioning, tool_env

pytestmark = pytest.mark.vllm


def wait_for(path: Path, timeout_s: float = 300, proc=None) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        assert proc is None or proc.poll() is None, f"the command exited {proc.returncode} before {path} appeared"
        time.sleep(0.5)


def settle(marker: str, timeout_s: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    return processes_mentioning(marker)


def test_interrupting_a_rule_stops_every_server(tmp_path):
    project = copy_project(tmp_path / "kvtier")
    # dram's run: vLLM and an LMCache server, started as soon as the model is generated (the environment's own
    # LMCache: no build to wait for), and nothing measured before it.
    target = "raw_data/runs/test/round-1/dram"
    # One tier: G3, which compares the pool with recompute, has nothing to judge, so no gates.
    (project / "one_run.yaml").write_text("runs: {tiers: [dram], cross_instance: false, rounds: 1, max_rounds: 1}\n"
                                          "gates: {enabled: false}\nlmcache: {build: installed}\n")
    proc = subprocess.Popen(["snakemake", target, "--cores", "2", "--configfile", "config/presets/test.yaml",
                             "one_run.yaml"],
                            cwd=project, env=tool_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    wait_for(project / target / "requests.jsonl", proc=proc)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground process group
    proc.wait(timeout=120)
    assert settle(str(project)) == [], "an interrupted rule left servers running"
    run = project / target / "run.json"
    assert not run.exists() or json.loads(run.read_text())["status"] == "incomplete"
    assert not (project / target / "summary.json").exists()


def test_a_server_killed_mid_run_fails_the_tier_and_leaves_nothing(tiny_model, tmp_path):
    settings = {"model_dir": str(tiny_model), "served_name": "tiny", "sessions": 8, "context_tokens": 2048,
                "followup_tokens": 16, "output_tokens": 8, "concurrency": [2, 4], "max_model_len": 8192,
                "engine_kv_gib": 1, "lmcache_l1_gb": 0.5, "timeout_s": 30,
                "local_disk_path": str(tmp_path / "pool_local"), "shared_pool_path": str(tmp_path / "pool_shared")}
    run_dir = tmp_path / "dram"
    proc = subprocess.Popen([sys.executable, "-m", "kvtier", "tier-run", "dram", "--run-dir", str(run_dir),
                             "--settings", json.dumps(settings)], env=tool_env(), stderr=subprocess.PIPE, text=True)
    wait_for(run_dir / "requests.jsonl", proc=proc)
    # This tier's vLLM, by its port (other tests' servers may serve the same model).
    port = json.loads((run_dir / "run.json").read_text())["config"]["base_url"].rsplit(":", 1)[1]
    vllm = [pid for pid in processes_mentioning("kvtier.stack.vllm_cpu_serve")
            # its arguments one by one, or (forked from the fork server) as one title
            if f" --port {port} " in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()]
    assert len(vllm) == 1, vllm
    pgid = os.getpgid(vllm[0])
    os.killpg(pgid, signal.SIGKILL)
    proc.communicate(timeout=300)
    assert group_members(pgid) == []
    assert settle(str(tmp_path)) == [], "LMCache or vLLM left running"
    status = json.loads((run_dir / "run.json").read_text())["status"]
    if proc.returncode != 0:  # the next eviction found the server gone: the run stopped, marked incomplete
        assert status == "incomplete"
    else:  # the server died after the last eviction: every lost request is recorded and no window counts
        windows = json.loads((run_dir / "summary.json").read_text())["windows"]
        assert sum(w["requests"]["failed"] for w in windows) > 0
        assert not all(attribution("dram", w)["valid"] for w in windows)


def test_the_restart_eviction_resumes_from_l2_with_the_same_outputs(tiny_model, tmp_path):
    """local_disk on the servers dram started (runs.share_servers), L2 evicted by restarting LMCache
    (`l2_eviction: restart`): dram's resumes come from L1, local_disk's from L2, each as its attribution rule
    demands, to the same greedy outputs. The default eviction (`clear`) is the pipeline's: the test preset's run
    checks the same of it on every window (tests/test_workflow.py)."""
    from kvtier.runs.campaign import _outputs
    from kvtier.runs.tier_run import TierSettings, run_tiers
    settings = TierSettings(model_dir=str(tiny_model), served_name="tiny", sessions=2, context_tokens=1024,
                            followup_tokens=16, output_tokens=8, concurrency=[2], max_model_len=8192,
                            engine_kv_gib=1, lmcache_l1_gb=0.5, timeout_s=120, l2_eviction="restart",
                            local_disk_path=str(tmp_path / "pool"), shared_pool_path=str(tmp_path / "shared"))
    dram, local_disk = run_tiers(("dram", "local_disk"), settings, (tmp_path / "dram", tmp_path / "run"))
    row = attribution("dram", dram["windows"][0])
    assert row["valid"] and row["l1_hit_tokens"] >= 1024 and row["l2_hit_tokens"] == 0, row
    (window,) = local_disk["windows"]
    row = attribution("local_disk", window)
    assert row["valid"] and row["l2_hit_tokens"] >= 1024 and row["l1_hit_tokens"] == 0, row
    log = (tmp_path / "dram" / "server_logs" / "vllm.log").read_text()
    # One start for both tiers, and one more for the L2 eviction of local_disk's one window.
    assert log.count("Application startup complete.") == 2
    # Each with its engine core forked, LMCache's connector loaded (kvtier.stack.vllm_cpu_serve).
    from kvtier.stack.vllm_cpu_serve import FORK_NOTE
    assert log.count(FORK_NOTE) == 2
    assert not (tmp_path / "run" / "server_logs").exists()
    outputs = _outputs(tmp_path / "run")
    assert outputs and outputs == _outputs(tmp_path / "dram"), "L1 and L2 resumed the same sessions to different outputs"
