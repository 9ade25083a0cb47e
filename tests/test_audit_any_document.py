"""The audit for a document of one's own: the worked example in examples/audit/ (a note the project wrote for the
purpose, its ledger declaring its own tables and evidence items), every verdict and cross-check drawn, its page
rendered by `kvtier audit --page`, and a ledger's table declarations refused when they are wrong."""

import json
import shutil

import pytest
import yaml

from kvtier.audit import VERDICTS, audit, crosschecks, ledger, load_tables, report
from kvtier.core.errors import KvtierError

from conftest import ROOT, run

EXAMPLE = ROOT / "examples" / "audit"
ARGS = ["--ledger", "claims.yaml", "--readings", "readings", "--sources", "sources"]

# What each claim of the note should get, by construction (examples/audit/claims.yaml says why).
EXPECTED = {
    "t1-recompute-c4": "REPRODUCED", "t1-recompute-c16": "REPRODUCED", "t1-host-c4": "REPRODUCED",
    "t1-host-c16": "MISMATCH", "t1-disk-c4": "REPRODUCED", "t1-disk-c16": "REPRODUCED",
    "host-cut-c4": "REPRODUCED", "disk-speedup-c16": "MISMATCH", "host-speedup-range": "REPRODUCED",
    "disk-added-latency": "AMBIGUOUS", "host-throughput-gain": "UNCHECKED", "host-p90-under-1s": "NOT-DERIVABLE",
    "summary-cut": "REPRODUCED",
}


def example_ledger(root=EXAMPLE):
    return ledger.load(root / "claims.yaml", root / "readings", root / "sources")


def test_the_example_draws_every_verdict_and_cross_check_outcome_it_was_written_for():
    note = example_ledger()
    assert note.declares_tables and list(note.tables) == ["TTFT"]
    results = audit(note, load_tables(EXAMPLE / "readings", note.tables))
    assert {r.claim.id: r.verdict for r in results} == EXPECTED
    assert {r.verdict for r in results} == set(VERDICTS) == set(report.counts(results))
    by_id = {r.claim.id: r for r in results}
    assert "1.93" in by_id["t1-host-c16"].explanation and "2.3" in by_id["disk-speedup-c16"].explanation
    checks = {(c.kind, c.subject): c.outcome for c in crosschecks.all_checks(results)}
    assert checks == {("same_as", "host-cut-c4 = summary-cut"): "AGREES", ("group", "table-1"): "DIFFERS",
                      ("range", "host-speedup-range"): "COVERS EXACTLY"}
    assert ledger.uncovered_digits(note) == []


def test_the_worked_example_from_the_command_line_with_its_page(tmp_path):
    """The README's commands, in a copy: verdicts, cross-checks and the rendered page; then one changed digit in
    the readings flips the claim that uses it, and only that one."""
    work = tmp_path / "audit"
    shutil.copytree(EXAMPLE, work)
    out = tmp_path / "out"
    proc = run(["kvtier", "audit", *ARGS, "--out-dir", str(out), "--page", str(tmp_path / "page")], cwd=work)
    assert "     MISMATCH: 2" in proc.stdout and "REPRODUCED: 8" in proc.stdout and "warning" not in proc.stderr
    verdicts = {v["id"]: v["verdict"] for v in json.loads((out / "verdicts.json").read_text())}
    assert verdicts == EXPECTED
    html = (tmp_path / "page" / "audit.html").read_text()
    for word in ("MISMATCH", "AMBIGUOUS", "NOT-DERIVABLE", "UNCHECKED", "REPRODUCED", "COVERS EXACTLY",
                 "t1-host-c16", "ttft.csv", "Cache tiers for a support-chat service"):
        assert word in html, word
    manifest = json.loads((tmp_path / "page" / "manifest.json").read_text())
    assert any(i["path"].endswith("ttft.csv") for i in manifest["inputs"])

    readings = work / "readings" / "ttft.csv"
    readings.write_text(readings.read_text().replace("recompute,4,2.404", "recompute,4,2.504"))
    changed = run(["kvtier", "audit", *ARGS, "--out-dir", str(out)], cwd=work)
    after = {v["id"]: v["verdict"] for v in json.loads((out / "verdicts.json").read_text())}
    # 2.504 rounds to 2.50, not the table's 2.40; the 74 % cut becomes 75 %, the speed-up at concurrency 4 is 4.1,
    # outside 3.2 to 3.9; the summary quotes the finding's figure, not the readings, and stays
    assert {i for i in after if after[i] != EXPECTED[i]} == {"t1-recompute-c4", "host-cut-c4", "host-speedup-range"}
    assert "MISMATCH: 5" in changed.stdout


