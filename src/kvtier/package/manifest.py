"""R8, the package itself: one manifest with the sha256 of every file the evidence rests on, and its verifier.

The manifest covers the raw data, the patches, the lock files, the workflow, the notebooks, the config, the code
(the load client, the probes, the orchestration), the LMCache build records and every file under evidence/, all
but itself. It holds no date or host, so that the same tree always gives the same manifest, byte for byte.
Every evidence page shows the manifest's sha256 in a stamp written after the manifest is computed
(kvtier.core.hashing: a page is hashed with its stamp emptied); `verify` checks each stamp too.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..core.atomic import write_bytes
from ..core.errors import KvtierError
from ..core.hashing import PAGE_SUFFIXES, STAMP, STAMP_CLOSE, STAMP_OPEN, manifest_digest, page_stamps

FORMAT = "kvtier-package-manifest/1"
MANIFEST_NAME = "package_manifest.json"  # in the evidence folder
# What the package is made of, relative to the project root; and the evidence folder (config's evidence_dir).
ROOT_FILES = ("README.md", "Snakefile", "Makefile", "pyproject.toml", "environment.yml", "requirements.lock")
TREES = ("config", "examples", "notebooks", "patches", "probes", "profiles", "raw_data", "src", "workflow")
BUILD_RECORDS = "build/lmcache/*/build.json"
# Never part of it: caches, and the hidden temporary names atomic writes use before their rename.
SKIPPED_DIRS = ("__pycache__", ".ipynb_checkpoints", ".snakemake", ".pytest_cache", "*.egg-info")
SKIPPED_FILES = (".tmp-*", "*.pyc")


@dataclass(frozen=True)
class Finding:
    kind: str   # MODIFIED, MISSING or EXTRA
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind:8} {self.path}: {self.detail}"


def _skipped(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def manifest_path(evidence_dir: str = "evidence") -> str:
    return f"{Path(evidence_dir).as_posix()}/{MANIFEST_NAME}"


def package_files(root: str | os.PathLike, evidence_dir: str = "evidence") -> list[str]:
    """Every path (relative, POSIX) the manifest covers that exists under `root`, sorted; the manifest excluded."""
    root = Path(root)
    if Path(evidence_dir).is_absolute() or ".." in Path(evidence_dir).parts:
        raise KvtierError(f"evidence folder {evidence_dir!r}: must be a relative path inside the project")
    found = [name for name in ROOT_FILES if (root / name).is_file()]
    found += sorted(p.relative_to(root).as_posix() for p in root.glob(BUILD_RECORDS) if p.is_file())
    for tree in (*TREES, evidence_dir):
        for folder, dirs, files in os.walk(root / tree):
            dirs[:] = sorted(d for d in dirs if not _skipped(d, SKIPPED_DIRS))
            # A link to a folder (profiles/default) is recorded as the link, as links to files are.
            links = [d for d in dirs if (Path(folder) / d).is_symlink()]
            dirs[:] = [d for d in dirs if d not in links]
            files = [*files, *links]
            for name in files:
                if not _skipped(name, SKIPPED_FILES):
                    found.append((Path(folder) / name).relative_to(root).as_posix())
    return sorted(set(found) - {manifest_path(evidence_dir)})


def record(path: Path) -> dict[str, object]:
    """A file's entry: a link's target, or a file's digest and size."""
    if path.is_symlink():
        return {"link": os.readlink(path)}
    digest, size = manifest_digest(path)
    return {"sha256": digest, "bytes": size}


def build(root: str | os.PathLike, evidence_dir: str = "evidence") -> dict:
    root = Path(root)
    return {"format": FORMAT, "tool": f"kvtier {__version__}", "evidence_dir": Path(evidence_dir).as_posix(),
            "files": {rel: record(root / rel) for rel in package_files(root, evidence_dir)}}


def encode(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def pages(root: Path, files, evidence_dir: str) -> list[str]:
    return [rel for rel in files if rel.startswith(f"{Path(evidence_dir).as_posix()}/") and Path(rel).suffix in PAGE_SUFFIXES
            and not (root / rel).is_symlink()]


def stamp(path: Path, digest: str) -> None:
    """Write `digest` into the page's stamps; its mtime is kept, so that Snakemake does not take a stamped page for
    a newer input of the rules that read it (the stamp is not part of the page's digest)."""
    data = path.read_bytes()
    stamped = STAMP.sub(STAMP_OPEN + digest.encode() + STAMP_CLOSE, data)
    if stamped != data:
        times = path.stat()
        write_bytes(path, stamped)
        os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))


