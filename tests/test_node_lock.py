"""The node's measurement lock (kvtier.core.node_lock): two processes never measure at once on one node, the one
waiting says who holds it, and a killed holder never leaves it held."""

import os
import signal
import subprocess
import sys
import time

from kvtier.core import node_lock

from conftest import tool_env

HOLD = ("import sys, time\n"
        "from kvtier.core import node_lock\n"
        "with node_lock.hold(sys.argv[2], sys.argv[1]) as waited:\n"
        "    print(f'took {time.time():.3f} waited {waited:.3f}', flush=True)\n"
        "    time.sleep(float(sys.argv[3]))\n"
        "    print(f'left {time.time():.3f}', flush=True)\n")


def holder(path, what, seconds):
    return subprocess.Popen([sys.executable, "-c", HOLD, str(path), what, str(seconds)], env=tool_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_held(path, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while node_lock.holder(path) == "unknown":
        assert time.monotonic() < deadline, "the lock was never taken"
        time.sleep(0.05)


def test_a_second_measurement_waits_for_the_first_and_names_it(tmp_path):
    path = tmp_path / "measure.lock"
    first = holder(path, "kvtier tier-run", 2)
    wait_held(path)
    second = holder(path, "kvtier r1-reads", 0)
    out1, _ = first.communicate(timeout=60)
    out2, err2 = second.communicate(timeout=60)
    left = float(out1.split("left ")[1])
    took = float(out2.split("took ")[1].split()[0])
    assert took >= left, (out1, out2)
    assert "waiting for the measurement lock" in err2 and "(kvtier tier-run)" in err2, err2
    assert node_lock.holder(path) == "unknown", "the holder's note outlived it"


def test_a_killed_holder_releases_the_lock(tmp_path):
    path = tmp_path / "measure.lock"
    first = holder(path, "kvtier tier-run", 600)
    wait_held(path)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    with node_lock.hold("after the kill", path) as waited:
        assert waited < 5


def test_the_lock_file_is_shared_with_other_users(tmp_path):
    path = tmp_path / "measure.lock"
    with node_lock.hold("kvtier g2-storage", path):
        assert "kvtier g2-storage" in node_lock.holder(path)
    assert path.stat().st_mode & 0o777 == 0o666


# Each measuring command with arguments that parse and a settings value it refuses: it must wait for the lock
# before it gets as far as refusing them.
COMMANDS = {
    "tier-run": ["engine", "--run-dir", "{d}/run", "--settings", "{{}}"],
    "r3-populate": ["--handoff-dir", "{d}/handoff", "--settings", "{{}}"],
    "r3-resume": ["--handoff-dir", "{d}/handoff", "--run-dir", "{d}/run", "--settings", "{{}}"],
    "r1-reads": ["--run-dir", "{d}/run", "--settings", "{{}}"],
    "r1-resume": ["--run-dir", "{d}/run", "--settings", "{{}}"],
    "boundary-run": ["--boundary-dir", "{d}/b", "--settings", "{{}}"],
    "g2-storage": ["--run-dir", "{d}/run", "--settings", "{{}}"],
    "r9-loads": ["--run-dir", "{d}/run", "--settings", "{{}}"],
    "soak": ["--run-dir", "{d}/run", "--settings", "{{}}"],
    "sweep-run": ["--run-dir", "{d}/run", "--settings", "{{}}"],
}


def test_every_measuring_command_waits_for_the_lock(tmp_path):
    from kvtier.cli import MEASURING
    assert set(MEASURING) == set(COMMANDS)
    path = tmp_path / "measure.lock"
    env = {**tool_env(), node_lock.ENV: str(path)}
    with node_lock.hold("the test", path):
        procs, errs = {}, {}
        for command, args in COMMANDS.items():
            argv = [a.format(d=tmp_path) for a in args]
            errs[command] = tmp_path / f"{command}.err"
            with open(errs[command], "w") as err:
                procs[command] = subprocess.Popen([sys.executable, "-m", "kvtier", command, *argv], env=env,
                                                  stdout=subprocess.DEVNULL, stderr=err, text=True)
        # Each says it waits once it has reached the lock (no fixed sleep: that is the readiness signal); none may
        # have gone further while the lock is held.
        deadline = time.monotonic() + 120
        while not all("waiting for the measurement lock" in errs[c].read_text() for c in COMMANDS):
            assert time.monotonic() < deadline, {c: errs[c].read_text()[-300:] for c in COMMANDS}
            time.sleep(0.1)
        running = {command: proc.poll() for command, proc in procs.items()}
    assert running == {command: None for command in COMMANDS}, f"ran without the lock: {running}"
    for command, proc in procs.items():
        proc.wait(timeout=120)
        err = errs[command].read_text()
        assert "waiting for the measurement lock" in err and "(the test)" in err, (command, err)
        assert proc.returncode == 2 and "kvtier: error:" in err, (command, err)


def test_the_lock_path_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(node_lock.ENV, str(tmp_path / "elsewhere.lock"))
    assert node_lock.lock_path() == tmp_path / "elsewhere.lock"
    monkeypatch.delenv(node_lock.ENV)
    assert str(node_lock.lock_path()) == node_lock.DEFAULT_PATH
