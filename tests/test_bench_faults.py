"""Faults a real server cannot be made to produce on demand, injected by kvtier's instrument server: every one
ends as a recorded per-request failure, never a hang or a lost record."""

import json
import time

import pytest

from kvtier.bench.instrument import spawn
from kvtier.bench.runner import BenchConfig, Runner
from kvtier.core.errors import KvtierError
from kvtier.stack.process import free_port

from conftest import run


@pytest.fixture
def instrument(request):
    port = free_port()
    proc = spawn(port, mode=request.param)
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def bench(url: str, run_dir, **overrides) -> tuple[dict, list[dict]]:
    cfg = BenchConfig(**{"base_url": url, "model": "instrument", "workload": "random", "requests": 6,
                         "input_tokens": 16, "output_tokens": 4, "concurrency": [2], "timeout_s": 3.0, **overrides})
    summary = Runner(cfg, run_dir, progress=False).run()
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    return summary, records


@pytest.mark.parametrize("instrument, error_class", [
    ("malformed", "MalformedStream"), ("status500", "HTTPStatus"), ("drop", "ConnectionResetError"),
    ("hang", "Timeout"), ("no-done", "MalformedStream"),
], indirect=["instrument"], ids=["malformed-sse", "http-500", "dropped-stream", "hang", "no-done"])
def test_each_fault_is_a_recorded_failure(instrument, error_class, tmp_path):
    started = time.monotonic()
    # A hung request waits out its timeout: all six at once, so that the test waits for it once, not three times.
    summary, records = bench(instrument, tmp_path / "run", **({"concurrency": [6]} if error_class == "Timeout" else {}))
    assert time.monotonic() - started < 30, "a fault must never hang the run"
    assert len(records) == 6 and all(r["error"]["class"] == error_class for r in records)
    window = summary["windows"][0]
    assert window["requests"] == {"total": 6, "ok": 0, "failed": 6, "errors": {error_class: 6}}
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "complete"


@pytest.mark.parametrize("instrument", ["ok"], indirect=True)
def test_a_healthy_stream_is_timed_token_by_token(instrument, tmp_path):
    summary, records = bench(instrument, tmp_path / "run")
    for r in records:
        assert r["error"] is None and r["completion_tokens"] == 4 and len(r["token_ns"]) == 4
        assert r["send_ns"] < r["first_byte_ns"] <= r["first_token_ns"] <= r["last_token_ns"] <= r["end_ns"]
        assert r["output_text"] == "t0t1t2t3"
    assert summary["windows"][0]["requests"]["ok"] == 6


def test_unreachable_server_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(KvtierError, match="is not reachable"):
        bench(f"http://127.0.0.1:{free_port()}", tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("instrument", ["ok"], indirect=True)
def test_unknown_model_is_named(instrument, tmp_path):
    proc = run(["kvtier", "bench", "--base-url", instrument, "--model", "gpt-9", "--run-dir", str(tmp_path / "r"),
                "--workload", "random"], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "model 'gpt-9' is not served" in proc.stderr and "instrument" in proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, message", [
    (["--concurrency", "0"], "concurrency [0]: every value must be an integer >= 1"),
    (["--concurrency", "4", "-2"], "concurrency [4, -2]"),
    (["--rate", "0"], "rate 0.0: must be > 0"),
    (["--workload", "trace"], "needs --trace FILE"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    proc = run(["kvtier", "bench", "--base-url", "http://127.0.0.1:1", "--model", "m", "--run-dir",
                str(tmp_path / "r"), "--workload", "random", *args], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("instrument", ["ok"], indirect=True)
def test_a_bad_trace_line_is_named_before_anything_is_sent(instrument, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
                     '{"timestamp": 5, "input_length": "ten", "output_length": 2, "hash_ids": [1]}\n')
    proc = run(["kvtier", "bench", "--base-url", instrument, "--model", "instrument", "--run-dir",
                str(tmp_path / "r"), "--workload", "trace", "--trace", str(trace)], cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert f"{trace}, line 2: field 'input_length' = 'ten' has the wrong type" in proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("instrument", ["ok"], indirect=True)
def test_a_run_directory_is_never_overwritten(instrument, tmp_path):
    bench(instrument, tmp_path / "run")
    with pytest.raises(KvtierError, match="already holds a run"):
        bench(instrument, tmp_path / "run")


def test_a_kept_alive_connection_the_server_has_since_closed_is_not_reused(monkeypatch):
    """Servers close idle kept-alive connections (uvicorn, which vLLM runs, after 5 s); a request written into one is
    lost unanswered. The client opens a new connection instead, for a connection seen closed and for one idle
    longer than the server may keep it (kvtier.bench.http.MAX_IDLE_NS)."""
    import asyncio

    from kvtier.bench import backend, http
    from kvtier.bench.instrument import InstrumentServer
    from kvtier.bench.records import new_record

    async def exchange(conn, endpoint, n):
        prepared = backend.prepare(endpoint, "completions", f"r{n}", "t",
                                   backend.body("completions", "instrument", [1, 2, 3], 4), {})
        return await backend.execute(conn, prepared, new_record("run", 1, f"r{n}", "t", None, {}), 5.0)

    async def scenario(pause_s):
        port = free_port()
        server = await InstrumentServer(port, mode="idle-close").start()
        endpoint = http.Endpoint.parse(f"http://127.0.0.1:{port}")
        conn = http.Connection(endpoint)
        try:
            first = await exchange(conn, endpoint, 1)
            await asyncio.sleep(pause_s)  # the server closes its end after 0.2 s
            second = await exchange(conn, endpoint, 2)
        finally:
            conn.close()
            server.close()
        return first, second

    first, second = asyncio.run(scenario(0.5))
    assert first["error"] is None and second["error"] is None, second["error"]
    # Idle past the limit, reopened before the server could close it: here the limit is shorter than its 0.2 s.
    monkeypatch.setattr(http, "MAX_IDLE_NS", 50_000_000)
    first, second = asyncio.run(scenario(0.1))
    assert first["error"] is None and second["error"] is None, second["error"]
