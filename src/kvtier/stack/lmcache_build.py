"""A reproducible LMCache build: the pinned upstream wheel (sha256-checked) plus patches/*.patch, in order.

    build/lmcache/<variant>/
        build.json        upstream artifact + sha256, each patch + sha256, patch set, built artifact + sha256
        dist/<wheel>      the built wheel (upstream's own file for the unpatched variant)
        site/             the wheel installed with `pip install --target`: put first on PYTHONPATH of the
                          LMCache server to run this build (kvtier's own venv keeps the upstream release)
        tests/            the tests the patches add, to run against site/

Patches are `git format-patch` files against the source tree (paths `lmcache/...`, `tests/...`). The wheel ships
the package's Python sources next to its compiled extensions, so a patch to Python code applies to the wheel as
it would to the sdist, and nothing is compiled. The patched build's version gets a local tag naming the patch
set (`0.5.6+kvtier.<10 hex of the patches' sha256>`), which the platform probe records.

Bad input stops the build and names it: a checksum mismatch on the upstream artifact, a patch that does not
apply (git's message names the file and the hunk's line). The variant directory appears whole or not at all.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.atomic import write_text
from ..core.errors import KvtierError
from ..core.hashing import sha256_file

BUILD_FILE = "build.json"
LOCAL_TAG = "kvtier"


@dataclass(frozen=True)
class Upstream:
    """The pinned upstream release: one wheel file of it, by name and sha256."""
    version: str = "0.5.6"
    filename: str = "lmcache-0.5.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    sha256: str = "14530ff72b96056e894c9b8dc70c10d019e7802799bbfde9cec298700b799194"


def patch_set_id(patches: list[Path]) -> str:
    """Names a patch set by its content (file names and bytes, in order); 'none' when empty."""
    if not patches:
        return "none"
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes() + b"\0")
    return f"{LOCAL_TAG}.{digest.hexdigest()[:10]}"


def fetch(upstream: Upstream, cache_dir: str | os.PathLike) -> Path:
    """The upstream wheel in `cache_dir`, downloaded with pip (its configured indexes) unless already there;
    refused unless its sha256 is the pinned one."""
    cache_dir = Path(cache_dir)
    target = cache_dir / upstream.filename
    if not target.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                                   "--dest", tmp, f"lmcache=={upstream.version}"],
                                  capture_output=True, text=True)
            got = Path(tmp) / upstream.filename
            if not got.is_file():
                found = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
                raise KvtierError(f"could not download {upstream.filename} (pip exited {done.returncode}, "
                                  f"got {found}): {done.stderr.strip()[-500:]}")
            verify(got, upstream)
            os.replace(got, target)
    verify(target, upstream)
    return target


def verify(path: Path, upstream: Upstream) -> None:
    actual = sha256_file(path)
    if actual != upstream.sha256:
        raise KvtierError(f"{path}: sha256 {actual} is not the pinned {upstream.sha256} of {upstream.filename}; "
                          "refusing to build from it")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _apply(patch: Path, tree: Path) -> None:
    """Apply one format-patch to `tree`, all or nothing (git apply checks every hunk before writing).

    Inside a git work tree (a build directory under a checkout), git apply would take the patch's paths as
    relative to that repository's top and silently skip those outside the current directory; the ceiling
    keeps git from finding any repository above `tree`, so the paths are `tree`'s."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.resolve().parent)}
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    done = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch.resolve())], cwd=tree,
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise KvtierError(f"patch {patch} does not apply to the upstream release: {done.stderr.strip()}")


def _digests(tree: Path) -> dict[str, str]:
    return {p.relative_to(tree).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in tree.rglob("*") if p.is_file()}


def _check_applied(patch: Path, before: dict[str, str], after: dict[str, str]) -> None:
    """Every file the patch names changed: a patch that 'applied' without touching them was skipped."""
    named = {line.split(" b/", 1)[1].strip() for line in patch.read_text(errors="replace").splitlines()
             if line.startswith("diff --git a/")}
    unchanged = sorted(name for name in named if before.get(name) == after.get(name))
    if unchanged:
        raise KvtierError(f"patch {patch} left {', '.join(unchanged)} unchanged: it was not applied")


