"""R8, the package itself: the manifest catches any change (tested by damage), and the archive is
byte-reproducible and verifies where it is unpacked. The real pipeline's manifest is checked in test_workflow."""

import hashlib
import json
import random
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from kvtier.core.errors import KvtierError
from kvtier.core.hashing import page_stamps, stamp_element
from kvtier.package import archive, manifest

from conftest import copy_project


def page(title: str) -> str:
    return (f"<!DOCTYPE html><html><body><h1>{title}</h1><p>median 1.93 [1.42, 2.87]</p>"
            f"<footer>package manifest sha256: {stamp_element()}</footer></body></html>\n")


@pytest.fixture
def package(tmp_path) -> Path:
    """The project's own files, plus evidence pages and raw runs as the pipeline leaves them."""
    root = copy_project(tmp_path / "kvtier")
    for item in ("R1", "R2", "B", "gates"):
        (root / "evidence" / item).mkdir(parents=True, exist_ok=True)
        (root / "evidence" / item / f"{item}.html").write_text(page(item))
        (root / "evidence" / item / f"{item}_table.csv").write_text("concurrency,ttft_p50_s\n8,0.41\n16,0.73\n")
    (root / "evidence" / "index.html").write_text(page("index"))
    run = root / "raw_data" / "runs" / "local" / "round-1" / "dram"
    run.mkdir(parents=True)
    (run / "requests.jsonl").write_text("".join(json.dumps({"request_id": i, "ttft_ns": 1000 + i}) + "\n"
                                                for i in range(50)))
    (run / "run.json").write_text('{"status": "complete"}\n')
    (root / "build" / "lmcache" / "patched").mkdir(parents=True)
    (root / "build" / "lmcache" / "patched" / "build.json").write_text('{"version": "0.5.6+kvtier.0123456789"}\n')
    manifest.write(root)
    return root


