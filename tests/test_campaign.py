"""Attribution rules and the R2_local tables, on synthetic windows and on a real campaign's tables."""

import dataclasses
import shutil

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import conditions, measured, r3
from kvtier.runs.campaign import attribution

from conftest import ROOT


def window(prompt=4160, failed=0, **sources):
    vllm = {f'vllm:prompt_tokens_by_source_total{{engine="0",source="{k}"}}': v for k, v in sources.items()
            if k in ("local_compute", "local_cache_hit", "external_kv_transfer")}
    lmcache = {f"lmcache_mp_lookup_hit_{k}_tokens_total{{model_name=\"m\"}}": v for k, v in sources.items()
               if k in ("l1", "l2")}
    metrics = {"vllm": {"deltas": vllm}, "lmcache": {"deltas": lmcache}}
    return {"concurrency": 2, "prompt_tokens": prompt, "requests": {"failed": failed}, "server_metrics": metrics}


# R3's hand-off as B's run records it: A stopped, then B started (kvtier.runs.cross_instance).
HANDED_OFF = {"writer_stopped": "2026-12-01T10:00:00+00:00", "reader_started": "2026-12-01T10:00:40+00:00"}
OVERLAPPED = {"writer_stopped": "2026-12-01T10:01:00+00:00", "reader_started": "2026-12-01T10:00:40+00:00"}


@pytest.mark.parametrize("tier, sources, valid", [
    ("recompute", dict(local_compute=4160), True),
    ("recompute", dict(local_compute=64, local_cache_hit=4096), False),        # the prefix cache was on
    ("engine", dict(local_compute=64, local_cache_hit=4096), True),
    ("engine", dict(local_compute=4160), False),                                # nothing was cached
    ("dram", dict(local_compute=64, external_kv_transfer=4096, l1=4096), True),
    ("dram", dict(local_compute=64, external_kv_transfer=4096, l1=4096, l2=4096), False),  # L2 served it
    ("dram", dict(local_compute=64, local_cache_hit=4096), False),             # the engine served it
    ("local_disk", dict(local_compute=64, external_kv_transfer=4096, l2=4096), True),
    ("local_disk", dict(local_compute=64, external_kv_transfer=4096, l1=4096), False),     # L1 was not emptied
    ("shared_pool", dict(local_compute=4160), False),
    ("cross_instance", dict(local_compute=64, external_kv_transfer=4096, l2=4096, handoff=HANDED_OFF), True),
    ("cross_instance", dict(local_compute=64, external_kv_transfer=4096, l2=4096, handoff=OVERLAPPED), False),
    ("cross_instance", dict(local_compute=64, external_kv_transfer=4096, l2=4096), False),  # no hand-off recorded
    ("cross_instance", dict(local_compute=4160, handoff=HANDED_OFF), False),       # B recomputed
])
def test_a_window_counts_only_when_the_tier_under_test_served_the_prefix(tier, sources, valid):
    handoff = sources.pop("handoff", None)
    assert attribution(tier, window(**sources), handoff)["valid"] is valid


def test_a_window_with_failed_requests_is_invalid():
    row = attribution("dram", window(failed=1, local_compute=64, external_kv_transfer=4096, l1=4096))
    assert row["valid"] is False and "1 request(s) failed" in row["rule"]


def rounds_frame(rows):
    return pd.DataFrame(rows, columns=["round", "tier", "concurrency", "ttft_p50_s", "output_tok_s"])


