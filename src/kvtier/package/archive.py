"""`kvtier package`: the package as one file, dist/kvtier-evidence-<version>-<hash>.tar.gz, byte for byte the same
whenever the tree matches the same manifest: entries sorted, one fixed mtime, uid, gid and owner names, modes
normalised to 0644 or 0755, and a gzip header without a name or a date. It holds exactly the manifest's files and
the manifest, under one folder named like the archive, and is written only from a tree that verifies."""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
from pathlib import Path

from .. import __version__
from ..core.atomic import atomic_path
from ..core.errors import KvtierError
from . import manifest as package_manifest

# 2000-01-01T00:00:00Z: any fixed instant does; a date of 0 makes some tools warn.
FIXED_MTIME = 946684800


def archive_name(digest: str) -> str:
    return f"kvtier-evidence-{__version__}-{digest[:12]}"


def _add(tar: tarfile.TarFile, root: Path, rel: str, prefix: str) -> None:
    path = root / rel
    info = tarfile.TarInfo(f"{prefix}/{rel}")
    info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
    if path.is_symlink():
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
        tar.addfile(info)
        return
    status = path.stat()
    info.size, info.mode = status.st_size, 0o755 if status.st_mode & stat.S_IXUSR else 0o644
    with open(path, "rb") as f:
        tar.addfile(info, f)


def unpack(archive: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Unpack a package archive into `dest`; returns the package's folder there. A member that would land outside
    `dest` is refused before anything is written (tarfile's own "tar" filter, where this Python has it, 3.11.4 and
    later, also strips what a package archive never holds)."""
    archive, dest = Path(archive), Path(dest)
    root = dest.resolve()
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            target = (root / member.name).resolve()
            if not target.is_relative_to(root) or not (member.isfile() or member.issym() or member.isdir()):
                raise KvtierError(f"{archive}: member {member.name!r} is not a file of a package under {dest}")
        tar.extractall(dest, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    return dest / archive.name.removesuffix(".tar.gz")


def build(root: str | os.PathLike, out_dir: str | os.PathLike = "dist",
          manifest_file: str | os.PathLike | None = None) -> tuple[Path, str]:
    """Write the archive of the package at `root` into `out_dir`; returns its path and the manifest's sha256."""
    root = Path(root)
    findings, _ = package_manifest.verify(root, manifest_file)
    if findings:
        shown = "\n  ".join(map(str, findings[:10]))
        raise KvtierError(f"{root}: the package does not match its manifest ({len(findings)} finding(s)); "
                          f"run `kvtier verify` and rebuild the evidence first:\n  {shown}")
    manifest, digest = package_manifest.load(root, manifest_file)
    name = archive_name(digest)
    paths = sorted([*manifest["files"], package_manifest.manifest_path(manifest["evidence_dir"])])
    out = Path(out_dir) / f"{name}.tar.gz"
    with atomic_path(out) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in paths:
            _add(tar, root, rel, name)
    return out, digest
