"""vLLM's and LMCache's servers started by forking a process that has already imported vLLM, not a new Python each time.

Why: on 2 cores, `import vllm.entrypoints.openai.api_server` (torch, transformers, vLLM) takes 15-23 s of each
vLLM start, and a run of the pipeline starts vLLM tens of times (23 on the test preset) for windows of seconds.
The fork server imports it once per Snakemake run (started by the Snakefile's `onstart`, local executor only);
each start is then a fork of it that runs `python -m kvtier.stack.vllm_cpu_serve ARGS` (or LMCache's `lmcache
server ARGS` script, its build first on the path as PYTHONPATH puts it: torch is then imported already, LMCache
itself after the fork) as a new Python would: the same module or script run as `__main__`, with the caller's
arguments, environment, working directory, log file and cgroup (an emulated tier's bandwidth cap applies to it as to a process the caller started), in a session of
its own (so that `ManagedProcess.stop` signals its whole group as before). What the fork shares is only what the
import left in memory; everything vLLM does from parsing its arguments on (engine configuration, the model load,
the KV allocation, serving) happens in the forked process, as in a plain start.

What a fork cannot take from the caller is what was read at import time. A request is therefore refused (and the
caller starts vLLM the plain way, saying why in the server's log) where its environment differs from the fork
server's in anything but IMPORT_FREE_KEYS: variables read after the import, and kvtier's own. vLLM's `envs` are read
when used (their cache is switched on in the engine, after the fork; checked at every start); LMCache's LMCACHE_*
only by LMCache, which the fork server never imports. Entries a start puts first on PYTHONPATH (an LMCache build)
are put first on its `sys.path`, unless they hold a module the fork server has imported (then refused).

Measurements that time a start itself (R9's ready_s) do not use it (`VllmServer.fork = False`). The exit status of
a forked server is kept by the fork server, which reaps it; `Forked` answers like `subprocess.Popen`.

Lifetime: the fork server exits when the process that started it is gone (its parent id changes), when told to
(SIGTERM, the Snakefile's onsuccess/onerror), or when nothing has asked it for IDLE_EXIT_S.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import runpy
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import emulated
from .vllm_cpu_serve import LAUNCH_MODULE, SERVER_MODULE

ENV = "KVTIER_VLLM_FORK_SERVER"      # the fork server's socket path, for every process of the run
PRELOAD = (SERVER_MODULE, "vllm.entrypoints.launchers.api_server.entry")
# The modules a fork may run as `python -m`: vLLM's CPU server, and the peer client (`vllm bench serve`, which
# imports vLLM too: kvtier.bench.peer).
FORKABLE_MODULES = (LAUNCH_MODULE, "kvtier.bench.peer")
# Set per start by VllmServer.environment, and read by vLLM only when used (vllm.envs), after the fork.
IMPORT_FREE_KEYS = frozenset({"VLLM_SERVER_DEV_MODE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING",
                              "VLLM_WORKER_MULTIPROC_METHOD"})
IMPORT_FREE_KEYS |= {"_", "SHLVL", "PWD", "OLDPWD"}  # the shell's own bookkeeping (the working directory is set)
# Set in a caller's own environment by what ran there, and read when used: torch's compile cache folder (torch
# sets it in a process that generated a model), pytest's name of the running test.
IMPORT_FREE_KEYS |= {"TORCHINDUCTOR_CACHE_DIR", "PYTEST_CURRENT_TEST"}
IMPORT_FREE_PREFIXES = ("KVTIER_",)  # kvtier's own (the emulation plan, the caps): vLLM never reads them
NOT_IMPORTED_PREFIXES = {"LMCACHE_": "lmcache"}  # read only by a package the fork server has not imported
# What Snakemake's `shell` adds to every job's environment (snakemake/shell.py): thread counts that OpenMP and the
# BLAS libraries read when torch is imported, and the temporary folder (its default `tmpdir` resource).
SNAKEMAKE_THREAD_KEYS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                         "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
SNAKEMAKE_TMP_KEYS = ("TMPDIR", "TMP", "TEMPDIR", "TEMP")
READY_WAIT_S = 180.0   # how long a start waits for a fork server that is still importing
IDLE_EXIT_S = 1800.0
PR_SET_PDEATHSIG = 1
STARTED_NOTE = "kvtier.stack.fork_server: forked from the fork server"  # in the server's log, once a start


def differing_keys(mine: dict[str, str], theirs: dict[str, str], imported: frozenset[str] = frozenset()) -> list[str]:
    """The variables, other than the import-free ones, that the two environments do not share with one value;
    `imported`: the top-level packages imported where `mine` is the environment."""
    free = IMPORT_FREE_PREFIXES + tuple(p for p, package in NOT_IMPORTED_PREFIXES.items() if package not in imported)

    def matters(key: str) -> bool:
        return key not in IMPORT_FREE_KEYS and not key.startswith(free)
    return sorted(k for k in set(mine) | set(theirs) if matters(k) and mine.get(k) != theirs.get(k))


def path_first(mine: dict[str, str], theirs: dict[str, str]) -> list[str] | None:
    """The entries `theirs` puts on PYTHONPATH before all of `mine`'s, or None where it does not extend it so."""
    split = [[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] for env in (mine, theirs)]
    extra = len(split[1]) - len(split[0])
    return split[1][:extra] if extra >= 0 and split[1][extra:] == split[0] else None


