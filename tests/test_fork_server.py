"""The vLLM fork server (kvtier.stack.fork_server): a forked start is the same server as a plain one, in the
caller's place (session, environment, log, cgroup), and anything that would make it differ is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kvtier.core.errors import KvtierError
from kvtier.stack import fork_server
from kvtier.stack.lmcache_server import LMCacheServer
from kvtier.stack.process import group_members
from kvtier.stack.vllm_server import VllmServer

from conftest import tool_env


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
    from kvtier.stack import process
    started = []
    monkeypatch.setattr(process.subprocess, "Popen", lambda command, **kw: started.append(command) or "popen")
    monkeypatch.setenv(fork_server.ENV, str(tmp_path / "gone.sock"))
    server = VllmServer("model", str(tmp_path / "logs" / "vllm.log"))
    assert server.launch() is server and server.process == "popen" and started == [server.command()]
    assert "started without the fork server: no fork server at" in (tmp_path / "logs" / "vllm.log").read_text()
    started.clear()
    VllmServer("model", str(tmp_path / "r9.log"), fork=False).launch()  # a timed start never asks
    assert started and not (tmp_path / "r9.log").read_text()


def test_what_a_fork_runs_in_place_of_a_command(tmp_path):
    vllm = VllmServer("model", "log").command()
    assert fork_server.program(vllm) == {"module": "kvtier.stack.vllm_cpu_serve", "args": vllm[3:]}
    lmcache = LMCacheServer(log_path="log").command()
    assert fork_server.program(lmcache) == {"script": lmcache[0], "args": lmcache[1:]}
    # a launcher of the user's (a cluster's `vllm serve`, a container) or another interpreter starts anew
    assert fork_server.program(VllmServer("model", "log", vllm_command=["vllm", "serve"]).command()) is None
    assert fork_server.program(["/usr/bin/python3", "-m", "kvtier.stack.vllm_cpu_serve"]) is None
    # the peer client imports vLLM too; any other module starts anew
    from kvtier.bench import peer
    bench = peer.command(base_url="http://x", model="m")
    assert fork_server.program(bench) == {"module": "kvtier.bench.peer", "args": bench[3:]}
    assert fork_server.program([sys.executable, "-m", "kvtier", "render"]) is None


def test_a_build_first_on_pythonpath_goes_first_on_sys_path_unless_it_shadows_an_import(tmp_path):
    mine, site = {"PYTHONPATH": "/a"}, str(tmp_path)
    assert fork_server.path_first(mine, {"PYTHONPATH": f"{site}:/a"}) == [site]
    assert fork_server.path_first({}, {"PYTHONPATH": site}) == [site]
    assert fork_server.path_first(mine, {"PYTHONPATH": f"/a:{site}"}) is None  # not in front: compared as is
    (tmp_path / "lmcache").mkdir()
    (tmp_path / "lmcache-0.5.6.dist-info").mkdir()
    (tmp_path / "six.py").write_text("")
    assert fork_server.top_level_names(site) == {"lmcache", "six"}
    # LMCACHE_* are read by LMCache only: free while the fork server has not imported it
    assert fork_server.differing_keys({}, {"LMCACHE_X": "1"}, frozenset({"vllm"})) == []
    assert fork_server.differing_keys({}, {"LMCACHE_X": "1"}, frozenset({"lmcache"})) == ["LMCACHE_X"]


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
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert "-m kvtier.stack.vllm_cpu_serve " in title and f" --port {server.port} " in title  # as ps shows it
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
def test_an_lmcache_server_forks_with_its_build_first_and_the_callers_environment(running_fork_server, lmcache_builds,
                                                                                  tmp_path, monkeypatch):
    from kvtier.core import web
    socket_path, _, _ = running_fork_server
    monkeypatch.setenv(fork_server.ENV, socket_path)
    build_dir, record = lmcache_builds["patched"]
    site = (build_dir / record["site"]).resolve()
    server = LMCacheServer(log_path=str(tmp_path / "lmcache.log"), l1_size_gb=0.05, site=str(site),
                           l2_path=str(tmp_path / "pool"), l2_options={"load_concurrency": 4})
    with server:
        assert isinstance(server.process, fork_server.Forked)
        pid = server.process.pid
        env = json.loads(web.request(f"http://127.0.0.1:{server.http_port}/env", timeout_s=30))
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(site) and env["LMCACHE_DISABLE_BANNER"] == "1"
        # the build's own compiled extensions are what is mapped, not the environment's LMCache
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert f"{site}/lmcache/" in maps and f"{Path(sys.executable).parent.parent}/lib" not in \
            "".join(line for line in maps.splitlines() if "/lmcache/" in line)
    assert group_members(pid) == []
    assert (tmp_path / "lmcache.log").read_text().count(fork_server.STARTED_NOTE) == 1


@pytest.mark.vllm
def test_a_forked_server_joins_the_callers_cgroup_where_an_emulated_tier_caps_it(running_fork_server, tmp_path):
    # An emulated tier's bandwidth cap holds for the processes of one cgroup: a measuring command joins it, and the
    # servers it starts must be in it too (the LMCache server is what reads the pool), forked or not.
    from kvtier.stack import emulated
    control = emulated.throttle()
    if os.geteuid() != 0 or control is None:
        pytest.skip("needs root and a writable cgroup hierarchy (kvtier.stack.emulated.throttle); run `make test` "
                    "as root to include it")
    group = control.create("fork-test")
    script = (
        "import json, sys; from pathlib import Path; from kvtier.stack import emulated; "
        "from kvtier.stack.lmcache_server import LMCacheServer; "
        f"emulated.throttle().join(Path({str(group)!r})); "
        f"server = LMCacheServer(log_path={str(tmp_path / 'lmcache.log')!r}, l1_size_gb=0.05); server.start(); "
        "print(json.dumps([type(server.process).__name__, Path(f'/proc/{server.process.pid}/cgroup').read_text()]));"
        " server.stop()")
    try:
        done = subprocess.run([sys.executable, "-c", script], env=tool_env(), capture_output=True, text=True,
                              timeout=300)
    finally:
        control.remove(group)
    assert done.returncode == 0, done.stderr[-3000:]
    kind, cgroup = json.loads(done.stdout.strip().splitlines()[-1])
    assert kind == "Forked" and f"/{group.name}\n" in cgroup, cgroup  # v1 (blkio) or v2 (0::) line


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
    refused = fork_server.launch(socket_path, {"module": "kvtier.stack.vllm_cpu_serve", "args": ["--help"]}, env,
                                 str(tmp_path / "x.log"))
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
