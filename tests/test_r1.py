"""R1 probes on real parts: both LMCache builds' fs L2 adapter reading real files cold, real fio, real fsync'd
safetensors shards; the page cache checked with mincore; the R1 tables and targets computed from the records."""

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from kvtier.bench.records import read_records
from kvtier.core.errors import KvtierError
from kvtier.evidence import r1, stats
from kvtier.probes import ckptsave, fio, pagecache
from kvtier.runs import r1 as r1_run

from conftest import ROOT, run

FIXTURE = ROOT / "tests" / "fixtures" / "r1"
CKPT = {"layers": 4, "hidden": 256, "intermediate": 512, "kv_dim": 64, "rank": 8, "shards": 2}
# The quiet check runs before every timed read and save; bounds a busy test machine meets, so it never waits long.
QUIET = {"max_dirty_mib": 4096, "max_cpu_busy": 1.0, "max_runnable_per_cpu": 1000, "sample_s": 0.05, "timeout_s": 5}


def test_dropped_files_leave_the_page_cache_and_reads_bring_them_back(tmp_path):
    path = tmp_path / "chunk.data"
    path.write_bytes(os.urandom(4 << 20))
    path.read_bytes()
    assert pagecache.resident_bytes(path) == 4 << 20
    assert pagecache.drop(tmp_path) == 1
    assert pagecache.resident_bytes(tmp_path) == 0
    with open(path, "rb") as f:
        f.read(1 << 20)
    assert 0 < pagecache.resident_bytes(path) <= 4 << 20


def test_checkpoint_spec_counts_a_32b_lora_and_refuses_nonsense():
    spec = ckptsave.CheckpointSpec()
    # rank 16 x (in + out) of q, k, v, o, gate, up, down, over 64 layers
    per_layer = 16 * ((5120 + 5120) * 2 + (5120 + 1024) * 2 + (5120 + 27648) * 2 + (27648 + 5120))
    assert spec.parameters() == 64 * per_layer and spec.bytes() == 2 * spec.parameters()
    with pytest.raises(KvtierError, match="shards"):
        ckptsave.CheckpointSpec(layers=2, shards=4)
    with pytest.raises(KvtierError, match="rank must be a positive integer"):
        ckptsave.CheckpointSpec(rank=0)
    with pytest.raises(KvtierError, match="dtype"):
        ckptsave.CheckpointSpec(dtype="int8")


@pytest.mark.parametrize("writer", ckptsave.WRITERS)
def test_a_checkpoint_save_writes_every_shard_then_removes_it(tmp_path, writer):
    from safetensors.torch import load  # noqa: PLC0415

    spec = ckptsave.CheckpointSpec(**CKPT)
    shards = ckptsave.state_dict_shards(spec)
    assert sum(t.numel() for shard in shards for t in shard.values()) == spec.parameters()
    seen = {}
    real_save = ckptsave._save

    def keep_copy(shard, path):
        written = real_save(shard, path)
        seen[path.name] = load(path.read_bytes())
        return written

    ckptsave._save, saved = keep_copy, None
    try:
        saved = ckptsave.save(shards, tmp_path, writer)
    finally:
        ckptsave._save = real_save
    assert saved["writer"] == writer and saved["shards"] == 2 and saved["gb_per_s"] > 0
    assert saved["bytes"] > spec.bytes()  # the tensors plus the safetensors headers
    assert sorted(seen) == ["adapter-00001-of-00002.safetensors", "adapter-00002-of-00002.safetensors"]
    for name, shard in zip(sorted(seen), shards):
        assert seen[name].keys() == shard.keys()
        assert all(seen[name][k].view(torch.uint8).equal(shard[k].view(torch.uint8)) for k in shard)
    assert not (tmp_path / ckptsave.DIR_NAME).exists()
    with pytest.raises(KvtierError, match="unknown checkpoint writer 'many'"):
        ckptsave.save(shards, tmp_path, "many")