def top_level_names(folder: str) -> set[str]:
    """The modules and packages a folder on sys.path offers."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return set()
    return {e[:-3] if e.endswith(".py") else e for e in entries
            if e.endswith(".py") or ("." not in e and os.path.isdir(os.path.join(folder, e)))}


def own_cgroup_path() -> str | None:
    """This process's cgroup in the hierarchy that caps an emulated tier's bandwidth, or None where there is no
    writable one (then there is nothing to follow: no emulation runs here)."""
    control = emulated.throttle()
    return str(emulated.own_cgroup(control)) if control else None


# ---------------------------------------------------------------------------------------------------------------
# The caller's side

class Forked:
    """A server forked by the fork server, answering as much of `subprocess.Popen` as ManagedProcess uses."""

    def __init__(self, socket_path: str, pid: int):
        self.socket_path = socket_path
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                answer = _ask(self.socket_path, {"op": "status", "pid": self.pid}, timeout_s=10)
                if not answer.get("running", True):
                    self.returncode = int(answer["returncode"])
            except OSError:  # the fork server is gone: the process is alive while /proc shows it not a zombie
                if not _alive(self.pid):
                    self.returncode = -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
            time.sleep(0.1)
        return self.returncode


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _ask(socket_path: str, request: dict, timeout_s: float) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(socket_path)
        conn.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data or b"{}")


def program(command: list[str]) -> dict | None:
    """What a fork of the fork server runs in place of `command`: {"module": M, "args": ...} for `python -m M ...`
    (FORKABLE_MODULES) or {"script": S, "args": ...} for a console script beside this Python (LMCache's
    `lmcache`), or None for anything else (another interpreter, a launcher), which must start anew."""
    if command[:2] == [sys.executable, "-m"] and len(command) > 2 and command[2] in FORKABLE_MODULES:
        return {"module": command[2], "args": command[3:]}
    if command and Path(command[0]).parent == Path(sys.executable).parent and Path(command[0]).name == "lmcache":
        return {"script": command[0], "args": command[1:]}
    return None


def launch(socket_path: str, run: dict, env: dict[str, str], log_path: str) -> Forked | str:
    """Start `run` (`program`'s answer) forked from the fork server at `socket_path`: a `Forked`, or why not (then
    the caller starts it the plain way). Waits while the fork server is still importing (its pid file says it is
    alive), which is never longer than a plain start's own import."""
    deadline = time.monotonic() + READY_WAIT_S
    request = {"op": "launch", **run, "env": dict(env), "cwd": os.getcwd(), "log": str(log_path),
               "cgroup": own_cgroup_path()}
    while True:
        try:
            answer = _ask(socket_path, request, timeout_s=60)
            break
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            if not _server_alive(socket_path):
                return f"no fork server at {socket_path} ({exc.strerror})"
            if time.monotonic() > deadline:
                return f"the fork server at {socket_path} was not ready after {READY_WAIT_S:g} s"
            time.sleep(0.5)
        except OSError as exc:
            return f"the fork server at {socket_path} did not answer ({exc})"
    if "pid" not in answer:
        return answer.get("refused", f"the fork server answered {answer}")
    return Forked(socket_path, int(answer["pid"]))


def _pid_file(socket_path: str) -> Path:
    return Path(f"{socket_path}.pid")


