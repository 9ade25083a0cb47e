"""Evidence B's boundary and `kvtier advise` on synthetic grids with known answers."""

from pathlib import Path

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import advise, boundary

FIXTURE = Path(__file__).parent / "fixtures" / "boundary"  # a real test-preset boundary run (its README)
NOISE = (0.98, 1.0, 1.02)  # three rounds, the same small spread around every cell's value


def grid(cells: dict) -> pd.DataFrame:
    """cells: {(scheme, context, concurrency): TTFT p50 in s}; p99 is twice p50."""
    return pd.DataFrame([{"scheme": s, "context_tokens": ctx, "concurrency": c, "round": r + 1,
                          "ttft_p50_s": v * n, "ttft_p99_s": 2 * v * n}
                         for (s, ctx, c), v in cells.items() for r, n in enumerate(NOISE)])


def two_schemes(engine: dict, offload: dict, context: int = 4096) -> pd.DataFrame:
    return grid({**{("engine_only", context, c): v for c, v in engine.items()},
                 **{("offload", context, c): v for c, v in offload.items()}})


def test_one_crossover_is_bracketed_by_the_measured_cells():
    g = two_schemes({1: 0.2, 2: 0.3, 4: 1.5, 8: 4.0}, {1: 0.4, 2: 0.5, 4: 0.7, 8: 1.0})
    won = boundary.winners(g)
    assert list(won["winner"]) == ["engine_only", "engine_only", "offload", "offload"]
    [x] = boundary.crossovers(won)[4096]
    assert (x.below, x.above, x.before, x.after) == (2, 4, "engine_only", "offload")
    assert "between the two" in boundary.crossover_text(won)


def test_the_heatmap_outlines_the_cells_that_bracket_each_crossover():
    g = two_schemes({1: 0.2, 2: 1.0, 4: 2.0, 8: 3.0}, {1: 0.4, 2: 1.0, 4: 1.0, 8: 1.0})
    won = boundary.winners(g)
    assert boundary.bracket_cells(won) == {(4096, 1), (4096, 4)}  # the tie at 2 lies inside the bracket
    spec = boundary.heatmap(won).to_dict()
    assert any(layer["mark"].get("stroke") == "black" for layer in spec["layer"])


def test_no_crossover_is_said_plainly():
    won = boundary.winners(two_schemes({1: 0.2, 8: 0.9}, {1: 0.4, 8: 1.8}))
    assert boundary.crossovers(won) == {4096: []}
    assert boundary.crossover_text(won) == ("context 4096: no crossover on this grid (engine_only wins or ties at "
                                            "every measured concurrency)")


def test_two_crossovers_and_ties_widen_the_bracket():
    g = two_schemes({1: 0.2, 2: 1.0, 4: 2.0, 8: 3.0, 16: 2.0}, {1: 0.4, 2: 1.0, 4: 1.0, 8: 3.0, 16: 4.0})
    won = boundary.winners(g).set_index("concurrency")
    assert won.loc[2, "winner"] == won.loc[8, "winner"] == boundary.TIE  # equal in every round: the ratio holds 1
    found = boundary.crossovers(won.reset_index())[4096]
    assert [(x.below, x.above, x.after) for x in found] == [(1, 4, "offload"), (4, 16, "engine_only")]


def test_crossovers_along_the_context_axis_hold_concurrency_fixed():
    g = grid({("engine_only", 1024, 4): 0.2, ("engine_only", 2048, 4): 0.4, ("engine_only", 4096, 4): 3.0,
              ("offload", 1024, 4): 0.3, ("offload", 2048, 4): 0.6, ("offload", 4096, 4): 1.0})
    won = boundary.winners(g)
    [x] = boundary.crossovers(won, along="context_tokens")[4]
    assert (x.at, x.below, x.above, x.before, x.after) == (4, 2048, 4096, "engine_only", "offload")
    assert boundary.crossover_text(won, along="context_tokens").startswith(
        "concurrency 4: engine_only wins up to context 2048, offload from 4096")
    assert boundary.crossovers(won) == {1024: [], 2048: [], 4096: []}  # one concurrency: nothing along it
    with pytest.raises(KvtierError, match="not 'time'"):
        boundary.crossovers(won, along="time")


def test_throughput_winners_take_the_higher_figure():
    g = two_schemes({1: 0.2, 8: 3.0}, {1: 0.4, 8: 1.2}).assign(output_tok_s=lambda f: 1 / f["ttft_p50_s"])
    won = boundary.winners(g, metric="output_tok_s")
    assert list(won["winner"]) == ["engine_only", "offload"]
    with pytest.raises(KvtierError, match="no such reading"):
        boundary.winners(g, metric="tpot_s")