def test_fio_reports_direct_reads_per_queue_depth(tmp_path):
    one = fio.direct_read(tmp_path, 8 << 20, 1 << 20, 1)
    deep = fio.direct_read(tmp_path, 8 << 20, 1 << 20, 8)
    assert (one["iodepth"], deep["iodepth"]) == (1, 8)
    assert one["bytes"] == deep["bytes"] == 8 << 20 and one["gb_per_s"] > 0 and deep["gb_per_s"] > 0
    assert one["fio_version"].startswith("fio-")
    with pytest.raises(KvtierError, match="not a fio JSON report"):
        fio.parse("fio: option not understood", source="x")


def test_a_missing_fio_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KvtierError, match="fio not found on PATH.*apt-get install fio"):
        fio.executable()


# What the judge between rounds is told: the checksum's cost is still undecided (the real judge,
# evidence.r1.undecided_reads, is tested on its own below and end to end in the test preset's pipeline).
CHECKSUM_OPEN = {"targets": ["checksum"], "loads": {"patched": [4], "patched_checksum": [4]}, "depths": []}


@pytest.fixture(scope="module")
def reads(lmcache_builds, tmp_path_factory):
    """A real, small R1 reads run over both builds: 2 rounds of everything, then (sequential rounds, up to 3) a
    third of only what the undecided target needs."""
    base = tmp_path_factory.mktemp("r1")
    settings = r1_run.ReadSettings(pool_path=str(base / "pool"), local_disk_path=str(base / "local"),
                                    builds={name: str(path) for name, (path, _) in lmcache_builds.items()},
                                    chunks=24, chunk_mib=0.5, load_concurrency=4, queue_depths=[1, 4], rounds=2,
                                    max_rounds=3, checkpoint=CKPT, quiet=QUIET, verify_checksum=True)
    run_dir = base / "R1" / "reads"
    looked = []

    def undecided(reads_dir):
        looked.append(len((reads_dir / r1_run.COLDREAD_FILE).read_text().splitlines()))  # the records so far
        return CHECKSUM_OPEN

    run = r1_run.run_reads(settings, run_dir, undecided=undecided)
    assert looked == [8, 10], "the judge looks after round 2 and after round 3, at every record written by then"
    return settings, run_dir, run


def test_one_python_per_build_makes_every_load_asked_of_it_and_a_failure_is_named(lmcache_builds, tmp_path):
    settings = r1_run.ReadSettings(pool_path=str(tmp_path / "pool"), local_disk_path=str(tmp_path / "local"),
                                    builds={name: str(path) for name, (path, _) in lmcache_builds.items()},
                                    chunks=4, chunk_mib=0.25, load_concurrency=2, queue_depths=[1], rounds=1,
                                    checkpoint=CKPT, quiet=QUIET, verify_checksum=True)
    pool = tmp_path / "pool" / r1_run.COLDREAD_DIR
    with r1_run.ColdReader(settings.builds["patched"], pool, settings) as reader:
        assert reader.store(verify_checksum=True) == {"stored": 4, "chunks": 4, "files_with_checksum": 4}
        first, second = reader.loads([(1, False), (2, True)]), reader.loads([(2, False)])
        assert reader.running()  # the same Python for both requests
    assert not reader.running()
    assert [(r["load_concurrency"], r["verify_checksum"]) for r in first + second] == [(1, False), (2, True),
                                                                                        (2, False)]
    assert all(r["resident_bytes_before"] == 0 and r["chunks"] == 4 for r in first + second)
    with r1_run.ColdReader(settings.builds["upstream"], pool, settings) as reader:
        with pytest.raises(KvtierError, match=r"cold load with .*upstream failed \(exit 1, 0 of 1 stores\): "
                                              r"(.|\n)*has no chunk checksums"):
            reader.store(verify_checksum=True)
    assert not reader.running()


