"""Shared fixtures: the repository root, a scratch copy of the project, and a subprocess runner."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PUBLISHED = ROOT / "raw_data" / "published"
BIN = Path(sys.executable).parent

# The interrupt tests press Ctrl-C (SIGINT) on the commands they start. A shell script that starts pytest in the
# background leaves SIGINT ignored, and ignored signals stay ignored across exec: restore the terminal's default
# so that the children see Ctrl-C as a user would.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


SLURM_TESTS = "test_slurm.py"


def pytest_collection_modifyitems(config, items):
    """The tests that need no built project first, then those that read it, the Slurm tests last.
    The Slurm run starts in the background once the project is built (`built`), so that only tests that read the
    built project run beside it: the others, some of which measure or wait on the measurement lock, run before.
    The Slurm tests last: once slurm-wlm is installed, Snakemake's Slurm executor plugin asks `scontrol` for the
    cluster's settings every time Snakemake starts, even to run locally; with the daemons stopped (the Slurm tests'
    teardown) that waits about 9 s for its timeout, and every later Snakemake run of the session would pay it."""
    def place(item) -> tuple[bool, bool]:
        slurm = item.path.name == SLURM_TESTS  # in its own order: the daemons' teardown is its last test
        return slurm, not slurm and "built" in getattr(item, "fixturenames", ())
    items.sort(key=place)


def tool_env() -> dict:
    """Environment for subprocesses: this interpreter's bin first, so `kvtier` and `snakemake` are ours (once:
    under `make test` it is first already, and the session's fork server then serves this process and its
    subprocesses alike)."""
    env = dict(os.environ)
    if not env.get("PATH", "").startswith(f"{BIN}{os.pathsep}"):
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


# This process as its subprocesses: the servers a test starts in this process and those its commands start are
# then forked from the session's one fork server (vllm_fork_server) alike.
os.environ["PATH"] = tool_env()["PATH"]


def run(cmd: list[str], cwd: Path, check: bool = True, timeout: float = 900,
        env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env or tool_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n"
                             f"--- stderr\n{proc.stderr}")
    return proc


NOT_PROJECT = {".venv", ".snakemake", ".git", "logs", "__pycache__", ".pytest_cache"}


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line, or whose working directory, mentions `text` (a rule's servers run in
    the project with relative paths, so their command lines alone would not name it)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # dead, waiting to be reaped
            cmdline = proc.joinpath("cmdline").read_bytes().decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if text in cmdline or cwd == text or cwd.startswith(text.rstrip("/") + "/"):
            found.append(int(proc.name))
    return [pid for pid in found if pid != os.getpid()]


def project_files() -> list[str]:
    """Files a fresh clone would have, plus files not yet committed (but never ignored ones)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return [f for f in out.split("\0") if f and ((ROOT / f).exists() or (ROOT / f).is_symlink())]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: an unpacked release
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                if p.is_file() and not NOT_PROJECT & set(p.relative_to(ROOT).parts)
                and (p.parts[len(ROOT.parts)] != "evidence" or p.name == "README.md")]


def copy_project(dest: Path) -> Path:
    for rel in project_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target, follow_symlinks=False)  # profiles/default is a link
    return dest


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    return copy_project(tmp_path / "kvtier")


# The workflow tests run the default target with the small preset: every tier, fewer and shorter sessions.
PRESET = ["--configfile", "config/presets/test.yaml"]
SLURM_LOCAL = ROOT / "workflow" / "scripts" / "slurm_local.sh"
SLURM_CONF = Path("/etc/slurm/slurm.conf")
SLURM_LOCAL_MARK = "# written by kvtier workflow/scripts/slurm_local.sh"  # the first line of the one it writes


def slurm_local(action: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SLURM_LOCAL), action], capture_output=True, text=True, timeout=900)


