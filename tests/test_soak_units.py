"""The soak's parts that need no server: its request stream, its fault schedule, corrupting a chunk in place, the
telemetry's readings of processes and pools, and the windows and G4's criteria on synthetic soaks whose answer is
known (drift, a leak, a pool held or not, faults recovered or not, a corrupted chunk served)."""

import hashlib
import json
import os

import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import r5
from kvtier.gates import g4
from kvtier.runs import soak_faults, soak_monitor
from kvtier.runs.soak_workload import SoakWorkload, stream

IDS = list(range(100, 400))


def test_the_stream_is_seeded_ordered_bounded_and_opens_new_conversations_block_by_block():
    workload = SoakWorkload(rate_per_s=2.0, slots=3, context_tokens=64, followup_tokens=4, output_tokens=2, turns=3,
                            reuse=0.5, seed=7)
    items = list(stream(workload, IDS, 60.0))
    again = list(stream(workload, IDS, 60.0))
    assert [(i.request_id, i.prompt, i.arrival_s) for i in items] == [(i.request_id, i.prompt, i.arrival_s)
                                                                       for i in again]
    arrivals = [i.arrival_s for i in items]
    assert arrivals == sorted(arrivals) and arrivals[-1] < 60.0 and len(items) > 60  # about 2 a second
    assert len({i.request_id for i in items}) == len(items)
    assert all(i.labels["at_s"] == pytest.approx(i.arrival_s) and i.phase == "soak" for i in items)
    blocks = {i.labels["block"] for i in items}
    assert len(blocks) > 3
    # A block's conversations share no prefix with another block's: the pool keeps growing.
    first = {tuple(i.prompt[:64]) for i in items if i.labels["block"] == 0}
    second = {tuple(i.prompt[:64]) for i in items if i.labels["block"] == 1}
    assert first and second and not first & second
    # Within a block, returning turns extend an earlier prompt of their conversation.
    returning = [i for i in items if i.labels["returning"]]
    assert returning and all(any(j.prompt == i.prompt[:len(j.prompt)] and j.arrival_s < i.arrival_s for j in items
                                 if j.labels["session"] == i.labels["session"] and j is not i) for i in returning)


def test_a_trace_workload_loops_with_new_prefixes(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 1000 * k, "input_length": 600, "output_length": 4,
                                         "hash_ids": [1, 2]}) + "\n" for k in range(4)))
    items = list(stream(SoakWorkload(kind="trace", trace=str(trace), length_scale=0.1, time_scale=1.0), IDS, 12.0))
    assert {i.labels["block"] for i in items} == {0, 1, 2}
    loops = [[i for i in items if i.labels["block"] == b] for b in (0, 1)]
    assert loops[0][0].prompt == loops[0][1].prompt  # the trace's reuse inside a loop
    assert loops[0][0].prompt != loops[1][0].prompt  # a new seed per loop


@pytest.mark.parametrize("settings, words", [
    ({"kind": "poisson"}, "one of sessions, trace"), ({"rate_per_s": 0}, "rate_per_s 0"),
    ({"reuse": 1.5}, "reuse 1.5"), ({"kind": "trace"}, "set soak.workload.trace"),
])
def test_a_bad_workload_is_refused_naming_the_field(settings, words):
    with pytest.raises(KvtierError, match=words):
        SoakWorkload(**settings).check()


def test_a_workload_longer_than_the_model_is_refused():
    with pytest.raises(KvtierError, match="over max_model_len 512"):
        SoakWorkload(context_tokens=500, turns=4).check(max_model_len=512)


