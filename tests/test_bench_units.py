"""kvtier bench's pure parts: workloads, records, statistics, /metrics parsing."""

import json

import pytest

from kvtier.bench import metrics, summary, workloads
from kvtier.bench.records import RecordWriter, latest_per_request, new_record, read_records
from kvtier.core.errors import KvtierError

from conftest import ROOT

IDS = list(range(100, 400))


def test_sessions_have_exact_lengths_and_share_no_prefix():
    sessions = workloads.sessions(IDS, 8, 1000, 16, seed=3)
    assert all(len(s.context) == 1000 and len(s.followup) == 16 for s in sessions)
    assert len({tuple(s.context[:8]) for s in sessions}) == 8
    assert workloads.sessions(IDS, 8, 1000, 16, seed=3)[5].context == sessions[5].context  # seeded
    resumed = workloads.resume(sessions, 32, 8)
    assert resumed[0].prompt == sessions[0].context + sessions[0].followup and resumed[0].output_tokens == 32


def test_multi_turn_conversations_grow_by_their_turns_and_return_round_robin():
    opening, later = workloads.multi_turn(IDS, 3, 100, 8, 4, turns=3, reuse=1.0, seed=5)
    assert [i.labels["session"] for i in opening] == ["mt-0000", "mt-0001", "mt-0002"]
    assert all(len(i.prompt) == 108 and i.labels == {**i.labels, "turn": 1, "returning": False} for i in opening)
    # Round-robin: every slot's turn 2, then every slot's turn 3; each prompt extends the previous turn's by the
    # stand-in answer (4) and the follow-up (8).
    assert [(i.labels["session"], i.labels["turn"]) for i in later] == [
        ("mt-0000", 2), ("mt-0001", 2), ("mt-0002", 2), ("mt-0000", 3), ("mt-0001", 3), ("mt-0002", 3)]
    assert all(i.labels["returning"] and i.output_tokens == 4 for i in later)
    assert later[0].prompt[:108] == opening[0].prompt and len(later[0].prompt) == 120
    assert later[3].prompt[:120] == later[0].prompt and len(later[3].prompt) == 132
    assert len({tuple(i.prompt[:8]) for i in opening}) == 3, "conversations share no prefix"
    again = workloads.multi_turn(IDS, 3, 100, 8, 4, turns=3, reuse=1.0, seed=5)
    assert [i.prompt for i in again[1]] == [i.prompt for i in later]  # seeded


def test_multi_turn_reuse_is_the_fraction_of_later_turns_that_return():
    _, none = workloads.multi_turn(IDS, 4, 64, 8, 4, turns=3, reuse=0.0, seed=1)
    assert not any(i.labels["returning"] for i in none) and all(i.labels["turn"] == 1 for i in none)
    assert len({i.labels["session"] for i in none}) == 8 and all(len(i.prompt) == 72 for i in none)
    opening, half = workloads.multi_turn(IDS, 8, 64, 8, 4, turns=26, reuse=0.5, seed=1)
    returned = [i for i in half if i.labels["returning"]]
    assert 0.4 < len(returned) / len(half) < 0.6
    seen = {tuple(i.prompt) for i in opening}
    for item in half:  # a returning turn extends a prompt sent before; a new conversation extends none
        extends = any(tuple(item.prompt[:n]) in seen for n in range(64, len(item.prompt)))
        assert extends == item.labels["returning"], item.request_id
        seen.add(tuple(item.prompt))
    for bad, match in (({"reuse": 1.5}, "reuse 1.5"), ({"turns": 1}, "turns >= 2")):
        with pytest.raises(KvtierError, match=match):
            workloads.multi_turn(IDS, 2, 64, 8, 4, **{"turns": 3, "reuse": 1.0, **bad}, seed=0)


