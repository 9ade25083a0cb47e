"""kvtier bench against the real vLLM CPU server (one per test session, a model generated here)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kvtier.bench.records import latest_per_request, read_records
from kvtier.bench.runner import BenchConfig, Runner
from kvtier.core.errors import KvtierError

from conftest import ROOT, tool_env

pytestmark = pytest.mark.vllm


def cfg(server, **overrides) -> BenchConfig:
    base = dict(base_url=server.base_url, model="tiny", workload="cold-resume", sessions=4, context_tokens=1024,
                followup_tokens=16, output_tokens=8, concurrency=[2, 4], timeout_s=120,
                metrics_urls={"vllm": f"{server.base_url}/metrics"})
    return BenchConfig(**{**base, **overrides})


def window(summary, name):
    return next(w for w in summary["windows"] if w["window"] == name)


def test_cold_resume_after_reset_recomputes_every_prefix(vllm_server, tmp_path):
    summary = Runner(cfg(vllm_server, evict="reset-prefix-cache", ttft_sla_s=5.0), tmp_path / "run",
                     progress=False).run()
    assert [w["window"] for w in summary["windows"]] == ["resume-c2", "resume-c4"]
    for name in ("resume-c2", "resume-c4"):
        w = window(summary, name)
        assert w["requests"]["ok"] == 4 and w["prompt_tokens"] == 4 * (1024 + 16)
        assert w["cached_tokens"] == 0, "the prefix cache was reset before the resume"
        assert w["output_tokens"] == 4 * 8 and w["ttft_s"]["p50"] > 0
        deltas = w["server_metrics"]["vllm"]["deltas"]
        computed = sum(v for k, v in deltas.items() if k.startswith("vllm:prompt_tokens_by_source_total")
                       and 'source="local_compute"' in k)
        assert computed == 4 * (1024 + 16)
        rec = w["ttft_reconciliation"]
        assert rec["available"] and rec["server_count"] == 4
        assert rec["client_mean_s"] >= rec["server_mean_s"] * 0.9  # the client sees at least the engine's TTFT
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "complete" and run["phases_done"] == ["populate", "resume-c2", "resume-c4"]
    assert len(list(read_records(tmp_path / "run" / "requests.jsonl"))) == 4 + 4 + 4


def test_without_eviction_the_resume_hits_the_prefix_cache(vllm_server, tmp_path):
    summary = Runner(cfg(vllm_server, evict="none", concurrency=[2]), tmp_path / "run", progress=False).run()
    cached = window(summary, "resume-c2")["cached_tokens"]
    # vLLM caches whole blocks (128 tokens on CPU): each 1024-token context, less at most one block, is cached.
    assert 4 * (1024 - 128) <= cached <= 4 * 1024


def test_a_run_stopped_after_populate_is_handed_off_and_another_process_finishes_it(vllm_server, tmp_path):
    """R3's hand-off at the client's level (kvtier.runs.cross_instance): one Runner populates and stops, another
    (here: the same server, as if on another node) resumes the same run; one run, two segments, no request twice."""
    run_dir = tmp_path / "run"
    handed = Runner(cfg(vllm_server, evict="none", concurrency=[2]), run_dir, progress=False,
                    metadata={"role": "writer"}, stop_after="populate").run()
    assert handed["status"] == "incomplete" and handed["phases_done"] == ["populate"]
    assert handed["segments"][0]["status"] == "handed-off" and not (run_dir / "summary.json").exists()
    summary = Runner(cfg(vllm_server, evict="none", concurrency=[2]), run_dir, resume=True, progress=False,
                     metadata={"reader": True}).run()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and [s["status"] for s in run["segments"]] == ["handed-off", "complete"]
    assert run["metadata"] == {"role": "writer", "reader": True}
    assert all(s["host"] and s["base_url"] == vllm_server.base_url for s in run["segments"])
    records = list(read_records(run_dir / "requests.jsonl"))
    assert [r["segment"] for r in records] == [1] * 4 + [2] * 4 and len(latest_per_request(records)) == 8
    (resumed,) = summary["windows"]
    assert resumed["segment"] == 2 and resumed["cached_tokens"] > 0  # the same server still held the prefixes
    with pytest.raises(KvtierError, match="stop after 'resume-c9'"):
        Runner(cfg(vllm_server), tmp_path / "other", progress=False, stop_after="resume-c9").run()


def test_chat_endpoint_and_greedy_outputs_are_reproducible(vllm_server, tmp_path):
    first = Runner(cfg(vllm_server, endpoint="chat", concurrency=[2]), tmp_path / "a", progress=False).run()
    Runner(cfg(vllm_server, endpoint="chat", concurrency=[2], evict="reset-prefix-cache"), tmp_path / "b",
           progress=False).run()
    assert window(first, "resume-c2")["requests"]["ok"] == 4
    texts = [{r["request_id"]: r["output_text"] for r in read_records(tmp_path / d / "requests.jsonl")}
             for d in ("a", "b")]
    assert texts[0] == texts[1] and all(texts[0].values())


def test_trace_replay(vllm_server, tmp_path):
    summary = Runner(cfg(vllm_server, workload="trace", trace=str(ROOT / "raw_data/traces/mooncake_conversation_trace.jsonl"),
                         max_requests=14, time_scale=0.2, length_scale=0.25, max_input_tokens=3000),
                     tmp_path / "run", progress=False).run()
    w = window(summary, "trace")
    assert w["requests"]["ok"] == 14 and w["concurrency"] is None
    # every request shares the trace's first hash id: a 128-token block at this scale, one vLLM cache block
    assert w["cached_tokens"] >= 128, "requests that share hash ids share their prefix blocks"


def test_a_prompt_longer_than_the_model_is_a_recorded_failure(vllm_server, tmp_path):
    summary = Runner(cfg(vllm_server, workload="random", requests=2, input_tokens=9000, concurrency=[1]),
                     tmp_path / "run", progress=False).run()
    w = window(summary, "random-c1")
    assert w["requests"]["failed"] == 2 and w["requests"]["errors"] == {"HTTPStatus": 2}
    messages = [r["error"]["message"] for r in read_records(tmp_path / "run" / "requests.jsonl")]
    assert all(m.startswith("HTTP 400") for m in messages)


def bench_command(server, run_dir, *extra):
    return [sys.executable, "-m", "kvtier", "bench", "--base-url", server.base_url, "--model", "tiny",
            "--run-dir", str(run_dir), "--workload", "random", "--input-tokens", "1500", "--output-tokens", "4",
            "--requests", "40", "--concurrency", "1", *extra]


def test_interrupted_run_is_marked_incomplete_and_resumes_without_mixing(vllm_server, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(bench_command(vllm_server, run_dir), env=tool_env(), stderr=subprocess.PIPE, text=True)
    requests = run_dir / "requests.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not requests.exists() or requests.read_text().count("\n") < 5):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "marked incomplete" in err
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "incomplete"
    done_before = len(list(read_records(requests)))
    assert 5 <= done_before < 40
    resumed = subprocess.run([sys.executable, "-m", "kvtier", "bench", "--resume", str(run_dir)], env=tool_env(),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and len(run["segments"]) == 2
    records = list(read_records(requests))
    latest = latest_per_request(records)
    assert len(latest) == 40 and {r["segment"] for r in latest} == {2}  # the unfinished window ran again, whole
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["windows"][0]["requests"]["total"] == 40 and summary["windows"][0]["segment"] == 2


def test_a_server_killed_mid_run_leaves_recorded_failures_and_no_process(tiny_model, tmp_path):
    from kvtier.stack.process import group_members
    from kvtier.stack.vllm_server import VllmServer
    server = VllmServer(str(tiny_model), str(tmp_path / "vllm.log"), served_name="tiny", max_model_len=8192,
                        kv_cache_gib=1).start()
    pgid = server.process.pid
    try:
        killer = threading.Timer(6.0, lambda: os.killpg(pgid, signal.SIGKILL))
        killer.start()
        summary = Runner(cfg(server, workload="random", requests=200, input_tokens=1500, output_tokens=4,
                             concurrency=[2], timeout_s=30), tmp_path / "run", progress=False).run()
        killer.join()
    finally:
        server.stop()
    w = summary["windows"][0]
    assert w["requests"]["total"] == 200 and w["requests"]["ok"] > 0 and w["requests"]["failed"] > 0
    assert set(w["requests"]["errors"]) <= {"ConnectionRefusedError", "ConnectionResetError", "OSError",
                                            "HTTPError", "MalformedStream", "Timeout"}
    left = {pid: open(f"/proc/{pid}/stat").read() + open(f"/proc/{pid}/cmdline").read() for pid in group_members(pgid)}
    assert not left, f"no process of the killed server may be left: {left}"


def _engine_core_environ(server) -> bytes:
    """The environment the server's engine core process was started with (/proc/PID/environ is fixed at exec)."""
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    # A spawned start has multiprocessing's resource tracker beside the engine core.
    cores = [pid for pid in children if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(cores) == 1, children
    return Path(f"/proc/{cores[0]}/environ").read_bytes()


def test_the_forked_engine_core_serves_what_vllms_own_spawned_start_serves(vllm_server, tiny_model, tmp_path):
    # kvtier.stack.vllm_cpu_serve forks vLLM's engine core where vLLM's CPU platform spawns it (a second import of
    # torch and vLLM, 8-10 s of each start). A spawned core was exec'd with the method vLLM set; a forked one keeps
    # its parent's start-up environment. Greedy outputs must be the same token for token.
    from kvtier.core import web
    from kvtier.stack.vllm_server import SERVER_MODULE, VllmServer
    assert vllm_server.command()[1:3] == ["-m", "kvtier.stack.vllm_cpu_serve"]
    assert b"VLLM_WORKER_MULTIPROC_METHOD=spawn" not in _engine_core_environ(vllm_server)
    stock = VllmServer(str(tiny_model), str(tmp_path / "stock.log"), served_name="tiny", max_model_len=8192,
                       kv_cache_gib=1, vllm_command=[sys.executable, "-m", SERVER_MODULE])
    prompts = [[100 + (7 * i + 3 * k) % 900 for i in range(300)] for k in range(3)]

    def outputs(server) -> list[list[int]]:
        return [web.post_json(f"{server.base_url}/v1/completions",
                              {"model": "tiny", "prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                               "logprobs": 0}, timeout_s=120)["choices"][0]["logprobs"]["tokens"] for p in prompts]

    with stock:
        assert b"VLLM_WORKER_MULTIPROC_METHOD=spawn" in _engine_core_environ(stock)
        spawned = outputs(stock)
    assert outputs(vllm_server) == spawned
