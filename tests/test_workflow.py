"""Real Snakemake on a temporary copy of the project: the default target, lint, bad configs, reruns."""

import base64
import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from kvtier.core.table_io import read_table, write_table
from kvtier.evidence import r2
from kvtier.stack import emulated

from conftest import BIN, PRESET, ROOT, copy_built, processes_mentioning, run

pytestmark = pytest.mark.workflow

AUDIT_OUTPUTS = ["audit.html", "audit.ipynb", "verdicts.json", "verdicts.csv", "cross_checks.json",
                 "cross_checks.csv", "manifest.json"]
R2_OUTPUTS = ["R2.html", "R2.ipynb", "R2_table.csv", "R2_pool_vs_local_disk.csv", "R2_vs_recompute.csv",
              "R2_chart.png", "R2_chart.svg", "manifest.json"]


# Two rounds of three server starts (recompute then engine, dram then local_disk, shared_pool) and R3's two jobs.
ALL_JOBS = {"model": 1, "lmcache_build": 2, "tier_run_recompute_engine": 2, "tier_run_dram_local_disk": 2,
            "tier_run_shared_pool": 2, "r3_populate": 2, "r3_resume": 2, "campaign_look": 1, "campaign": 1, "render_R2_local": 1,
            "render_R3": 1, "r1_reads": 1, "r1_resume": 1, "render_R1": 1, "render_R2": 1, "render_audit": 1,
            "boundary_cells": 1, "boundary": 1, "render_B": 1, "platform": 1, "gate_g1": 1, "gate_proceed": 4,
            "g2_storage": 1, "gate_g2": 1, "gate_g3": 1, "render_gates": 1, "model_r9": 1, "r9_loads": 1,
            "render_R9": 1, "render_R4": 1, "render_R6": 1, "render_R7": 1, "soak": 1, "gate_g4": 1, "render_R5": 1,
            "index": 1, "package_manifest": 1, "all": 1}
# What a run measures: none of it may start before G1 has passed.
MEASUREMENTS = ("tier_run", "r3_populate", "r3_resume", "r1_reads", "r1_resume", "boundary_cells", "g2_storage", "r9_loads",
                "soak")


