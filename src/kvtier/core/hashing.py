"""sha256 of files, for manifests.

Evidence pages carry the package manifest's sha256 in a stamp (kvtier.package.manifest), written into them after
the manifest that hashes them: a page's digest is taken with its stamp emptied, so stamping a page changes neither
its digest here nor in the manifest its render wrote."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

# The element every page shows the package manifest's hash in; empty until the manifest is written.
STAMP_OPEN, STAMP_CLOSE = b'<code class="kvtier-r8">', b"</code>"
STAMP = re.compile(re.escape(STAMP_OPEN) + rb"([0-9a-f]{0,64}|unsealed)" + re.escape(STAMP_CLOSE))
UNSEALED = b"unsealed"
PAGE_SUFFIXES = (".html", ".htm")


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(path: str | os.PathLike) -> tuple[str, int]:
    """What a manifest records of a file: the sha256 of its bytes and their number, a page's with its stamp emptied."""
    path = Path(path)
    if path.suffix not in PAGE_SUFFIXES:
        return sha256_file(path), path.stat().st_size
    data = STAMP.sub(STAMP_OPEN + STAMP_CLOSE, path.read_bytes())
    return hashlib.sha256(data).hexdigest(), len(data)


def page_stamps(data: bytes) -> list[str]:
    """The hashes a page's stamps show ('unsealed' before a manifest was written)."""
    return [m.group(1).decode() for m in STAMP.finditer(data)]


def stamp_element(value: str = UNSEALED.decode()) -> str:
    return (STAMP_OPEN + value.encode() + STAMP_CLOSE).decode()


def file_record(path: str | os.PathLike) -> dict[str, object]:
    path = Path(path)
    digest, size = manifest_digest(path)
    return {"path": path.as_posix(), "sha256": digest, "bytes": size}