def test_reads_alternate_the_builds_and_every_load_starts_cold(reads):
    settings, run_dir, run = reads
    assert run["status"] == "complete" and run["page_cache"].startswith("O_DIRECT")
    loads = [json.loads(line) for line in (run_dir / r1_run.COLDREAD_FILE).read_text().splitlines()]
    # Builds and the patched build's load bounds (fio's depths and the configured bound) alternate their order.
    # With verify_checksum, the patched build also loads at the configured bound checking every chunk's CRC-32.
    # The third round loads only what the undecided target needs: no upstream, no other bound, no fio, no save.
    assert [(r["round"], r["build"], r["load_concurrency"]) for r in loads] == [
        (0, "upstream", 1), (0, "patched", 1), (0, "patched", 4), (0, "patched_checksum", 4),
        (1, "patched_checksum", 4), (1, "patched", 4), (1, "patched", 1), (1, "upstream", 1),
        (2, "patched", 4), (2, "patched_checksum", 4)]
    looks = run["sequential"]
    assert [(look["after_rounds"], look["undecided"]) for look in looks["looks"]] == [(2, ["checksum"]),
                                                                                    (3, ["checksum"])]
    assert (looks["rounds"], looks["max_rounds"], looks["stop"]) == (2, 3, r1_run.ROUNDS_SPENT)
    by_build = {r["build"]: r for r in loads}
    # Every file was written with its checksum before the first load, so the checked loads had each one to check;
    # the upstream build knows no checksums.
    assert by_build["patched_checksum"]["verify_checksum"] and by_build["patched_checksum"]["files_with_checksum"] == 24
    assert not by_build["patched"]["verify_checksum"] and by_build["upstream"]["files_with_checksum"] is None
    assert by_build["patched"]["adapter_reads_concurrently"] and not by_build["upstream"]["adapter_reads_concurrently"]
    assert by_build["patched"]["lmcache_version"].startswith("0.5.6+kvtier.")
    assert by_build["upstream"]["lmcache_version"] == "0.5.6"
    assert all(r["resident_bytes_before"] == 0 and r["bytes"] == 24 * (1 << 19) for r in loads)
    fios = [json.loads(line) for line in (run_dir / r1_run.FIO_FILE).read_text().splitlines()]
    assert [(r["round"], r["iodepth"]) for r in fios] == [(0, 1), (0, 4), (1, 1), (1, 4)]
    saves = [json.loads(line) for line in (run_dir / r1_run.CHECKPOINT_FILE).read_text().splitlines()]
    # Each timed load (in the build's own Python), fio run and save waited for quiet and recorded it.
    assert all(r["quiet"]["quiet"] and r["quiet"]["bounds"]["sample_s"] == 0.05 for r in loads + fios + saves)
    assert {(r["target"], r["writer"]) for r in saves} == {(t, w) for t in ("local_disk", "shared_pool")
                                                           for w in ckptsave.WRITERS}
    assert len(saves) == 8
    # Nothing of the probe is left on the pool or the local disk.
    assert not any(Path(settings.pool_path).iterdir()) and not any(Path(settings.local_disk_path).iterdir())