def test_a_cell_missing_for_one_scheme_claims_nothing_there():
    g = two_schemes({1: 0.2, 2: 0.3, 4: 1.5}, {1: 0.4, 4: 0.7})
    won = boundary.winners(g)
    assert list(won["concurrency"]) == [1, 4]
    [x] = boundary.crossovers(won)[4096]
    assert (x.below, x.above) == (1, 4)  # concurrency 2 was not measured for offload: the bracket says so


def test_sla_regions_from_intervals():
    g = two_schemes({1: 0.2, 4: 1.0, 8: 4.0}, {1: 0.4, 4: 0.7, 8: 1.0})
    regions = boundary.sla_regions(g, [("ttft_p50_s", 1.0)]).set_index(["scheme", "concurrency"])
    assert regions.loc[("engine_only", 1), "verdict"] == "MET"
    assert regions.loc[("engine_only", 4), "verdict"] == "UNDECIDED"  # 0.98-1.02 s straddles 1 s
    assert regions.loc[("engine_only", 8), "verdict"] == "NOT MET"
    assert regions.loc[("offload", 8), "verdict"] == "UNDECIDED"
    with pytest.raises(KvtierError, match="must be > 0"):
        boundary.sla_regions(g, [("ttft_p50_s", 0)])
    with pytest.raises(KvtierError, match="no such column"):
        boundary.sla_regions(g, [("ttft_p95_s", 1.0)])
    with pytest.raises(KvtierError, match="missing column"):
        boundary.winners(g.drop(columns=["round"]))


def test_a_cell_whose_sla_verdict_is_undecided_gets_more_rounds_too():
    # Every winner is decided (offload twice as fast, or half as fast, in every round), but at concurrency 4
    # engine_only's TTFT p50 straddles a 1-s SLA: a sequential run measures that cell again, and only for it.
    g = two_schemes({1: 0.2, 4: 1.0, 8: 4.0}, {1: 0.4, 4: 0.5, 8: 2.0})
    plan = boundary.sequential.Plan(3, 6)
    assert boundary.undecided_cells(g, plan) == set()
    assert boundary.undecided_cells(g, plan, [("ttft_p50_s", 1.0)]) == {(4096, 4)}
    assert boundary.undecided_cells(g, plan, [("ttft_p50_s", 10.0)]) == set()
    # Under a sequential plan the SLA's interval is the plan's (wider at this look than fixed rounds').
    fixed = boundary.sla_regions(g, [("ttft_p50_s", 1.0)]).set_index(["scheme", "concurrency"])
    planned = boundary.sla_regions(g, [("ttft_p50_s", 1.0)], plan).set_index(["scheme", "concurrency"])
    assert planned.loc[("offload", 1), "low"] < fixed.loc[("offload", 1), "low"]


def test_slas_come_as_words_and_bad_ones_are_named():
    assert boundary.parse_slas("ttft_p50_s=0.5 ttft_p99_s=2") == [("ttft_p50_s", 0.5), ("ttft_p99_s", 2.0)]
    for bad in ("ttft_p50_s", "ttft_p50_s=fast", "tpot_s=1", "output_tok_s=2"):  # a throughput is no time
        with pytest.raises(KvtierError, match=f"SLA '{bad}'"):
            boundary.parse_slas(bad)


def profile_at(peak: int, p50: float, p90: float, p99: float) -> dict:
    return {"concurrency": {"peak": peak}, "context_tokens": {"p50": p50, "p90": p90, "p99": p99}}


def test_advise_inside_the_grid_takes_the_worst_bracketing_cell():
    g = grid({**{("engine_only", ctx, c): v for (ctx, c), v in {(1024, 1): 0.1, (1024, 8): 0.5, (4096, 1): 0.3,
                                                                  (4096, 8): 3.0}.items()},
              **{("offload", ctx, c): v for (ctx, c), v in {(1024, 1): 0.2, (1024, 8): 0.6, (4096, 1): 0.4,
                                                              (4096, 8): 1.2}.items()}})
    advice = advise.advise(g, profile_at(4, 1024, 2048, 4096), [("ttft_p50_s", 2.0)])
    by_point = {a["point"]: a for a in advice}
    # At context 1024 (measured) between concurrency 1 and 8, both schemes stay under 2 s at every corner.
    assert by_point["context p50"]["answer"] == "engine_only and offload meet(s) the SLA"
    assert by_point["context p50"]["bracket"] == {"concurrency": [1, 8], "context_tokens": [1024]}
    # Context 2048 lies between 1024 and 4096: the 4096 x 8 corner (3.0 s) fails the engine.
    p90 = by_point["context p90"]
    assert p90["schemes"]["engine_only"]["verdict"] == "NOT MET" and p90["schemes"]["offload"]["verdict"] == "MET"
    assert p90["schemes"]["offload"]["margin_s"] == pytest.approx(2.0 - 1.2 * max(NOISE), rel=0.2)
    assert advise.any_met(advice)
    assert "offload: MET, margin" in advise.text(advice)