def write(root: str | os.PathLike, evidence_dir: str = "evidence") -> tuple[Path, str]:
    """Compute the manifest, stamp every page with its sha256, then write it (its presence seals the package).
    Returns its path and its sha256. A page without a stamp (rendered by an older kvtier) is refused, nothing
    written."""
    root = Path(root)
    manifest = build(root, evidence_dir)
    data = encode(manifest)
    digest = hashlib.sha256(data).hexdigest()
    listed = pages(root, manifest["files"], evidence_dir)
    unstamped = [rel for rel in listed if not page_stamps((root / rel).read_bytes())]
    if unstamped:
        raise KvtierError(f"{root / unstamped[0]}: the page has no place for the manifest's hash (rendered before "
                          f"kvtier stamped its pages; render it again)"
                          + (f"; {len(unstamped) - 1} more: {', '.join(unstamped[1:4])}" if len(unstamped) > 1 else ""))
    for rel in listed:
        stamp(root / rel, digest)
    return write_bytes(root / manifest_path(evidence_dir), data), digest


def load(root: str | os.PathLike, manifest_file: str | os.PathLike | None = None) -> tuple[dict, str]:
    """The manifest and its sha256; a clear error for a missing or malformed one."""
    path = Path(manifest_file) if manifest_file else Path(root) / manifest_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KvtierError(f"{path}: no package manifest (`kvtier manifest` writes it; `make evidence` does too)") \
            from None
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise KvtierError(f"{path}: not a package manifest: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise KvtierError(f"{path}: key 'format' must be {FORMAT!r}, not "
                          f"{manifest.get('format') if isinstance(manifest, dict) else manifest!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, dict) and ({"sha256", "bytes"} <= v.keys() or "link" in v)
                                              for v in files.values()):
        raise KvtierError(f"{path}: key 'files' must map each path to its sha256 and bytes (or its link)")
    if not isinstance(manifest.get("evidence_dir"), str):
        raise KvtierError(f"{path}: key 'evidence_dir' must name the evidence folder")
    return manifest, hashlib.sha256(data).hexdigest()


def verify(root: str | os.PathLike, manifest_file: str | os.PathLike | None = None) -> tuple[list[Finding], int]:
    """Every MODIFIED, MISSING and EXTRA path of the package against its manifest, and how many files were checked.
    A page whose stamp does not show this manifest's sha256 is MODIFIED."""
    root = Path(root)
    manifest, digest = load(root, manifest_file)
    recorded: dict[str, dict] = manifest["files"]
    evidence_dir = manifest["evidence_dir"]
    present = set(package_files(root, evidence_dir))
    findings, missing = [], {}
    for rel, entry in sorted(recorded.items()):
        path = root / rel
        if rel not in present:
            findings.append(Finding("MISSING", rel, "in the manifest, not in the package"))
            missing[entry.get("sha256") or entry.get("link")] = rel
            continue
        now = record(path)
        if now != entry:
            findings.append(Finding("MODIFIED", rel, _difference(entry, now)))
        elif pages(root, [rel], evidence_dir):
            shown = page_stamps(path.read_bytes())
            if shown != [digest] * len(shown) or not shown:
                findings.append(Finding("MODIFIED", rel, f"the page shows manifest {', '.join(shown) or 'no hash'}, "
                                                         f"not this one's {digest}"))
    for rel in sorted(present - recorded.keys()):
        now = record(root / rel)
        twin = missing.get(now.get("sha256") or now.get("link"))
        findings.append(Finding("EXTRA", rel, "not in the manifest" + (f" (the content of missing {twin})"
                                                                        if twin else "")))
    return findings, len(present | recorded.keys())


def _difference(recorded: dict, now: dict) -> str:
    if "link" in recorded or "link" in now:
        return f"link {recorded.get('link', '(a file)')} → {now.get('link', '(a file)')}"
    if recorded["bytes"] != now["bytes"]:
        return f"{recorded['bytes']} bytes → {now['bytes']} bytes"
    return f"sha256 {recorded['sha256'][:16]}… → {now['sha256'][:16]}… (same size)"