def test_the_fault_schedule_reads_durations_and_refuses_what_it_cannot_do():
    faults = soak_faults.schedule([{"at": "3m", "kind": "kill_vllm"}, {"at": 30, "kind": "pool_full", "for": "45s"},
                                   {"at": "1m", "kind": "corrupt_chunk", "bytes": 8}], 600)
    assert [(f.at_s, f.kind) for f in faults] == [(30, "pool_full"), (60, "corrupt_chunk"), (180, "kill_vllm")]
    assert faults[0].for_s == 45 and faults[1].bytes == 8
    for entries, words in (([{"at": "1m", "kind": "reboot"}], r"soak.faults\[1\]: kind 'reboot'"),
                           ([{"at": "20m", "kind": "kill_vllm"}], r"soak.faults\[1\].at '20m': inside"),
                           ([{"at": 5, "kind": "kill_vllm", "when": 1}], "unknown field"),
                           ([{"at": "soon", "kind": "kill_vllm"}], "a duration such as"),
                           ([{"at": 5, "kind": "corrupt_chunk", "bytes": 0}], "bytes 0")):
        with pytest.raises(KvtierError, match=words):
            soak_faults.schedule(entries, 600)
    assert soak_faults.seconds("72h", "soak.duration") == 259200
    with pytest.raises(KvtierError, match="soak.duration"):
        soak_faults.seconds("0m", "soak.duration")


def test_flipping_bytes_keeps_the_size_and_changes_exactly_those_bytes(tmp_path):
    chunk = tmp_path / "a.data"
    original = os.urandom(4096)
    chunk.write_bytes(original)
    done = soak_faults.flip_bytes(chunk, 64, "seed")
    damaged = chunk.read_bytes()
    assert len(damaged) == 4096 and sum(a != b for a, b in zip(original, damaged)) == 64
    assert done["sha256_before"] == hashlib.sha256(original).hexdigest() != done["sha256_after"]
    assert done["sha256_after"] == hashlib.sha256(damaged).hexdigest()
    chunk.write_bytes(original)
    assert soak_faults.flip_bytes(chunk, 64, "seed")["first_offset"] == done["first_offset"]  # seeded


def test_the_telemetry_reads_a_process_group_and_a_pool(tmp_path):
    me = soak_monitor.group_usage(os.getpgid(0))
    assert me["alive"] and me["rss_bytes"] > 10 * 2**20 and me["fds"] >= 3
    assert 0 < me["anon_bytes"] < me["rss_bytes"]
    assert soak_monitor.group_usage(None) == {"alive": False, "processes": 0, "rss_bytes": 0, "anon_bytes": 0,
                                              "shmem_bytes": 0, "fds": 0}
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "k1.data").write_bytes(b"a" * 100)
    (tmp_path / "k2.data").write_bytes(b"b" * 50)
    (tmp_path / "k3.tmp").write_bytes(b"c")
    pool = soak_monitor.pool_usage(tmp_path)
    assert (pool["files"], pool["bytes"], pool["pending"]) == (2, 150, 1) and pool["free_bytes"] > 0


# ------------------------------------------------------------------------------------------------------------
# Synthetic soaks


def synthetic(duration=600.0, window=60.0, ttft=lambda t: 0.2, rss=lambda t: 500.0, pool=lambda t: 100.0,
              faults=(), events=(), quota_gb=0.5, failed_at=()):
    """A soak's loaded data as kvtier.evidence.r5.load returns it: a request every 2 s, a sample every 5 s."""
    records = []
    for k in range(int(duration / 2)):
        at = 2.0 * k
        error = {"class": "ConnectionRefusedError", "message": "x"} if at in failed_at else None
        records.append({"request_id": f"soak/{k}", "phase": "soak", "segment": 1, "labels": {"at_s": at},
                        "error": error, "send_ns": int(at * 1e9), "first_token_ns": int((at + ttft(at)) * 1e9),
                        "completion_tokens": 4, "token_ns": [0, 1, 2, 3]})
    samples = []
    for k in range(int(duration / 5) + 1):
        t = 5.0 * k
        counters = {"vllm": {'vllm:prompt_tokens_by_source_total{source="local_compute"}': 100.0 * k,
                             'vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}': 50.0 * k,
                             'vllm:prompt_tokens_by_source_total{source="local_cache_hit"}': 50.0 * k},
                    "lmcache": {"lmcache_mp_lookup_hit_l1_tokens_total": 25.0 * k,
                                "lmcache_mp_lookup_hit_l2_tokens_total": 25.0 * k,
                                "lmcache_mp_l2_store_completed_objects_chunks_total": 2.0 * k,
                                "lmcache_mp_l2_prefetch_load_completed_chunks_total": 1.0 * k}}
        samples.append({"t": t, "wall": 1e9 + t, "monitor_cpu_s": 0.001 * k,
                        "servers": {s: {"alive": True, "processes": 2, "rss_bytes": (rss(t) + 100) * r5.MB,
                                        "anon_bytes": rss(t) * r5.MB, "shmem_bytes": 100 * r5.MB, "fds": 40}
                                    for s in ("vllm", "lmcache")},
                        "counters": counters,
                        "pool": {"files": 10, "bytes": pool(t) * r5.MB, "pending": 0, "free_bytes": 5e9}})
    run = {"kind": "soak", "status": "complete", "config": {"window_s": window, "duration_s": duration,
                                                            "fault_list": [dict(f) for f in faults]},
           "metadata": {"pool_quota_gb": quota_gb}}
    return {"run": run, "records": records, "samples": samples, "events": list(events), "window_s": window,
            "duration_s": duration}


