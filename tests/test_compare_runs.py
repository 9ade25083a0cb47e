"""kvtier compare-runs: two evidence folders' verdict words, row by row, and the exit status that gates on them."""

import pandas as pd
import pytest

from kvtier.cli import main
from kvtier.core.errors import KvtierError
from kvtier.package import compare_runs

TIER_COLUMNS = ["concurrency", "tier", "baseline", "ttft_p50_speedup", "ttft_verdict", "output_tok_s_verdict"]


def write(folder, rel, rows, columns):
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=columns).to_csv(path, index=False)


def evidence(folder, r2_words, winners, gates):
    write(folder, "R2_local/R2_local_vs_recompute.csv",
          [[c, "dram", "recompute", 2.0, ttft, tput] for c, (ttft, tput) in r2_words.items()], TIER_COLUMNS)
    write(folder, "B/B_winners.csv", [[1024, c, 0.5, w] for c, w in winners.items()],
          ["context_tokens", "concurrency", "ratio", "winner"])
    write(folder, "gates/gate_lines.csv", [[g, line, v, 1.0, ""] for (g, line), v in gates.items()],
          ["gate", "line", "verdict", "figure", "unit"])
    return folder


@pytest.fixture
def pair(tmp_path):
    a = evidence(tmp_path / "a", {8: ("faster", "no difference measured"), 16: ("faster", "faster"),
                                  32: ("MET", "slower")},
                 {2: "engine_only", 4: "tie", 8: "offload"},
                 {("G1", "cpu"): "PASS", ("G3", "c16"): "MET", ("G3", "c32"): "UNDECIDED"})
    b = evidence(tmp_path / "b", {8: ("faster", "no difference measured"), 16: ("no difference measured", "faster"),
                                  32: ("NOT MET", "slower"), 64: ("faster", "faster")},
                 {2: "engine_only", 4: "tie", 8: "offload"},
                 {("G1", "cpu"): "FAIL", ("G3", "c16"): "MET", ("G3", "c32"): "MET"})
    return a, b


def test_each_comparison_is_marked_by_its_words_and_key(pair):
    rows, absent = compare_runs.compare(*pair)
    marks = {(r.table.split("/")[0], r.key, r.column): r.mark for r in rows}
    r2 = "R2_local"
    assert marks[(r2, "concurrency=8, tier=dram, baseline=recompute", "ttft_verdict")] == "same"
    assert marks[(r2, "concurrency=16, tier=dram, baseline=recompute", "ttft_verdict")] == "decided vs undecided"
    assert marks[(r2, "concurrency=32, tier=dram, baseline=recompute", "ttft_verdict")] == "opposite"
    assert marks[(r2, "concurrency=64, tier=dram, baseline=recompute", "ttft_verdict")] == "only in B"
    assert marks[("gates", "gate=G3, line=c32", "verdict")] == "decided vs undecided"
    # G1 checks a record against a bill, not a measurement: not a comparison of runs
    assert not [key for _, key, _ in marks if "G1" in key]
    assert "R1/R1_targets.csv" in absent and "B/B_sla.csv" in absent
    tally = compare_runs.counts(rows)
    assert (tally["same"], tally["decided vs undecided"], tally["opposite"], tally["only in B"]) == (8, 2, 1, 2)
    assert compare_runs.same_share(rows) == pytest.approx(8 / 11)


@pytest.mark.parametrize("a, b, expected", [
    ("faster", "slower", "opposite"), ("offload", "engine_only", "opposite"), ("shorter", "longer", "opposite"),
    ("PASS", "UNDECIDED", "decided vs undecided"), ("tie", "offload", "decided vs undecided"),
    ("tie", "one round: not decided", "other"), ("faster", "MET", "other"), ("spam", "faster", "other"),
])
def test_words_are_opposite_only_when_both_are_decided_in_opposite_directions(a, b, expected):
    assert compare_runs.mark(a, b) == expected


def test_the_command_prints_the_counts_and_exits_1_on_an_opposite_word(pair, capsys):
    assert main(["compare-runs", str(pair[0]), str(pair[1])]) == 1
    out, err = capsys.readouterr()
    assert "opposite" in out and "R2_local/R2_local_vs_recompute.csv [concurrency=32" in out
    assert "same word: 8 of 11 (72.7 %)" in out and "1 opposite" in err
    assert main(["compare-runs", str(pair[0]), str(pair[0]), "--all"]) == 0
    out, _ = capsys.readouterr()
    assert "same word: 11 of 11 (100.0 %)" in out and out.count("same ") >= 11


