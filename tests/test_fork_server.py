"""The vLLM fork server (kvtier.stack.fork_server): a forked start is the same server as a plain one, in the
caller's place (session, environment, log, cgroup), and anything that would make it differ is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kvtier.core.errors import KvtierError
from kvtier.stack import fork_server
from kvtier.stack.process import ManagedProcess, group_members
from kvtier.stack.vllm_server import VllmServer


def test_only_import_free_variables_may_differ():
    mine = {"PATH": "/a", "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "KVTIER_EMULATION": "x", "_": "a"}
    theirs = {"PATH": "/a", "OMP_NUM_THREADS": "2", "VLLM_CPU_KVCACHE_SPACE": "4", "KVTIER_CAPS": "y",
              "VLLM_LOGGING_LEVEL": "DEBUG", "_": "b"}
    # OpenMP reads its thread count, vLLM's logger its level, when they are imported: those must match
    assert fork_server.differing_keys(mine, theirs) == ["OMP_NUM_THREADS", "VLLM_LOGGING_LEVEL"]
    assert fork_server.differing_keys(mine, mine) == []


def test_the_job_environment_is_what_snakemakes_shell_adds(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # what gettempdir() found before, read again
    env = fork_server.snakemake_job_environment(threads=1, path_first="/venv/bin")
    assert {env[k] for k in fork_server.SNAKEMAKE_THREAD_KEYS} == {"1"}
    assert {env[k] for k in fork_server.SNAKEMAKE_TMP_KEYS} == {str(tmp_path)}
    assert env["PATH"] == f"/venv/bin:{os.environ['PATH']}"


def test_without_a_fork_server_a_start_is_a_plain_one_and_the_log_says_why(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr(ManagedProcess, "launch", lambda self: launched.append(self) or self)
    monkeypatch.setenv(fork_server.ENV, str(tmp_path / "gone.sock"))
    server = VllmServer("model", str(tmp_path / "logs" / "vllm.log"))
    assert server.launch() is server and launched == [server]
    assert "started without the fork server: no fork server at" in (tmp_path / "logs" / "vllm.log").read_text()
    assert fork_server.launch(str(tmp_path / "gone.sock"), [], dict(os.environ), str(tmp_path / "x.log")) \
        .startswith("no fork server at")


@pytest.fixture
def running_fork_server(vllm_fork_server):
    """The session's fork server (tests/conftest.py): socket, process, log."""
    return vllm_fork_server.socket_path, vllm_fork_server.process, vllm_fork_server.log_path


def _outputs(server) -> list[list[int]]:
    from kvtier.core import web
    prompts = [[100 + (7 * i + 3 * k) % 900 for i in range(300)] for k in range(3)]
    return [web.post_json(f"{server.base_url}/v1/completions",
                          {"model": "tiny", "prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                           "logprobs": 0}, timeout_s=120)["choices"][0]["logprobs"]["tokens"] for p in prompts]


@pytest.mark.vllm
def test_a_forked_start_serves_what_a_plain_start_serves_in_the_callers_place(running_fork_server, vllm_server,
                                                                              tiny_model, tmp_path, monkeypatch):
    socket_path, _, log_path = running_fork_server
    log = Path(log_path)
    monkeypatch.setenv(fork_server.ENV, socket_path)
    server = VllmServer(str(tiny_model), str(tmp_path / "forked.log"), served_name="tiny", max_model_len=8192,
                        kv_cache_gib=1)
    started = time.monotonic()
    with server:
        forked_s = time.monotonic() - started
        assert isinstance(server.process, fork_server.Forked)
        pid = server.process.pid
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # its own session: stop() signals its group
        assert os.readlink(f"/proc/{pid}/cwd") == os.getcwd()
        assert Path(f"/proc/{pid}/cgroup").read_text() == Path("/proc/self/cgroup").read_text()
        assert _outputs(server) == _outputs(vllm_server)  # the session's plain start: token for token
    assert group_members(pid) == []  # stopped as a plain start is: its whole group
    text = (tmp_path / "forked.log").read_text()
    assert text.count(fork_server.STARTED_NOTE) == 1 and "Starting vLLM server" in text
    # vLLM answered from the caller's environment, not the fork server's (which has neither): its KV space
    # (VLLM_CPU_KVCACHE_SPACE) and its uniprocess engine (VLLM_ENABLE_V1_MULTIPROCESSING=0: the core forked)
    assert "Explicitly set (1.0/" in text and "the engine core is forked, not spawned" in text
    assert "imported in" in log.read_text()
    print(f"forked start ready in {forked_s:.1f} s (the fork server's import: {log.read_text().split(' in ')[1]})")


@pytest.mark.vllm
def test_a_forked_server_that_fails_reports_its_exit_status(running_fork_server, tiny_model, tmp_path, monkeypatch):
    socket_path, _, _ = running_fork_server
    monkeypatch.setenv(fork_server.ENV, socket_path)
    server = VllmServer(str(tiny_model), str(tmp_path / "bad.log"), extra_args=["--no-such-option"])
    with pytest.raises(KvtierError, match="exited with 2 before it was ready"):
        server.start()
    assert "unrecognized arguments: --no-such-option" in (tmp_path / "bad.log").read_text()


@pytest.mark.vllm
def test_a_request_whose_environment_differs_is_refused_naming_the_variable(running_fork_server, tmp_path):
    socket_path, _, _ = running_fork_server
    env = {**os.environ, "OMP_NUM_THREADS": "7"}
    refused = fork_server.launch(socket_path, ["--help"], env, str(tmp_path / "x.log"))
    assert isinstance(refused, str) and "OMP_NUM_THREADS" in refused and not (tmp_path / "x.log").exists()


@pytest.mark.vllm
def test_the_fork_server_ends_with_the_process_that_started_it(tmp_path):
    # Snakemake killed outright: its fork server must not stay behind holding an imported vLLM
    socket_path = str(tmp_path / "vllm.sock")
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from kvtier.stack import fork_server; "
        f"p = fork_server.start({socket_path!r}, {str(tmp_path / 'f.log')!r}); print(p.pid, flush=True); "
        "time.sleep(3600)")], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert fork_server._alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while fork_server._alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not fork_server._alive(child)