def verdicts(data, **settings):
    return {line["name"]: line for line in g4.lines(data, r5.windows(data), g4.G4Settings(**settings))}


def test_a_quiet_soak_passes_every_line_and_its_windows_add_up():
    data = synthetic()
    table = r5.windows(data)
    assert len(table) == 10 and table["requests"].sum() == 300 and table["failed"].sum() == 0
    assert list(table["steady"]) == [False] + [True] * 9  # the first window is warm-up
    row = table.iloc[3]
    assert row["ttft_p50_s"] == pytest.approx(0.2) and row["output_tok_s"] == pytest.approx(30 * 4 / 60)
    assert (row["engine_frac"], row["l1_frac"], row["l2_frac"], row["recompute_frac"]) == pytest.approx(
        (0.25, 0.125, 0.125, 0.5))
    assert row["l2_write_mb_s"] == pytest.approx(24 * 10 / 60)  # 24 chunks of 10 MB each in the window
    lines = verdicts(data)
    assert {name: line["verdict"] for name, line in lines.items()} == {
        "failed requests outside faults": "PASS", "TTFT p99 drift %": "PASS", "vllm RSS growth MB": "PASS",
        "lmcache RSS growth MB": "PASS", "pool held by eviction": "PASS"}
    assert r5.monitor_share(data) == pytest.approx(0.001 / 5)


def test_drift_a_leak_and_an_unbounded_pool_each_fail_their_line():
    lines = verdicts(synthetic(ttft=lambda t: 0.2 + t / 600, rss=lambda t: 500 + t, pool=lambda t: t * 2))
    assert lines["TTFT p99 drift %"]["verdict"] == "FAIL" and lines["TTFT p99 drift %"]["figure"] > 100
    rss = lines["vllm RSS growth MB"]
    # 1 MB/s over the steady windows of the second half (300-600 s): 300 MB.
    assert rss["verdict"] == "FAIL" and rss["figure"] == pytest.approx(300, rel=0.01), rss
    assert rss["slope_mb_per_h"] == pytest.approx(3600, rel=0.01) and rss["span_min"] == pytest.approx(5)
    assert lines["pool held by eviction"]["verdict"] == "FAIL"
    unbudgeted = verdicts(synthetic(quota_gb=None))["pool held by eviction"]
    assert unbudgeted["verdict"] == "FAIL" and "without bound" in unbudgeted["why"]


def kill(at, exit_at, serving_at, pool_served=True):
    events = [{"t": at, "kind": "fault", "fault": 0, "server": "lmcache"},
              {"t": exit_at, "kind": "exit", "server": "lmcache", "fault": 0}]
    if serving_at is not None:
        events += [{"t": serving_at - 1, "kind": "ready", "server": "lmcache", "fault": 0},
                   {"t": serving_at, "kind": "serving", "fault": 0},
                   {"t": serving_at + 3, "kind": "pool_check", "fault": 0,
                    "probe": {"external_tokens": 256 if pool_served else 0, "identical": True}}]
    return events


def test_a_killed_server_that_comes_back_passes_and_its_failures_are_the_faults():
    data = synthetic(faults=[{"at_s": 200.0, "kind": "kill_lmcache"}], events=kill(200.0, 200.5, 230.0),
                     failed_at=(202.0, 204.0))
    lines = verdicts(data)
    fault = lines["kill_lmcache at 200 s"]
    assert fault["verdict"] == "PASS" and fault["recovered_s"] == 30.0 and fault["pool_served_after"]
    assert lines["failed requests outside faults"]["verdict"] == "PASS"
    assert r5.failures(data) == {"during_faults": {"ConnectionRefusedError": 2}, "outside_faults": {}}
    table = r5.windows(data)
    assert list(table.loc[table["faults"] != "", "window"]) == [3]  # 200-240 s: one window