def kvtier(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvtier", *args], cwd=cwd, capture_output=True, text=True)


def test_an_untouched_package_verifies_and_every_page_shows_the_manifests_hash(package):
    started = time.perf_counter()
    proc = kvtier("verify", cwd=package)
    print(f"kvtier verify: {time.perf_counter() - started:.2f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recorded, digest = manifest.load(package)
    assert "files match the manifest" in proc.stdout
    for rel in ("Snakefile", "requirements.lock", "patches/README.md", "raw_data/published/R2_readings.csv",
                "raw_data/runs/local/round-1/dram/requests.jsonl", "build/lmcache/patched/build.json",
                "evidence/R2/R2.html", "evidence/index.html", "workflow/rules/index.smk", "src/kvtier/cli.py"):
        assert rel in recorded["files"], rel
    assert not any("__pycache__" in rel or rel.startswith("tests/") for rel in recorded["files"])
    for html in package.glob("evidence/**/*.html"):
        assert page_stamps(html.read_bytes()) == [digest], html
    # The same tree gives the same manifest, byte for byte (no date, no host in it).
    before = (package / manifest.manifest_path()).read_bytes()
    manifest.write(package)
    assert (package / manifest.manifest_path()).read_bytes() == before


def test_one_byte_flipped_in_each_of_50_files_is_found_and_named(package):
    files = sorted(manifest.load(package)[0]["files"])
    rng = random.Random(20261203)
    damaged = rng.sample([rel for rel in files if (package / rel).stat().st_size > 0
                          and not (package / rel).is_symlink()], 50)
    for rel in damaged:
        data = bytearray((package / rel).read_bytes())
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        (package / rel).write_bytes(bytes(data))
    findings, checked = manifest.verify(package)
    assert checked == len(files)
    assert sorted(f.path for f in findings) == sorted(damaged)
    assert {f.kind for f in findings} == {"MODIFIED"}


def test_truncated_renamed_added_and_deleted_files_are_each_named(package):
    readings = "raw_data/published/R2_readings.csv"
    (package / readings).write_text((package / readings).read_text()[:-20])
    (package / "evidence/R1/R1_table.csv").write_bytes(b"")
    jsonl = package / "raw_data/runs/local/round-1/dram/requests.jsonl"
    jsonl.rename(jsonl.with_name("requests.old.jsonl"))
    (package / "evidence/R2/extra.png").write_bytes(b"\x89PNG")
    (package / "config/examples/mi308x.yaml").unlink()
    findings = {(f.kind, f.path): f.detail for f in manifest.verify(package)[0]}
    assert set(findings) == {
        ("MODIFIED", readings), ("MODIFIED", "evidence/R1/R1_table.csv"),
        ("MISSING", "raw_data/runs/local/round-1/dram/requests.jsonl"),
        ("EXTRA", "raw_data/runs/local/round-1/dram/requests.old.jsonl"),
        ("EXTRA", "evidence/R2/extra.png"), ("MISSING", "config/examples/mi308x.yaml")}
    assert "bytes →" in findings[("MODIFIED", readings)]
    assert "the content of missing raw_data/runs/local/round-1/dram/requests.jsonl" in \
        findings[("EXTRA", "raw_data/runs/local/round-1/dram/requests.old.jsonl")]


def test_one_digit_changed_in_a_published_reading_fails_verify_naming_the_file(package):
    readings = package / "raw_data/published/R2_readings.csv"
    readings.write_text(readings.read_text().replace("local_disk,8,10.17", "local_disk,8,10.18"))
    proc = kvtier("verify", cwd=package)
    assert proc.returncode == 1
    assert "MODIFIED raw_data/published/R2_readings.csv: sha256" in proc.stdout
    assert "1 finding(s)" in proc.stderr and "1 MODIFIED" in proc.stderr


def test_a_page_that_shows_another_hash_or_none_is_modified(package):
    _, digest = manifest.load(package)
    r1, r2 = package / "evidence/R1/R1.html", package / "evidence/R2/R2.html"
    other = hashlib.sha256(b"another manifest").hexdigest()
    r1.write_text(r1.read_text().replace(digest, other))  # the page's digest is unchanged: only its stamp differs
    r2.write_text(r2.read_text().replace('<code class="kvtier-r8">', "<code>"))
    findings = {f.path: f for f in manifest.verify(package)[0]}
    assert set(findings) == {"evidence/R1/R1.html", "evidence/R2/R2.html"}
    assert f"shows manifest {other}" in findings["evidence/R1/R1.html"].detail


def test_a_bad_manifest_is_refused_naming_the_file_and_key(package):
    path = package / manifest.manifest_path()
    path.write_text("{not json")
    with pytest.raises(KvtierError, match="package_manifest.json: not a package manifest"):
        manifest.verify(package)
    path.write_text(json.dumps({"format": "other/1", "files": {}}))
    with pytest.raises(KvtierError, match="key 'format' must be 'kvtier-package-manifest/1'"):
        manifest.verify(package)
    path.unlink()
    proc = kvtier("verify", cwd=package)
    assert proc.returncode == 2 and "no package manifest" in proc.stderr


def test_a_page_without_a_stamp_is_refused_and_nothing_written(package):
    (package / "evidence/R9").mkdir()
    (package / "evidence/R9/R9.html").write_text("<html><body>old page</body></html>")
    before = (package / manifest.manifest_path()).read_bytes()
    with pytest.raises(KvtierError, match="R9.html: the page has no place for the manifest's hash"):
        manifest.write(package)
    assert (package / manifest.manifest_path()).read_bytes() == before


def test_the_archive_is_byte_reproducible_and_verifies_where_it_is_unpacked(package, tmp_path):
    first, digest = archive.build(package, tmp_path / "a")
    (package / "evidence/R2/R2.html").touch()  # a later mtime changes nothing in the archive
    proc = kvtier("package", "--out-dir", str(tmp_path / "b"), cwd=package)
    assert proc.returncode == 0, proc.stderr
    second = tmp_path / "b" / first.name
    assert first.name == f"kvtier-evidence-{archive.__version__}-{digest[:12]}.tar.gz"
    assert hashlib.sha256(first.read_bytes()).hexdigest() == hashlib.sha256(second.read_bytes()).hexdigest()
    with tarfile.open(first) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(m.name for m in members)
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(archive.FIXED_MTIME, 0, 0, "", "")}
    unpacked = archive.unpack(first, tmp_path / "unpacked")
    assert unpacked == tmp_path / "unpacked" / first.name.removesuffix(".tar.gz")
    assert manifest.verify(unpacked)[0] == []
    assert (unpacked / "profiles" / "default").is_symlink()


def test_an_archive_member_outside_its_folder_is_refused(tmp_path):
    bad = tmp_path / "kvtier-evidence-0-0.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, __import__("io").BytesIO(b"hi"))
    with pytest.raises(KvtierError, match="member '../escaped.txt' is not a file of a package"):
        archive.unpack(bad, tmp_path / "unpacked")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "unpacked").exists()


def test_a_package_that_does_not_verify_is_not_archived(package, tmp_path):
    (package / "raw_data/published/claims.yaml").write_text("changed\n")
    with pytest.raises(KvtierError, match=r"(?s)1 finding\(s\).*MODIFIED raw_data/published/claims.yaml"):
        archive.build(package, tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []


@pytest.mark.parametrize("command", [["tier-run", "dram"], ["r9-loads"], ["soak"]], ids=lambda c: c[0])
def test_a_measuring_command_refuses_when_the_run_only_renders(tmp_path, command):
    """`measure: false` (a replay of a package's raw runs) exports KVTIER_NO_MEASURE to every job: a measurement
    that would run all the same (its run is missing) stops, naming the run, before anything is started."""
    import os
    env = {**os.environ, "KVTIER_NO_MEASURE": "1"}
    run_dir = tmp_path / "raw_data" / "runs" / "local" / "R9"
    proc = subprocess.run([sys.executable, "-m", "kvtier", *command, "--run-dir", str(run_dir), "--settings", "{}"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 2, proc.stderr
    assert f"`kvtier {command[0]}` would measure {run_dir}" in proc.stderr and "measure: false" in proc.stderr
    assert not run_dir.exists()