def test_comparisons_are_paired_by_round_and_carry_an_interval_and_a_word():
    from kvtier.runs.campaign import medians
    # Round 2 was slow for both tiers (the machine drifted): paired by round, the pool is still 2x faster.
    by_round = rounds_frame([
        (1, "shared_pool", 8, 0.5, 100), (1, "local_disk", 8, 1.0, 100), (1, "local_disk", 16, 1.0, 100),
        (2, "shared_pool", 8, 2.0, 100), (2, "local_disk", 8, 4.0, 100), (2, "local_disk", 16, 1.1, 100),
        (3, "shared_pool", 8, 0.6, 100), (3, "local_disk", 8, 1.2, 100), (3, "local_disk", 16, 0.9, None),
        (1, "shared_pool", 16, 1.0, 110), (2, "shared_pool", 16, 1.0, 90), (3, "shared_pool", 16, None, None),
    ])
    frame = measured.compare_rounds(by_round, (("shared_pool", "local_disk"),)).set_index("concurrency")
    assert frame.loc[8, "ttft_p50_speedup"] == pytest.approx(2.0)
    assert (frame.loc[8, "ttft_speedup_low"], frame.loc[8, "ttft_speedup_high"]) == pytest.approx((2.0, 2.0))
    assert frame.loc[8, "ttft_verdict"] == "faster" and frame.loc[8, "output_tok_s_verdict"] == "no difference measured"
    # At 16 round 3's pool window was invalid: two rounds compared, one a bit faster and one a bit slower.
    assert frame.loc[16, "rounds"] == 2 and frame.loc[16, "ttft_verdict"] == "no difference measured"
    assert frame.loc[16, "output_tok_s_ratio"] == pytest.approx((1.1 + 0.9) / 2)
    assert "Student's t 95 % on the log mean of 2 rounds" in frame.loc[16, "interval"]
    text = measured.verdict_text(frame.reset_index())
    assert "concurrency 8: TTFT FASTER, speed-up 2x [2, 2]" in text
    # The medians in the published shape: invalid windows left out, NaN where no round was valid.
    mid = medians(by_round).set_index(["tier", "concurrency"])
    assert mid.loc[("local_disk", 8), "ttft_p50_s"] == pytest.approx(1.2)
    assert mid.loc[("shared_pool", 16), "ttft_p50_s"] == pytest.approx(1.0)
    assert mid.loc[("local_disk", 16), "output_tok_s"] == pytest.approx(100)


def test_one_round_gives_figures_but_no_verdict():
    by_round = rounds_frame([(1, "dram", 8, 0.5, 100), (1, "recompute", 8, 5.0, 10)])
    [row] = measured.compare_rounds(by_round, (("dram", "recompute"),)).itertuples()
    assert row.ttft_p50_speedup == pytest.approx(10) and row.ttft_verdict == "one round: not decided"
    assert measured.compare_rounds(by_round, (("dram", "engine"),)).empty


def test_r2_local_tables_from_a_real_campaign():
    local = measured.load(ROOT / "tests" / "fixtures" / "campaign", "R2_local")
    vs_recompute = local.comparisons["vs_recompute"]
    assert set(vs_recompute["tier"]) == {"engine", "dram", "local_disk", "shared_pool"}
    speedup = vs_recompute.set_index(["tier", "concurrency"])["ttft_p50_speedup"]
    assert (speedup > 1).all(), "every cached tier beats recompute on TTFT"
    # Two rounds of the test preset: Student's t with one degree of freedom is wide, so a speed-up reads faster
    # only where both rounds agree closely; never slower, and the word always follows the interval.
    assert (vs_recompute["rounds"] >= 2).all()
    assert set(vs_recompute["ttft_verdict"]) <= {"faster", "no difference measured"}
    assert ((vs_recompute["ttft_verdict"] == "faster") == (vs_recompute["ttft_speedup_low"] > 1)).all()
    assert set(local.rounds["round"]) == set(local.conditions["rounds"]) and len(local.conditions["rounds"]) >= 2
    assert "Rounds" in conditions.campaign_markdown(local.conditions)
    assert "same device" in conditions.campaign_markdown(local.conditions)
    assert "cross_instance" not in set(local.readings["tier"]), "R3's run has its own page"


