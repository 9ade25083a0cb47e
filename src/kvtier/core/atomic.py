"""Write files so that a reader never sees half of one: write a temporary sibling, then rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it replaces `path`, on error it is removed."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    # Hidden, and keeps the suffix so that tools which infer a format from the name still work.
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{final.stem}-", suffix=final.suffix, dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, final)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
