"""Evidence B's boundary run: its settings, the order of its cells, and one real cell where the working set
overflows the engine (engine_only recomputes, offload reloads, both answer alike)."""

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
             ({"contexts": [4600]}, "reaches 4744 tokens .*over max_model_len 4608"),
             ({"servers": {**SERVERS, "engine_kv_tokens": 4096}}, "engine_kv_tokens 4096 cannot hold one request"),
             ({"servers": {**SERVERS, "engine_kv_tokens": None}}, "must set the engine's KV capacity"),
             ({"servers": {**SERVERS, "bogus": 1}}, "boundary servers: .*bogus")]
    for overrides, match in cases:
        with pytest.raises(KvtierError, match=match):
            settings(**overrides)


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


@pytest.mark.vllm
def test_a_working_set_over_the_engine_capacity_is_recomputed_by_engine_only_and_reloaded_by_offload(
        tiny_model, tmp_path):
    """One cell, two rounds: 4 conversations of 1024 tokens (4096 + turns) against an engine that holds 2048
    tokens. Round-robin returns find their prefix evicted from the engine: engine_only recomputes it; offload
    reloads it from LMCache. Greedy outputs agree."""
    import pandas as pd

    from kvtier.evidence import boundary as evidence
    s = boundary.BoundarySettings(
        servers={"model_dir": str(tiny_model), "served_name": "tiny", "engine_kv_tokens": 2048,
                 "max_model_len": 1536, "lmcache_l1_gb": 0.2, "timeout_s": 120,
                 "local_disk_path": str(tmp_path / "pool"), "shared_pool_path": str(tmp_path / "shared")},
        contexts=[1024], concurrency=[2], sessions_per_slot=2, turns=3, followup_tokens=16, output_tokens=8)
    summaries = boundary.run_rounds(s, 2, tmp_path / "B")
    assert len(summaries) == 4
    tables = boundary.aggregate(tmp_path / "B")
    cells = tables["B_attribution"].set_index(["scheme", "round"])
    assert cells["valid"].all(), cells
    engine, offload = cells.loc["engine_only"], cells.loc["offload"]
    # engine_only: the returning prefixes were evicted, so most prompt tokens were computed again.
    assert (engine["recompute_frac"] > 0.6).all() and (engine["external_kv_transfer"] == 0).all(), engine
    # offload: the same prefixes came back through the connector, from L1.
    assert (offload["l1_frac"] > 0.5).all() and (offload["recompute_frac"] < 0.4).all(), offload
    correctness = tables["B_correctness"]
    assert len(correctness) == 2 and (correctness["identical"] == correctness["compared"]).all()
    assert (correctness["compared"] == 8).all()  # (turns - 1) x 4 conversations
    conditions = json.loads((tmp_path / "B" / "conditions.json").read_text())
    assert conditions["engine_kv_tokens_reported"]["engine_only"] <= 2048 + 128, conditions
    assert [o["round"] for o in conditions["order"]] == [1, 1, 2, 2]
    grid = evidence.load_grid(tmp_path / "B")
    assert set(grid["scheme"]) == {"engine_only", "offload"} and grid["ttft_p50_s"].notna().all()
    assert isinstance(evidence.winners(grid), pd.DataFrame)
