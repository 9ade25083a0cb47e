"""Evidence B's boundary run: its settings and the order of its cells. The real cells, where the working set
overflows the engine (engine_only recomputes, offload reloads, both answer alike), are those of the test preset's
run (tests/test_workflow.py, test_B_renders_the_measured_boundary_with_its_reasons)."""

import json

import pytest

from kvtier.core.errors import KvtierError
from kvtier.runs import boundary

SERVERS = {"model_dir": "/m", "engine_kv_tokens": 8192, "max_model_len": 4608}


def settings(**overrides) -> boundary.BoundarySettings:
    return boundary.BoundarySettings(**{"servers": SERVERS, **overrides})


def test_settings_refuse_what_cannot_run_naming_the_value():
    settings()  # the defaults fit
    cases = [({"schemes": ["vram"]}, "schemes \\['vram'\\]"),
             ({"contexts": []}, "contexts \\[\\]"), ({"concurrency": [0, 2]}, "concurrency \\[0, 2\\]"),
             ({"turns": 1}, "turns >= 2"), ({"reuse": 1.5}, "reuse in \\[0, 1\\]"),
             ({"contexts": [4600]}, "reaches 4840 tokens .*5 turns, min_requests 16 at concurrency 2.*over "
                                    "max_model_len 4608"),
             ({"min_requests": 0}, "min_requests >= 1"),
             ({"servers": {**SERVERS, "engine_kv_tokens": 4096}}, "engine_kv_tokens 4096 cannot hold one request"),
             ({"servers": {**SERVERS, "engine_kv_tokens": None}}, "must set the engine's KV capacity"),
             ({"servers": {**SERVERS, "bogus": 1}}, "boundary servers: .*bogus")]
    for overrides, match in cases:
        with pytest.raises(KvtierError, match=match):
            settings(**overrides)


def test_low_concurrency_gets_more_turns_not_more_conversations_to_reach_min_requests():
    s = settings(concurrency=[2, 4, 8], sessions_per_slot=2, turns=3, min_requests=16)
    # 4 conversations x (turns - 1) later turns >= 16: 5 turns at 2; 8 x 2 = 16 already at 4.
    assert [s.turns_for(c) for c in (2, 4, 8)] == [5, 3, 3]
    assert settings(min_requests=1).turns_for(2) == 3  # never fewer than `turns`


def test_sequential_rounds_are_refused_when_they_cannot_run():
    assert boundary.BoundaryRounds(3, 8, 300).most == 8 and boundary.BoundaryRounds(3).most == 3
    for args, match in [((0,), "rounds 0: at least 1"), ((3, 2), "max_rounds 2: at least rounds"),
                        ((1, 4), "start from at least 2"), ((3, 8, 0), "cell_budget_s 0")]:
        with pytest.raises(KvtierError, match=match):
            boundary.BoundaryRounds(*args)


def test_cells_reverse_every_other_round_and_schemes_alternate_cell_by_cell_and_round_by_round():
    s = settings(contexts=[1024, 2048], concurrency=[2, 4])
    assert s.cells(1) == [(0, 1024, 2), (1, 1024, 4), (2, 2048, 2), (3, 2048, 4)]
    assert s.cells(2) == s.cells(1)[::-1]
    first = {(r, i): boundary.scheme_order(s.schemes, r, i)[0] for r in (1, 2, 3) for i, _, _ in s.cells(r)}
    # In the order measured, A B, B A, ...: consecutive cells open with different schemes.
    for r in (1, 2):
        opened = [first[(r, i)] for i, _, _ in s.cells(r)]
        assert all(a != b for a, b in zip(opened, opened[1:])), opened
    # And every cell opens with the other scheme in the next round.
    assert all(first[(1, i)] != first[(2, i)] and first[(1, i)] == first[(3, i)] for i in range(4))
    assert all(sorted(boundary.scheme_order(s.schemes, 1, i)) == sorted(s.schemes) for i in range(4))


def test_the_engine_capacity_is_set_in_bytes_from_the_model_and_overrides_the_cpu_default(tiny_model, tmp_path,
                                                                                        monkeypatch):
    from kvtier.stack.model import ModelSpec, kv_bytes_per_token
    from kvtier.stack.vllm_server import VllmServer
    per_token = kv_bytes_per_token(tiny_model, "float32")
    assert per_token == ModelSpec(max_positions=8192).kv_bytes_per_token == 2 * 4 * 2 * 64 * 4
    assert kv_bytes_per_token(tiny_model, "bfloat16") == per_token // 2
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")  # inherited: would override the flag on CPU
    server = VllmServer(str(tiny_model), str(tmp_path / "log"), kv_cache_bytes=8192 * per_token)
    cmd = server.command()
    assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == str(8192 * per_token)
    assert "VLLM_CPU_KVCACHE_SPACE" not in server.environment()
    assert "--kv-cache-memory-bytes" not in VllmServer(str(tiny_model), str(tmp_path / "log")).command()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
    with pytest.raises(KvtierError, match="config.json: cannot size the KV of one token"):
        kv_bytes_per_token(tmp_path / "bad")