def test_r1_tables_and_targets_come_from_the_records(reads):
    _, run_dir, _ = reads
    measured = r1.load(run_dir.parent)
    coldread = measured.coldread.set_index(["build", "load_concurrency"])
    assert list(coldread.index) == [("upstream", 1), ("patched", 1), ("patched", 4), ("patched_checksum", 4)]
    rounds = measured.coldread_rounds
    for (build, bound), row in coldread.iterrows():
        values = rounds[(rounds["build"] == build) & (rounds["load_concurrency"] == bound)]["gb_per_s"]
        assert len(values) == (3 if bound == 4 and build != "upstream" else 2)
        assert row["gb_per_s_median"] == pytest.approx(values.median())
    assert list(measured.fio["iodepth"]) == [1, 4]
    fio = measured.fio.set_index("iodepth")["gb_per_s_median"]
    assert measured.matching["depth"].tolist() == [1, 4]
    fio_rounds, read_rounds = measured.fio_rounds, measured.coldread_rounds

    def paired(bound, depth=None, build="patched"):
        """Per-round ratios of the patched read at `bound` to fio at `depth` (or to upstream)."""
        mine = read_rounds[(read_rounds["build"] == build) & (read_rounds["load_concurrency"] == bound)]
        if depth is None:
            other = read_rounds[read_rounds["build"] == "upstream"]
        else:
            other = fio_rounds[fio_rounds["iodepth"] == depth]
        return (mine.set_index("round")["gb_per_s"] / other.set_index("round")["gb_per_s"]).sort_index()

    for row in measured.matching.itertuples():  # a ratio per round, then its median and interval over 2 rounds
        ratios = paired(row.depth, row.depth)
        figure = stats.estimate(ratios)
        assert (row.patched_over_fio, row.low, row.high) == pytest.approx((ratios.median(), figure.low, figure.high))
        assert row.low <= ratios.min() and ratios.max() <= row.high
    targets = measured.targets.set_index("target")
    best = int(coldread.loc["patched", "gb_per_s_median"].idxmax())
    device = targets.filter(like="fio at its best", axis=0).iloc[0]
    assert device["figure"] == pytest.approx(paired(best, int(fio.idxmax())).median())
    assert device["rounds"] == 2 and device["low"] <= device["figure"] <= device["high"]
    assert device["verdict"] == ("MET" if device["low"] >= 0.8 else "NOT MET" if device["high"] < 0.8
                                 else "UNDECIDED")
    configured = targets.filter(like="configured bound 4", axis=0).iloc[0]
    assert configured["figure"] == pytest.approx(paired(4, 4).median())
    upstream = targets.filter(like="/ upstream", axis=0).iloc[0]
    assert upstream["figure"] == pytest.approx(paired(best).median())
    checksum = targets.filter(like="CRC-32", axis=0).iloc[0]
    checked = read_rounds[read_rounds["build"] == "patched_checksum"].set_index("round")["gb_per_s"]
    unchecked = read_rounds[(read_rounds["build"] == "patched") & (read_rounds["load_concurrency"] == 4)]
    assert checksum["figure"] == pytest.approx((checked / unchecked.set_index("round")["gb_per_s"]).median())
    assert checksum["threshold"] == 0.9 and checksum["at_least"] and "24 files" in checksum["detail"]
    # Judged under the run's plan (2 to 3 rounds): the sequential interval of the look the target stopped at, and
    # why it stopped; an undecided one says what would decide it.
    assert checksum["rounds"] == 3 and checksum["interval"].startswith("sequential Student's t on the log mean of 3")
    assert checksum["stop"] == ("rounds spent" if checksum["verdict"] == "UNDECIDED" else "decided")
    assert (checksum["to_decide"] != "") == (checksum["verdict"] == "UNDECIDED")
    assert device["stop"] in ("decided", "ended with the run") and "look at" in device["interval"]
    conditions = r1.conditions_markdown(measured.conditions)
    assert measured.conditions["verify_checksum"] and "CRC-32" in conditions
    assert "3 rounds: 2 to 3 rounds, 95 % overall" in conditions and "stopped: rounds spent" in conditions
    assert measured.resume is None  # no resume run in this directory
    text = r1.targets_text(measured)
    assert "best load bound / upstream" in text and "sequential Student's t on the log mean of 2 rounds" in text
    assert all(line.split(":")[0] in ("MET", "NOT MET", "UNDECIDED") for line in text.splitlines()[:3])
    written = r1.write_evidence(measured, run_dir.parent / "evidence", png_scale=1)
    assert {p.name for p in written} >= {"R1_coldread.csv", "R1_matching.csv", "R1_targets.csv", "R1_chart.png",
                                         "R1_chart.svg"}


