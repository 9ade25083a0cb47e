"""R3's hand-off between two processes (kvtier.runs.cross_instance), without servers: what B checks before it
starts. The two instances on the real stack, as two jobs, are in tests/test_workflow.py and tests/test_slurm.py."""

import json

import pytest

from kvtier.core.errors import KvtierError
from kvtier.runs import cross_instance


def pool_with(directory, files):
    for name, size in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"k" * size)
    (directory / "in-flight.tmp").write_bytes(b"x")  # not a finished chunk file
    return directory


def handoff(pool, files, host="node-a"):
    return {"pool": str(pool), "pool_state": {"files": len(files), "bytes": sum(files.values()), "pending": 0},
            "files": files, "writer": {"host": host, "servers": {}, "run_id": "r"},
            "writer_stopped": "2026-12-01T10:00:00+00:00"}


FILES = {"model@1@abc.data": 4096, "sub/model@1@def.data": 8192}


def test_a_pool_holding_every_file_at_its_size_passes(tmp_path):
    pool = pool_with(tmp_path / "pool", FILES)
    assert cross_instance.pool_files(pool) == FILES
    cross_instance.check_pool(handoff(pool, FILES), pool)


def test_a_pool_missing_files_stops_b_naming_both_hosts_and_the_counts(tmp_path):
    pool = pool_with(tmp_path / "pool", {"model@1@abc.data": 4096})
    with pytest.raises(KvtierError, match=r"on node-a: 1 of 2 chunk files missing, 0 of another size.*both nodes share"):
        cross_instance.check_pool(handoff(pool, FILES), pool)


def test_a_chunk_file_of_another_size_stops_b(tmp_path):
    pool = pool_with(tmp_path / "pool", {**FILES, "model@1@abc.data": 100})
    with pytest.raises(KvtierError, match="0 of 2 chunk files missing, 1 of another size"):
        cross_instance.check_pool(handoff(pool, FILES), pool)


def test_b_on_another_pool_path_is_refused(tmp_path):
    pool = pool_with(tmp_path / "pool", FILES)
    with pytest.raises(KvtierError, match="same runs.shared_pool_path"):
        cross_instance.check_pool(handoff(pool, FILES), tmp_path / "elsewhere")


def test_a_hand_off_that_is_not_one_is_refused_naming_the_file(tmp_path):
    with pytest.raises(KvtierError, match="handoff.json"):
        cross_instance.read_handoff(tmp_path)
    (tmp_path / "handoff.json").write_text(json.dumps({"pool": "p"}))
    with pytest.raises(KvtierError, match="missing files, pool_state, writer, writer_stopped"):
        cross_instance.read_handoff(tmp_path)