def test_too_few_same_words_fail_even_without_an_opposite(tmp_path, capsys):
    a = evidence(tmp_path / "a", {8: ("faster", "faster")}, {}, {})
    b = evidence(tmp_path / "b", {8: ("no difference measured", "faster")}, {}, {})
    assert main(["compare-runs", str(a), str(b)]) == 1
    assert main(["compare-runs", str(a), str(b), "--min-same", "0.5"]) == 0


def test_a_damaged_table_or_folder_is_named(tmp_path, capsys):
    a = evidence(tmp_path / "a", {8: ("faster", "faster")}, {}, {})
    write(tmp_path / "b", "B/B_winners.csv", [[1024, 2]], ["context_tokens", "concurrency"])
    with pytest.raises(KvtierError, match=r"b/B/B_winners.csv: missing column\(s\) winner"):
        compare_runs.compare(a, tmp_path / "b")
    assert main(["compare-runs", str(a), str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such evidence folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(KvtierError, match="holds a measured comparison"):
        compare_runs.compare(tmp_path / "empty", tmp_path / "empty")



def test_soak_faults_on_another_schedule_are_compared_fault_by_fault(tmp_path):
    a = evidence(tmp_path / "a", {}, {}, {("G4", "kill_vllm at 20 s"): "PASS", ("G4", "kill_vllm at 90 s"): "PASS",
                                          ("G4", "pool held by eviction"): "PASS"})
    b = evidence(tmp_path / "b", {}, {}, {("G4", "kill_vllm at 10 s"): "PASS", ("G4", "kill_vllm at 40 s"): "FAIL",
                                          ("G4", "pool held by eviction"): "PASS"})
    rows, _ = compare_runs.compare(a, b)
    marks = {c.key: c.mark for c in rows}
    assert marks == {"gate=G4, line=kill_vllm #1": "same", "gate=G4, line=kill_vllm #2": "opposite",
                     "gate=G4, line=pool held by eviction": "same"}


def test_b_crossover_brackets_and_document_000_statements_are_compared_by_direction(tmp_path):
    lines = {"a": [["concurrency", 1024, "engine_only → offload between 2 and 4"],
                   ["concurrency", 2048, "engine_only → offload between 2 and 4"],
                   ["concurrency", 4096, "none"], ["context_tokens", 2, "engine_only → offload between 1024 and 2048"]],
             "b": [["concurrency", 1024, "engine_only → offload between 4 and 8"],
                   ["concurrency", 2048, "none"],
                   ["concurrency", 4096, "none"], ["context_tokens", 2, "offload → engine_only between 1024 and 2048"]]}
    verdicts = {"a": ["AGREES", "NOT SHOWN", "AGREES"], "b": ["AGREES", "AGREES", "CONTRADICTS"]}
    for side in ("a", "b"):
        write(tmp_path / side, "B/B_crossovers.csv", lines[side], ["along", "at", "crossover"])
        write(tmp_path / side, "B/B_statements.csv", [[f"s{i}", v] for i, v in enumerate(verdicts[side])],
              ["id", "verdict"])
    rows, _ = compare_runs.compare(tmp_path / "a", tmp_path / "b")
    marks = {(r.table.split("/")[1], r.key): r.mark for r in rows}
    assert marks[("B_crossovers.csv", "along=concurrency, at=1024")] == "other"  # the same way, another bracket
    assert marks[("B_crossovers.csv", "along=concurrency, at=2048")] == "decided vs undecided"
    assert marks[("B_crossovers.csv", "along=concurrency, at=4096")] == "same"
    assert marks[("B_crossovers.csv", "along=context_tokens, at=2")] == "opposite"
    assert [marks[("B_statements.csv", f"id=s{i}")] for i in range(3)] == ["same", "decided vs undecided", "opposite"]
    assert compare_runs.direction("engine_only → offload between 2 and 4; offload → engine_only between 8 and 16") == 0
    assert compare_runs.direction("a crossover somewhere") is None