def test_a_restarted_server_whose_pool_no_longer_serves_fails():
    data = synthetic(faults=[{"at_s": 200.0, "kind": "kill_lmcache"}],
                     events=kill(200.0, 200.5, 230.0, pool_served=False))
    line = verdicts(data)["kill_lmcache at 200 s"]
    assert line["verdict"] == "FAIL" and "did not serve a prompt stored after the restart" in line["why"]


def test_a_server_that_never_serves_again_and_a_failure_outside_faults_fail():
    data = synthetic(faults=[{"at_s": 200.0, "kind": "kill_vllm"}],
                     events=kill(200.0, 200.5, None), failed_at=(100.0,))
    lines = verdicts(data)
    assert lines["kill_vllm at 200 s"]["verdict"] == "FAIL"
    assert "never served again" in lines["kill_vllm at 200 s"]["why"]
    assert lines["failed requests outside faults"]["verdict"] == "FAIL"
    assert lines["failed requests outside faults"]["figure"] == 1
    assert g4.verdict(list(lines.values())) == "FAIL"


def corrupt_event(served_tokens, identical, control_ok=True, present=1):
    probe = {"chunks": ["m@0x0@0@ab.data"], "external_tokens": served_tokens, "identical": identical,
             "first_output": "a", "again_output": "a" if identical else "b", "l2_hit_tokens": served_tokens,
             "error": None, "first_error": None, "files_present_before_resend": present}
    control = {**probe, "external_tokens": 256 if control_ok else 0, "identical": True}
    return [{"t": 300.0, "kind": "fault", "fault": 0, "probes": {"corrupted": probe, "control": control},
             "damaged": [{"file": "m@0x0@0@ab.data", "flipped": 16}] if present else []}]


@pytest.mark.parametrize("served, identical, verdict, words", [
    (256, False, "FAIL", "WRONG ANSWER"), (256, True, "FAIL", "silent corruption"),
    (0, True, "PASS", "not handed to the engine"),
])
def test_a_corrupted_chunk_handed_to_the_engine_fails_and_a_changed_output_is_a_wrong_answer(served, identical,
                                                                                            verdict, words):
    data = synthetic(faults=[{"at_s": 300.0, "kind": "corrupt_chunk"}], events=corrupt_event(served, identical))
    line = verdicts(data)["corrupt_chunk at 300 s"]
    assert line["verdict"] == verdict and words in line["why"] and "m@0x0@0@ab.data" in line["why"]


def test_a_corruption_probe_whose_control_was_not_served_from_the_pool_proves_nothing():
    data = synthetic(faults=[{"at_s": 300.0, "kind": "corrupt_chunk"}],
                     events=corrupt_event(0, True, control_ok=False))
    assert verdicts(data)["corrupt_chunk at 300 s"]["verdict"] == "UNDECIDED"


def test_a_scheduled_fault_that_never_fired_fails_and_a_skipped_one_is_undecided():
    data = synthetic(faults=[{"at_s": 100.0, "kind": "pool_full"}, {"at_s": 500.0, "kind": "kill_vllm"}],
                     events=[{"t": 100.0, "kind": "fault", "fault": 0, "skipped": True, "why": "needs root"}])
    lines = verdicts(data)
    assert lines["pool_full at 100 s"]["verdict"] == "UNDECIDED" and "needs root" in lines["pool_full at 100 s"]["why"]
    assert lines["kill_vllm at 500 s"]["verdict"] == "FAIL"