def test_trace_replay_preserves_prefix_reuse_and_scales():
    trace = workloads.load_trace(ROOT / "raw_data" / "traces" / "mooncake_conversation_trace.jsonl", limit=200)
    items = workloads.trace_requests(trace, IDS, seed=1, time_scale=0.5, length_scale=0.25)
    by_blocks = {}
    for req, item in zip(trace, items):
        assert len(item.prompt) == max(1, round(req.input_length * 0.25))
        assert item.arrival_s == pytest.approx((req.timestamp_ms - trace[0].timestamp_ms) / 1000 * 0.5)
        by_blocks.setdefault(req.hash_ids[:1], []).append(item)
    block = round(512 * 0.25)
    shared = [group for group in by_blocks.values() if len(group) > 1]
    assert shared, "the conversation trace reuses prefixes"
    for group in shared:  # same first hash id: same first block of tokens
        assert all(item.prompt[:block] == group[0].prompt[:block] for item in group)


def test_trace_loader_names_the_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\nnot json\n')
    with pytest.raises(KvtierError, match=f"{path}, line 2: not JSON"):
        workloads.load_trace(path)
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n')
    with pytest.raises(KvtierError, match="line 1: missing field 'hash_ids'"):
        workloads.load_trace(path)


def test_records_survive_a_torn_last_line_and_resumes_count_once(tmp_path):
    path = tmp_path / "requests.jsonl"
    with RecordWriter(path) as writer:
        for segment, rid in ((1, "a"), (1, "b"), (2, "a")):
            writer.write(new_record("run", segment, rid, "p", 1, {}))
    with open(path, "ab") as f:
        f.write(b'{"run_id": "run", "segm')  # the process died mid-write
    records = list(read_records(path))
    assert len(records) == 3
    latest = {r["request_id"]: r["segment"] for r in latest_per_request(records)}
    assert latest == {"a": 2, "b": 1}
    path.write_text('{"a": 1}\ngarbage\n{"b": 2}\n')
    with pytest.raises(KvtierError, match="line 2: not a JSON record"):
        list(read_records(path))


def record(send, first_token, tokens_at, end, completion, error=None):
    r = new_record("run", 1, f"r{send}", "w", 2, {})
    r.update(send_ns=send, first_byte_ns=first_token, first_token_ns=first_token, last_token_ns=tokens_at[-1],
             end_ns=end, token_ns=[t - send for t in tokens_at], completion_tokens=completion, prompt_tokens=10,
             error=error)
    return r


def test_window_statistics_by_hand():
    s = 1_000_000_000
    records = [record(0, 1 * s, [1 * s, 2 * s, 4 * s], 4 * s, 3),
               record(1 * s, 3 * s, [3 * s, 4 * s], 5 * s, 2),
               record(2 * s, None, [2 * s], 3 * s, 0, error={"class": "Timeout", "message": "x"})]
    stats = summary.window_stats(records, ttft_sla_s=1.5)
    assert stats["duration_s"] == 5.0
    assert stats["ttft_s"]["p50"] == 1.5 and stats["ttft_s"]["count"] == 2     # 1 s and 2 s
    assert sorted([stats["itl_s"]["min"], stats["itl_s"]["max"]]) == [1.0, 2.0]  # gaps 1, 2 and 1
    assert stats["tpot_s"]["mean"] == pytest.approx((3 / 2 + 1 / 1) / 2)          # (4-1)/(3-1), (4-3)/(2-1)
    assert stats["e2e_s"]["mean"] == 4.0
    assert stats["output_tok_s"]["aggregate"] == 1.0                                # 5 tokens / 5 s
    assert stats["requests"] == {"total": 3, "ok": 2, "failed": 1, "errors": {"Timeout": 1}}
    assert stats["goodput"] == {"ttft_sla_s": 1.5, "requests_within_sla": 1, "fraction": 1 / 3,
                                "requests_per_s": 0.2}


