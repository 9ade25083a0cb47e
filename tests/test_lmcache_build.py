"""The LMCache build: the pinned upstream wheel plus patches/*.patch, checked, tagged, reproducible, all or nothing."""

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from kvtier.core.errors import KvtierError
from kvtier.core.hashing import sha256_file
from kvtier.stack import lmcache_build

from conftest import ROOT, run

PATCHES = sorted((ROOT / "patches").glob("*.patch"))


@pytest.fixture(scope="module")
def patched(lmcache_builds):
    return lmcache_builds["patched"]


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_the_patched_build_is_tagged_recorded_and_passes_its_own_tests(patched):
    out, record = patched
    assert PATCHES, "patches/ holds the parallel-read patch"
    assert record["version"] == f"0.5.6+{record['patch_set']}" and record["patch_set"].startswith("kvtier.")
    assert record["artifact"]["sha256"] == sha256_file(out / record["artifact"]["file"])
    assert [p["file"] for p in record["patches"]] == [p.name for p in PATCHES]
    env = {**os.environ, "PYTHONPATH": str(out / "site")}
    # In one Python (torch and LMCache load once): the build's version as installed and as imported, the patched
    # adapter's default bound, then the unit tests the patches add, run against the build (upstream's pytest style).
    tests = out / "tests"
    script = ("import importlib.metadata as m, sys, lmcache, pytest; "
              "from lmcache.v1.distributed.l2_adapters import fs_l2_adapter as f; "
              "print('versions', m.version('lmcache'), lmcache.__version__, f.DEFAULT_LOAD_CONCURRENCY, flush=True); "
              f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-c', {os.devnull!r}, '--rootdir', "
              f"{str(tests)!r}, {str(tests)!r}]))")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=tests)
    versions = next((line.split()[1:] for line in done.stdout.splitlines() if line.startswith("versions ")), None)
    assert versions == [record["version"], record["version"], "16"], done.stdout[-2000:] + done.stderr[-2000:]
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_build_is_reproducible_and_the_unpatched_variant_is_upstream_itself(upstream_wheel, patched,
                                                                                 tmp_path):
    # Built again, inside a git checkout this time (as build/ is inside the project's own): the same bytes.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    again = lmcache_build.build(upstream_wheel, lmcache_build.Upstream(), PATCHES, tmp_path / "build" / "again")
    assert again["artifact"]["sha256"] == patched[1]["artifact"]["sha256"]
    assert "DEFAULT_LOAD_CONCURRENCY" in (tmp_path / "build" / "again" / "site" / "lmcache" / "v1" / "distributed"
                                         / "l2_adapters" / "fs_l2_adapter.py").read_text()
    plain = lmcache_build.build(upstream_wheel, lmcache_build.Upstream(), [], tmp_path / "upstream")
    assert plain["patch_set"] == "none" and plain["version"] == "0.5.6"
    assert plain["artifact"]["sha256"] == lmcache_build.Upstream().sha256


def test_a_patch_that_does_not_apply_stops_the_build_naming_file_and_hunk(upstream_wheel, tmp_path):
    broken = tmp_path / "0002-broken.patch"
    text = PATCHES[0].read_text()
    broken.write_text(text.replace("        self._use_odirect = config.use_odirect\n",
                                   "        self._use_odirect = config.use_odirect_changed\n", 1))
    out = tmp_path / "builds" / "patched"
    with pytest.raises(KvtierError) as caught:
        lmcache_build.build(upstream_wheel, lmcache_build.Upstream(), [broken], out)
    message = str(caught.value)
    assert "0002-broken.patch" in message
    assert "patch failed: lmcache/v1/distributed/l2_adapters/fs_l2_adapter.py:" in message
    assert not out.exists() and leftovers(out.parent) == []


def test_a_checksum_mismatch_stops_the_build_before_anything_is_written(upstream_wheel, tmp_path):
    wrong = replace(lmcache_build.Upstream(), sha256="0" * 64)
    out = tmp_path / "builds" / "patched"
    with pytest.raises(KvtierError, match="is not the pinned 0000"):
        lmcache_build.build(upstream_wheel, wrong, PATCHES, out)
    assert not out.parent.exists()
    proc = run(["kvtier", "lmcache-build", "--out", str(out), "--upstream-wheel", str(upstream_wheel),
                "--upstream-sha256", "0" * 64], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "refusing to build from it" in proc.stderr
    assert not out.parent.exists()


def test_a_tampered_download_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    upstream = lmcache_build.Upstream()
    (cache / upstream.filename).write_bytes(b"not the release")
    with pytest.raises(KvtierError, match="refusing to build from it"):
        lmcache_build.fetch(upstream, cache)


def test_the_config_pins_the_same_upstream_release_as_the_code():
    from kvtier.core import config
    pinned = config.validate({}, "defaults")["lmcache"]["upstream"]
    assert pinned == {"version": lmcache_build.Upstream().version, "filename": lmcache_build.Upstream().filename,
                      "sha256": lmcache_build.Upstream().sha256}
