"""The gates as pipeline stages, below Snakemake: verdict records (schema-checked), the proceed step that stops what
comes after a FAIL, the page banner after a failed gate, G2's own storage passes with real fio, and the gate-g2 /
gate-g3 commands on a real campaign's rounds (the campaign fixture)."""

import json
from pathlib import Path

import pytest
from test_render import make_notebook

from kvtier.core.errors import KvtierError
from kvtier.core.table_io import read_table
from kvtier.gates import g2, g3, page, record
from kvtier.runs.g2_storage import StorageSettings, run_storage

from conftest import ROOT, run

CAMPAIGN = Path(__file__).parent / "fixtures" / "campaign"


def a_record(tmp_path, verdict="PASS", gate="G2", lines=None) -> Path:
    source = tmp_path / "source.csv"
    source.write_text("x\n1\n")
    lines = lines or [{"name": "local_disk sequential read qd1", "verdict": "PASS"},
                      {"name": "recompute TTFT p50 at concurrency 8", "verdict": verdict,
                       "why": "unstable: cv 0.700 > 0.5" if verdict == "FAIL" else ""}]
    path = tmp_path / f"{gate}.json"
    record.write(path, record.make(gate, verdict, lines, [source], {"max_cv": 0.5}))
    return path


def test_a_record_round_trips_and_a_bad_one_is_refused_naming_what(tmp_path):
    path = a_record(tmp_path)
    read = record.read(path)
    assert read["gate"] == "G2" and read["title"] == "G2 single-node baseline" and read["verdict"] == "PASS"
    assert read["inputs"][0]["path"].endswith("source.csv") and len(read["inputs"][0]["sha256"]) == 64
    broken = json.loads(path.read_text())
    broken["verdict"] = "MAYBE"
    path.write_text(json.dumps(broken))
    with pytest.raises(KvtierError, match=r"G2.json: not a gate verdict record: 'MAYBE' is not one of .* at verdict"):
        record.read(path)
    path.write_text("{")
    with pytest.raises(KvtierError, match="not a readable gate record"):
        record.read(path)


def test_proceed_writes_the_flag_on_pass_and_stops_on_fail_naming_gate_lines_and_record(tmp_path):
    flag = tmp_path / "G2.proceed"
    assert record.proceed(a_record(tmp_path), flag)["after_failed_gate"] is False and flag.is_file()
    flag.unlink()
    failed = a_record(tmp_path, "FAIL")
    with pytest.raises(KvtierError) as stopped:
        record.proceed(failed, flag)
    message = str(stopped.value)
    assert "G2 single-node baseline FAILED (1 of 2 lines)" in message
    assert "recompute TTFT p50 at concurrency 8: FAIL (unstable: cv 0.700 > 0.5)" in message
    assert str(failed) in message and "local_disk sequential read" not in message
    assert not flag.exists()
    # gates.stop_on_fail: false: the flag is written, marked
    assert record.proceed(failed, flag, stop_on_fail=False)["after_failed_gate"] is True
    assert json.loads(flag.read_text())["verdict"] == "FAIL"


def test_an_undecided_gate_goes_on_marked_unless_stop_on_undecided(tmp_path):
    flag = tmp_path / "G3.proceed"
    undecided = a_record(tmp_path, "UNDECIDED", gate="G3", lines=[
        {"name": "concurrency 8: TTFT p50 reduction %", "verdict": "MET"},
        {"name": "concurrency 16: TTFT p50 reduction %", "verdict": "UNDECIDED"}])
    assert record.proceed(undecided, flag)["after_failed_gate"] is True
    assert json.loads(flag.read_text())["verdict"] == "UNDECIDED"
    flag.unlink()
    with pytest.raises(KvtierError) as stopped:
        record.proceed(undecided, flag, stop_on_undecided=True)
    assert ("G3 main gate UNDECIDED (1 of 2 lines): later stages are not run (gates.stop_on_undecided is true)"
            in str(stopped.value)) and "concurrency 16: TTFT p50 reduction %: UNDECIDED" in str(stopped.value)
    assert not flag.exists()
    # stop_on_fail alone does not stop an undecided gate, nor stop_on_undecided a failed one
    assert not record.stops("UNDECIDED", stop_on_fail=True) and not record.stops("FAIL", False, True)
    go_on = run(["kvtier", "gate-proceed", str(undecided), "--flag", str(flag)], cwd=ROOT)
    assert "G3 UNDECIDED: later stages run after an undecided gate" in go_on.stdout and flag.is_file()
    stop = run(["kvtier", "gate-proceed", str(undecided), "--flag", str(tmp_path / "g"), "--stop-on-undecided", "1"],
               cwd=ROOT, check=False)
    assert stop.returncode == 2 and "UNDECIDED" in stop.stderr and not (tmp_path / "g").exists()