def test_the_device_rule_picks_the_target_and_the_interval_decides_it():
    def fio(*rounds):  # GB/s at depths 1 and 4, per round
        return pd.DataFrame([{"round": r, "iodepth": d, "gb_per_s": v} for r, pair in enumerate(rounds)
                             for d, v in zip((1, 4), pair)])

    def reads(*rounds):  # upstream, patched at 1, patched at 4, per round
        return pd.DataFrame([{"round": r, "build": b, "load_concurrency": c, "gb_per_s": v}
                             for r, values in enumerate(rounds)
                             for (b, c), v in zip((("upstream", 1), ("patched", 1), ("patched", 4)), values)])

    coldread = reads((1.0, 1.0, 1.5), (1.0, 1.0, 1.6), (1.0, 1.0, 1.4))
    table, rewards = r1.targets(coldread, fio((1.0, 1.2), (1.0, 1.2), (1.0, 1.2)), None, 4)
    assert not rewards and table.iloc[1]["threshold"] == 1.0 and table.iloc[1]["verdict"] == "MET"
    table, rewards = r1.targets(coldread, fio((1.0, 3.0), (1.0, 3.0), (1.0, 3.0)), None, 4)
    assert rewards and table.iloc[1]["threshold"] == 2.0 and table.iloc[1]["verdict"] == "NOT MET"
    assert table.iloc[0]["verdict"] == "NOT MET"  # at most 1.6 < 0.8 x 3.0 in every round
    # One round near the threshold and one far: the interval straddles 0.8, so the device target is undecided.
    table, _ = r1.targets(reads((1.0, 0.5, 0.9), (1.0, 0.5, 0.7)), fio((1.0, 1.0), (1.0, 1.0)), None, 4)
    device = table.iloc[0]
    figure = stats.estimate([0.9, 0.7])
    assert (device["low"], device["high"], device["verdict"]) == (pytest.approx(figure.low),
                                                                  pytest.approx(figure.high), "UNDECIDED")
    # One round decides nothing.
    table, _ = r1.targets(reads((1.0, 1.0, 3.0)), fio((1.0, 1.0)), None, 4)
    assert set(table["verdict"]) == {"UNDECIDED"}


def test_a_checksum_load_whose_files_had_no_checksum_is_refused_not_read_as_free():
    def reads(checksummed):  # patched and patched_checksum at bound 4, two rounds
        return pd.DataFrame([{"round": r, "build": b, "load_concurrency": 4, "gb_per_s": v, "chunks": 8,
                              "files_with_checksum": checksummed if b == "patched_checksum" else None}
                             for r in (0, 1) for b, v in (("upstream", 1.0), ("patched", 2.0),
                                                          ("patched_checksum", 1.9))])

    fio = pd.DataFrame([{"round": r, "iodepth": 4, "gb_per_s": 2.0} for r in (0, 1)])
    table, _ = r1.targets(reads(8), fio, None, 4)
    checksum = table[table["target"].str.contains("CRC-32")].iloc[0]
    assert checksum["figure"] == pytest.approx(0.95) and checksum["threshold"] == 0.9
    with pytest.raises(KvtierError, match="patched_checksum load in round 0: only 3 of 8 chunk files carried"):
        r1.targets(reads(3), fio, None, 4)


def test_bad_r1_settings_and_records_are_named(tmp_path, reads):
    settings, run_dir, _ = reads
    proc = run(["kvtier", "r1-reads", "--run-dir", str(tmp_path / "x"), "--settings",
                json.dumps({"pool_path": "p", "local_disk_path": "l", "builds": {"patched": "b"}})], cwd=tmp_path,
               check=False)
    assert proc.returncode != 0 and "need upstream, patched" in proc.stderr and not (tmp_path / "x").exists()
    proc = run(["kvtier", "r1-reads", "--run-dir", str(tmp_path / "x"), "--settings",
                json.dumps({"pool_path": "p", "local_disk_path": "l", "builds": {}, "chunk": 3})], cwd=tmp_path,
               check=False)
    assert proc.returncode != 0 and "'chunk'" in proc.stderr
    with pytest.raises(KvtierError, match="already holds a run"):
        r1_run.run_reads(settings, run_dir)
    copy = tmp_path / "R1"
    shutil.copytree(run_dir.parent / "reads", copy / "reads")
    (copy / "reads" / r1_run.FIO_FILE).unlink()
    with pytest.raises(KvtierError, match="fio.jsonl: missing"):
        r1.load(copy)
    shutil.copy(run_dir / r1_run.FIO_FILE, copy / "reads" / r1_run.FIO_FILE)
    with open(copy / "reads" / r1_run.COLDREAD_FILE, "a") as f:
        f.write("{broken\n\n")
    with pytest.raises(KvtierError, match="coldread.jsonl, line"):
        r1.load(copy)
    shutil.copy(run_dir / r1_run.COLDREAD_FILE, copy / "reads" / r1_run.COLDREAD_FILE)
    record = json.loads((copy / "reads" / "run.json").read_text())
    (copy / "reads" / "run.json").write_text(json.dumps({**record, "status": "incomplete", "error": "KeyboardInterrupt"}))
    with pytest.raises(KvtierError, match="'incomplete', not complete"):
        r1.load(copy)