def test_advise_outside_the_grid_says_so_and_never_extrapolates():
    g = two_schemes({1: 0.2, 8: 0.9}, {1: 0.4, 8: 1.8})
    advice = advise.advise(g, profile_at(32, 4096, 4096, 4096), [("ttft_p50_s", 2.0)])
    assert {a["answer"] for a in advice} == {advise.OUTSIDE} and not advise.any_met(advice)
    advice = advise.advise(g, profile_at(4, 8192, 8192, 8192), [("ttft_p50_s", 2.0)])
    assert {a["answer"] for a in advice} == {advise.OUTSIDE}
    with pytest.raises(KvtierError, match="at least one SLA"):
        advise.advise(g, profile_at(4, 4096, 4096, 4096), [])


def test_the_advise_command_reads_a_profile_and_a_boundary_directory(tmp_path):
    import json

    from conftest import ROOT, run
    g = two_schemes({1: 0.2, 8: 3.0}, {1: 0.4, 8: 1.2})
    (tmp_path / "B").mkdir()
    g.to_csv(tmp_path / "B" / boundary.ROUNDS_FILE, index=False)
    (tmp_path / "profile.json").write_text(json.dumps(profile_at(4, 4096, 4096, 4096)))
    args = ["kvtier", "advise", "--profile", str(tmp_path / "profile.json"), "--boundary", str(tmp_path / "B")]
    met = run([*args, "--sla-ttft-p50", "2"], cwd=ROOT)
    assert "offload: MET" in met.stdout and "engine_only: NOT MET" in met.stdout
    none = run([*args, "--sla-ttft-p50", "0.1", "--json"], cwd=ROOT, check=False)
    assert none.returncode == 1 and json.loads(none.stdout)[0]["answer"] == "no scheme meets the SLA"
    for bad, message in ((["--sla-ttft-p50", "0"], "--sla-ttft-p50 0.0: must be > 0 s"),
                         (["--sla-ttft-p50", "2", "--boundary", str(tmp_path)], "no boundary cells")):
        proc = run([*args, *bad], cwd=ROOT, check=False)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    (tmp_path / "profile.json").write_text("{}")
    proc = run([*args, "--sla-ttft-p50", "2"], cwd=ROOT, check=False)
    assert proc.returncode == 2 and "not a kvtier workload profile" in proc.stderr