def test_gate_proceed_command_exits_non_zero_on_fail_and_prints_why(tmp_path):
    failed = a_record(tmp_path, "FAIL")
    proc = run(["kvtier", "gate-proceed", str(failed), "--flag", str(tmp_path / "f")], cwd=ROOT, check=False)
    assert proc.returncode == 2 and "G2 single-node baseline FAILED" in proc.stderr
    assert not (tmp_path / "f").exists()
    go_on = run(["kvtier", "gate-proceed", str(failed), "--flag", str(tmp_path / "f"), "--stop-on-fail", "0"], cwd=ROOT)
    assert "after a failed gate" in go_on.stdout and (tmp_path / "f").is_file()


def test_a_page_rendered_after_a_failed_gate_says_so_at_its_top(tmp_path):
    from kvtier.evidence import render
    nb = make_notebook(tmp_path / "X.ipynb", "print('figures')")
    out = tmp_path / "evidence" / "X"
    (tmp_path / "a").mkdir()
    passed = a_record(tmp_path / "a")
    failed = a_record(tmp_path, "FAIL", gate="G1", lines=[{"name": "cpu.usable_cpus", "verdict": "FAIL"}])
    assert record.failed_gates([passed]) == []
    page = render.render("X", nb, out, {"out_dir": str(out)}, [], cwd=tmp_path,
                         after_failed_gates=record.failed_gates([passed, failed]))
    html = page.read_text()
    assert "Rendered after a gate that did not pass" in html and "G1 arrival acceptance: FAIL" in html
    assert "stop_on_fail" in html and "#c0392b" in html
    assert html.index("Rendered after a gate that did not pass") < html.index("figures")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [g["gate"] for g in manifest["after_failed_gates"]] == ["G1"]
    clean = render.render("X", nb, tmp_path / "evidence" / "Y", {"out_dir": str(out)}, [], cwd=tmp_path)
    assert "Rendered after a gate" not in clean.read_text()
    # after an undecided gate only: the banner is amber and says why the run went on
    undecided = a_record(tmp_path / "a", "UNDECIDED", gate="G3", lines=[{"name": "c16", "verdict": "UNDECIDED"}])
    amber = render.render("X", nb, tmp_path / "evidence" / "Z", {"out_dir": str(out)}, [], cwd=tmp_path,
                          after_failed_gates=record.failed_gates([passed, undecided])).read_text()
    assert "G3 main gate: UNDECIDED" in amber and "stop_on_undecided" in amber and "#b9770e" in amber


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    """A real G2 storage run: fio on two tier paths of this disk, 2 repetitions at one queue depth."""
    base = tmp_path_factory.mktemp("g2")
    settings = StorageSettings(paths={"local_disk": str(base / "ld"), "shared_pool": str(base / "sp")},
                               read_paths=["local_disk"], queue_depths=[1], repetitions=2, size_mib=8, random_mib=2)
    run_storage(settings, base / "storage")
    return base / "storage"


def test_g2_storage_measures_every_pass_on_every_path_and_cleans_up(storage):
    records = [json.loads(line) for line in (storage / "storage.jsonl").read_text().splitlines()]
    seen = sorted({(r["path"], r["rw"]) for r in records})
    # the pool's sequential reads are R1's (read_paths), not taken twice
    assert seen == [("local_disk", "randread"), ("local_disk", "read"), ("local_disk", "write"),
                    ("shared_pool", "randread"), ("shared_pool", "write")]
    assert len(records) == 2 * 5 and all(r["gb_per_s"] > 0 and r["iops"] > 0 for r in records)
    assert json.loads((storage / "run.json").read_text())["status"] == "complete"
    assert (storage / "probes" / "platform.json").is_file()
    assert not list(storage.parent.glob("*/kvtier-g2-fio"))
    with pytest.raises(KvtierError, match="already holds a run"):
        run_storage(StorageSettings(paths={"local_disk": str(storage.parent / "ld")}), storage)


@pytest.mark.parametrize("settings, message", [
    ({"paths": {}}, "no tier path"),
    ({"paths": {"a": "x"}, "read_paths": ["b"]}, "read_paths \\['b'\\] are not among"),
    ({"paths": {"a": "x"}, "repetitions": 0}, "repetitions must be a positive integer"),
    ({"paths": {"a": "x"}, "random_mib": 512}, "random_mib 512 exceeds size_mib 256"),
])
def test_bad_storage_settings_are_refused(settings, message):
    with pytest.raises(KvtierError, match=message):
        StorageSettings(**settings)


