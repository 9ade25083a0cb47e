"""sha256 of files, for manifests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_record(path: str | os.PathLike) -> dict[str, object]:
    path = Path(path)
    return {"path": path.as_posix(), "sha256": sha256_file(path), "bytes": path.stat().st_size}