def _retag(tree: Path, old: str, new: str) -> None:
    """Give the unpacked wheel in `tree` the version `new`: metadata, dist-info name, lmcache/_version.py."""
    info = tree / f"lmcache-{old}.dist-info"
    metadata = info / "METADATA"
    lines = metadata.read_text(encoding="utf-8").splitlines(keepends=True)
    metadata.write_text("".join(f"Version: {new}\n" if line.startswith("Version: ") else line for line in lines),
                        encoding="utf-8")
    version_py = tree / "lmcache" / "_version.py"
    if version_py.is_file():
        text = version_py.read_text(encoding="utf-8")
        version_py.write_text(text.replace(f"version = '{old}'", f"version = '{new}'"), encoding="utf-8")
    info.rename(tree / f"lmcache-{new}.dist-info")


def _pack(tree: Path, version: str, wheel: Path) -> None:
    """Zip `tree` as a wheel with a fresh RECORD (every file's sha256 and size)."""
    info = f"lmcache-{version}.dist-info"
    files = sorted(p for p in tree.rglob("*") if p.is_file() and p.relative_to(tree).as_posix() != f"{info}/RECORD")
    rows = []
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in files:
            name = path.relative_to(tree).as_posix()
            data = path.read_bytes()
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)  # reproducible
            rows.append([name, _record_hash(data), str(len(data))])
        rows.append([f"{info}/RECORD", "", ""])
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        zf.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0)), out.getvalue())


def build(upstream_wheel: str | os.PathLike, upstream: Upstream, patches: list[str | os.PathLike],
          out_dir: str | os.PathLike) -> dict:
    """Build `out_dir` (a variant directory, see the module docstring) from the verified upstream wheel and
    `patches` in the order given; returns build.json's content."""
    upstream_wheel, out_dir = Path(upstream_wheel), Path(out_dir)
    patches = [Path(p) for p in patches]
    verify(upstream_wheel, upstream)
    for patch in patches:
        if not patch.is_file():
            raise KvtierError(f"patch {patch}: no such file")
    patch_set = patch_set_id(patches)
    version = upstream.version if not patches else f"{upstream.version}+{patch_set}"
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}-"))
    try:
        tree = staging / "tree"
        with zipfile.ZipFile(upstream_wheel) as zf:
            zf.extractall(tree)
        for patch in patches:
            before = _digests(tree)
            _apply(patch, tree)
            _check_applied(patch, before, _digests(tree))
        (staging / "dist").mkdir()
        if patches:
            if (tree / "tests").exists():  # what the patches add to the test suite stays beside the build
                shutil.move(str(tree / "tests"), str(staging / "tests"))
            _retag(tree, upstream.version, version)
            wheel = staging / "dist" / upstream.filename.replace(f"-{upstream.version}-", f"-{version}-", 1)
            _pack(tree, version, wheel)
        else:
            wheel = staging / "dist" / upstream.filename
            shutil.copy2(upstream_wheel, wheel)
        shutil.rmtree(tree)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
                               "--target", str(staging / "site"), str(wheel)], capture_output=True, text=True)
        if done.returncode != 0:
            raise KvtierError(f"installing {wheel.name} failed: {done.stderr.strip()[-800:]}")
        record = {
            "upstream": {**asdict(upstream)},
            "patches": [{"file": p.name, "sha256": sha256_file(p)} for p in patches],
            "patch_set": patch_set,
            "version": version,
            "artifact": {"file": f"dist/{wheel.name}", "sha256": sha256_file(wheel)},
            "site": "site",
        }
        write_text(staging / BUILD_FILE, json.dumps(record, indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
        return record
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def read(variant_dir: str | os.PathLike) -> dict:
    from ..core.config import read_json
    return read_json(Path(variant_dir) / BUILD_FILE, "LMCache build record")