def test_gate_g2_judges_storage_and_the_campaign_and_names_a_missed_floor(storage, tmp_path):
    out = tmp_path / "G2.json"
    argv = ["kvtier", "gate-g2", "--storage", str(storage), "--rounds", str(CAMPAIGN / "R2_rounds.csv"),
            "--out", str(out)]
    proc = run([*argv, "--settings", json.dumps({"max_cv": 100})], cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = record.read(out)
    names = [line["name"] for line in result["lines"]]
    assert "local_disk sequential write qd1" in names and "recompute TTFT p50 at concurrency 2" in names
    assert "engine-hit TTFT p50 (the floor) at concurrency 4" in names
    too_high = run([*argv, "--settings", json.dumps({"max_cv": 100, "floors": {"seq_write_gb_s": 1e6}})],
                   cwd=ROOT, check=False)
    assert too_high.returncode == 1
    assert "FAIL  shared_pool sequential write qd1" in too_high.stdout and "under the floor 1e+06" in too_high.stdout
    bad = run([*argv, "--settings", json.dumps({"floors": {"seq_speed": 1}})], cwd=ROOT, check=False)
    assert bad.returncode == 2 and "unknown key 'seq_speed'" in bad.stderr


def test_an_incomplete_storage_run_is_refused(storage, tmp_path):
    copy = tmp_path / "storage"
    copy.mkdir()
    (copy / "run.json").write_text(json.dumps({"status": "incomplete", "error": "KeyboardInterrupt: signal 15"}))
    with pytest.raises(KvtierError, match="run.json: the run is .incomplete., not complete .KeyboardInterrupt: signal 15"):
        g2.load_storage(copy)


def test_gate_g3_on_the_campaign_fixture_keeps_its_reason(tmp_path):
    out = tmp_path / "G3.json"
    proc = run(["kvtier", "gate-g3", "--rounds", str(CAMPAIGN / "R2_rounds.csv"), "--settings",
                json.dumps({"candidate": "shared_pool", "baseline": "recompute", "ttft_reduction_min_pct": 25}),
                "--why", "one disk under both pools", "--out", str(out)], cwd=ROOT, check=False)
    result = record.read(out)
    # 2 rounds (test preset): Student's t with 1 degree of freedom leaves the c2 tok/s gain undecided, and no line
    # missed: the gate is UNDECIDED, not passed (exit 1)
    assert proc.returncode == 1 and result["verdict"] == "UNDECIDED"
    assert "UNDECIDED c2 output tok/s gain % ≥ 0: 82.9 [-23.1, 332.8]" in proc.stdout
    assert result["notes"] == ["one disk under both pools"]
    assert {line["name"] for line in result["lines"]} == {
        "concurrency 2: TTFT p50 reduction %", "concurrency 2: output tok/s gain %",
        "concurrency 4: TTFT p50 reduction %", "concurrency 4: output tok/s gain %"}


def test_a_tier_whose_greedy_outputs_differ_leaves_g3_undecided_until_explained(tmp_path):
    correctness = read_table(CAMPAIGN / "correctness.csv")
    settings = g3.G3Settings("shared_pool", "engine")
    lines = g3.correctness_lines(correctness, settings)  # both tiers compared with recompute: a line each
    assert [(r["name"], r["verdict"], r["detail"]) for r in lines] == [
        ("greedy outputs: shared_pool identical to recompute's", "MET", "every one identical"),
        ("greedy outputs: engine identical to recompute's", "MET", "every one identical")]
    # One request of one round differs: that tier's line is UNDECIDED, naming where, and the gate cannot pass.
    changed = correctness.copy()
    row = changed.index[(changed["tier"] == "shared_pool")][-1]
    changed.loc[row, "identical_to_recompute"] -= 1
    (line,) = g3.correctness_lines(changed, g3.G3Settings("shared_pool", "recompute"))
    assert line["verdict"] == "UNDECIDED" and line["figure"].startswith(f"{int(changed[changed['tier'] == 'shared_pool']['identical_to_recompute'].sum())} of ")
    assert line["detail"] == (f"differ in round {int(changed.loc[row, 'round'])} at concurrency "
                              f"{int(changed.loc[row, 'concurrency'])}: not a valid measurement until explained")
    measured = [{"name": "c2", "verdict": "MET"}]
    assert g3.verdict(measured + [line]) == "UNDECIDED" and g3.verdict(measured) == "PASS"
    # From the command line, into the record and the page's tables.
    (tmp_path / "correctness.csv").write_text(changed.to_csv(index=False))
    out = tmp_path / "G3.json"
    proc = run(["kvtier", "gate-g3", "--rounds", str(CAMPAIGN / "R2_rounds.csv"), "--correctness",
                str(tmp_path / "correctness.csv"), "--settings", json.dumps({"candidate": "shared_pool",
                                                                             "baseline": "recompute"}),
                "--out", str(out)], cwd=ROOT, check=False)
    result = record.read(out)
    assert proc.returncode == 1 and result["verdict"] == "UNDECIDED" and "not a valid measurement" in proc.stdout
    assert len(result["inputs"]) == 2
    assert page.g3_correctness(result)["verdict"].tolist() == ["UNDECIDED"]
    assert len(page.g3_table(result)) == 4