def pytest_sessionstart(session):
    # A configuration that slurm_local.sh wrote and left without its daemons (an older script's `down`, a killed
    # run) makes every Snakemake start here wait ~10 s on `scontrol show config`; its `down` takes it away.
    if os.geteuid() == 0 and SLURM_CONF.is_file() and SLURM_CONF.read_text().startswith(SLURM_LOCAL_MARK) \
            and slurm_local("status").returncode != 0:
        down = slurm_local("down")
        print(f"conftest: {SLURM_CONF} left by slurm_local.sh with no controller: "
              f"{'removed' if down.returncode == 0 else down.stderr.strip()[-300:]}")


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-node Slurm on this machine (workflow/scripts/slurm_local.sh up; down at the end), or the
    reason there is none: it needs root, and a machine where slurm-wlm and munge install and start."""
    if os.geteuid() != 0:
        yield ("needs root: workflow/scripts/slurm_local.sh installs slurm-wlm and munge and starts munged, "
               "slurmctld and slurmd (run `make test` as root to include it)")
        return
    up = slurm_local("up")
    if up.returncode != 0:
        yield f"Slurm could not start here (workflow/scripts/slurm_local.sh up): {up.stderr.strip()[-600:]}"
        return
    yield None
    slurm_local("down")


@dataclasses.dataclass
class Built:
    """The default target's run of the test preset: where, and Snakemake's output."""
    project: Path
    output: str
    seconds: float


# A project on which the test preset has already run (a `built` of an earlier session, kept by pytest under its
# temporary folder): the workflow tests read it instead of running the pipeline again. Only for the edit-test loop
# on the tests themselves: it must come from the same code and preset, which nothing here checks.
REUSE_BUILT = "KVTIER_TEST_BUILT"


@pytest.fixture(scope="session")
def built_run(tmp_path_factory) -> Built:
    """One project copy on which the default target has run with the test preset, locally (`--cores 2`), once per
    test session: every test that reads what the pipeline produced reads this run, and a test that changes
    something works on a copy of it (`copy_built`). tests/test_slurm.py runs the smallest DAG that proves the
    Slurm executor on a copy of it, not this whole preset again."""
    if os.environ.get(REUSE_BUILT):  # a maintainer's shortcut while editing tests; `make test` never sets it
        return Built(Path(os.environ[REUSE_BUILT]).resolve(), f"reused ({REUSE_BUILT})", 0.0)
    project = copy_project(tmp_path_factory.mktemp("built") / "kvtier")
    started = time.monotonic()
    done = run(["snakemake", "--cores", "2", *PRESET], cwd=project, timeout=3600)
    return Built(project, done.stdout + done.stderr, time.monotonic() - started)


@pytest.fixture(scope="session")
def built(built_run, request) -> Path:
    if any(item.path.name == SLURM_TESTS for item in request.session.items):
        # tests/test_slurm.py's run through Slurm starts now, on a copy of this project, and goes on beside the
        # tests in between: its four jobs spend most of their 3 minutes waiting on the scheduler (a submission, a
        # Snakemake start inside each job, a status check every 5-30 s), which those tests spend working. Its
        # measuring commands hold the machine's measurement lock (kvtier.core.node_lock) as every other does.
        request.getfixturevalue("slurm_background")
    return built_run.project


@dataclasses.dataclass
class Background:
    """A command left running in the background, its output (stdout and stderr) going to `log`."""
    cmd: list[str]
    proc: subprocess.Popen
    log: Path

    def wait(self, timeout: float = 1800) -> subprocess.CompletedProcess:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"{' '.join(self.cmd)} still ran after {timeout:g} s:\n"
                                 f"{self.log.read_text()[-4000:]}") from None
        return subprocess.CompletedProcess(self.cmd, self.proc.returncode, self.log.read_text(), "")

    def stop(self) -> None:
        """SIGTERM, as a user's `kill` (Snakemake then cancels its jobs), SIGKILL a minute later."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_background(cmd: list[str], cwd: Path, log: Path) -> Background:
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=tool_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return Background(cmd, proc, log)


@pytest.fixture(scope="session")
def slurm_background(slurm_cluster, built_run, tmp_path_factory):
    """tests/test_slurm.py's smallest DAG through Slurm, started in the background on a copy of the session's built
    project (`start_on_slurm`), or the reason there is no Slurm here. Stopped at the end if still running."""
    if slurm_cluster:
        yield slurm_cluster
        return
    from test_slurm import start_on_slurm
    run_ = start_on_slurm(copy_built(built_run.project, tmp_path_factory.mktemp("slurm") / "kvtier"))
    yield run_
    run_.background.stop()