def test_a_conversation_longer_than_the_model_allows_is_refused_before_any_server_starts(tiny_model, tmp_path):
    s = boundary.BoundarySettings(servers={"model_dir": str(tiny_model), "engine_kv_tokens": 10000,
                                           "max_model_len": 9000}, contexts=[1024], concurrency=[2])
    with pytest.raises(KvtierError, match="max_model_len 9000 is over the model's max_position_embeddings 8192"):
        boundary.run_rounds(s, 1, tmp_path / "B")
    assert not (tmp_path / "B").exists()


def test_a_boundary_directory_without_cells_is_refused_naming_it(tmp_path):
    with pytest.raises(KvtierError, match="no finished boundary cell under cells/round-<r>/"):
        boundary.aggregate(tmp_path)


def test_requests_are_paired_across_schemes_by_id_within_a_round():
    rows = [{"round": 1, "scheme": s, "context_tokens": 1024, "concurrency": 2, "valid": True}
            for s in ("engine_only", "offload")]
    outputs = {(1, "engine_only", 1024, 2): {"a": ("x", 0.10), "b": ("y", 0.20), "c": ("z", 0.40), "d": ("w", None)},
               (1, "offload", 1024, 2): {"a": ("x", 0.05), "b": ("y", 0.30), "c": ("z", 0.40), "e": ("v", 1.0)}}
    boundary._pair_requests(rows, outputs)
    engine, offload = rows
    assert engine["ttft_paired_ratio"] is None  # the baseline carries none
    assert offload["ttft_paired_ratio"] == pytest.approx(1.0) and offload["paired_requests"] == 3  # 0.5, 1.5, 1.0
    engine["valid"] = False  # an invalid baseline round pairs nothing
    boundary._pair_requests(rows, outputs)
    assert rows[1]["ttft_paired_ratio"] is None


def test_a_replay_that_fails_is_recorded_as_failed_and_the_grid_is_kept(tmp_path, monkeypatch):
    """After the rounds, a replay that cannot be prepared or sent (a server gone, a request not found) is a record
    with its error in cells/replays.jsonl, never an exception: that would fail the job, and Snakemake would remove
    the cells it had measured."""
    from types import SimpleNamespace

    from kvtier.bench.records import read_records
    from kvtier.runs import boundary_replay
    from kvtier.runs.boundary import CELLS_DIR, REPLAYS_FILE, replays_table

    (tmp_path / CELLS_DIR).mkdir()
    outputs = {(1, "engine_only", 512, 2): {"a": ("x", 0.1), "b": ("y", 0.1)},
               (1, "offload", 512, 2): {"a": ("z", 0.1), "b": ("y", 0.1)}}  # a differs, b is the control
    monkeypatch.setattr(boundary_replay, "cell_outputs", lambda _: outputs)
    gone = "http://127.0.0.1:9"  # nothing listens: the reset of the prefix cache fails
    stacks = {s: SimpleNamespace(vllm=SimpleNamespace(base_url=gone)) for s in ("engine_only", "offload")}
    settings = SimpleNamespace(schemes=("engine_only", "offload"),
                               tier_settings=lambda: SimpleNamespace(served_name="m", timeout_s=5))
    config = SimpleNamespace(seed=1, base_url=gone, model="m")
    monkeypatch.setattr(boundary_replay, "cell_config",
                        lambda settings, stack, round_, context, c: config)
    monkeypatch.setattr(boundary_replay, "alphabet", lambda tokenizer, seed: [1, 2])
    # The control's request is not in the plan any more: its preparation fails.
    monkeypatch.setattr(boundary_replay, "plan", lambda cfg, ids: [SimpleNamespace(
        items=[SimpleNamespace(request_id="a", prompt=[1, 2], output_tokens=2)])])
    records = boundary_replay.replay(settings, stacks, tmp_path, controls=1)
    written = list(read_records(tmp_path / CELLS_DIR / REPLAYS_FILE))
    assert len(records) == len(written) == 4 and all(r["error"] for r in written)
    errors = {r["labels"]["replay_of"]: r["error"] for r in written}
    assert errors["b"].startswith("replay not prepared: KeyError") and not errors["a"].startswith("replay not")
    table = replays_table(tmp_path, outputs)
    assert list(table["failed"]) == ["engine_only offload"] * 2 and table["identical_alone"].isna().all()
