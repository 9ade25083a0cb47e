"""The imported run: RUN_DIR/imported.json (the mapped metrics per window, their definitions, what was not mapped,
the source's sha256) and RUN_DIR/source/<file> (the tool's file as it was)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ... import __version__
from ...core.atomic import write_text
from ...core.errors import KvtierError
from ...core.hashing import sha256_file

IMPORTED_FILE = "imported.json"
FORMAT = "kvtier-imported/1"


@dataclass
class Window:
    """One measured window of the tool's result, in kvtier's metric names and units (seconds, tokens, per s)."""
    window: str
    concurrency: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=dict)  # per metric family (ttft_s, ...), the tool's own


@dataclass
class Imported:
    tool: str
    tool_version: str | None
    windows: list[Window]
    unmapped: list[dict]          # {"field", "value", "why"}: nothing the tool wrote is dropped silently
    metadata: dict


def require(record: dict, key: str, path: Path, kinds=(int, float)):
    value = record.get(key)
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise KvtierError(f"{path}: key {key!r} = {value!r}: expected "
                          f"{' or '.join(k.__name__ for k in kinds)}; is this the right format?")
    return value


def _parsers():
    from . import aiperf, guidellm, vllm_bench
    return {"vllm-bench-serve": vllm_bench.parse, "guidellm": guidellm.parse, "aiperf": aiperf.parse}


FORMATS = ("vllm-bench-serve", "guidellm", "aiperf")


def import_file(fmt: str, source: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Parse `source` as `fmt` and write the imported run into `out_dir` (which must not hold a run already)."""
    source, out_dir = Path(source), Path(out_dir)
    parsers = _parsers()
    if fmt not in parsers:
        raise KvtierError(f"import format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if (out_dir / IMPORTED_FILE).exists() or (out_dir / "run.json").exists():
        raise KvtierError(f"{out_dir}: already holds a run; import into a new folder")
    result = parsers[fmt](source)
    if not result.windows:
        raise KvtierError(f"{source}: no measured window found in this {fmt} file")
    record = {
        "format": FORMAT, "tool": f"kvtier {__version__}",
        "source": {"format": fmt, "file": f"source/{source.name}", "sha256": sha256_file(source),
                   "tool": result.tool, "tool_version": result.tool_version},
        "windows": [vars(w) for w in result.windows],
        "unmapped": result.unmapped,
        "metadata": result.metadata,
    }
    (out_dir / "source").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, out_dir / "source" / source.name)
    return write_text(out_dir / IMPORTED_FILE, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
