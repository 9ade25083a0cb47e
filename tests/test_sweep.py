"""The bandwidth sweep (kvtier.runs.sweep, evidence.sweep): its settings refused when wrong, its order rotated, its
analysis and service model on readings whose answer is known, and its page on a real sweep (tests/fixtures/sweep).
The sweep on the real stack inside an emulation runs in tests/test_workflow.py (the pipeline's rule, as root)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.runs import sweep
from kvtier.stack import emulated


@pytest.mark.parametrize("settings, message", [
    ({"read_caps": ["10MB/s", "fast"]}, r"sweep.read_caps\[1\]: 'fast' is not a bandwidth"),
    ({"read_caps": ["10MB/s", "10000000B/s"]}, "each cap once"),
    ({"contexts": []}, "contexts: at least one"),
    ({"sessions": 2, "concurrency": [4]}, "at least the highest concurrency"),
    ({"rounds": 0}, "rounds 0: a positive integer"),
])
def test_bad_sweep_settings_are_refused_naming_them(settings, message):
    with pytest.raises(KvtierError, match=message):
        sweep.SweepSettings(**settings)


def test_each_run_takes_each_position_over_the_rounds():
    settings = sweep.SweepSettings(read_caps=["100MB/s", "10MB/s"])
    assert sweep.labels(settings) == ["recompute", "dram", "cap-10000000", "cap-100000000"]
    orders = [sweep.order(settings, r) for r in range(4)]
    for label in sweep.labels(settings):
        assert sorted(o.index(label) for o in orders) == [0, 1, 2, 3]


def test_a_sweep_outside_an_emulation_is_refused_before_anything_starts(tmp_path, monkeypatch):
    from kvtier.runs.tier_run import TierSettings
    monkeypatch.delenv(emulated.ENV_CAPS, raising=False)
    with pytest.raises(KvtierError, match="tier local_disk is not emulated in this command"):
        sweep.run_sweep(sweep.SweepSettings(), TierSettings(model_dir=str(tmp_path)), tmp_path / "sweep")
    assert not (tmp_path / "sweep").exists()


def readings(ttft: dict[str, list[float]], context: int = 1024, concurrency: int = 4) -> pd.DataFrame:
    rows = []
    for run, values in ttft.items():
        bps = int(float(run.removesuffix("MB/s")) * 1e6) if run.endswith("MB/s") else None
        for r, t in enumerate(values, 1):
            rows.append({"context_tokens": context, "round": r, "run": f"cap-{bps}" if bps else run,
                         "read_bps": bps, "concurrency": concurrency, "ttft_p50_s": t, "requests": 8, "failed": 0})
    return pd.DataFrame(rows)


def test_the_crossover_is_bracketed_between_the_caps_where_the_verdict_turns():
    from kvtier.evidence import sweep as answers
    rows = readings({"recompute": [1.0, 1.05, 0.97], "dram": [0.10, 0.11, 0.10],
                     "10MB/s": [2.1, 2.0, 1.9], "25MB/s": [1.31, 1.35, 1.28], "50MB/s": [0.70, 0.72, 0.69],
                     "100MB/s": [0.41, 0.40, 0.43]})
    compared = answers.comparisons(rows).set_index("read_mb_s")
    assert list(compared["verdict"]) == ["recompute faster", "recompute faster", "offload pays", "offload pays"]
    assert compared.loc[50, "vs_recompute"] == pytest.approx(0.7, abs=0.02)
    assert compared.loc[100, "vs_dram"] == pytest.approx(4.1, abs=0.2)
    crossing = answers.crossovers(answers.comparisons(rows)).iloc[0]
    assert crossing["crossover"] == "offload starts to pay between 25 and 50 MB/s"
    assert (crossing["slower_up_to_mb_s"], crossing["pays_from_mb_s"]) == (25, 50)


@pytest.mark.parametrize("ttft, says", [
    ({"10MB/s": [0.5, 0.52, 0.49], "50MB/s": [0.3, 0.31, 0.3]}, "offload paid at every cap decided, down to 10 MB/s"),
    ({"10MB/s": [3.0, 3.1, 2.9], "50MB/s": [2.0, 2.1, 1.9]}, "recompute was faster at every cap decided, up to 50"),
    ({"10MB/s": [0.5, 2.0, 0.9], "50MB/s": [1.4, 0.6, 1.1]}, "no cap decided either way"),
    ({"10MB/s": [0.5, 0.52, 0.49], "50MB/s": [2.0, 2.1, 1.9]}, "not ordered by bandwidth"),
])
def test_a_sweep_without_a_bracket_says_why(ttft, says):
    from kvtier.evidence import sweep as answers
    rows = readings({"recompute": [1.0, 1.0, 1.0], "dram": [0.1, 0.1, 0.1], **ttft})
    assert answers.crossovers(answers.comparisons(rows)).iloc[0]["crossover"].startswith(says)


def test_a_cap_without_its_baseline_in_the_same_rounds_is_refused():
    from kvtier.evidence import sweep as answers
    rows = readings({"dram": [0.1, 0.1], "10MB/s": [1.0, 1.1]})
    with pytest.raises(KvtierError, match="no recompute window paired with the cap 10 MB/s at 1024 tokens"):
        answers.comparisons(rows)


def test_the_service_model_recovers_known_parameters_and_predicts_held_out_cells():
    """Readings made by a known model (30 ms to go to L2 at all, and the median request waits for 80 % of the
    in-flight bytes' read time less a head start of 0.25 s, over a DRAM floor that grows with the context) with
    ±5 % noise: fitted on two contexts'
    odd caps, it recovers the parameters within 10 % and predicts every held-out cell (the third context, the even
    caps) within 20 %."""
    import numpy as np

    from kvtier.evidence import sweep as answers
    kvpt, rng = 4096, np.random.default_rng(0)
    truth = answers.ServiceModel(0.03, 0.8, 0.25, kvpt, (0, 0), 0)
    caps = [10e6, 25e6, 50e6, 100e6, 250e6, 1e9]
    rows = []
    for context in (1024, 2048, 4096):
        floor = 0.1 + 40e-6 * context
        for r in (1, 2, 3):
            rows += [{"context_tokens": context, "round": r, "run": "recompute", "read_bps": None, "concurrency": 4,
                      "ttft_p50_s": 0.3 * context / 1024},
                     {"context_tokens": context, "round": r, "run": "dram", "read_bps": None, "concurrency": 4,
                      "ttft_p50_s": floor * rng.uniform(0.95, 1.05)}]
            for bps in caps:
                rows.append({"context_tokens": context, "round": r, "run": f"cap-{int(bps)}", "read_bps": bps,
                             "concurrency": 4,
                             "ttft_p50_s": truth.ttft(context, 4, bps, floor) * rng.uniform(0.95, 1.05)})
    cells = answers.cells(pd.DataFrame(rows))
    train = answers.split(cells)
    assert set(cells.loc[train, "context_tokens"]) == {1024, 4096} and set(cells.loc[train, "read_bps"]) == {
        10e6, 50e6, 250e6}
    model = answers.fit(cells[train], kvpt)
    assert model.share == pytest.approx(0.8, rel=0.1) and model.head_start_s == pytest.approx(0.25, rel=0.1)
    assert model.l2_overhead_s == pytest.approx(0.03, abs=0.01)
    errors = answers.held_out_errors(model, cells[~train])
    assert len(errors) == 3 * 6 - 2 * 3 and errors["error"].abs().max() < 0.2, errors
    assert list(errors.loc[errors["read_bps"] == 1e9, "extrapolated"]) == [True] * 3  # above the fitted caps
    # Where the model's resume takes as long as recompute: 2048 tokens at concurrency 4 against 0.6 s.
    floor = 0.1 + 40e-6 * 2048
    bps = model.breakeven_bps(2048, 4, 0.6, floor)
    assert truth.ttft(2048, 4, bps, floor) == pytest.approx(0.6, rel=0.1)
    assert model.breakeven_bps(2048, 4, 0.1, floor) is None  # recompute under the floor: nothing beats it


def test_too_few_or_degenerate_cells_do_not_fit():
    from kvtier.evidence import sweep as answers
    one_cell = pd.DataFrame({"context_tokens": [1024] * 4, "concurrency": [4] * 4, "read_bps": [1e7] * 4,
                             "ttft_p50_s": [1.0, 1.1, 0.9, 1.0], "floor_s": [0.1] * 4})
    with pytest.raises(KvtierError, match="vary neither the context nor"):
        answers.fit(one_cell, 4096)
    with pytest.raises(KvtierError, match="3 cell\\(s\\) cannot fit"):
        answers.fit(one_cell.head(3), 4096)
    with pytest.raises(KvtierError, match="needs each cell's DRAM resume"):
        answers.fit(one_cell.assign(floor_s=None), 4096)


FIXTURE = Path(__file__).parent / "fixtures" / "sweep"


def test_the_page_files_from_the_fixture_sweep(tmp_path):
    """A real sweep (tests/fixtures/sweep): every cap has its verdict and both ratios, the crossover is bracketed
    or says why, the model is fitted and judged on the cells held out, and the page's files are written."""
    from kvtier.evidence import sweep as answers
    measured = answers.analyse(FIXTURE)
    spec = measured.run["sweep"]
    assert len(measured.comparisons) == len(spec["contexts"]) * len(spec["read_caps"]) * len(spec["concurrency"])
    assert set(measured.comparisons["verdict"]) <= {"offload pays", "recompute faster", "undecided"}
    # The slowest cap is slower than the fastest at every context: the cap reaches the resumes.
    for _, group in measured.comparisons.groupby("context_tokens"):
        group = group.sort_values("read_mb_s")
        assert group["ttft_p50_s"].iloc[0] > 3 * group["ttft_p50_s"].iloc[-1], group
    assert len(measured.crossovers) == len(spec["contexts"]) * len(spec["concurrency"])
    assert measured.model is not None and "held out: median |error|" in measured.model_note
    assert set(measured.predictions["used"]) == {"fitted", "held out"}
    written = answers.write_evidence(measured, tmp_path, png_scale=1)
    assert sorted(p.name for p in written) == ["S_chart.png", "S_chart.svg", "S_comparisons.csv",
                                               "S_crossovers.csv", "S_model.csv"]
    assert "L2 read cap" in (tmp_path / "S_chart.svg").read_text()


def test_an_incomplete_sweep_is_refused_naming_it(tmp_path):
    import shutil

    from kvtier.evidence import sweep as answers
    shutil.copytree(FIXTURE, tmp_path / "sweep")
    run = json.loads((tmp_path / "sweep" / "run.json").read_text())
    (tmp_path / "sweep" / "run.json").write_text(json.dumps({**run, "status": "incomplete"}))
    with pytest.raises(KvtierError, match="run.json: the run is 'incomplete'"):
        answers.analyse(tmp_path / "sweep")
