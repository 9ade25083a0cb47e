"""kvtier.bench.profile against values computed by hand on small logs."""

import json

import pytest

from kvtier.bench import profile
from kvtier.core.errors import KvtierError

from conftest import ROOT

# Four requests in Mooncake's format (512-token blocks). r2 extends r1's full blocks (1, 2); r4 extends r2's (1, 2, 4).
MOONCAKE = [
    {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]},
    {"timestamp": 1000, "input_length": 1600, "output_length": 20, "hash_ids": [1, 2, 4, 5]},
    {"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]},
    {"timestamp": 5000, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 4, 5]},
]
SERVICE = profile.ServiceModel(prefill_tok_s=1000, time_per_output_token_s=0.1)


def write_lines(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_mooncake_log_by_hand(tmp_path):
    requests = profile.load(write_lines(tmp_path / "trace.jsonl", MOONCAKE))
    result = profile.profile(requests, SERVICE)
    ctx = result["context_tokens"]  # sorted 600, 1100, 1600, 2048; linear between closest ranks
    assert (ctx["p50"], ctx["p90"], ctx["p99"]) == pytest.approx((1350, 1600 + 0.7 * 448, 1600 + 0.97 * 448))
    assert [b["requests"] for b in result["context_histogram"][:4]] == [1, 2, 1, 0]
    # Reuse: r2 repeats blocks (1), (1,2): 1024 tokens; r4 repeats all four chains of r2: 4 x 512. Of 5348.
    assert result["prefix_reuse"]["reused_tokens"] == 1024 + 2048
    assert result["prefix_reuse"]["ratio"] == pytest.approx(3072 / 5348)
    # Returns: r2 continues r1 after 1 s; r4 continues r2 (its longest repeated full-block prefix) after 4 s.
    assert result["session_returns"]["returns"] == 2
    assert result["session_returns"]["gap_s"]["max"] == pytest.approx(4.0)
    assert result["session_returns"]["gap_s"]["min"] == pytest.approx(1.0)
    # Concurrency from arrivals: holds of 2.1, 3.6, 1.1 and 2.148 s; at t = 2 s r1, r2 and r3 are in flight.
    conc = result["concurrency"]
    assert conc["peak"] == 3 and "modelled from arrivals" in conc["source"]
    assert (conc["time_weighted_p50"], conc["time_weighted_p90"], conc["time_weighted_p99"]) == (1, 2, 3)
    assert conc["service_model"] == {"prefill_tok_s": 1000, "time_per_output_token_s": 0.1}
    assert "prefix reuse: 57.4 %" in profile.text(result)


def test_a_users_log_with_end_times_and_sessions(tmp_path):
    rows = [{"start_s": 0, "end_s": 4, "input_tokens": 100, "output_tokens": 50, "session_id": "a"},
            {"start_s": 1, "end_s": 2, "input_tokens": 80, "output_tokens": 5, "session_id": "b"},
            {"start_s": 3, "end_s": 5, "input_tokens": 200, "output_tokens": 10, "session_id": "a"}]
    result = profile.profile(profile.load(write_lines(tmp_path / "log.jsonl", rows)))  # no service model needed
    assert result["concurrency"]["peak"] == 2 and result["concurrency"]["source"].startswith("measured")
    # Turn 2 of session a reuses turn 1's prompt and output: min(200, 100 + 50) of 380 prompt tokens.
    assert result["prefix_reuse"]["ratio"] == pytest.approx(150 / 380)
    assert result["session_returns"]["gap_s"]["p50"] == pytest.approx(3.0)
    csv_log = tmp_path / "log.csv"
    csv_log.write_text("start_s,end_s,input_tokens,output_tokens,session_id\n"
                       + "".join(f"{r['start_s']},{r['end_s']},{r['input_tokens']},{r['output_tokens']},"
                                 f"{r['session_id']}\n" for r in rows))
    assert profile.profile(profile.load(csv_log)) == result


def test_without_hashes_or_sessions_reuse_is_not_measured_and_says_so(tmp_path):
    rows = [{"start_s": 0, "input_tokens": 100, "output_tokens": 5}, {"start_s": 1, "input_tokens": 300,
                                                                       "output_tokens": 5}]
    log = write_lines(tmp_path / "log.jsonl", rows)
    with pytest.raises(KvtierError, match="service-time model"):
        profile.profile(profile.load(log))
    result = profile.profile(profile.load(log), SERVICE)
    assert result["prefix_reuse"]["ratio"] is None and "not measurable" in result["prefix_reuse"]["method"]
    assert result["session_returns"]["returns"] == 0


@pytest.mark.parametrize("content, fmt, message", [
    ("hello\n", None, "unknown trace format"),
    ('{"start_s": 0, "input_tokens": -3, "output_tokens": 1}\n', None, "line 1: field 'input_tokens' = -3 must be >= 1"),
    ('{"start_s": 0, "input_tokens": 5}\n', None, "line 1: missing field 'output_tokens'"),
    ('{"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}\n', None, "line 1: timestamp must"),
    ('{"start_s": 0, "input_tokens": 5, "output_tokens": 1}\n', "parquet", "format 'parquet'"),
])
def test_bad_logs_are_named(tmp_path, content, fmt, message):
    log = tmp_path / "bad.jsonl"
    log.write_text(content)
    with pytest.raises(KvtierError, match=message) as error:
        profile.load(log, fmt)
    assert str(log) in str(error.value) or fmt


def test_a_service_model_must_be_positive():
    with pytest.raises(KvtierError, match="prefill_tok_s = 0"):
        profile.ServiceModel(0, 0.1).check()


def test_the_bundled_conversation_trace_profiles():
    trace = ROOT / "raw_data" / "traces" / "mooncake_conversation_trace.jsonl"
    result = profile.profile(profile.load(trace), SERVICE)
    assert result["requests"] > 100 and 0 < result["prefix_reuse"]["ratio"] < 1
    assert result["session_returns"]["returns"] > 0 and result["concurrency"]["peak"] >= 1