def _server_alive(socket_path: str) -> bool:
    try:
        return _alive(int(_pid_file(socket_path).read_text()))
    except (OSError, ValueError):
        return False


def snakemake_job_environment(threads: int = 1, path_first: str | None = None) -> dict[str, str]:
    """The environment a local Snakemake job of `threads` threads gets from this process's (with `path_first`
    put first on PATH, as the workflow's shell prefix does): the one in which the fork server must import vLLM for
    a job's start to be forked (every measuring rule runs with one thread)."""
    env = {**os.environ, **dict.fromkeys(SNAKEMAKE_THREAD_KEYS, str(threads)),
           **dict.fromkeys(SNAKEMAKE_TMP_KEYS, tempfile.gettempdir())}
    if path_first:
        env["PATH"] = f"{path_first}:{env.get('PATH', '')}"
    return env


class RunForkServer:
    """The fork server of one Snakemake run (Snakefile: started `onstart`, stopped `onsuccess` / `onerror`): its
    socket in a fresh temporary folder (a socket path must be short), named to the jobs by ENV."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.socket_path: str | None = None
        self.log_path: str | None = None

    def start(self, log_path: str, environment: dict[str, str]) -> None:
        self.log_path = log_path
        self.socket_path = str(Path(tempfile.mkdtemp(prefix="kvtier-fork-")) / "vllm.sock")
        self.process = start(self.socket_path, log_path, environment)
        os.environ[ENV] = self.socket_path

    def stop(self) -> None:
        os.environ.pop(ENV, None)
        if self.process is not None:
            stop(self.process, self.socket_path)
            shutil.rmtree(Path(self.socket_path).parent, ignore_errors=True)
            self.process = None


def start(socket_path: str, log_path: str, environment: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a fork server (it imports vLLM in the background: a start waits for it) and return its process."""
    Path(socket_path).parent.mkdir(parents=True, exist_ok=True)
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    for stale in (Path(socket_path), _pid_file(socket_path)):
        stale.unlink(missing_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", __name__, socket_path, str(os.getpid())], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                   env=environment)
    _pid_file(socket_path).write_text(f"{process.pid}\n")
    return process


def stop(process: subprocess.Popen, socket_path: str) -> None:
    """SIGTERM the fork server (the servers it forked are their callers' to stop) and remove its files."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for path in (Path(socket_path), _pid_file(socket_path)):
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------
# The fork server's side

class _Server:
    def __init__(self, socket_path: str, parent: int):
        self.socket_path = socket_path
        self.environment = dict(os.environ)
        self.cgroup = own_cgroup_path()
        self.parent = parent
        self.exited: dict[int, int] = {}
        self.children: set[int] = set()
        self.listener: socket.socket | None = None

    def run(self) -> None:
        started = time.monotonic()
        for module in PRELOAD:
            __import__(module)
        _prepare_title()
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"fork server: {', '.join(PRELOAD)} imported in {time.monotonic() - started:.1f} s; "
              f"listening on {self.socket_path}", flush=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        partial = f"{self.socket_path}.{os.getpid()}"
        self.listener.bind(partial)
        self.listener.listen(16)
        os.rename(partial, self.socket_path)  # the socket appears whole: a caller never connects to a half-bound one
        self.listener.settimeout(1.0)
        last_asked = time.monotonic()
        while os.getppid() == self.parent and time.monotonic() - last_asked < IDLE_EXIT_S:
            self._reap()
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                if self.children:
                    last_asked = time.monotonic()
                continue
            last_asked = time.monotonic()
            with conn:
                conn.settimeout(30)
                try:
                    request = json.loads(conn.makefile("rb").readline())
                    conn.sendall(json.dumps(self._answer(request, conn)).encode() + b"\n")
                except (OSError, ValueError) as exc:
                    print(f"fork server: a request failed: {exc}", flush=True)
        print("fork server: its parent is gone" if os.getppid() != self.parent else
              f"fork server: idle for {IDLE_EXIT_S:g} s", flush=True)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.exited[pid] = os.waitstatus_to_exitcode(status)

    def _answer(self, request: dict, conn: socket.socket) -> dict:
        if request.get("op") == "status":
            self._reap()
            pid = int(request["pid"])
            if pid in self.exited:
                return {"running": False, "returncode": self.exited[pid]}
            return {"running": pid in self.children}
        if request.get("op") != "launch":
            return {"refused": f"unknown request {request.get('op')!r}"}
        env = request["env"]
        imported = frozenset(name.partition(".")[0] for name in sys.modules)
        first = path_first(self.environment, env)
        if first:
            shadowed = sorted({name for folder in first for name in top_level_names(folder)} & imported)
            if shadowed:
                return {"refused": f"PYTHONPATH's {os.pathsep.join(first)} holds {', '.join(shadowed)}, "
                                   "already imported by the fork server"}
            # the entries go on sys.path instead; the rest of PYTHONPATH is compared as any variable
            env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            if "PYTHONPATH" in self.environment:
                env["PYTHONPATH"] = self.environment["PYTHONPATH"]
        differ = differing_keys(self.environment, env, imported)
        if differ:
            return {"refused": f"its environment differs from the fork server's in {', '.join(differ[:8])}"
                               f"{' …' if len(differ) > 8 else ''} (read at import time)"}
        if ("module" in request) == ("script" in request):
            return {"refused": "a launch names one module or one script"}
        request["path_first"] = first or []
        return self._fork(request, conn)

    def _fork(self, request: dict, conn: socket.socket) -> dict:
        go_read, go_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the server to be
            os.close(go_write)
            conn.close()
            self.listener.close()
            go = os.read(go_read, 1)
            os._exit(_serve(request) if go == b"1" else 1)
        os.close(go_read)
        self.children.add(pid)
        cgroup = request.get("cgroup")
        try:
            if cgroup and cgroup != self.cgroup:
                Path(cgroup, "cgroup.procs").write_text(f"{pid}\n")  # the caller's cgroup: its caps apply
        except OSError as exc:
            os.close(go_write)
            os.kill(pid, signal.SIGKILL)
            return {"refused": f"could not move the forked server into the caller's cgroup {cgroup} ({exc})"}
        os.write(go_write, b"1")
        os.close(go_write)
        return {"pid": pid}


def _prepare_title() -> None:
    """setproctitle sets itself up from the process's environment block, which a forked start replaces before it
    names itself (_set_title): set up here, in the fork server, or the title would stay the fork server's."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.getproctitle()


def _set_title(argv: list[str]) -> None:
    """Show the command a plain start would have run (ps, /proc/PID/cmdline), not the fork server's: with
    setproctitle, which vLLM itself uses to name its engine core."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(shlex.join(argv))


def _serve(request: dict) -> int:
    """In the forked process: become what `python -m MODULE ARGS` would be in the caller's place, and run it."""
    os.setsid()
    for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request.get("script")
    # As the interpreter starts: the script's folder (`python -m`: the working directory) first, PYTHONPATH next
    sys.path[0] = os.path.dirname(os.path.realpath(script)) if script else request["cwd"]
    sys.path[1:1] = request["path_first"]
    code = 0
    try:
        from vllm import envs
        if envs._is_envs_cache_enabled():  # vLLM would answer from the fork server's environment
            raise RuntimeError("vllm.envs' cache is on in the fork server; a forked start would not see its own")
        print(STARTED_NOTE, file=sys.stderr, flush=True)
        _set_title([sys.executable, *([script] if script else ["-m", request["module"]]), *request["args"]])
        if script:
            sys.argv = [script, *request["args"]]
            runpy.run_path(script, run_name="__main__")
        else:
            for module in (LAUNCH_MODULE, SERVER_MODULE):  # run as `__main__` only, as `python -m` runs them
                sys.modules.pop(module, None)
            sys.argv = [request["module"], *request["args"]]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()  # what the interpreter's exit would run (multiprocessing's, vLLM's); os._exit follows
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return code


def _terminate_with_parent() -> None:
    """SIGTERM when the process that started this one ends (Linux's PR_SET_PDEATHSIG), even mid-import."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except (OSError, AttributeError):
        pass  # elsewhere the accept loop's parent check ends it


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(f"usage: python -m {__name__} SOCKET_PATH PARENT_PID")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _terminate_with_parent()
    server = _Server(sys.argv[1], int(sys.argv[2]))
    if os.getppid() != server.parent:  # it ended before the line above could take effect
        sys.exit(0)
    try:
        server.run()
    finally:
        for path in (Path(server.socket_path), Path(f"{server.socket_path}.{os.getpid()}")):
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
