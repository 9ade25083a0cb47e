"""Quiet preconditions (kvtier.probes.quiet) against fake /proc files, a busy CPU, and a real disk writing."""

import os
import time

import pytest

from kvtier.core.errors import KvtierError
from kvtier.probes import quiet


class FakeProc:
    """/proc/meminfo and /proc/stat in a folder; time moves only when the check sleeps. `runnable`: the tasks
    runnable now, the check included."""

    def __init__(self, folder, dirty_mib, busy, runnable):
        self.folder, self.now, self.jiffies = folder, 0.0, [0, 0]
        self.dirty_mib, self.busy, self.runnable = list(dirty_mib), busy, runnable  # dirty: one value per reading
        self.write()

    def write(self):
        dirty = self.dirty_mib[0] if len(self.dirty_mib) == 1 else self.dirty_mib.pop(0)
        (self.folder / "meminfo").write_text(f"MemTotal: 1000 kB\nDirty: {int(dirty * 1024)} kB\n"
                                             f"Writeback: 0 kB\n")
        busy, idle = self.jiffies
        (self.folder / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0\nctxt 1\n"
                                          f"procs_running {self.runnable}\nprocs_blocked 16\n")

    def sleep(self, seconds):
        self.now += seconds
        self.jiffies[0] += int(100 * seconds * self.busy)
        self.jiffies[1] += int(100 * seconds * (1 - self.busy))
        self.write()

    def sources(self, cpus=2):
        synced = []
        src = quiet.Sources(meminfo=str(self.folder / "meminfo"), stat=str(self.folder / "stat"),
                            sync=lambda: synced.append(True),
                            sleep=self.sleep, clock=lambda: self.now, cpus=cpus)
        return src, synced


def test_a_quiet_machine_passes_at_once_after_sync(tmp_path):
    # 0.1 busy: a sample of 0.2 s is 20 jiffies a CPU, so a share under 0.05 reads as none (as on a real machine)
    proc = FakeProc(tmp_path, dirty_mib=[1], busy=0.1, runnable=1)
    src, synced = proc.sources()
    bounds = quiet.QuietBounds()
    record = quiet.wait_quiet(bounds, src)
    assert record["quiet"] and synced == [True] and record["waited_s"] == bounds.sample_s and record["over"] == []
    assert record["dirty_mib"] == pytest.approx(1.0) and record["cpu_busy"] == pytest.approx(0.1, abs=0.01)


def test_the_window_waits_for_writeback_to_drain(tmp_path):
    proc = FakeProc(tmp_path, dirty_mib=[900, 600, 300, 100, 20, 5], busy=0.05, runnable=2)
    src, _ = proc.sources()
    bounds = quiet.QuietBounds(max_dirty_mib=64)
    record = quiet.wait_quiet(bounds, src)
    assert record["quiet"] and record["dirty_mib"] < 64 and record["waited_s"] >= 4 * bounds.sample_s


def test_a_busy_machine_is_recorded_as_not_quiet_after_the_timeout(tmp_path):
    proc = FakeProc(tmp_path, dirty_mib=[1], busy=0.9, runnable=6)
    src, _ = proc.sources(cpus=2)
    record = quiet.wait_quiet(quiet.QuietBounds(timeout_s=10), src)
    assert not record["quiet"] and record["waited_s"] >= 10
    assert any("of the CPUs busy" in o for o in record["over"]) and record["runnable_per_cpu"] == pytest.approx(2.5)
    assert "2.5 tasks runnable per CPU (bound 1)" in record["over"]


def test_tasks_blocked_on_io_do_not_keep_an_idle_machine_waiting(tmp_path):
    # 16 LMCache threads that had waited on a capped tier's reads sat in the load average for a minute after; the
    # run queue (the check itself only) and an idle CPU are what the check reads.
    proc = FakeProc(tmp_path, dirty_mib=[1], busy=0.0, runnable=1)
    record = quiet.wait_quiet(quiet.QuietBounds(), proc.sources(cpus=2)[0])
    assert record["quiet"] and record["runnable_per_cpu"] == 0 and record["waited_s"] == quiet.QuietBounds().sample_s


def test_a_stat_file_without_a_run_queue_is_named(tmp_path):
    (tmp_path / "meminfo").write_text("Dirty: 0 kB\nWriteback: 0 kB\n")
    (tmp_path / "stat").write_text("cpu  1 0 0 1 0 0 0 0 0 0\n")
    src = quiet.Sources(meminfo=str(tmp_path / "meminfo"), stat=str(tmp_path / "stat"), sleep=lambda s: None)
    with pytest.raises(KvtierError, match="stat: no procs_running line"):
        quiet.wait_quiet(quiet.QuietBounds(), src)


def test_bad_bounds_are_named():
    with pytest.raises(KvtierError, match="max_cpu_busy"):
        quiet.QuietBounds(max_cpu_busy=5)
    with pytest.raises(KvtierError, match="timeout_s must be a positive number"):
        quiet.QuietBounds(timeout_s=0)


def test_a_window_right_after_gigabytes_written_waits_or_says_so(tmp_path):
    # The real kernel: write ~1.5 GB through the page cache of the pool's file system and start at once.
    block = os.urandom(1 << 20)
    with open(tmp_path / "install.bin", "wb") as f:
        for _ in range(1536):
            f.write(block)
    started = time.monotonic()
    record = quiet.wait_quiet(quiet.QuietBounds(max_dirty_mib=64, max_cpu_busy=0.9, max_runnable_per_cpu=50,
                                                 timeout_s=60))
    assert record["waited_s"] <= time.monotonic() - started + 0.1
    # Either sync and the wait drained it under the bound, or the record says it did not get quiet, and why.
    if record["quiet"]:
        assert record["dirty_mib"] <= 64 and record["over"] == []
    else:
        assert record["over"] and record["waited_s"] >= 60


def test_a_page_says_how_many_measurements_were_quiet_and_names_the_others():
    from kvtier.evidence.conditions import quiet_line
    ok = {"quiet": True, "waited_s": 1.2, "over": []}
    busy = {"quiet": False, "waited_s": 120.0, "over": ["0.9 of the CPUs busy (bound 0.25)"]}
    found = quiet.summary([("dram at concurrency 8", ok), ("local_disk at concurrency 32", busy)])
    assert (found["checked"], found["quiet"], found["waited_s_max"]) == (2, 1, 120.0)
    line = quiet_line(found)
    assert "1 of 2 windows" in line and "local_disk at concurrency 32 (0.9 of the CPUs busy" in line
    assert "not made" in quiet_line(quiet.summary([("engine at concurrency 8", None)]))
    with pytest.raises(KvtierError, match="quiet bounds .*unexpected keyword"):
        quiet.hook({"max_dirt_mib": 1})
    assert quiet.hook(None) is None