def test_the_page_reads_a_boundary_directory_and_explains_each_cell(tmp_path):
    import json

    from kvtier.core.table_io import write_table
    from kvtier.evidence import charts, conditions
    g = two_schemes({2: 0.3, 4: 1.5}, {2: 0.5, 4: 0.7})
    write_table(g, tmp_path / "B_rounds.csv")
    shares = pd.DataFrame([{"scheme": s, "context_tokens": 4096, "concurrency": c, "round": r,
                            "engine_frac": e, "l1_frac": 1 - e if s == "offload" else 0.0, "l2_frac": 0.0,
                            "recompute_frac": 1 - e if s == "engine_only" else 0.0, "valid": r != 3 or c == 2}
                           for s, c, e in (("engine_only", 2, 0.9), ("engine_only", 4, 0.1), ("offload", 2, 0.9),
                                           ("offload", 4, 0.1)) for r in (1, 2, 3)])
    write_table(shares, tmp_path / "B_attribution.csv")
    with pytest.raises(KvtierError, match="B_correctness.csv missing"):
        boundary.load(tmp_path)
    write_table(pd.DataFrame([{"round": 1, "context_tokens": 4096, "concurrency": 2, "requests": 4,
                               "compared": 4, "identical": 4},
                              {"round": 2, "context_tokens": 4096, "concurrency": 4, "requests": 8,
                               "compared": 8, "identical": 7}]), tmp_path / "B_correctness.csv")
    (tmp_path / "conditions.json").write_text(json.dumps({
        "workload": {"workload": "multi-turn", "followup_tokens": 32, "output_tokens": 16, "turns": 3, "reuse": 1.0,
                     "seed": 0, "contexts": [4096], "concurrency": [2, 4]},
        "sessions_per_cell": {"L4096-c2": 4, "L4096-c4": 8}, "engine_kv_tokens": 12288,
        "engine_kv_tokens_reported": {"engine_only": 12288, "offload": 12288},
        "servers": {"engine_only": {"vllm": ["python", "--served-model-name", "m", "--max-model-len", "4352"]}},
        "platform": None, "rounds": [1, 2, 3], "order": [],
        "quiet": {"measurements": 12, "checked": 12, "quiet": 12, "waited_s_max": 1.0, "not_quiet": []}}))
    measured = boundary.load(tmp_path)
    assert list(measured.won["winner"]) == ["engine_only", "offload"]
    # A mismatch is in the cell's row, and listed on its own.
    assert list(measured.won["outputs"]) == [
        "identical", "1 of 8 differ (round 2): not a valid measurement until explained"]
    assert boundary.mismatches(measured.correctness)[["round", "concurrency", "differ"]].values.tolist() == [[2, 4, 1]]
    medians = boundary.cell_medians(measured.grid)
    assert medians.loc[(medians["scheme"] == "offload") & (medians["concurrency"] == 4), "ttft_p50_s"].item() == \
        pytest.approx(0.7)
    why = boundary.attribution_medians(measured.attribution).set_index(["scheme", "concurrency"])
    # At 4 the engine ran out of room: engine_only recomputed 90 %, offload took 90 % from L1.
    assert why.loc[("engine_only", 4), "recompute_frac"] == pytest.approx(0.9)
    assert why.loc[("offload", 4), "l1_frac"] == pytest.approx(0.9)
    assert why.loc[("engine_only", 4), "valid rounds"] == "2/3" and why.loc[("offload", 2), "valid rounds"] == "3/3"
    text = conditions.boundary_markdown(measured.conditions)
    assert "4, 8 per cell" in text and "12288 tokens configured" in text and "engine_only 12,288" in text
    assert "max model length 4352" in text and "12 of 12 cells" in text
    assert "<svg" in charts.to_svg(boundary.heatmap(measured.won))
    statements = [{"id": "s1", "check": "along_concurrency", "metric": "ttft_p50_s", "verdict": "AGREES",
                   "reasons": ["context 4096: engine_only → offload"]}]
    written = boundary.write_evidence(measured, tmp_path / "out", [("ttft_p50_s", 1.0)], png_scale=1,
                                      statements=statements)
    assert sorted(p.name for p in written) == ["B_attribution.csv", "B_cells.csv", "B_chart.png", "B_chart.svg",
                                               "B_correctness.csv", "B_crossovers.csv", "B_replays.csv",
                                               "B_sla.csv", "B_statements.csv", "B_winners.csv"]
    crossings = pd.read_csv(tmp_path / "out" / "B_crossovers.csv")
    assert crossings.loc[crossings["along"] == "concurrency", "crossover"].tolist() == [
        "engine_only → offload between 2 and 4"]
    assert pd.read_csv(tmp_path / "out" / "B_statements.csv")["verdict"].tolist() == ["AGREES"]


def test_the_service_model_is_read_off_a_full_recompute_cell():
    measured = boundary.load(FIXTURE)
    model, how = advise.service_model(measured)
    cell = dict(scheme="engine_only", context_tokens=1024, concurrency=2)
    rounds = measured.grid.loc[(measured.grid[list(cell)] == pd.Series(cell)).all(axis=1)]
    prompts = measured.attribution.loc[(measured.attribution[list(cell)] == pd.Series(cell)).all(axis=1)]
    requests = measured.conditions["sessions_per_cell"]["L1024-c2"] * (measured.conditions["workload"]["turns"] - 1)
    assert model.prefill_tok_s == pytest.approx(prompts["prompt_tokens"].median() / requests
                                                / rounds["ttft_p50_s"].median())
    assert model.time_per_output_token_s == pytest.approx(2 / rounds["output_tok_s"].median())
    assert "concurrency 2, context 1024" in how
    measured.attribution["recompute_frac"] = 0.0
    with pytest.raises(KvtierError, match="no engine_only cell recomputed"):
        advise.service_model(measured)