def test_a_digit_the_ledger_forgot_is_named_on_stderr(tmp_path):
    work = tmp_path / "audit"
    shutil.copytree(EXAMPLE, work)
    raw = yaml.safe_load((work / "claims.yaml").read_text())
    raw["not_claims"] = [e for e in raw["not_claims"] if e["pattern"] != "Table 1"]
    (work / "claims.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = run(["kvtier", "audit", *ARGS], cwd=work)
    assert "warning: a digit in no claim and no not_claims entry: field_note.md, line 8:" in proc.stderr


def ledger_copy(tmp_path, mutate):
    work = tmp_path / "audit"
    shutil.copytree(EXAMPLE, work)
    raw = yaml.safe_load((work / "claims.yaml").read_text())
    mutate(raw)
    (work / "claims.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return work


def table(raw):
    return raw["tables"]["TTFT"]


def a_claim(raw, ident):
    return next(c for c in raw["claims"] if c["id"] == ident)


BAD = {
    "a key that is not a column": (lambda raw: table(raw).update(keys=["tier", "load"]),
                                   "tables.TTFT: field 'keys': 'load' not among its columns"),
    "text as a value column": (lambda raw: table(raw)["columns"].update(note={"type": "text"}),
                               "tables.TTFT: field 'columns.note': type 'text' only for a key column"),
    "an unknown column type": (lambda raw: table(raw)["columns"]["ttft_p50_s"].update(type="float"),
                               "tables.TTFT: field 'columns.ttft_p50_s.type' = 'float'"),
    "no value column": (lambda raw: table(raw).update(columns={"tier": {"type": "text"},
                                                                "concurrency": {"type": "integer"}}),
                        "tables.TTFT: field 'columns': every column is a key"),
    "a file outside the readings folder": (lambda raw: table(raw).update(file="../ttft.csv"),
                                           "tables.TTFT: field 'file' = '../ttft.csv'"),
    "an evidence item the ledger does not list": (
        lambda raw: a_claim(raw, "host-cut-c4").update(evidence=["R2"]),
        "claim 'host-cut-c4': field 'evidence': 'R2' is not an evidence item (evidence_items: T1)"),
    "a column the table lacks": (
        lambda raw: a_claim(raw, "host-cut-c4").update(formula="TTFT.ttft_p90_s[host_memory, 4]"),
        "claim 'host-cut-c4': field 'formula': unknown column 'ttft_p90_s' of table TTFT"),
    "a document that is not there": (lambda raw: raw["documents"].update({"other.md": {
        "title": "x", "sha256": "0" * 64}}), "documents.other.md: no such document"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_wrong_table_declaration_is_refused_naming_what(tmp_path, case):
    mutate, message = BAD[case]
    work = ledger_copy(tmp_path, mutate)
    with pytest.raises(KvtierError) as err:
        example_ledger(work)
    assert message in str(err.value)


def test_readings_that_do_not_fit_the_declared_table_are_refused_naming_file_and_line(tmp_path):
    work = ledger_copy(tmp_path, lambda raw: None)
    readings = work / "readings" / "ttft.csv"
    readings.write_text(readings.read_text().replace("local_disk,16,2.598", "local_disk,16,fast"))
    proc = run(["kvtier", "audit", *ARGS, "--out-dir", str(tmp_path / "out")], cwd=work, check=False)
    assert proc.returncode == 2 and "ttft.csv, line 7: column 'ttft_p50_s' = 'fast' is not a number" in proc.stderr
    assert not (tmp_path / "out").exists()
    # a tier column of kvtier's kind refuses a name that is not one of kvtier's tiers
    work = ledger_copy(tmp_path / "tier", lambda raw: table(raw)["columns"]["tier"].update(type="tier"))
    with pytest.raises(KvtierError, match="unknown tier 'host_memory'"):
        example_ledger(work)


def test_kvtiers_own_runs_are_not_compared_with_a_ledger_of_other_tables(tmp_path):
    proc = run(["kvtier", "audit", *ARGS, "--runs", str(tmp_path)], cwd=EXAMPLE, check=False)
    assert proc.returncode == 2 and "this ledger declares its own tables" in proc.stderr


def test_without_sources_the_documents_are_looked_for_beside_the_readings(tmp_path):
    proc = run(["kvtier", "audit", "--ledger", "claims.yaml", "--readings", "readings"], cwd=EXAMPLE, check=False)
    assert proc.returncode == 2 and "documents.field_note.md: no such document readings/sources/field_note.md" \
        in proc.stderr