def test_a_fault_this_machine_could_not_inject_is_named_and_left_out_of_the_verdict():
    data = synthetic(faults=[{"at_s": 100.0, "kind": "pool_full"}],
                     events=[{"t": 100.0, "kind": "fault", "fault": 0, "skipped": True,
                              "why": "needs root (a loop-mounted file system)"}])
    rows = list(verdicts(data).values())
    # Every other line passes: G4 passes on the faults it injected, and its notes say which one it did not.
    assert g4.verdict(rows) == "PASS"
    assert g4.notes(rows) == ["pool_full at 100 s was not injected and is not judged (needs root (a loop-mounted "
                              "file system))"]
    assert "5 of 5 lines PASS; 1 fault(s) not injected, not judged" in g4.text(rows)
    # A line that could be judged and was not leaves the gate UNDECIDED (as G3), not passed and not failed; a
    # failed line fails it whatever else is undecided.
    undecided = [*rows, {"name": "TTFT p99 drift %", "verdict": "UNDECIDED", "figure": None, "limit": 50, "why": ""}]
    assert g4.verdict(undecided) == "UNDECIDED"
    assert g4.verdict([*undecided, {**rows[0], "verdict": "FAIL"}]) == "FAIL"
    assert g4.verdict([r for r in rows if r.get("not_injected")]) == "FAIL"  # nothing judged: nothing passed


def test_rss_growth_is_decided_by_the_interval_of_its_growth_over_the_steady_span():
    wander = lambda t: 40 if int(t // 60) % 2 else -40  # noqa: E731
    # Peaks that wander by 40 MB from window to window around a slow rise: the growth's interval spans 64 MB.
    noisy = verdicts(synthetic(rss=lambda t: 1500 + wander(t) + t / 60))["vllm RSS growth MB"]
    assert noisy["verdict"] == "UNDECIDED" and noisy["low"] < 64 < noisy["high"], noisy
    assert "95 % interval of the growth over the span" in noisy["why"]
    # A wander of 7 MB on no growth at all: decided, well under the bound.
    flat = verdicts(synthetic(rss=lambda t: 1500 + wander(t) * 7 / 40))["vllm RSS growth MB"]
    assert flat["verdict"] == "PASS" and flat["high"] < 64, flat
    # The same 40 MB wander on a leak of 2 MB a second is a leak whatever the noise.
    leak = verdicts(synthetic(rss=lambda t: 1500 + wander(t) + 2 * t))["vllm RSS growth MB"]
    assert leak["verdict"] == "FAIL" and leak["low"] > 64, leak


def test_a_corruption_whose_damaged_files_were_gone_before_the_resend_proves_nothing():
    data = synthetic(faults=[{"at_s": 300.0, "kind": "corrupt_chunk"}], events=corrupt_event(0, True, present=0))
    line = verdicts(data)["corrupt_chunk at 300 s"]
    assert line["verdict"] == "UNDECIDED" and "proves nothing" in line["why"]


def test_a_prefix_cache_reset_refused_while_blocks_are_held_is_tried_again_and_any_other_error_is_not(monkeypatch):
    # After a restart, a probe the client gave up on may still hold blocks in vLLM: its reset is refused until that
    # request ends (seen in the test preset's soak through Slurm). The HTTP call is replaced; the rule is the soak's.
    import asyncio
    import types

    from kvtier.runs import soak
    calls = []

    def refuse_twice(base_url):
        calls.append(base_url)
        if len(calls) <= 2:
            raise KvtierError("evict: vLLM refused to reset its prefix cache (blocks still held by running requests)")

    monkeypatch.setattr(soak, "reset_prefix_cache", refuse_twice)
    runner = object.__new__(soak.Soak)
    runner.stack = types.SimpleNamespace(vllm=types.SimpleNamespace(base_url="http://vllm"))

    async def reset(attempts):
        await runner._reset_prefix_cache(asyncio.get_running_loop(), attempts=attempts, wait_s=0.01)

    asyncio.run(reset(5))
    assert calls == ["http://vllm"] * 3
    calls.clear()
    with pytest.raises(KvtierError, match="still held"):  # still refused after the last attempt
        asyncio.run(reset(2))
    assert len(calls) == 2

    def gone(base_url):
        calls.append(base_url)
        raise KvtierError("evict: POST /reset_prefix_cache failed (connection refused)")

    monkeypatch.setattr(soak, "reset_prefix_cache", gone)
    calls.clear()
    with pytest.raises(KvtierError, match="connection refused"):
        asyncio.run(reset(5))
    assert len(calls) == 1