PROM_BEFORE = """# HELP vllm:time_to_first_token_seconds x
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.3
vllm:num_requests_running{engine="0",model_name="m"} 3.0
"""
PROM_AFTER = PROM_BEFORE.replace('le="0.1",model_name="m"} 1.0', 'le="0.1",model_name="m"} 3.0').replace(
    'le="0.5",model_name="m"} 2.0', 'le="0.5",model_name="m"} 6.0').replace(
    'le="+Inf",model_name="m"} 2.0', 'le="+Inf",model_name="m"} 6.0').replace(
    "_count{engine=\"0\",model_name=\"m\"} 2.0", "_count{engine=\"0\",model_name=\"m\"} 6.0").replace(
    "_sum{engine=\"0\",model_name=\"m\"} 0.3", "_sum{engine=\"0\",model_name=\"m\"} 1.1").replace(
    "running{engine=\"0\",model_name=\"m\"} 3.0", "running{engine=\"0\",model_name=\"m\"} 0.0")


def test_metrics_deltas_ignore_gauges_and_the_histogram_is_interpolated():
    delta = metrics.deltas(metrics.parse(PROM_BEFORE), metrics.parse(PROM_AFTER))
    assert not any("num_requests_running" in k for k in delta)
    hist = metrics.histogram(delta, metrics.TTFT_HISTOGRAM)
    assert hist["count"] == 4 and hist["mean_s"] == pytest.approx(0.2)
    # 2 of 4 observations in (0, 0.1], 2 in (0.1, 0.5]: the median sits at the top of the first bucket
    assert hist["p50_s"] == pytest.approx(0.1) and hist["p90_s"] == pytest.approx(0.1 + 0.4 * (3.6 - 2) / 2)
    rec = summary.reconcile({"ttft_s": {"count": 4, "mean": 0.25, "p50": 0.12}}, hist)
    assert rec["mean_difference_s"] == pytest.approx(0.05) and rec["server_count"] == 4


def test_summary_schema_documents_every_statistic():
    schema = json.dumps(__import__("yaml").safe_load((ROOT / "workflow/schemas/summary.schema.yaml").read_text()))
    for word in ("Time to first token", "Inter-token latency", "Time per output token", "End-to-end latency",
                 "goodput", "aggregate", "per_request"):
        assert word.lower() in schema.lower()


def test_progress_is_drawn_on_a_terminal_and_silent_otherwise():
    import io

    from kvtier.bench.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet, loud = io.StringIO(), Tty()
    for stream in (quiet, loud):
        progress = Progress(stream=stream)
        progress.start("resume-c8", 2)
        progress.update(True)
        progress.update(False)
        progress.close()
    assert quiet.getvalue() == ""
    assert "resume-c8" in loud.getvalue() and "2/2  ok 1  failed 1" in loud.getvalue()


def test_a_counter_born_inside_the_window_counts_from_zero():
    after = metrics.parse('lmcache_mp_lookup_hit_l2_tokens_total{model_name="m"} 4096.0\n')
    assert metrics.deltas({}, after) == {'lmcache_mp_lookup_hit_l2_tokens_total{model_name="m"}': 4096.0}


def test_sigterm_interrupts_again_after_a_phase_has_run():
    """A phase runs on its own event loop, which takes SIGTERM while it runs (cancelling the phase) and must hand
    the caller's handler back after: kvtier's SIGTERM-as-Ctrl-C must still stop a run between two phases."""
    import asyncio
    import os
    import signal
    import time

    from kvtier.bench.runner import run_async

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        run_async(asyncio.sleep(0.01))
        assert signal.getsignal(signal.SIGTERM) is interrupt
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)

        async def long_phase():
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the loop runs: the phase is cancelled
            await asyncio.sleep(5)
        with pytest.raises(KeyboardInterrupt, match="terminated"):
            run_async(long_phase())
        assert signal.getsignal(signal.SIGTERM) is interrupt
    finally:
        signal.signal(signal.SIGTERM, before)