# What a built project holds that no rule writes again: the model and LMCache builds (hundreds of MB). A copy links
# them instead of copying, so that a test's copy costs its small files only.
LINKED = ("models", "build")


def copy_built(built: Path, dest: Path) -> Path:
    """A copy of the built project for a test that reruns part of the pipeline: everything copied with its times
    (so that Snakemake sees what is up to date), the model and builds hard-linked (read only, never rewritten)."""
    shutil.copytree(built, dest, symlinks=True, ignore=lambda folder, names: [
        name for name in names if Path(folder) == built and name in LINKED])
    for name in LINKED:
        if (built / name).exists():
            shutil.copytree(built / name, dest / name, symlinks=True, copy_function=os.link)
    return dest


# ---------------------------------------------------------------------------------------------------------------
# The real stack: a generated model and one vLLM CPU server per test session.

def made_once(tmp_path_factory, name: str, make) -> Path:
    """`make(folder)` run once per test session, however many pytest-xdist workers it has: the first worker to
    ask makes it in the session's common temporary folder, the others wait for it (a file lock) and use the same.
    `make` fills `folder` or returns a path under it; what it returns is what every worker gets."""
    from filelock import FileLock
    base = tmp_path_factory.getbasetemp()
    common = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # pytest-N/ holds every worker's own
    folder, done = common / f"once-{name}", common / f"once-{name}.done"
    with FileLock(f"{folder}.lock"):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed halfway left it
            folder.mkdir(parents=True)
            done.write_text(str(make(folder)))
    return Path(done.read_text())


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from kvtier.stack.model import ModelSpec, generate
    return made_once(tmp_path_factory, "model", lambda folder: generate(folder / "tiny",
                                                                         ModelSpec(seed=0, max_positions=8192)))


@pytest.fixture(scope="session", autouse=True)
def vllm_fork_server(request, tmp_path_factory):
    """Where the session runs real-stack tests: one import of vLLM for the servers its tests start themselves
    (kvtier.stack.fork_server; a pipeline run starts its own), named to them and their subprocesses by
    KVTIER_VLLM_FORK_SERVER. None in the edit-test loop, which starts no server."""
    from kvtier.stack import fork_server
    if not any(item.get_closest_marker("vllm") for item in request.session.items):
        yield None
        return
    server = fork_server.RunForkServer()
    server.start(str(tmp_path_factory.mktemp("fork") / "fork_server.log"), tool_env())
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm_server(tiny_model, tmp_path_factory):
    """A plain start (fork=False): the reference that a forked start is compared with."""
    from kvtier.stack.vllm_server import VllmServer
    server = VllmServer(str(tiny_model), str(tmp_path_factory.mktemp("logs") / "vllm.log"), served_name="tiny",
                        max_model_len=8192, kv_cache_gib=1, fork=False)
    with server:
        yield server


@pytest.fixture(scope="session")
def upstream_wheel(tmp_path_factory):
    """The real upstream LMCache wheel, fetched once (pip download, sha256 checked)."""
    from kvtier.stack import lmcache_build
    return made_once(tmp_path_factory, "upstream",
                     lambda folder: lmcache_build.fetch(lmcache_build.Upstream(), folder))


@pytest.fixture(scope="session")
def lmcache_builds(upstream_wheel, tmp_path_factory) -> dict:
    """Both LMCache builds, made once a session: {"upstream" | "patched": (build directory, build record)}."""
    from kvtier.stack import lmcache_build
    patches = sorted((ROOT / "patches").glob("*.patch"))

    def make(root: Path) -> Path:
        for name, files in (("upstream", []), ("patched", patches)):
            lmcache_build.build(upstream_wheel, lmcache_build.Upstream(), files, root / name)
        return root
    root = made_once(tmp_path_factory, "builds", make)
    return {name: (root / name, lmcache_build.read(root / name)) for name in ("upstream", "patched")}
