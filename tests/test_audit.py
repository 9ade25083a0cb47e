"""The claims auditor against the real ledger and readings: golden verdicts, dependence on readings, refusals."""

import copy
import json
import os
import shutil

import pytest
import yaml

from kvtier.audit import audit, crosschecks, ledger, load_tables, report
from kvtier.audit.formula import Ref, expand_refs
from kvtier.core.errors import KvtierError
from kvtier.evidence.published import R2_SPEC

from conftest import PUBLISHED, ROOT, run

GOLDEN = ROOT / "tests" / "golden" / "audit_verdicts.json"
LEDGER = ledger.load(PUBLISHED / "claims.yaml")


def records(results):
    return report.verdict_records(results)


def test_golden_verdicts():
    """The auditor's whole output for the published ledger. Regenerate deliberately:
    KVTIER_UPDATE_GOLDEN=1 python -m pytest tests/test_audit.py -k golden, then review the diff."""
    got = records(audit(LEDGER, load_tables(PUBLISHED)))
    if os.environ.get("KVTIER_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
    assert got == json.loads(GOLDEN.read_text())


def test_the_ledger_is_large_and_every_verdict_occurs():
    results = audit(LEDGER, load_tables(PUBLISHED))
    assert len(results) > 30
    assert set(report.counts(results)) == {r.verdict for r in results}


def dependents(reading: Ref) -> set[str]:
    return {c.id for c in LEDGER.claims
            if any(reading in expand_refs(d.formula, d.over) for d in c.definitions)}


R2_CELLS = [(row["tier"], row["concurrency"], column) for row in load_tables(PUBLISHED)["R2"].to_dict("records")
            for column in R2_SPEC.values if row[column] == row[column]]


@pytest.mark.parametrize("tier, concurrency, column", R2_CELLS, ids=lambda v: str(v))
def test_changing_a_reading_changes_only_the_claims_that_use_it(tier, concurrency, column):
    tables = load_tables(PUBLISHED)
    before = {r["id"]: r for r in records(audit(LEDGER, tables))}
    r2 = tables["R2"]
    r2.loc[(r2["tier"] == tier) & (r2["concurrency"] == concurrency), column] *= 1.25
    after = {r["id"]: r for r in records(audit(LEDGER, tables))}
    changed = {i for i in before if before[i] != after[i]}
    users = dependents(Ref("R2", column, (tier, concurrency)))
    assert changed <= users, f"claims changed without using the reading: {changed - users}"
    flipped = {i for i in changed if before[i]["verdict"] != after[i]["verdict"]}
    # Every published cell has a transcription claim, which must notice the change.
    assert any(i.startswith("003-table-") for i in flipped), flipped


def test_a_changed_reading_flips_the_derived_claim_that_depends_on_it():
    tables = load_tables(PUBLISHED)
    r2 = tables["R2"]
    r2.loc[(r2["tier"] == "local_disk") & (r2["concurrency"] == 16), "output_tok_s"] = 60.0
    verdicts = {r.claim.id: r.verdict for r in audit(LEDGER, tables)}
    baseline = {r.claim.id: r.verdict for r in audit(LEDGER, load_tables(PUBLISHED))}
    assert {i for i in verdicts if verdicts[i] != baseline[i]} == {"003-tok-gain-vs-local",
                                                                   "003-table-c16-local-tok"}


def test_every_digit_of_both_documents_is_a_claim_or_explained():
    missing = ledger.uncovered_digits(LEDGER)
    assert not missing, "digits in no claim and no not_claims entry:\n" + "\n".join(missing)
    # and the check sees one when an explanation goes
    stripped = copy.copy(LEDGER)
    stripped.not_claims = LEDGER.not_claims[1:]
    assert ledger.uncovered_digits(stripped)


def test_cross_checks_flag_what_a_reader_should_look_at():
    checks = {(c.kind, c.subject): c for c in crosschecks.all_checks(audit(LEDGER, load_tables(PUBLISHED)))}
    assert checks[("group", "003-raw-readings-table")].outcome == "AGREES"
    assert checks[("group", "000-boundary-table")].outcome == "DIFFERS"
    assert checks[("range", "000-sla-ttft-range")].outcome == "COVERS LOOSELY"
    assert checks[("same_as", "000-tok-gain-intro = 003-tok-gain-vs-local")].outcome == "DIFFERS"
    assert checks[("same_as", "000-recompute-ttft-c16 = 003-table-c16-recompute-ttft")].outcome == "AGREES"
    # the FAQ's concurrency bound is about throughput, the body's about TTFT
    assert checks[("same_as", "000-faq-offload-concurrency-bound = 000-offload-concurrency-bound")].outcome == \
        "DIFFERS"


def test_ratio_claims_are_re_evaluated_on_local_runs_and_absolute_ones_never(tmp_path):
    local = load_tables(PUBLISHED)["R2"].copy()
    local["ttft_p50_s"] *= 0.01  # a much faster machine: absolute figures mean nothing, ratios still do
    local["output_tok_s"] *= 100
    results = {r.claim.id: r for r in audit(LEDGER, load_tables(PUBLISHED), {"R2": local})}
    gain = results["003-tok-gain-vs-local"].local
    assert gain["status"] == "evaluated" and gain["definitions"][0]["matches"] is True
    assert results["003-table-c8-pool-ttft"].local["status"] == "not compared"
    assert "absolute" in results["003-table-c8-pool-ttft"].local["why"]
    assert results["000-table-c8-improvement"].local["status"] == "not compared"  # needs B, not measured locally


# ---------------------------------------------------------------------------------------------------------------
# A malformed ledger is refused whole, naming the claim and the field.

def published_copy(tmp_path, mutate):
    target = tmp_path / "published"
    shutil.copytree(PUBLISHED, target)
    raw = yaml.safe_load((PUBLISHED / "claims.yaml").read_text())
    mutate(raw)
    (target / "claims.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True, sort_keys=False))
    return target


def claim(raw, ident):
    return next(c for c in raw["claims"] if c["id"] == ident)


BAD_LEDGERS = {
    "unknown field": (lambda raw: claim(raw, "003-pool-ttft-c16").update(formla="x"),
                      "claim '003-pool-ttft-c16': unknown field 'formla'"),
    "missing formula": (lambda raw: claim(raw, "003-pool-ttft-c16").pop("formula"),
                        "claim '003-pool-ttft-c16': missing field 'formula'"),
    "unknown column": (lambda raw: claim(raw, "003-pool-ttft-c16").update(formula="R2.ttft_p90_s[shared_pool, 16]"),
                       "claim '003-pool-ttft-c16': field 'formula': unknown column 'ttft_p90_s' of table R2"),
    "unknown tier": (lambda raw: claim(raw, "003-pool-ttft-c16").update(formula="R2.ttft_p50_s[fx100, 16]"),
                     "claim '003-pool-ttft-c16': field 'formula': unknown tier 'fx100'"),
    "unknown tier in a definition": (
        lambda raw: claim(raw, "003-speedup-vs-recompute")["definitions"][1].update(
            formula="R2.ttft_p50_s[vram, c]"),
        "claim '003-speedup-vs-recompute': field 'definitions[1].formula': unknown tier 'vram'"),
    "quote not in the document": (lambda raw: claim(raw, "003-pool-ttft-c16").update(quote="降到 11.58 s"),
                                  "claim '003-pool-ttft-c16': field 'quote': '降到 11.58 s' occurs 0 times"),
    "quote in another document": (lambda raw: claim(raw, "003-pool-ttft-c16").update(quote="而 FX100 方案为 11.85s"),
                                  "claim '003-pool-ttft-c16': field 'quote'"),
    "same_as not mutual": (lambda raw: claim(raw, "000-pool-ttft-c16")["same_as"].remove("003-pool-ttft-c16"),
                           "claim '000-pool-ttft-c16': field 'same_as': must list '003-pool-ttft-c16' back"),
    "duplicate id": (lambda raw: raw["claims"].append(copy.deepcopy(claim(raw, "003-pool-ttft-c16"))),
                     "claim '003-pool-ttft-c16': field 'id': used by more than one claim"),
    "c without over": (lambda raw: claim(raw, "003-tok-gain-vs-local").pop("over"),
                       "claim '003-tok-gain-vs-local': field 'formula': uses c"),
    "range needs two ends": (lambda raw: claim(raw, "003-tok-gain-vs-local").update(claimed=29),
                             "claim '003-tok-gain-vs-local': field 'claimed' = 29: rule 'range' needs [low, high]"),
    "wrong type": (lambda raw: claim(raw, "003-pool-ttft-c16").update(scale="huge"),
                   "claim '003-pool-ttft-c16': field 'scale' = 'huge'"),
    "unknown evidence item": (lambda raw: claim(raw, "003-pool-ttft-c16").update(evidence=["R10"]),
                              "claim '003-pool-ttft-c16': field 'evidence': 'R10' is not an evidence item"),
    "statement quote not in the document": (
        lambda raw: raw["boundary_statements"][0].update(quote="卸载方案永远更快"),
        "boundary statement '000-shape-concurrency-ttft': field 'quote': '卸载方案永远更快' must occur exactly once"),
    "statement backs an unknown claim": (
        lambda raw: raw["boundary_statements"][0]["claims"].append("000-no-such-claim"),
        "boundary statement '000-shape-concurrency-ttft': field 'claims': no claim '000-no-such-claim'"),
    "statement id taken by a claim": (
        lambda raw: raw["boundary_statements"][0].update(id="000-vram-concurrency-bound"),
        "boundary statement '000-vram-concurrency-bound': field 'id': used more than once"),
    "statement with an unknown check": (
        lambda raw: raw["boundary_statements"][0].update(check="along_time"),
        "boundary_statements.0: field 'check' = 'along_time'"),
}


@pytest.mark.parametrize("case", BAD_LEDGERS, ids=list(BAD_LEDGERS))
def test_malformed_ledger_is_refused_naming_claim_and_field(tmp_path, case):
    mutate, message = BAD_LEDGERS[case]
    published = published_copy(tmp_path, mutate)
    with pytest.raises(KvtierError) as err:
        ledger.load(published / "claims.yaml")
    assert message in str(err.value)


def test_cli_refuses_a_malformed_ledger_and_writes_nothing(tmp_path):
    published = published_copy(tmp_path, BAD_LEDGERS["unknown column"][0])
    out = tmp_path / "out"
    proc = run(["kvtier", "audit", "--claims", str(published / "claims.yaml"), "--published-dir", str(published),
                "--out-dir", str(out)], cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "003-pool-ttft-c16" in proc.stderr and "ttft_p90_s" in proc.stderr
    assert not out.exists()


def test_cli_writes_verdicts_and_cross_checks(tmp_path):
    proc = run(["kvtier", "audit", "--out-dir", str(tmp_path)], cwd=ROOT)
    assert "MISMATCH" in proc.stdout
    verdicts = json.loads((tmp_path / "verdicts.json").read_text())
    assert isinstance(verdicts, list) and len(verdicts) == len(LEDGER.claims)
    for key in ("id", "source", "quote", "evidence", "verdict", "claimed", "recomputed", "explanation"):
        assert all(key in v for v in verdicts)
    csv_lines = (tmp_path / "verdicts.csv").read_text().splitlines()
    assert csv_lines[0].startswith("id,source,evidence,verdict") and len(csv_lines) > len(verdicts)
    assert (tmp_path / "cross_checks.csv").is_file()


def test_cli_re_evaluates_ratio_claims_on_a_runs_directory(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "R2_readings.csv").write_text("tier,concurrency,ttft_p50_s,output_tok_s\n"
                                          "shared_pool,8,0.5,120\nlocal_disk,8,0.8,100\n")
    run(["kvtier", "audit", "--runs", str(runs), "--out-dir", str(tmp_path / "out")], cwd=ROOT)
    verdicts = {v["id"]: v for v in json.loads((tmp_path / "out" / "verdicts.json").read_text())}
    local = verdicts["003-tok-gain-vs-local"]["local"]["definitions"][0]
    assert local["values"] == [{"c": 8, "value": pytest.approx(20.0)}] and local["missing"] == [16, 32]
    assert verdicts["003-table-c8-pool-ttft"]["local"]["status"] == "not compared"


def test_cli_gives_every_local_value_its_interval_over_the_campaigns_rounds(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "R2_readings.csv").write_text("tier,concurrency,ttft_p50_s,output_tok_s\n"
                                          "shared_pool,8,0.5,120\nlocal_disk,8,0.8,100\n")
    # Three rounds of pool vs local-disk output tok/s: gains of 20 %, 10 % and 30 %.
    (runs / "R2_rounds.csv").write_text("round,tier,concurrency,ttft_p50_s,output_tok_s\n"
                                        "1,shared_pool,8,0.5,120\n1,local_disk,8,0.8,100\n"
                                        "2,shared_pool,8,0.5,110\n2,local_disk,8,0.8,100\n"
                                        "3,shared_pool,8,0.5,130\n3,local_disk,8,0.8,100\n")
    run(["kvtier", "audit", "--runs", str(runs), "--out-dir", str(tmp_path / "out")], cwd=ROOT)
    verdicts = {v["id"]: v for v in json.loads((tmp_path / "out" / "verdicts.json").read_text())}
    claim = verdicts["003-tok-gain-vs-local"]
    [at_8] = claim["local"]["definitions"][0]["over_rounds"]
    assert at_8["c"] == 8 and at_8["rounds"] == 3
    half = 4.3027 * 10.0 / 3 ** 0.5  # Student's t, 2 degrees of freedom, sd 10 %, three rounds
    assert (at_8["point"], at_8["low"], at_8["high"]) == pytest.approx((20.0, 20.0 - half, 20.0 + half), rel=1e-3)
    assert "Student's t 95 % on the mean of 3 rounds" in at_8["method"]
    assert claim["claimed"] == [29, 40] and at_8["holds_claimed"] is True  # [-4.8, 44.8] meets the claimed 29–40 %
    # A malformed rounds file is refused, naming the file and the line.
    (runs / "R2_rounds.csv").write_text("round,tier,concurrency,ttft_p50_s,output_tok_s\nx,local_disk,8,0.8,100\n")
    proc = run(["kvtier", "audit", "--runs", str(runs)], cwd=ROOT, check=False)
    assert proc.returncode != 0 and "R2_rounds.csv, line 2: column 'round'" in proc.stderr


def test_cli_checks_document_000s_statements_on_a_boundary_map(tmp_path):
    fixture = ROOT / "tests" / "fixtures" / "boundary"
    proc = run(["kvtier", "audit", "--boundary", str(fixture), "--out-dir", str(tmp_path)], cwd=ROOT)
    records = {r["id"]: r for r in json.loads((tmp_path / "boundary_statements.json").read_text())}
    assert set(records) == {s["id"] for s in LEDGER.boundary_statements}
    # The fixture's grid: engine_only wins context 512 at concurrency 2, offload everywhere else (3 rounds).
    assert records["000-shape-concurrency-ttft"]["verdict"] == "AGREES"
    assert records["000-shape-low-corner"]["verdict"] == "AGREES"
    assert "000-shape-concurrency-ttft: AGREES" in proc.stdout
    assert (tmp_path / "boundary_statements.csv").read_text().startswith("id,verdict,")
    missing = run(["kvtier", "audit", "--boundary", str(tmp_path / "nothing")], cwd=ROOT, check=False)
    assert missing.returncode == 2 and "no boundary cells" in missing.stderr