def test_r3_tables_from_a_real_campaign():
    shared = measured.load(ROOT / "tests" / "fixtures" / "campaign", "R3")
    verdict = r3.verdict(shared)
    assert verdict["verified"] and verdict["writer_files"] > 0
    assert all(hit >= prompt / 2 for hit, prompt in zip(verdict["l2_hit_tokens"], verdict["prompt_tokens"]))
    assert set(shared.comparisons["vs_recompute"]["tier"]) == {"cross_instance", "shared_pool"}
    assert (shared.comparisons["vs_recompute"]["ttft_p50_speedup"] > 1).all()
    assert list(shared.comparisons["vs_same_instance"]["baseline"].unique()) == ["shared_pool"]
    assert r3.verdict_text(shared).startswith("SEQUENTIAL SHARING VERIFIED:")


def test_r3_is_not_verified_when_a_window_is_invalid():
    shared = measured.load(ROOT / "tests" / "fixtures" / "campaign", "R3")
    broken = dataclasses.replace(shared, attribution=shared.attribution.assign(valid=[False] + [True] * (
        len(shared.attribution) - 1)))
    assert not r3.verdict(broken)["verified"]
    assert r3.verdict_text(broken).startswith("NOT VERIFIED:")


def test_both_measured_pages_are_one_type_whose_comparisons_are_data():
    files = {item.id: item.output_files() for item in measured.ITEMS.values()}
    assert files["R2_local"]["pool_vs_local_disk"] == "R2_local_pool_vs_local_disk.csv"
    assert files["R3"]["vs_same_instance"] == "R3_vs_same_instance.csv"
    local = measured.load(ROOT / "tests" / "fixtures" / "campaign", "R2_local")
    pool = local.comparisons["pool_vs_local_disk"]
    assert list(zip(pool["tier"], pool["baseline"])) == [("shared_pool", "local_disk")] * len(pool)


def test_a_campaign_without_R3_runs_is_refused_naming_the_switch(tmp_path):
    campaign = tmp_path / "campaign"
    shutil.copytree(ROOT / "tests" / "fixtures" / "campaign", campaign)
    attribution = pd.read_csv(campaign / "attribution.csv")
    attribution[attribution["tier"] != "cross_instance"].to_csv(campaign / "attribution.csv", index=False)
    with pytest.raises(KvtierError, match="no cross_instance run.*runs.cross_instance"):
        measured.load(campaign, "R3")
    assert len(measured.load(campaign, "R2_local").attribution) > 0
    with pytest.raises(KvtierError, match="no measured tier page 'R9'"):
        measured.load(campaign, "R9")


def test_a_tier_run_without_a_model_is_refused_before_any_server_starts(tmp_path):
    from kvtier.runs.tier_run import TierSettings, run_tier, run_tiers
    with pytest.raises(KvtierError, match="no config.json there"):
        run_tier("dram", TierSettings(model_dir=str(tmp_path / "nope")), tmp_path / "run")
    with pytest.raises(KvtierError, match="unknown tier 'vram'"):
        run_tier("vram", TierSettings(model_dir=str(tmp_path)), tmp_path / "run")
    (tmp_path / "config.json").write_text("{}")
    # dram must fill L1 before local_disk's evictions empty it (L2 reads do not refill it): that order only.
    with pytest.raises(KvtierError, match="only recompute then engine, or dram then local_disk"):
        run_tiers(("local_disk", "dram"), TierSettings(model_dir=str(tmp_path)), (tmp_path / "a", tmp_path / "b"))
    with pytest.raises(KvtierError, match="1 run directory for 2 tiers"):
        run_tiers(("recompute", "engine"), TierSettings(model_dir=str(tmp_path)), (tmp_path / "run",))
    assert not (tmp_path / "run").exists() and not (tmp_path / "a").exists()