def test_the_r1_fixture_has_every_raw_file_and_no_machine_path():
    for name in r1.RAW_FILES:
        assert (FIXTURE / name).is_file(), name
    for path in FIXTURE.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert str(ROOT) not in text and "/tmp/" not in text and "/root" not in text, path


def test_the_fixture_resume_reads_its_chunks_from_l2():
    measured = r1.load(FIXTURE)
    resume = measured.resume
    assert resume is not None and len(resume) >= 2
    assert resume["window_valid"].all() and (resume["window_l2_hit_tokens"] > 0).all()
    assert (resume["ttft_s"] > 0).all() and (resume["raw_read_s"] > 0).all()
    assert resume["lmcache_retrieve_s"].notna().all()
    target = measured.targets.set_index("target").filter(like="resume", axis=0).iloc[0]
    assert target["figure"] == pytest.approx(resume["ttft_s"].median() / resume["raw_read_s"].median())
    assert target["at_least"] == False and target["low"] <= target["figure"] <= target["high"]  # noqa: E712
    assert set(measured.targets["verdict"]) <= {"MET", "NOT MET", "UNDECIDED"}


def test_the_resume_is_set_beside_the_same_sessions_from_the_engine_cache(tmp_path):
    resume = r1.load(FIXTURE).resume
    floor = read_records(FIXTURE / "resume" / r1_run.ENGINE_HIT_RUN / "requests.jsonl")
    by_session = {r["labels"]["session"]: (r["first_token_ns"] - r["send_ns"]) / 1e9
                  for r in floor if r["phase"].startswith("resume")}
    assert len(by_session) == len(resume)
    for row in resume.itertuples():
        engine_hit = by_session[row.request_id.split("/")[0]]
        assert row.engine_hit_ttft_s == pytest.approx(engine_hit)
        assert row.beyond_engine_hit_over_raw_read == pytest.approx((row.ttft_s - engine_hit) / row.raw_read_s)
    assert "from vLLM's prefix cache take" in r1.targets_text(r1.load(FIXTURE))
    # A floor that did not come from the engine's cache is no floor: refused, naming the run and the setting.
    copy = tmp_path / "R1"
    shutil.copytree(FIXTURE, copy)
    summary_path = copy / "resume" / r1_run.ENGINE_HIT_RUN / "summary.json"
    summary = json.loads(summary_path.read_text())
    for window in summary["windows"]:
        deltas = window["server_metrics"]["vllm"]["deltas"]
        for key in [k for k in deltas if 'source="local_cache_hit"' in k]:
            deltas[key] = 0.0
    summary_path.write_text(json.dumps(summary))
    with pytest.raises(KvtierError, match="engine_hit: the sessions did not resume.*engine_kv_gib"):
        r1.load(copy)
    shutil.rmtree(copy / "resume" / r1_run.ENGINE_HIT_RUN)
    with pytest.raises(KvtierError, match="engine_hit/summary.json: missing .*kvtier r1-resume"):
        r1.load(copy)


def test_a_pool_that_refuses_o_direct_is_named_before_anything_is_written(tmp_path, lmcache_builds, monkeypatch):
    assert pagecache.takes_odirect(tmp_path)  # this disk reads and writes O_DIRECT (the probe does both)
    settings = r1_run.ReadSettings(pool_path=str(tmp_path / "pool"), local_disk_path=str(tmp_path / "local"),
                                    builds={name: str(path) for name, (path, _) in lmcache_builds.items()})
    real_open = os.open

    def refuse_odirect(path, flags, *args):  # what a file system without O_DIRECT answers (EINVAL)
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(pagecache.os, "open", refuse_odirect)
    assert not pagecache.takes_odirect(tmp_path / "pool")
    with pytest.raises(KvtierError, match="pool: its file system does not take O_DIRECT.*use_odirect: false"):
        r1_run.run_reads(settings, tmp_path / "reads")
    assert not (tmp_path / "reads").exists() and not any((tmp_path / "pool").iterdir())