def jobs_of_dry_run(project, configfiles=("config/presets/test.yaml",), extra=(), targets=()) -> dict[str, int]:
    """{rule: count} from `snakemake -n`'s job stats table (the targets first: --configfile takes every word after
    it)."""
    out = run(["snakemake", *targets, "-n", "--cores", "1", *extra, "--configfile", *configfiles], cwd=project).stdout
    if "Nothing to be done" in out:
        return {}
    stats = out.split("Job stats:", 1)[1].splitlines()
    jobs = {}
    for line in stats[3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        jobs[parts[0]] = int(parts[1])
    return jobs


def test_default_target_renders_R2_and_the_index(built):
    evidence = built / "evidence"
    for name in R2_OUTPUTS:
        assert (evidence / "R2" / name).stat().st_size > 0, name
    index = (evidence / "index.html").read_text()
    assert 'href="R2/R2.html"' in index
    page = (evidence / "R2" / "R2.html").read_text()
    assert "149.48" in page and "31.5" in page
    # The chart is inline (base64 SVG), so the page shows it with no network and no JavaScript.
    inline = re.findall(r'data-mime-type="image/svg\+xml"[^>]*>\s*<img[^>]*src="data:image/svg\+xml;base64,([^"]+)"',
                        page)
    assert len(inline) == 1 and "TTFT p50" in base64.b64decode(inline[0]).decode()


def test_default_target_renders_the_audit(built):
    for name in AUDIT_OUTPUTS:
        assert (built / "evidence" / "audit" / name).stat().st_size > 0, name
    assert 'href="audit/audit.html"' in (built / "evidence" / "index.html").read_text()
    page = (built / "evidence" / "audit" / "audit.html").read_text()
    assert "MISMATCH" in page and "000-table-c8-offload-ttft" in page


def test_rendered_verdicts_equal_what_the_package_computes(built):
    from kvtier.audit import audit, ledger, load_tables, report
    published = built / "raw_data" / "published"
    expected = report.verdict_records(audit(ledger.load(published / "claims.yaml"), load_tables(published)))
    assert json.loads((built / "evidence" / "audit" / "verdicts.json").read_text()) == expected


def test_rendered_csvs_equal_what_the_package_computes(built):
    derived = r2.load(built / "raw_data" / "published")
    for name, frame in [("table", derived.table), ("pool_vs_local", derived.pool_vs_local),
                        ("vs_recompute", derived.vs_recompute)]:
        rendered = read_table(built / "evidence" / "R2" / r2.OUTPUT_FILES[name])
        pd.testing.assert_frame_equal(rendered, frame.reset_index(drop=True), check_dtype=False,
                                      check_exact=True, obj=name)


def test_manifest_hashes_the_raw_inputs_and_names_the_notebook(built):
    manifest = json.loads((built / "evidence" / "R2" / "manifest.json").read_text())
    assert manifest["made_by"]["notebook"]["path"] == "notebooks/R2.ipynb"
    assert {i["path"] for i in manifest["inputs"]} >= {"raw_data/published/R2_readings.csv"}
    assert {o["path"].rsplit("/", 1)[1] for o in manifest["outputs"]} == set(R2_OUTPUTS) - {"manifest.json"}


def test_the_evidence_has_the_pages_and_tables_of_a_local_run(built_run):
    """Every file a local run of the test preset renders, and every table's columns and row keys
    (tests/evidence_shape.py); measured numbers differ from run to run, the shape does not, whether it ran on
    this machine or another (tests/test_slurm.py compares a Slurm run's pages with this run's)."""
    from evidence_shape import evidence_shape
    golden = json.loads((ROOT / "tests" / "golden" / "test_preset_evidence.json").read_text())
    assert evidence_shape(built_run.project) == golden, \
        "if a page changed on purpose, rewrite the golden from a local run (tests/evidence_shape.py says how)"


def test_second_run_has_nothing_to_do(built):
    assert jobs_of_dry_run(built) == {}


def test_changing_one_reading_rerenders_R2_and_nothing_unrelated(built, tmp_path):
    project = tmp_path / "kvtier"
    copy_built(built, project)
    readings = project / "raw_data" / "published" / "R2_readings.csv"
    readings.write_text(readings.read_text().replace("local_disk,8,10.17,43.9", "local_disk,8,15.06,43.9"))
    # The audit reads the R2 readings too, so it is re-rendered; nothing else is but the index and the last gate's
    # flag, which waits for every page (its verdict is the run's exit status once everything is rendered).
    assert jobs_of_dry_run(project) == {"render_R2": 1, "render_audit": 1, "index": 1, "gate_proceed": 1,
                                        "package_manifest": 1, "all": 1}
    run(["snakemake", "--cores", "2", *PRESET], cwd=project)
    changed = read_table(project / "evidence" / "R2" / "R2_pool_vs_local_disk.csv").set_index("concurrency")
    assert changed.loc[8, "ttft_p50_reduction_pct"] == pytest.approx(50.0)
    # The package manifest was written again over the changed reading and the re-rendered pages.
    verified = run(["kvtier", "verify"], cwd=project, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_package_manifest_covers_the_run_and_every_page_shows_its_hash(built, tmp_path):
    from kvtier.core.hashing import page_stamps
    from kvtier.package import manifest
    verified = run(["kvtier", "verify"], cwd=built, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    recorded, digest = manifest.load(built)
    files = recorded["files"]
    campaign = "raw_data/runs/test"
    for rel in (f"{campaign}/round-1/dram/requests.jsonl", f"{campaign}/gates/G4.json", f"{campaign}/gates/G4.proceed",
                "build/lmcache/patched/build.json", "evidence/R5/R5.html", "evidence/index.html",
                "raw_data/published/R2_readings.csv", "requirements.lock", "patches/README.md"):
        assert rel in files, rel
    assert not [rel for rel in files if rel.startswith(("logs/", "models/", "pools/", ".snakemake/"))]
    pages = sorted(built.glob("evidence/**/*.html"))
    assert len(pages) >= 12
    for page in pages:
        assert page_stamps(page.read_bytes()) == [digest], page
    # One digit changed in a published reading: named, and verify fails.
    project = tmp_path / "kvtier"
    copy_built(built, project)
    readings = project / "raw_data" / "published" / "R2_readings.csv"
    readings.write_text(readings.read_text().replace("local_disk,8,10.17,43.9", "local_disk,8,10.18,43.9"))
    changed = run(["kvtier", "verify"], cwd=project, check=False)
    assert changed.returncode == 1
    assert changed.stdout.splitlines() == [line for line in changed.stdout.splitlines()
                                           if "raw_data/published/R2_readings.csv" in line] != []


def test_an_unpacked_package_renders_from_its_raw_runs_without_measuring(built, tmp_path):
    """R8: the built run's archive, unpacked elsewhere, verifies and has nothing to do. With `measure: false` and
    its evidence/ removed, every page is rendered again from the shipped raw runs, nothing built or measured, and
    every table and verdict comes out byte for byte as shipped. A raw run removed and asked for is refused, named."""
    import filecmp

    from kvtier.package.archive import unpack
    run(["kvtier", "package", "--out-dir", str(tmp_path / "dist")], cwd=built)
    (archive,) = (tmp_path / "dist").glob("*.tar.gz")
    project = unpack(archive, tmp_path / "unpacked")
    assert not (project / "models").exists() and not (project / "pools").exists()
    run(["kvtier", "verify"], cwd=project)
    replay = ["--config", "measure=false"]
    assert jobs_of_dry_run(project, extra=replay) == {}
    shipped = tmp_path / "shipped"
    shutil.move(project / "evidence", shipped)
    # As the README has it: the environment's snakemake by its path, the environment not activated.
    inactive = {**os.environ, "PATH": os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != BIN.resolve())}
    out = run([str(BIN / "snakemake"), "--cores", "2", *PRESET, *replay], cwd=project, env=inactive)
    ran = set(re.findall(r"\(Rule: (\w+)", out.stdout + out.stderr))
    assert {"render_R1", "render_R3", "render_R5", "render_gates", "index", "package_manifest"} <= ran
    assert not [r for r in ran if r.startswith(("model", "lmcache", "platform", *MEASUREMENTS))], ran
    tables = sorted(p.relative_to(shipped) for p in shipped.glob("*/*") if p.suffix in (".csv", ".json")
                    and p.name != "manifest.json")
    assert len(tables) > 30
    _, differ, missing = filecmp.cmpfiles(shipped, project / "evidence", [str(t) for t in tables], shallow=False)
    assert differ == [] and missing == []
    run(["kvtier", "verify"], cwd=project)  # against the manifest written again over the pages rendered again
    shutil.rmtree(project / "raw_data" / "runs" / "test" / "R9")
    refused = run(["snakemake", "--cores", "2", *PRESET, *replay, "--", "raw_data/runs/test/R9"], cwd=project,
                  check=False)
    log = (project / "logs" / "r9" / "test" / "loads.log").read_text()
    assert refused.returncode != 0 and "`kvtier r9-loads` would measure raw_data/runs/test/R9" in log
    assert "measure: false" in log and not (project / "raw_data" / "runs" / "test" / "R9").exists()


def test_fresh_copy_dry_run_and_lint_are_clean(project_copy):
    assert jobs_of_dry_run(project_copy) == ALL_JOBS
    lint = run(["snakemake", "--lint"], cwd=project_copy, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "Lints for" not in lint.stdout + lint.stderr
    # The default config soaks; the README's `--config soak='{enabled: false}'` (Snakemake hands its scalars over as
    # strings) turns the soak off, and G3 becomes the last gate.
    jobs = jobs_of_dry_run(project_copy, ("config/config.yaml",))
    assert jobs["soak"] == 1 and jobs["gate_g4"] == 1
    jobs = jobs_of_dry_run(project_copy, ("config/config.yaml",), ["--config", "soak={enabled: false}"])
    assert "soak" not in jobs and "gate_g4" not in jobs


@pytest.mark.parametrize("bad, named", [
    ({"evidnce_dir": "out"}, "'evidnce_dir'"),
    ({"render": {"cell_timeout_s": "600s"}}, "'render.cell_timeout_s' = '600s'"),
    ({"render": {"chart_png_scale": 9}}, "'render.chart_png_scale' = 9"),
    ({"gates": {"g1": {"expect": [{"field": "cpu.usable_cpu", "op": "at_least", "value": 2}]}}},
     "gates.g1.expect[0]: field 'cpu.usable_cpu' is not in the platform record"),
    ({"runs": {"tiers": ["recompute", "engine"]}}, "gates.g3.candidate 'shared_pool' is not a tier of runs.tiers"),
    ({"runs": {"max_rounds": 1}}, "runs.max_rounds 1: at least runs.rounds (2)"),
])
def test_bad_config_stops_the_run_before_anything_is_written(project_copy, bad, named):
    (project_copy / "bad.yaml").write_text(yaml.safe_dump(bad))
    proc = run(["snakemake", "--cores", "1", "--configfile", "bad.yaml"], cwd=project_copy, check=False)
    assert proc.returncode != 0
    assert named in proc.stdout + proc.stderr
    assert "bad.yaml" in proc.stdout + proc.stderr
    assert not (project_copy / "evidence" / "R2").exists()
    assert not (project_copy / "evidence" / "audit").exists()
    assert not (project_copy / "evidence" / "index.html").exists()


def test_the_run_never_rewrites_published_readings(built):
    published = ROOT / "raw_data" / "published"
    for original in published.rglob("*"):
        if original.is_file():
            copy = built / original.relative_to(ROOT)
            assert copy.read_bytes() == original.read_bytes(), copy
    assert {p.relative_to(built) for p in (built / "raw_data" / "published").rglob("*")} == \
        {p.relative_to(ROOT) for p in published.rglob("*")}


def test_changing_the_ledger_rerenders_only_the_pages_that_read_it(built, tmp_path):
    project = tmp_path / "kvtier"
    copy_built(built, project)
    claims = project / "raw_data" / "published" / "claims.yaml"
    claims.write_text(claims.read_text().replace("claimed: 192\n", "claimed: 193\n"))
    # The audit, R1, which shows the published R1 claims as context, B and R9, which show document 000's.
    # And the index and the last gate's flag, as above.
    assert jobs_of_dry_run(project) == {"render_audit": 1, "render_R1": 1, "render_B": 1, "render_R9": 1, "index": 1,
                                        "gate_proceed": 1, "package_manifest": 1, "all": 1}


def test_audit_can_be_switched_off(project_copy):
    (project_copy / "no_audit.yaml").write_text("audit: {enabled: false}\n")
    jobs = jobs_of_dry_run(project_copy, ("config/presets/test.yaml", "no_audit.yaml"))
    assert "render_audit" not in jobs and "render_R2" in jobs


def test_measured_runs_are_attributed_correct_and_rendered(built):
    from kvtier.evidence import measured
    campaign = built / "raw_data" / "runs" / "test"
    local = measured.load(campaign, "R2_local")
    attribution = local.attribution.set_index(["tier", "concurrency"])
    assert attribution["valid"].all(), attribution[["valid", "rule"]]
    assert (attribution.loc["dram", "l1_hit_tokens"] > 0).all()
    for tier in ("local_disk", "shared_pool"):
        assert (attribution.loc[tier, "l2_hit_tokens"] > 0).all(), tier
    assert (attribution.loc["engine", "local_cache_hit"] > 0).all()
    correctness = local.correctness
    assert correctness[correctness["tier"] != "recompute"]["all_identical"].all(), correctness
    assert local.readings["ttft_p50_s"].notna().all()
    assert local.conditions["pools_on_same_device"] is True
    # Every window waited for a quiet machine first, and the record says what it found.
    found = local.conditions["quiet"]
    assert found["checked"] == found["measurements"] == len(read_table(campaign / "attribution.csv")) > 0
    assert attribution["quiet"].notna().all() and (attribution["quiet_waited_s"] >= 0).all()
    page = (built / "evidence" / "R2_local" / "R2_local.html").read_text()
    assert "Quiet check" in page and "not made" not in page
    assert "same device" in page and 'href="R2_local/R2_local.html"' in (built / "evidence" / "index.html").read_text()
    rendered = read_table(built / "evidence" / "R2_local" / "R2_local_table.csv")
    pd.testing.assert_frame_equal(rendered, local.table.reset_index(drop=True), check_dtype=False, obj="table")


def test_r3_instance_b_resumes_from_the_pool_instance_a_wrote(built):
    from kvtier.evidence import measured, r3
    shared = measured.load(built / "raw_data" / "runs" / "test", "R3")
    verdict = r3.verdict(shared)
    assert verdict["verified"], verdict
    assert verdict["writer_files"] > 0 and all(h > 0 for h in verdict["l2_hit_tokens"])
    assert shared.attribution["writer_stopped"].astype(bool).all()
    assert shared.readings.set_index("tier").loc["cross_instance", "ttft_p50_s"].notna().all()
    run = json.loads((built / "raw_data" / "runs" / "test" / "round-1" / "cross_instance" / "run.json").read_text())
    servers = run["metadata"]["servers"]
    model_of = {role: cmd["vllm"][cmd["vllm"].index("--model") + 1] for role, cmd in servers.items()}
    assert model_of["reader"] == model_of["writer"], "LMCache keys pool files by vLLM's --model string"
    page = (built / "evidence" / "R3" / "R3.html").read_text()
    assert "SEQUENTIAL SHARING VERIFIED:" in page and "NOT VERIFIED" not in page and "same device" in page
    assert 'href="R3/R3.html"' in (built / "evidence" / "index.html").read_text()
    rendered = read_table(built / "evidence" / "R3" / "R3_table.csv")
    pd.testing.assert_frame_equal(rendered, shared.table.reset_index(drop=True), check_dtype=False, obj="table")


def test_the_tiers_ran_in_interleaved_rounds_one_at_a_time_and_pages_decide_with_intervals(built):
    from kvtier.core.tiers import server_units
    from kvtier.evidence import campaign_rounds, measured
    from kvtier.runs.order import schedule
    campaign = built / "raw_data" / "runs" / "test"
    conditions = json.loads((campaign / "conditions.json").read_text())
    kinds = ["recompute", "engine", "dram", "local_disk", "shared_pool", "cross_instance"]
    # Sequential rounds: 2 of every unit in the rotation's order, then the look after round 2 named the units of
    # round 3 (those of every driving comparison it found undecided, R3's alone in the test preset, with
    # recompute's), which ran in the order it gave.
    looks = {look["after_rounds"]: look
             for look in campaign_rounds.read_looks(sorted((campaign / campaign_rounds.LOOKS_DIR).glob("*.json")))}
    third = [kind for unit in looks[2]["next_units"] for kind in unit]
    expected = schedule(server_units(kinds), 2) + [(3, kind) for kind in third]
    assert [(run["round"], run["kind"]) for run in conditions["order"]] == expected
    undecided_tiers = {row["tier"] for row in looks[2]["undecided"]}
    assert set(third) == ({k for unit in server_units(kinds) for k in unit if set(unit) & (undecided_tiers | {
        "recompute"})} if undecided_tiers else set())
    sequential = conditions["sequential"]
    assert (sequential["min_rounds"], sequential["max_rounds"]) == (2, 3)
    assert [look["after_rounds"] for look in sequential["looks"]] == sorted(looks) == ([2, 3] if third else [2])
    assert sequential["stop"] in ("decided", "rounds spent")
    # One at a time: each run ended before the next began.
    records = [json.loads((campaign / f"round-{r}" / kind / "run.json").read_text()) for r, kind in expected]
    assert all(before["end"] <= after["start"] for before, after in zip(records, records[1:]))
    by_round = read_table(campaign / "R2_rounds.csv")
    assert sorted(set(by_round["round"])) == ([1, 2, 3] if third else [1, 2]) and by_round["ttft_p50_s"].notna().all()
    # Every comparison on the pages carries its interval (the plan's, over 2 to 3 rounds) and a word; recompute is
    # far slower than any cache, so no word says slower.
    local = measured.load(campaign, "R2_local")
    vs_recompute = local.comparisons["vs_recompute"]
    assert vs_recompute["rounds"].isin([2, 3]).all() and vs_recompute["interval"].str.startswith("sequential").all()
    assert set(vs_recompute["ttft_verdict"]) <= {"faster", "no difference measured"}
    assert ((vs_recompute["ttft_verdict"] == "faster") == (vs_recompute["ttft_speedup_low"] > 1)).all()
    assert set(vs_recompute["stop"]) <= {"decided", "rounds spent", campaign_rounds.WITH_THE_CAMPAIGN}
    assert ((vs_recompute["stop"] == "decided") == (vs_recompute["ttft_verdict"] == "faster")).all()
    assert (vs_recompute.loc[vs_recompute["stop"] != "decided", "to_decide"] != "").all()
    page = (built / "evidence" / "R2_local" / "R2_local.html").read_text()
    for row in vs_recompute.itertuples():
        assert f"{row.tier} vs recompute, concurrency {row.concurrency}: TTFT {row.ttft_verdict.upper()}" in page
    assert "Sequential rounds" in page and "Rounds" in page
    # Recompute keeps no KV: its populate is a one-session warm-up; every cached tier populates every session.
    populated = {kind: sum(1 for line in (campaign / "round-1" / kind / "requests.jsonl").open()
                           if json.loads(line)["phase"] == "populate") for kind in kinds}
    assert populated == {**{kind: 4 for kind in kinds}, "recompute": 1}, populated
    assert '<details class="kvtier-code">' in page
    pool = local.comparisons["pool_vs_local_disk"]
    assert set(pool["ttft_verdict"]) <= {"faster", "slower", "no difference measured"}


def test_every_run_records_its_platform(built):
    from kvtier.probes import platform_probe
    from kvtier.stack.model import config_hash
    campaign = built / "raw_data" / "runs" / "test"
    for run_dir in sorted(campaign.glob("round-*/*")):
        record = platform_probe.read(run_dir / "probes" / "platform.json")
        assert record["model"]["config_hash"] == config_hash(built / "models" / "kvtier-model"), run_dir.name
        assert set(record["storage"]) >= {"local_disk", "shared_pool", "model", "run_dir"}
    conditions = json.loads((campaign / "conditions.json").read_text())
    assert conditions["consistent"] is True
    # The servers ran the patched build (the default), and the record names it with its artifact's sha256.
    lmcache = conditions["platform"]["software"]["lmcache"]
    build = json.loads((built / "build" / "lmcache" / "patched" / "build.json").read_text())
    assert lmcache["patch_set"] == build["patch_set"] != "none" and lmcache["build"]["artifact"] == build["artifact"]
    # local_disk ran on the servers dram started: their logs are in dram's run, and its record says so.
    shared = json.loads((campaign / "round-1" / "local_disk" / "run.json").read_text())["metadata"]["shared_servers"]
    assert shared == {"tiers": ["dram", "local_disk"], "measured_before": ["dram"], "server_logs": "../dram/server_logs"}
    log = (campaign / "round-1" / "local_disk" / shared["server_logs"] / "lmcache.log").read_text()
    assert "load_concurrency=16" in log, "the L2 adapter of the patched build, with the configured bound"


def test_r1_compares_both_builds_and_resumes_from_l2(built):
    from kvtier.evidence import r1
    measured = r1.load(built / "raw_data" / "runs" / "test" / "R1")
    versions = dict(zip(measured.coldread["build"], measured.coldread["version"]))
    build = json.loads((built / "build" / "lmcache" / "patched" / "build.json").read_text())
    # lmcache.verify_checksum (on by default): the patched build also loads checking each chunk's CRC-32.
    assert versions == {"upstream": "0.5.6", "patched": build["version"], "patched_checksum": build["version"]}
    assert (measured.coldread_rounds["resident_bytes_before"] == 0).all(), "every timed load started cold"
    resume = measured.resume
    assert len(resume) == 2 and resume["window_valid"].all() and (resume["window_l2_hit_tokens"] > 0).all()
    assert resume["lmcache_retrieve_s"].notna().all()
    assert (resume["engine_hit_ttft_s"] > 0).all(), "the same sessions resumed from vLLM's prefix cache"
    page = (built / "evidence" / "R1" / "R1.html").read_text()
    assert measured.conditions["quiet"]["checked"] == measured.conditions["quiet"]["measurements"] > 0
    assert "Quiet check" in page and "timed reads and saves" in page
    assert "fio" in page and "same device" in page and "0.98" in page and "5.23" in page
    assert "each chunk&#39;s CRC-32" in page or "each chunk's CRC-32" in page
    assert 'href="R1/R1.html"' in (built / "evidence" / "index.html").read_text()
    rendered = read_table(built / "evidence" / "R1" / "R1_targets.csv")
    assert list(rendered["target"]) == list(measured.targets["target"])
    assert rendered["figure"].tolist() == pytest.approx(measured.targets["figure"].tolist())
    manifest = json.loads((built / "evidence" / "R1" / "manifest.json").read_text())
    hashed = {Path(entry["path"]).as_posix() for entry in manifest["inputs"]}
    assert {f"raw_data/runs/test/R1/{name}" for name in r1.RAW_FILES} <= hashed


def test_B_renders_the_measured_boundary_with_its_reasons(built, tmp_path):
    from kvtier.audit import ledger, shapes
    from kvtier.evidence import boundary
    measured = boundary.load(built / "raw_data" / "runs" / "test" / "B")
    page = built / "evidence" / "B"
    # The page's tables come from the raw cells through the package, not from anywhere else.
    # (through a CSV of its own: an empty text reads back as missing either way)
    pd.testing.assert_frame_equal(read_table(page / "B_winners.csv"),
                                  read_table(write_table(measured.won, tmp_path / "won.csv")), check_dtype=False)
    assert set(measured.grid["scheme"]) == {"engine_only", "offload"}
    # Sequential rounds: 2 of every cell, then a third only for the cells still undecided after them.
    sequential = json.loads((built / "raw_data" / "runs" / "test" / "B" / "cells" / "sequential.json").read_text())
    assert sequential["rounds"] == 2 and sequential["max_rounds"] == 3
    # Undecided after 2: a tie, or a scheme's verdict against an SLA (the default config's) still UNDECIDED.
    slas = boundary.parse_slas(" ".join(f"{m}={s}" for m, s in yaml.safe_load(
        (built / "config" / "config.yaml").read_text())["boundary"]["slas"].items()))
    undecided = {f"L{x}-c{c}" for x, c in boundary.undecided_cells(measured.grid[measured.grid["round"] <= 2],
                                                                    boundary.sequential.Plan(2, 3), slas)}
    third = {f"L{x}-c{c}" for x, c in measured.grid.loc[measured.grid["round"] == 3, ["context_tokens",
                                                                                       "concurrency"]].values}
    assert third == undecided, (third, undecided)
    for cell, entry in sequential["cells"].items():
        assert entry["rounds"] == (3 if cell in undecided else 2), (cell, entry)
        assert entry["stop"] in (("decided", "rounds spent", "minutes spent") if cell in undecided else ("decided",))
    assert measured.grid["valid"].all() and len(measured.grid) == 2 * (1 * 2 * 2 + len(undecided))
    # 8 measured requests a window at least: concurrency 2 got a third turn.
    assert (measured.grid["requests"] >= 8).all() and conditions_of(built)["turns_per_cell"]["L512-c2"] == 3
    # A winner decided in a cell whose rounds went on for an SLA line still undecided says so; a tie never does.
    spent = ("rounds spent", "minutes spent")
    sla_stops = {f"decided (the cell's SLA lines: {s})" for s in spent}
    assert set(measured.won["stop"]) <= {"decided", *spent, *sla_stops}, set(measured.won["stop"])
    assert (measured.won.loc[measured.won["stop"].isin(sla_stops), "winner"] != boundary.TIE).all()
    for name in ("B_crossovers.csv", "B_statements.csv", "B_correctness.csv"):
        assert (page / name).is_file(), name
    html = (page / "B.html").read_text()
    assert "How each cell's answer was reached" in html and "Lan &amp; DeMets" in html
    assert boundary.crossover_text(measured.won).splitlines()[0] in html
    # Why a cell went one way: where the engine overflowed, engine_only recomputed and offload reloaded.
    shares = boundary.attribution_medians(measured.attribution).set_index(["scheme", "context_tokens", "concurrency"])
    assert shares.loc[("engine_only", 512, 4), "recompute_frac"] > 0.9
    # (offload: what it still recomputes is the part no cache holds, the follow-up and the last partial chunk)
    assert shares.loc[("offload", 512, 4), ["l1_frac", "l2_frac"]].sum() > 0.5
    assert shares.loc[("offload", 512, 4), ["engine_frac", "l1_frac", "l2_frac"]].sum() > 0.8
    assert (measured.correctness["identical"] == measured.correctness["compared"]).all()
    assert (measured.correctness["compared"] > 0).all()
    # No mismatch here, so only the control was replayed alone on both stacks (the method's own check): engine_only
    # recomputed the prompt, offload loaded it from LMCache (vLLM's prefix cache reset first), and they agree.
    replays = measured.replays
    assert list(replays["why"]) == ["control"] and replays["failed"].isna().all(), replays.to_dict("records")
    control = replays.iloc[0]
    assert control["engine_alone_cached_tokens"] == 0 and control["offload_alone_cached_tokens"] > 0
    assert control["identical_alone"] and control["engine_alone_as_in_cell"], control.to_dict()
    assert control["explanation"].startswith("control, identical in the cell and alone")
    assert (page / "B_replays.csv").is_file() and "Mismatches replayed alone" in html
    conditions = json.loads((built / "raw_data" / "runs" / "test" / "B" / "conditions.json").read_text())
    # vLLM's own report of its KV capacity: what the preset asked for (3072 tokens), to a block.
    assert conditions["engine_kv_tokens_reported"]["engine_only"] <= 3072 + 128, conditions
    rounds = [o["round"] for o in conditions["order"]]
    assert rounds == sorted(rounds) and len(rounds) == len(measured.grid), rounds  # round by round
    statements = shapes.evaluate_all(ledger.load(built / "raw_data" / "published" / "claims.yaml").boundary_statements,
                                     measured.grid)
    for s in statements:
        assert f"{s['id']}: {s['verdict']}" in html
    assert "outside the measured grid" in html or "meet(s) the SLA" in html or "no scheme meets" in html


def conditions_of(built: Path) -> dict:
    return json.loads((built / "raw_data" / "runs" / "test" / "B" / "conditions.json").read_text())


def run_starts(campaign: Path) -> list[str]:
    """The start time of every measured run of a campaign (run.json)."""
    return [json.loads(p.read_text())["start"] for p in sorted(campaign.rglob("run.json"))]


def test_the_gates_ran_in_order_before_what_they_gate_and_their_page_shows_every_verdict(built):
    from kvtier.core.table_io import read_table
    from kvtier.gates import g3, page, record
    campaign = built / "raw_data" / "runs" / "test"
    records = page.load(campaign / "gates")
    assert list(records) == ["G1", "G2", "G3", "G4"]
    # G4 judged the soak, which started after G3's verdict and ended before G4's.
    soak = json.loads((campaign / "soak" / "run.json").read_text())
    assert records["G3"]["checked_at"] <= soak["start"] <= soak["end"] <= records["G4"]["checked_at"]
    # The default bill describes this machine: G1 passes, and it was checked before anything was measured.
    assert records["G1"]["verdict"] == "PASS", record.failed_lines(records["G1"])
    assert records["G1"]["checked_at"] <= min(run_starts(campaign))
    # Nothing is measured after the last gate: its flag, the run's exit status, waits for every page.
    assert (campaign / "gates" / "G4.proceed").stat().st_mtime >= (built / "evidence" / "index.html").stat().st_mtime
    flag = json.loads((campaign / "gates" / "G1.proceed").read_text())
    assert flag == {"gate": "G1", "verdict": "PASS", "record": "raw_data/runs/test/gates/G1.json",
                    "after_failed_gate": False}
    # G2: every pass on both tier paths (the pool's reads from R1's fio rounds), and the campaign's baselines.
    names = {line["name"] for line in records["G2"]["lines"]}
    assert {"local_disk sequential write qd1", "local_disk sequential read qd1", "shared_pool 4 KiB random read qd1",
            "shared_pool sequential read qd16", "recompute TTFT p50 at concurrency 2",
            "engine-hit TTFT p50 (the floor) at concurrency 4"} <= names
    assert {line["source"] for line in records["G2"]["lines"]} == {"G2 storage", "R1 fio", "campaign rounds"}
    # G3 is what kvtier.gates.g3 computes from the campaign's rounds (the intervals of its sequential plan), with the
    # configured comparison and reason.
    from kvtier.evidence.campaign_rounds import plan_of
    settings = g3.G3Settings("shared_pool", "recompute")
    plan = plan_of(json.loads((campaign / "conditions.json").read_text()))
    assert plan is not None and f"{campaign.name}/conditions.json" in str(records["G3"]["inputs"])
    expected = g3.lines(read_table(campaign / "R2_rounds.csv"), settings, plan)
    expected += g3.correctness_lines(read_table(campaign / "correctness.csv"), settings)
    assert [(r["name"], r["verdict"]) for r in records["G3"]["lines"]] == [(r["name"], r["verdict"]) for r in expected]
    assert expected[-1]["name"] == "greedy outputs: shared_pool identical to recompute's"
    assert records["G3"]["verdict"] == g3.verdict(expected) and "one disk" in records["G3"]["notes"][0]
    html = (built / "evidence" / "gates" / "gates.html").read_text()
    for gate, r in records.items():
        assert f"{r['title']}" in html and f"{gate} {r['verdict']}" in html
    assert "local_disk" in html and "sequential write" in html and "folders of one disk" in html
    # A line with no figure (G4's UNDECIDED ones) is an empty cell.
    rendered = read_table(built / "evidence" / "gates" / page.LINES_FILE).fillna({"unit": "", "figure": ""}).astype(
        {"figure": str})
    pd.testing.assert_frame_equal(rendered, page.all_lines(records).reset_index(drop=True), check_dtype=False)
    index = (built / "evidence" / "index.html").read_text()
    assert all(f'href="{page}"' in index for page in ("gates/gates.html", "R6/R6.html", "R7/R7.html"))
    r6 = read_table(built / "evidence" / "R6" / "R6_lines.csv")
    assert list(r6["field"]) == [line["field"] for line in records["G1"]["lines"]] and set(r6["verdict"]) == {"PASS"}
    r7 = read_table(built / "evidence" / "R7" / "R7_deliverable.csv")
    assert set(r7["path"]) == {"local_disk", "shared_pool"} and (r7.filter(like="qd").stack().dropna() > 0).all()
    # G1 passed, so no page carries the banner of a gate that did not pass, but R5, measured after G3, carries
    # G2's and G3's if they did not (with the test preset's 2 rounds G3 is seldom decided).
    for manifest in (built / "evidence").glob("*/manifest.json"):
        marked = [(g["gate"], g["verdict"]) for g in json.loads(manifest.read_text()).get("after_failed_gates", [])]
        expected = [(gate, records[gate]["verdict"]) for gate in ("G2", "G3")
                    if records[gate]["verdict"] != "PASS"] if manifest.parent.name == "R5" else []
        assert marked == expected, manifest


def test_R4_sets_the_platform_record_of_every_run_side_by_side(built):
    from kvtier.evidence import r4
    campaign = built / "raw_data" / "runs" / "test"
    found = r4.find(campaign)
    assert {"gates", "round-1/recompute", "round-2/cross_instance", "R1/reads", "R1/resume/engine_hit", "B/cells",
            "G2/storage", "R9"} <= set(found)
    frame = read_table(built / "evidence" / "R4" / "R4_platform.csv").set_index("field")
    assert list(frame.columns) == list(found)
    assert frame.loc["cpu.usable_cpus"].nunique() == 1
    html = (built / "evidence" / "R4" / "R4.html").read_text()
    assert f"{len(found)} run directories" in html and "What differs between runs" in html
    manifest = json.loads((built / "evidence" / "R4" / "manifest.json").read_text())
    assert {i["path"] for i in manifest["inputs"]} >= {"raw_data/runs/test/gates/platform.json",
                                                        "raw_data/runs/test/R9/probes/platform.json"}


def test_R9_loads_one_model_from_each_path_cold_and_warm(built):
    from kvtier.evidence import r9
    measured = r9.load(built / "raw_data" / "runs" / "test" / "R9")
    loads = measured.loads
    assert sorted(zip(loads["path"], loads["state"])) == [("local_disk", "cold"), ("local_disk", "warm"),
                                                          ("shared_pool", "cold"), ("shared_pool", "warm")]
    # vLLM's own figure was found in its log for every start, and each start reached a server that answers.
    assert loads["loading_weights_s"].notna().all() and (loads["ready_s"] > loads["loading_weights_s"]).all()
    cold, warm = (loads[loads["state"] == s].set_index("path") for s in ("cold", "warm"))
    assert (cold["resident_before_bytes"] < 0.1 * cold["weights_bytes"]).all(), "cold starts began cold"
    assert (warm["resident_before_bytes"] > 0.9 * warm["weights_bytes"]).all(), "warm starts began warm"
    assert (loads["raw_read_bytes"] == loads["weights_bytes"]).all()
    assert not list((built / "pools").glob("*/kvtier-r9-model")), "the copies are removed"
    rendered = read_table(built / "evidence" / "R9" / "R9_table.csv")
    pd.testing.assert_frame_equal(rendered, measured.table, check_dtype=False)
    html = (built / "evidence" / "R9" / "R9.html").read_text()
    assert "6.2" in html and "9.3" in html and "names no baseline" in html


def test_every_server_start_was_forked_from_the_runs_one_import(built):
    """R9's too, as the test preset asks (r9.fork_server; by default R9 times whole starts), and its records say so."""
    from kvtier.stack import fork_server
    banner = "version 0.32"  # vLLM prints it once a start, after its arguments are parsed
    logs = {path: path.read_text(errors="replace") for path in (built / "raw_data" / "runs").rglob("*.log")}
    vllm = {path: text for path, text in logs.items() if banner in text}
    r9 = [path for path in vllm if "/R9/" in path.as_posix()]
    lmcache = {path: text for path, text in logs.items() if path.name == "lmcache.log"}
    assert len(vllm) >= 17 and len(r9) == 2 and len(lmcache) >= 10, sorted(vllm)
    for path, text in {**vllm, **lmcache}.items():
        assert "started without the fork server" not in text, (path, text.split("without the fork server")[1][:300])
        assert fork_server.STARTED_NOTE in text, path
    assert all(text.count(fork_server.STARTED_NOTE) == text.count(banner) for text in vllm.values())
    loads = [json.loads(line) for line in (built / "raw_data" / "runs" / "test" / "R9" / "loads.jsonl").open()]
    assert [load["start"] for load in loads] == ["forked"] * 4
    assert "every start forked from the run's fork server" in (built / "evidence" / "R9" / "R9.html").read_text()
    log = (built / "logs" / "fork_server.log").read_text()
    assert log.count("imported in") == 1, log[-2000:]
    assert not [pid for pid in processes_mentioning(str(built)) if b"kvtier.stack.fork_server"
                in Path(f"/proc/{pid}/cmdline").read_bytes()], "the fork server outlived the run"


def gated_copy(built: Path, tmp_path: Path, settings: dict) -> Path:
    """A copy of the built project whose gates stop the run on a FAIL, with `settings` over the test preset."""
    project = tmp_path / "kvtier"
    copy_built(built, project)
    (project / "gated.yaml").write_text(yaml.safe_dump({"gates": {"stop_on_fail": True, **settings}}))
    return project


def test_the_published_bill_of_materials_stops_the_run_at_G1_before_anything_is_measured(built, tmp_path):
    """The acceptance's command: the published setup's config on this machine."""
    project = tmp_path / "kvtier"
    copy_built(built, project)
    shutil.rmtree(project / "evidence")
    proc = run(["snakemake", "--cores", "2", "--configfile", "config/examples/mi308x.yaml"], cwd=project,
               check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    campaign = project / "raw_data" / "runs" / "mi308x"
    assert "G1 arrival acceptance FAILED" in out and "raw_data/runs/mi308x/gates/G1.json" in out
    for line in ("accelerators.devices.#: FAIL (8 x MI308X", "accelerators.devices.*.model: FAIL",
                 "software.torch_build: FAIL (ROCm 7.2)", "model.config_hash: FAIL"):
        assert line in out, line
    assert record_verdict(campaign / "gates" / "G1.json") == "FAIL" and not (campaign / "gates" / "G1.proceed").exists()
    # Nothing was measured: no run directory but the gates', no measurement finished, no measured page.
    assert sorted(p.name for p in campaign.iterdir()) == ["gates"]
    assert not [line for line in out.splitlines() if any(f"(Rule: {m}" in line for m in MEASUREMENTS)]
    # R6, the G1 page, may be rendered: it shows the failed bill.
    assert {p.name for p in (project / "evidence").iterdir()} <= {"R2", "audit", "R6"}


def record_verdict(path: Path) -> str:
    from kvtier.gates import record
    return record.read(path)["verdict"]


@pytest.mark.parametrize("gate, settings, failed_line", [
    ("G2", {"g2": {"max_cv": 1e-9}}, "unstable: cv"),
    ("G3", {"g3": {"ttft_reduction_min_pct": 99.9}}, "concurrency 2: TTFT p50 reduction %:"),
])
def test_a_failed_G2_or_G3_stops_what_comes_after_it(built, tmp_path, gate, settings, failed_line):
    project = gated_copy(built, tmp_path, settings)
    gates = project / "raw_data" / "runs" / "test" / "gates"
    later = gates / "G3.json"
    before = later.stat().st_mtime_ns
    proc = run(["snakemake", "--cores", "2", *PRESET, "gated.yaml"], cwd=project, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "FAILED" in out and failed_line in out
    assert record_verdict(gates / f"{gate}.json") == "FAIL" and not (gates / f"{gate}.proceed").exists()
    # Re-checking a gate measured nothing again, and what comes after a failed gate did not run.
    assert not [line for line in out.splitlines() if any(f"(Rule: {m}" in line for m in MEASUREMENTS)]
    if gate == "G2":
        assert later.stat().st_mtime_ns == before, "G3 ran after a failed G2"


def test_with_stop_on_fail_false_a_page_rendered_after_a_failed_G1_says_so(built, tmp_path):
    project = tmp_path / "kvtier"
    copy_built(built, project)
    (project / "go_on.yaml").write_text(yaml.safe_dump({"gates": {"stop_on_fail": False, "g1": {"expect": [
        {"field": "cpu.usable_cpus", "op": "at_least", "value": 4096, "why": "a machine this one is not"}]}}}))
    page = project / "evidence" / "R2_local" / "R2_local.html"
    proc = run(["snakemake", "--cores", "2", *PRESET, "go_on.yaml", "--", str(page.relative_to(project))],
               cwd=project)
    out = proc.stdout + proc.stderr
    # G1 was re-checked and failed; the page was re-rendered with the banner; nothing was measured again.
    assert "G1 FAIL: later stages run after a failed gate" in out
    assert not [line for line in out.splitlines() if any(f"(Rule: {m}" in line for m in MEASUREMENTS)]
    html = page.read_text()
    assert "Rendered after a gate that did not pass" in html and "G1 arrival acceptance: FAIL" in html
    assert "cpu.usable_cpus: FAIL (a machine this one is not)" in html
    manifest = json.loads((page.parent / "manifest.json").read_text())
    assert [g["gate"] for g in manifest["after_failed_gates"]] == ["G1"]


def test_snakemakes_report_holds_every_page_and_chart_with_its_caption(built, tmp_path):
    import zipfile

    from kvtier.evidence.catalog import BY_ID
    out = tmp_path / "report.zip"
    run(["snakemake", "--report", str(out), *PRESET], cwd=built)
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
        html = archive.read("report/report.html").decode()
    filed = sorted(Path(name).name for name in names if name.startswith("report/data/raw/"))
    pages = sorted(page.name for page in built.glob("evidence/*/*.html"))
    charts = ["R2_chart.png", "R2_chart.svg", "R9_chart.svg"]
    assert filed == sorted(pages + charts)
    for item in ("R1", "R2_local", "R3", "R5", "B", "G"):
        assert f"{item}: {BY_ID[item].title}" in html, item
    # Each caption names the rule and the notebook that made the file.
    assert html.count("Rendered by rule") >= len(filed)
    assert "notebooks/R5.ipynb" in html and "render_R5" in html


def test_compare_runs_reads_every_measured_comparison_of_a_real_run(built, tmp_path):
    """kvtier compare-runs on the test preset's evidence: every table it knows is there and parsed; one word made
    faster in one copy and slower in another is the one opposite comparison, and the command exits 1 for it."""
    from kvtier.package import compare_runs
    rows, absent = compare_runs.compare(built / "evidence", built / "evidence")
    assert absent == [] and len(rows) > 50 and {row.mark for row in rows} == {"same"}
    copies = []
    for word in ("faster", "slower"):
        copy = shutil.copytree(built / "evidence", tmp_path / word)
        table = copy / "R2_local" / "R2_local_vs_recompute.csv"
        frame = read_table(table)
        frame.loc[0, "ttft_verdict"] = word
        frame.to_csv(table, index=False)
        copies.append(copy)
    marks = compare_runs.counts(compare_runs.compare(*copies)[0])
    assert marks["opposite"] == 1 and marks["same"] == len(rows) - 1, marks
    out = run(["kvtier", "compare-runs", *map(str, copies)], cwd=tmp_path, check=False)
    assert out.returncode == 1 and "1 opposite" in out.stdout, out.stdout[-2000:]


@pytest.mark.skipif(emulated.unavailable() is not None, reason=f"emulated tiers: {emulated.unavailable()}")
def test_with_emulation_on_the_sweep_runs_on_capped_devices_renders_S_and_leaves_nothing(built, tmp_path):
    """The config's switch reaches the jobs: with `emulation` on, the platform probe and the test preset's two-cap
    sweep (rule sweep_run) mount the capped devices and join their cgroup themselves, the records hold the caps in
    force, the slow cap's resumes wait on the device and the fast cap's do not, page S renders, and no mount, loop
    device or cgroup is left."""
    project = copy_built(built, tmp_path / "kvtier")
    caps = {"local_disk": 200_000_000, "shared_pool": 400_000_000}
    tiers = ", ".join(f"{name}: {{size: 128MiB, read: {cap}B/s, write: {cap}B/s}}" for name, cap in caps.items())
    for name in caps:  # what the tier runs left there: a device is mounted on an empty directory only
        shutil.rmtree(project / "pools" / name, ignore_errors=True)
    gates = project / "raw_data" / "runs" / "test" / "gates"
    run(["snakemake", "raw_data/runs/test/gates/platform.json", "evidence/S/S.html", "--cores", "2", "--forcerun",
         "platform",
         "--config", f"emulation={{enabled: true, tiers: {{{tiers}}}}}", *PRESET], cwd=project)
    platform = json.loads((gates / "platform.json").read_text())
    for name, cap in caps.items():
        assert platform["emulation"]["tiers"][name]["in_force"] == {"read_bps": cap, "write_bps": cap}
        assert platform["storage"][name]["mount"] == {**platform["storage"][name]["mount"],
                                                     "fstype": "ext4", "mount_point": f"pools/{name}"}
        assert not os.path.ismount(project / "pools" / name)
        assert (project / "pools" / f"{name}.img").is_file()  # the tier's data, kept for the next job
    sweep_dir = project / "raw_data" / "runs" / "test" / "sweep"
    rows = {r["run"]: r for r in map(json.loads, (sweep_dir / "sweep.jsonl").read_text().splitlines())}
    slow, fast = rows["cap-10000000"], rows["cap-400000000"]
    print("sweep TTFT p50: " + ", ".join(f"{k} {r['ttft_p50_s']:.3f} s" for k, r in rows.items()))
    assert (slow["read_bps_in_force"], fast["read_bps_in_force"]) == (10_000_000, 400_000_000)
    # 2 x 1024 tokens x 4 KiB of KV in flight: about 0.8 s through 10 MB/s, 20 ms through 400 MB/s.
    assert slow["ttft_p50_s"] > 2 * fast["ttft_p50_s"], rows
    for row in (slow, fast, rows["dram"]):
        assert row["failed"] == 0 and row["cached_tokens"] > 0, row  # the KV came from LMCache, not a prefill
    assert rows["recompute"]["cached_tokens"] == 0
    assert json.loads((sweep_dir / "run.json").read_text())["emulation"]["tiers"]["local_disk"]["in_force"] == {
        "read_bps": caps["local_disk"], "write_bps": caps["local_disk"]}  # the configured cap, restored after
    for name in ("S.html", "S_comparisons.csv", "S_crossovers.csv", "S_chart.svg", "manifest.json"):
        assert (project / "evidence" / "S" / name).is_file(), name
    assert not (project / emulated.DEFAULT_STATE).exists()
    assert not emulated.throttle().group("tiers").exists()
    # With both L2 tiers emulated, G3 is the published gate (gates.g3.emulated): the pool against the local disk.
    for enabled, baseline in (("true", "local_disk"), ("false", "recompute")):
        # (by modification time only: G1's note says whether the tiers are emulated, and a G1 rerun would hide G3
        # behind the campaign's checkpoint in a dry run)
        planned = run(["snakemake", "raw_data/runs/test/gates/G3.json", "-n", "--cores", "1", "--forcerun",
                       "gate_g3", "--rerun-triggers", "mtime", "--config",
                       f"emulation={{enabled: {enabled}, tiers: {{{tiers}}}}}", *PRESET], cwd=project).stdout
        assert f"G3 main gate: shared_pool against {baseline}" in planned, planned[-2000:]
