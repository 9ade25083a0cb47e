"""Per-request records: what was sent, when each byte and token arrived, what came back, what failed.

`phase` is the window the request belongs to (populate, resume-c8, random-c16, rate100, trace).
requests.jsonl holds one JSON object per completed request (successful or not), appended and flushed as each
completes, so an interrupted run loses nothing that finished. Times are `time.monotonic_ns()` of this client
process; `token_ns` are the arrival times of the stream's non-empty token chunks, as offsets from `send_ns`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator

from ..core.errors import KvtierError

try:
    import msgspec

    _encode = msgspec.json.Encoder().encode
except ImportError:  # pragma: no cover - msgspec ships with vLLM
    def _encode(obj) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

FIELDS = (
    "run_id", "segment", "request_id", "phase", "concurrency", "labels",
    "wall_send_s", "send_ns", "first_byte_ns", "first_token_ns", "last_token_ns", "end_ns", "token_ns",
    "status", "prompt_tokens", "completion_tokens", "cached_tokens", "output_text", "error",
)


def new_record(run_id: str, segment: int, request_id: str, phase: str, concurrency: int | None,
               labels: dict) -> dict:
    return dict.fromkeys(FIELDS) | {"run_id": run_id, "segment": segment, "request_id": request_id,
                                    "phase": phase, "concurrency": concurrency, "labels": labels,
                                    "token_ns": [], "output_text": ""}


class RecordWriter:
    """Append records to requests.jsonl, flushing each line as it is written."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file = open(self.path, "ab", buffering=0)
        self.count = 0

    def write(self, record: dict) -> None:
        self._file.write(_encode(record) + b"\n")
        self.count += 1

    def close(self) -> None:
        if not self._file.closed:
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_records(path: str | os.PathLike) -> Iterator[dict]:
    """Every record of a requests.jsonl. A torn last line (the process died mid-write) is skipped, any other
    unreadable line is an error naming the file and line."""
    path = Path(path)
    if not path.exists():
        return
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError:
            if number == len(lines):  # no trailing newline: the write was cut short
                return
            raise KvtierError(f"{path}, line {number}: not a JSON record") from None


def latest_per_request(records: Iterable[dict]) -> list[dict]:
    """One record per request id, the newest segment's: a resumed run never counts a request twice."""
    latest: dict[str, dict] = {}
    for record in records:
        key = record["request_id"]
        if key not in latest or record["segment"] >= latest[key]["segment"]:
            latest[key] = record
    return list(latest.values())