def test_l2_tiers_ask_the_fs_adapter_for_o_direct_unless_told_not_to(tmp_path):
    from kvtier.runs.tier_run import TierSettings, TierStack
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    settings = TierSettings(model_dir=str(model), local_disk_path=str(tmp_path / "pool"))
    adapter = json.loads(TierStack("local_disk", settings, tmp_path).lmcache.command()[-1])
    assert adapter["type"] == "fs" and adapter["use_odirect"] is True
    off = TierSettings(model_dir=str(model), local_disk_path=str(tmp_path / "pool"), l2_use_odirect=False)
    assert "use_odirect" not in json.loads(TierStack("local_disk", off, tmp_path).lmcache.command()[-1])
    assert "--l2-adapter" not in TierStack("dram", settings, tmp_path).lmcache.command()


def test_between_rounds_the_judge_asks_only_for_what_an_undecided_target_reads(tmp_path):
    # Three rounds: the patched build reads at 0.95-0.97 x fio at depth 4 (decided MET against 0.8) and 2.4 x
    # upstream (MET against 2, fio rewarding parallelism); checking checksums costs 0.93, 0.86, 0.95 of it:
    # against 0.9 that is undecided, so only the patched build's loads at bound 4, checked and not, go on.
    coldread, fios = [], []
    for round_, cost in enumerate((0.93, 0.86, 0.95)):
        fios += [{"round": round_, "iodepth": 1, "gb_per_s": 0.5}, {"round": round_, "iodepth": 4, "gb_per_s": 1.0}]
        coldread += [{"round": round_, "build": "upstream", "load_concurrency": 1, "gb_per_s": 0.40},
                     {"round": round_, "build": "patched", "load_concurrency": 1, "gb_per_s": 0.45},
                     {"round": round_, "build": "patched", "load_concurrency": 4, "gb_per_s": 0.96 + 0.01 * round_},
                     {"round": round_, "build": "patched_checksum", "load_concurrency": 4, "chunks": 8,
                      "files_with_checksum": 8, "gb_per_s": (0.96 + 0.01 * round_) * cost}]
    for name, records in ((r1_run.COLDREAD_FILE, coldread), (r1_run.FIO_FILE, fios)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    plan = r1.sequential.Plan(3, 12)
    needs = r1.undecided_reads(tmp_path, 4, plan)
    assert needs == {"targets": ["patched checking each chunk's CRC-32 / patched, at the configured bound 4"],
                     "loads": {"patched": [4], "patched_checksum": [4]}, "depths": []}
    # Judged as the page judges it: the same verdicts, the open one with what would decide it.
    table, rewards = r1.targets(pd.DataFrame(coldread), pd.DataFrame(fios), None, 4, plan=plan)
    assert rewards and list(table["verdict"]) == ["MET", "MET", "MET", "UNDECIDED"]
    assert list(table["stop"]) == ["decided"] * 3 + ["ended with the run"]
    assert table.iloc[3]["to_decide"].startswith("about ") and table.iloc[2]["to_decide"] == ""


@pytest.mark.parametrize("bad, message", [
    ({"max_rounds": 1}, "max_rounds 1 must be an integer of at least rounds"),
    ({"rounds": 1, "max_rounds": 4}, "sequential rounds \\(max_rounds 4\\) need at least 2 rounds first"),
    ({"budget_s": 0}, "budget_s must be a positive number of seconds, not 0"),
])
def test_a_sequential_plan_that_cannot_run_is_refused(bad, message):
    with pytest.raises(KvtierError, match=message):
        r1_run.ReadSettings(**{"pool_path": "p", "local_disk_path": "l", "rounds": 2,
                               "builds": {"upstream": "u", "patched": "p"}, **bad})
