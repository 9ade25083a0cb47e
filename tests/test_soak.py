"""The G4 soak on the real stack (vLLM + the LMCache server): the test preset's soak in the session's pipeline run
(every fault once: LMCache killed, vLLM killed, the pool's file system full, chunks corrupted), its verdict and page;
and a soak stopped with Ctrl-C and resumed, with exactly one record per planned request. Nothing may be left
behind: no process, no mount, no shared-memory segment."""

import functools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import processes_mentioning, tool_env

pytestmark = [pytest.mark.vllm, pytest.mark.workflow]


def soak_dir(project: Path) -> Path:
    return project / "raw_data" / "runs" / "test" / "soak"


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def test_every_fault_of_the_test_preset_fired_and_was_recovered_from(built):
    run = soak_dir(built)
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "complete"
    faults = record["config"]["fault_list"]
    assert [f["kind"] for f in faults] == ["kill_vllm", "corrupt_chunk", "pool_full", "kill_lmcache"]
    seen = events(run)
    fired = {e["fault"]: e for e in seen if e["kind"] == "fault"}
    assert sorted(fired) == [0, 1, 2, 3]
    for index, server in ((0, "vllm"), (3, "lmcache")):
        assert fired[index]["server"] == server
        mine = [e["kind"] for e in seen if e.get("fault") == index]
        assert mine[:1] == ["fault"] and {"exit", "restart", "ready", "serving", "pool_check"} <= set(mine), mine
        check = next(e for e in seen if e.get("fault") == index and e["kind"] == "pool_check")["probe"]
        assert check["external_tokens"] > 0 and check["identical"], check  # the pool serves, and right
    probes = fired[1]["probes"]
    assert probes["control"]["external_tokens"] > 0 and probes["control"]["identical"]
    assert probes["corrupted"]["chunks"] and fired[1]["damaged"]
    # The pool's budget is lifted while the probes are compared: nothing damaged was evicted before the resend.
    assert probes["corrupted"]["files_present_before_resend"] == len(fired[1]["damaged"]) > 0
    # The patched build (patches/0003) refuses the damaged chunks: the probe is recomputed, its output unchanged.
    assert probes["corrupted"]["external_tokens"] == 0 and probes["corrupted"]["identical"], probes["corrupted"]
    if os.geteuid() == 0:
        assert fired[2]["filled_bytes"] > 0 and fired[2]["free_bytes"] < 2**20
        assert any(e["kind"] == "cleared" and e["fault"] == 2 for e in seen)
    else:
        print(f"pool_full not injected: {fired[2]['why']}")
        assert fired[2]["skipped"] and "root" in fired[2]["why"]
    # One record per request, every request due in the soak's duration sent.
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    ids = [r["request_id"] for r in records]
    assert len(ids) == len(set(ids))
    summary = json.loads((run / "summary.json").read_text())
    config = record["config"]
    due = config["workload"]["rate_per_s"] * config["duration_s"]  # Poisson arrivals: about this many
    assert summary["requests"] == sum(r["phase"] == "soak" for r in records) > 0.7 * due, (summary, due)


def test_g4_judges_the_soak_and_its_page_shows_the_faults(built):
    g4 = json.loads((built / "raw_data" / "runs" / "test" / "gates" / "G4.json").read_text())
    config = json.loads((soak_dir(built) / "run.json").read_text())["config"]
    line_of = {f["kind"]: f"{f['kind']} at {f['at_s']:g} s" for f in config["fault_list"]}  # the preset's schedule
    lines = {line["name"]: line for line in g4["lines"]}
    assert set(line_of.values()) <= set(lines), sorted(lines)
    for name in (line_of["kill_vllm"], line_of["kill_lmcache"], line_of["corrupt_chunk"],
                 "failed requests outside faults"):
        assert lines[name]["verdict"] == "PASS", lines[name]
    assert ".data" in lines[line_of["corrupt_chunk"]]["why"]  # the damaged chunk files, named
    page = (built / "evidence" / "R5" / "R5.html").read_text()
    assert "kill_lmcache" in page and "corrupt_chunk" in page and f"G4 {g4['verdict']}" in page
    assert "G4 stability soak" in (built / "evidence" / "gates" / "gates.html").read_text()
    windows = (built / "evidence" / "R5" / "R5_windows.csv").read_text().splitlines()
    assert len(windows) == 1 + math.ceil(config["duration_s"] / config["window_s"])  # the last one may be short


