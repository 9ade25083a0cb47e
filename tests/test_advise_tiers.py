"""`kvtier advise --sweep` (kvtier.evidence.advise_tiers): predictions for described storage from the bandwidth
sweep's service model, on a sweep made by a known model (so every answer is known), and the command on the real
fixture sweep (tests/fixtures/sweep)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import advise_tiers, stats
from kvtier.evidence import sweep as answers

KVPT = 4096
TRUTH = answers.ServiceModel(0.03, 0.8, 0.25, KVPT, (0, 0), 0)
CAPS = [10e6, 25e6, 50e6, 100e6, 250e6, 1e9]
CONTEXTS = (1024, 2048, 4096)


def floor_at(context: float) -> float:
    return 0.1 + 40e-6 * context


def recompute_at(context: float) -> float:
    return 0.3 * context / 1024


def known_sweep(wobble: float = 0.0) -> answers.Sweep:
    """A sweep at concurrency 4 whose readings the model TRUTH made (a small alternating wobble, so that the
    held-out error is not zero)."""
    rows = []
    for context in CONTEXTS:
        for r in (1, 2, 3):
            sign = (-1) ** r
            rows += [{"context_tokens": context, "round": r, "run": "recompute", "read_bps": None, "concurrency": 4,
                      "ttft_p50_s": recompute_at(context)},
                     {"context_tokens": context, "round": r, "run": "dram", "read_bps": None, "concurrency": 4,
                      "ttft_p50_s": floor_at(context)}]
            rows += [{"context_tokens": context, "round": r, "run": f"cap-{int(bps)}", "read_bps": bps,
                      "concurrency": 4, "ttft_p50_s": TRUTH.ttft(context, 4, bps, floor_at(context))
                      * (1 + sign * wobble * (i % 2))} for i, bps in enumerate(CAPS)]
    rows = pd.DataFrame(rows).assign(requests=8, failed=0)
    return answers.from_rows({"kv_bytes_per_token": KVPT}, rows)


def point(context: float, concurrency: int = 4) -> dict:
    return {"name": f"at {context:g}", "context_tokens": context, "concurrency": concurrency}


def test_inside_the_sweep_the_prediction_is_the_model_and_the_verdicts_clear_its_error_band():
    swept = known_sweep(wobble=0.02)
    error = advise_tiers.validated_error(swept)
    assert 0 < error < 0.1
    # 2048 tokens at concurrency 4: 32 MiB in flight. Recompute 0.6 s; the model breaks even near 45 MB/s.
    even = TRUTH.breakeven_bps(2048, 4, recompute_at(2048), floor_at(2048))
    hardware = advise_tiers.Hardware({"fast": 4 * even, "even": even, "slow": even / 4})
    [answer] = advise_tiers.predict(swept, hardware, [point(2048)], sla_p50_s=0.3)
    assert answer["recompute_s"] == pytest.approx(0.6) and answer["floor_s"] == pytest.approx(floor_at(2048))
    assert answer["breakeven_mb_s"] == pytest.approx(even / 1e6, rel=0.1)
    tiers = answer["tiers"]
    assert tiers["fast"]["ttft_p50_s"] == pytest.approx(TRUTH.ttft(2048, 4, 4 * even, floor_at(2048)), rel=0.1)
    assert [tiers[n]["verdict"] for n in ("fast", "even", "slow")] == [
        advise_tiers.BEATS, advise_tiers.WITHIN, advise_tiers.LOSES]
    assert tiers["fast"]["sla"] == stats.MET and tiers["slow"]["sla"] == stats.NOT_MET
    assert not any(t["extrapolated"] for t in tiers.values())
    assert advise_tiers.any_beats([answer])


def test_every_step_outside_the_sweep_is_named_and_never_counts_as_validated():
    swept = known_sweep(wobble=0.02)
    hardware = advise_tiers.Hardware({"nvme": 200e6, "tape": 1e5})
    far, many = advise_tiers.predict(swept, hardware, [point(8192), point(2048, concurrency=16)])
    assert "context 8192 outside the sweep's 1024-4096 tokens" in far["tiers"]["nvme"]["extrapolated"]
    # log-log along the last two contexts measured
    assert far["floor_s"] == pytest.approx(floor_at(4096) ** 2 / floor_at(2048))
    assert any("device time" in why and "outside the fitted" in why for why in far["tiers"]["tape"]["extrapolated"])
    assert any(why.startswith("concurrency 16 not measured") for why in many["tiers"]["nvme"]["extrapolated"])
    assert many["recompute_s"] == pytest.approx(4 * recompute_at(2048))
    assert not advise_tiers.any_beats([far, many])  # every answer extrapolated: nothing validated beats recompute
    text = advise_tiers.text(swept, hardware, [far, many])
    assert text.count("EXTRAPOLATED") == 4 and "breaks even at" in text


def test_a_described_engine_and_model_rescale_the_prediction():
    swept = known_sweep(wobble=0.02)
    hardware = advise_tiers.Hardware({"nvme": 100e6}, prefill_tok_s=4 * 2048 / 0.06, kv_bytes_per_token=2 * KVPT)
    [answer] = advise_tiers.predict(swept, hardware, [point(2048)])
    assert answer["recompute_s"] == pytest.approx(0.06)  # concurrency x context / prefill rate
    assert answer["floor_s"] == pytest.approx(floor_at(2048) / 10)  # the engine ten times faster
    nvme = answer["tiers"]["nvme"]
    assert nvme["device_s"] == pytest.approx(4 * 2048 * 2 * KVPT / 100e6)
    assert any(why.startswith("engine scaled by 0.1") for why in nvme["extrapolated"])


@pytest.mark.parametrize("text, message", [
    ("nvme", "expected NAME=BANDWIDTH"), ("nvme=fast", "--tier nvme: 'fast' is not a bandwidth"),
    ("=7GB/s", "expected NAME=BANDWIDTH"),
])
def test_a_bad_tier_is_refused_naming_it(text, message):
    with pytest.raises(KvtierError, match=message):
        advise_tiers.parse_tier(text)


def test_bad_hardware_is_refused_naming_it():
    assert advise_tiers.parse_tier("pool=12.5GB/s") == ("pool", 12.5e9)
    for kwargs, message in (({"tiers": {}}, "at least one tier"), ({"tiers": {"a": 0}}, "tier 'a' read bandwidth"),
                            ({"tiers": {"a": 1e6}, "prefill_tok_s": -1}, "--prefill-tok-s -1"),
                            ({"tiers": {"a": 1e6}, "kv_bytes_per_token": 0}, "--kv-bytes-per-token 0")):
        with pytest.raises(KvtierError, match=message):
            advise_tiers.Hardware(**kwargs)


def test_tiers_come_from_a_g2_record_as_each_paths_best_sequential_read(tmp_path):
    record = Path(__file__).parent / "fixtures" / "gates" / "G2.json"
    lines = json.loads(record.read_text())["lines"]
    tiers = advise_tiers.tiers_from_g2(record)
    for path, bps in tiers.items():
        reads = [x["median"] for x in lines if x.get("path") == path and x.get("rw") == "read"]
        assert bps == pytest.approx(max(reads) * 1e9)
    assert set(tiers) == {"local_disk", "shared_pool"}
    (tmp_path / "G1.json").write_text(json.dumps({"lines": [{"kind": "bill", "name": "cpus"}]}))
    with pytest.raises(KvtierError, match="G1.json: no sequential read line"):
        advise_tiers.tiers_from_g2(tmp_path / "G1.json")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(KvtierError, match="bad.json: not a G2 record"):
        advise_tiers.tiers_from_g2(tmp_path / "bad.json")
    with pytest.raises(KvtierError, match="absent.json: G2 record not found"):
        advise_tiers.tiers_from_g2(tmp_path / "absent.json")


def test_the_advise_command_predicts_for_described_tiers_from_the_fixture_sweep(tmp_path):
    from conftest import ROOT, run
    sweep_dir = Path(__file__).parent / "fixtures" / "sweep"
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"concurrency": {"peak": 4}, "context_tokens": {"p50": 1500, "p90": 3000,
                                                                                 "p99": 4000}}))
    args = ["kvtier", "advise", "--profile", str(profile), "--sweep", str(sweep_dir)]
    done = run([*args, "--tier", "nvme=200MB/s", "--tier", "floppy=5MB/s", "--sla-ttft-p50", "1"], cwd=ROOT)
    assert "validated on" in done.stdout and "nvme (200 MB/s)" in done.stdout
    assert "floppy (5 MB/s)" in done.stdout and "recompute faster" in done.stdout
    assert "EXTRAPOLATED" in done.stdout  # 5 MB/s puts the device time past the slowest cap fitted
    slow = run([*args, "--tier", "floppy=5MB/s", "--json"], cwd=ROOT, check=False)
    assert slow.returncode == 1
    advice = json.loads(slow.stdout)
    assert advice["boundary"] is None and len(advice["tiers"]) == 3
    for bad, message in ((["--tier", "nvme=7"], "--tier nvme: '7' is not a bandwidth"),
                         ([], "describe at least one tier")):
        proc = run([*args, *bad], cwd=ROOT, check=False)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    proc = run(["kvtier", "advise", "--profile", str(profile), "--tier", "nvme=7GB/s"], cwd=ROOT, check=False)
    assert proc.returncode == 2 and "give a measured boundary" in proc.stderr
    proc = run(["kvtier", "advise", "--profile", str(profile), "--boundary", str(tmp_path), "--tier", "a=1GB/s",
                "--sla-ttft-p50", "1"], cwd=ROOT, check=False)
    assert proc.returncode == 2 and "give --sweep S_DIR too" in proc.stderr