def test_a_grid_with_per_request_pairs_is_judged_on_them_not_on_the_ratio_of_p50s():
    rows = []
    for r, (engine, offload, paired) in enumerate([(1.0, 1.6, 1.21), (1.0, 0.9, 1.19), (1.0, 1.3, 1.20)], start=1):
        rows += [{"scheme": "engine_only", "context_tokens": 1024, "concurrency": 4, "round": r, "ttft_p50_s": engine,
                  "ttft_paired_ratio": None, "requests": 16, "paired_requests": None},
                 {"scheme": "offload", "context_tokens": 1024, "concurrency": 4, "round": r, "ttft_p50_s": offload,
                  "ttft_paired_ratio": paired, "requests": 16, "paired_requests": 16}]
    grid = pd.DataFrame(rows)
    (row,) = boundary.winners(grid).to_dict("records")
    # The p50s' ratios (1.6, 0.9, 1.3) hold 1; the pairs (1.21, 1.19, 1.20) do not.
    assert row["winner"] == "engine_only" and row["ratio"] == pytest.approx(1.20)
    assert row["statistic"] == boundary.PAIRED_WORDS and row["requests_per_round"] == "16"
    (plain,) = boundary.winners(grid.drop(columns=["ttft_paired_ratio"])).to_dict("records")
    assert plain["winner"] == "tie" and plain["to_decide"]


@pytest.mark.parametrize("identical_alone, offload_cached, word", [
    (True, 4096, "1 of 8 differ (round 2): each identical alone: batch dependence of the kernels, not a wrong KV "
                 "(replayed alone)"),
    (False, 4096, "1 of 8 differ (round 2); replayed alone, 0 of 1 shown to be batch dependence: not a valid "
                  "measurement until explained"),
    (True, 0, "1 of 8 differ (round 2); replayed alone, 0 of 1 shown to be batch dependence: not a valid "
              "measurement until explained"),
])
def test_a_mismatch_replayed_alone_explains_its_cell_or_leaves_it_invalid(identical_alone, offload_cached, word):
    from kvtier.runs.boundary import REPLAY_COLUMNS
    correctness = pd.DataFrame([{"round": 2, "context_tokens": 4096, "concurrency": 4, "requests": 8,
                                 "compared": 8, "identical": 7}])
    replays = pd.DataFrame([
        {"round": 2, "context_tokens": 4096, "concurrency": 4, "request_id": "mt-L4096-c4-0003/turn2",
         "why": "mismatch", "identical_in_cell": False, "identical_alone": identical_alone,
         "engine_alone_as_in_cell": True, "engine_alone_cached_tokens": 0,
         "offload_alone_cached_tokens": offload_cached, "failed": ""},
        {"round": 2, "context_tokens": 4096, "concurrency": 4, "request_id": "mt-L4096-c4-0000/turn2",
         "why": "control", "identical_in_cell": True, "identical_alone": True, "engine_alone_as_in_cell": True,
         "engine_alone_cached_tokens": 0, "offload_alone_cached_tokens": 4096, "failed": ""}], columns=REPLAY_COLUMNS)
    assert boundary.outputs_word(correctness, 4096, 4, replays) == word
    explained = boundary.with_explanation(replays)["explanation"].tolist()
    assert explained[1] == "control, identical in the cell and alone (offload loaded 4096 prompt tokens from LMCache)"
    if not offload_cached:  # nothing came from LMCache: the replay says nothing of the KV
        assert explained[0] == "LMCache no longer held the prompt, both replays recomputed it: cannot tell"
    # Which requests are replayed: every mismatch, then the controls from the last round.
    from kvtier.runs.boundary_replay import chosen
    outputs = {(1, "engine_only", 1024, 2): {"a": ("x", 0.1), "b": ("y", 0.1)},
               (1, "offload", 1024, 2): {"a": ("x", 0.1), "b": ("z", 0.1)},
               (2, "engine_only", 1024, 2): {"a": ("x", 0.1), "b": ("y", 0.1)},
               (2, "offload", 1024, 2): {"a": ("x", 0.1), "b": ("y", 0.1)}}
    assert chosen(outputs, 1) == [(1, 1024, 2, "b", "mismatch"), (2, 1024, 2, "a", "control")]
    assert chosen(outputs, 0) == [(1, 1024, 2, "b", "mismatch")]


def test_a_winner_decided_in_a_cell_whose_rounds_went_on_for_an_sla_line_says_decided():
    # A run stops a cell when its budget is spent, though only an SLA line was still open: the winner's own
    # comparison was decided, and its row must not read "rounds spent" as if it were not.
    g = two_schemes({2: 0.2, 4: 1.0}, {2: 0.4, 4: 1.0}).assign(stop="rounds spent")
    won = boundary.winners(g, plan=boundary.sequential.Plan(3, 6)).set_index("concurrency")
    assert won.loc[2, "winner"] == "engine_only"
    assert won.loc[2, "stop"] == "decided (the cell's SLA lines: rounds spent)"
    assert won.loc[4, "winner"] == boundary.TIE and won.loc[4, "stop"] == "rounds spent"