def test_nothing_of_the_soak_is_left_behind(built):
    run = soak_dir(built)
    pool = built / "pools" / "soak"
    assert not os.path.ismount(pool) and not pool.with_name("soak.img").exists()
    assert processes_mentioning(str(built)) == []
    left = [name for e in events(run) for name in e.get("removed_segments", [])]
    record = json.loads((run / "run.json").read_text())
    for name in left + record["metadata"].get("removed_segments", []):
        assert not Path("/dev/shm", name).exists(), name
    ports = {arg for argv in record["metadata"]["servers"].values() if argv
             for flag, arg in zip(argv, argv[1:]) if flag == "--port"}
    assert [p for p in ports if Path(f"/dev/shm/lmcache_l1_pool_kvtier-{p}").exists()] == []


SOAK_S = 24.0  # long enough to be stopped part way (after a dozen requests) and resumed; each start is ~30 s


def soak_command(model: Path, build: Path, run_dir: Path, *extra: str) -> list[str]:
    servers = {"model_dir": str(model), "served_name": "tiny", "max_model_len": 1536, "engine_kv_tokens": 4096,
               "lmcache_l1_gb": 0.02, "lmcache_build": str(build), "shared_pool_path": str(run_dir.parent / "pool")}
    settings = {"servers": servers, "duration": f"{SOAK_S:g}s", "window_s": 10, "sample_s": 2, "pool_quota_gb": 0.02,
                "faults": [], "workload": {"rate_per_s": 2.0, "slots": 4, "context_tokens": 512,
                                           "followup_tokens": 8, "output_tokens": 4, "turns": 3}}
    return [sys.executable, "-m", "kvtier", "soak", "--run-dir", str(run_dir), "--settings", json.dumps(settings),
            *extra]


def test_a_soak_stopped_with_ctrl_c_resumes_where_it_stopped_with_one_record_per_request(tiny_model, lmcache_builds,
                                                                                         tmp_path):
    """On the session's model and patched build: it needs no run of the pipeline."""
    from kvtier.runs.soak_workload import SoakWorkload, stream

    run_dir = tmp_path / "soak"
    command = functools.partial(soak_command, tiny_model, lmcache_builds["patched"][0], run_dir)
    proc = subprocess.Popen(command(), cwd=tmp_path, env=tool_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not ((run_dir / "requests.jsonl").is_file() and len((run_dir / "requests.jsonl").read_text().splitlines()) > 12):
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "the soak sent nothing"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:]
    stopped = json.loads((run_dir / "run.json").read_text())
    assert stopped["status"] == "incomplete" and 0 < stopped["segments"][0]["soak_to_s"] < SOAK_S
    assert processes_mentioning(str(tmp_path)) == []

    done = subprocess.run(command("--resume"), cwd=tmp_path, env=tool_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete" and len(record["segments"]) == 2
    assert record["segments"][1]["soak_from_s"] == stopped["segments"][0]["soak_to_s"]
    assert record["segments"][1]["soak_to_s"] >= SOAK_S
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    soaked = [r["request_id"] for r in records if r["phase"] == "soak"]
    assert len(soaked) == len(set(soaked)), "a request was recorded twice"
    # Every request the soak planned (the same seeded stream) has its one record, across both segments.
    planned = {item.request_id for item in stream(SoakWorkload(**json.loads(command()[-1])["workload"]),
                                                  list(range(100, 400)), SOAK_S)}
    assert set(soaked) == planned
    assert {r["segment"] for r in records if r["phase"] == "soak"} == {1, 2}
    assert processes_mentioning(str(tmp_path)) == []