def test_the_kernel_scan_of_a_forked_engine_core_reads_no_foreign_dict():
    # llvmlite's library object answers every attribute, __dict__ included, with a function wrapper
    # (kvtier.stack.vllm_cpu_serve): vLLM's scan must see no instance dict there, and vars() everywhere else.
    from kvtier.stack.vllm_cpu_serve import instance_dict

    class AnswersEverything:
        __slots__ = ()

        def __getattr__(self, name):
            return lambda *args: None

    class Owner:
        kernel = "class attribute"

    owner = Owner()
    owner.kernel = "instance attribute"
    assert instance_dict(AnswersEverything()) == {}
    assert instance_dict(owner) == {"kernel": "instance attribute"}
    assert instance_dict(Owner)["kernel"] == "class attribute"


def test_vllm_is_launched_as_configured_for_a_cluster(monkeypatch):
    from kvtier.stack.vllm_server import VllmServer
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cpu = VllmServer("/m", "/tmp/log", port=1)
    assert cpu.command()[1:3] == ["-m", "kvtier.stack.vllm_cpu_serve"]
    assert "--tensor-parallel-size" not in cpu.command() and cpu.environment()["VLLM_CPU_KVCACHE_SPACE"] == "2"
    gpu = VllmServer("/m", "/tmp/log", port=1, platform="rocm", vllm_command=["vllm", "serve"],
                     tensor_parallel_size=8, dtype="auto", extra_args=["--max-num-seqs", "64"])
    cmd = gpu.command()
    assert cmd[:4] == ["vllm", "serve", "--model", "/m"]
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "8" and cmd[-2:] == ["--max-num-seqs", "64"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in gpu.environment()
    from kvtier.core.errors import KvtierError
    with pytest.raises(KvtierError, match="platform 'tpu'"):
        VllmServer("/m", "/tmp/log", platform="tpu")


def test_lmcache_hands_kv_over_shared_memory_by_default_and_leaves_no_segment(tmp_path, monkeypatch):
    from kvtier.core.errors import KvtierError
    from kvtier.stack import lmcache_server
    monkeypatch.setattr(lmcache_server, "SHM_DIR", str(tmp_path))
    shm = lmcache_server.LMCacheServer(log_path=str(tmp_path / "log"))
    other = lmcache_server.LMCacheServer(log_path=str(tmp_path / "log"))
    cmd = shm.command()
    assert cmd[cmd.index("--shm-name") + 1] == shm.shm_name != other.shm_name  # one segment per server
    assert "--shm-name" not in lmcache_server.LMCacheServer(log_path="x", transfer="pickle").command()
    with pytest.raises(KvtierError, match="transfer 'rdma'"):
        lmcache_server.LMCacheServer(log_path="x", transfer="rdma")
    # A segment left behind (a server killed hard) is removed on stop, and before the next start.
    (tmp_path / shm.shm_name).write_bytes(b"stale")
    shm.stop()
    assert not (tmp_path / shm.shm_name).exists()


def test_a_real_lmcache_server_maps_the_named_segment_and_a_hard_kill_leaves_none(tmp_path):
    import os
    import signal
    from pathlib import Path

    from kvtier.stack import lmcache_server
    server = lmcache_server.LMCacheServer(log_path=str(tmp_path / "lmcache.log"), l1_size_gb=0.05)
    segment = Path(lmcache_server.SHM_DIR, server.shm_name)
    with server:
        assert segment.is_file(), f"LMCache made no segment {segment.name}: " + (tmp_path / "lmcache.log").read_text()
        os.killpg(server.process.pid, signal.SIGKILL)  # no chance to clean up after itself
        server.process.wait(timeout=30)
        assert segment.exists()
    assert not segment.exists()


def test_server_ports_stay_out_of_the_ephemeral_range_and_are_never_handed_out_twice():
    # A port from the ephemeral range can be taken by anyone binding port 0 (vLLM's engine does) between the
    # moment it is chosen and the moment the server binds it: R3's second LMCache once failed that way.
    from kvtier.stack.process import _ephemeral_range, free_port
    ports = [free_port() for _ in range(64)]
    assert len(set(ports)) == len(ports) and max(ports) < _ephemeral_range()[0]


def test_a_populate_url_applies_to_cold_resume_only():
    from kvtier.bench.runner import BenchConfig
    from kvtier.core.errors import KvtierError
    BenchConfig(base_url="http://127.0.0.1:1", model="m", populate_url="http://127.0.0.1:2").check()
    with pytest.raises(KvtierError, match="cold-resume workload only"):
        BenchConfig(base_url="http://127.0.0.1:1", model="m", workload="random",
                    populate_url="http://127.0.0.1:2").check()


def test_populate_sessions_warms_up_with_the_first_sessions_and_is_checked():
    from kvtier.bench.runner import BenchConfig, plan
    from kvtier.core.errors import KvtierError
    cfg = BenchConfig(base_url="http://127.0.0.1:1", model="m", sessions=6, context_tokens=64, concurrency=[2, 4],
                      populate_sessions=1)
    cfg.check()
    phases = plan(cfg, list(range(100, 400)))
    assert [p.name for p in phases] == ["populate", "resume-c2", "resume-c4"]
    assert len(phases[0].items) == 1 and all(len(p.items) == 6 for p in phases[1:])
    assert phases[0].items[0].prompt == phases[1].items[0].prompt[:64]  # the first session's context
    for bad in (0, 7):
        with pytest.raises(KvtierError, match=f"populate sessions {bad}: must be from 1 to sessions \\(6\\)"):
            BenchConfig(base_url="http://127.0.0.1:1", model="m", sessions=6, populate_sessions=bad).check()


def test_stacks_start_side_by_side_and_a_failure_stops_them_all():
    from kvtier.core.errors import KvtierError
    from kvtier.runs.tier_run import start_together
    events = []

    class Stack:
        def __init__(self, name, fails=False):
            self.name, self.fails = name, fails

        def launch(self):
            events.append(("launch", self.name))

        def wait_ready(self):
            events.append(("ready", self.name))
            if self.fails:
                raise KvtierError(f"{self.name} exited with 1 before it was ready")

        def stop(self):
            events.append(("stop", self.name))

    writer, reader = Stack("A"), Stack("B")
    assert start_together(writer, reader) is writer
    assert events == [("launch", "A"), ("launch", "B"), ("ready", "A"), ("ready", "B")]  # both launched first
    events.clear()
    with pytest.raises(KvtierError, match="B exited"):
        start_together(Stack("A"), Stack("B", fails=True))
    assert events[-2:] == [("stop", "B"), ("stop", "A")]


def test_the_pool_settles_only_when_no_chunk_is_in_flight(tmp_path):
    from kvtier.core.errors import KvtierError
    from kvtier.runs.tier_run import pool_state, wait_pool_settled
    (tmp_path / "a.data").write_bytes(b"x" * 10)
    assert wait_pool_settled(tmp_path, timeout_s=5, quiet_s=0.2) == {"files": 1, "bytes": 10, "pending": 0}
    (tmp_path / "b.tmp").write_bytes(b"y")
    assert pool_state(tmp_path)["pending"] == 1
    with pytest.raises(KvtierError, match="still changing"):
        wait_pool_settled(tmp_path, timeout_s=0.5, quiet_s=0.2)


def test_the_verdict_text_names_every_interval_method_and_a_missing_throughput():
    by_round = rounds_frame([(1, "dram", 8, 0.5, None), (1, "recompute", 8, 5.0, 10), (2, "dram", 8, 0.6, None),
                             (2, "recompute", 8, 5.5, 11), (1, "dram", 16, 1.0, 20), (1, "recompute", 16, 9.0, 5)])
    text = measured.verdict_text(measured.compare_rounds(by_round, (("dram", "recompute"),)))
    assert "concurrency 8: TTFT FASTER" in text and "output tok/s not measured" in text
    assert "(Student's t 95 % on the log mean of 2 rounds" in text and "(one round: no interval)" in text
