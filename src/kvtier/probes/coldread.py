"""R1 probe: cold-read bandwidth of one LMCache fs L2 worker loading N chunks from a pool.

Runs in a Python that has the LMCache build under test first on its path (PYTHONPATH=<build>/site), so the same
code measures the upstream and the patched adapter (kvtier.runs.r1 keeps one per build for a whole run, --serve):

    PYTHONPATH=build/lmcache/patched/site python -m kvtier.probes.coldread --pool DIR --chunks 256 --chunk-mib 1 \
        --load-concurrency 1 2 4 8 16 32 16:checked [--odirect] [--verify-checksum] [--store-only]

The chunks are written through the adapter itself (its own file names and layout) when the pool lacks them.
Right before each timed load, the pool's files are dropped from the page cache (posix_fadvise DONTNEED) and the
bytes still resident are counted (mincore), so the record shows that the load read the device; with --odirect
the adapter reads with O_DIRECT as well (its own `use_odirect`), into page-aligned buffers as O_DIRECT needs;
with --quiet, the load waits for a quiet machine (kvtier.probes.quiet) and records what it found. With
--verify-checksum (the patched build only, patches/0003) the adapter stores a CRC-32 with each chunk file it writes
and checks it on every load; the record counts the pool files that carry one, so that a load which had nothing to
check cannot pass for one that did; a bound written `N:checked` checks on that load only, so that one Python
loads both with and without the check (a start of this Python, torch and LMCache is 2-3 s of a small run).
--store-only writes the missing chunks and loads nothing.
One load per `--load-concurrency` value, in the order given, each by a new adapter with that bound; the upstream
adapter ignores the bound: it reads one key after another. Prints one JSON record per load on stdout.

With --serve the same Python makes loads for as long as it is asked (kvtier.runs.r1 keeps one per build for a whole
run): each line on stdin is a request, {"load_concurrency": ["1", "16:checked", ...]} or {"store_only": true,
"verify_checksum": true}, answered with the records it asks for, one line each; end of input ends it.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import time
from pathlib import Path

from . import pagecache
from .quiet import QuietBounds, wait_quiet

MODEL_NAME = "kvtier-r1-coldread"  # the pool files' key namespace


class _Buffer:
    """The memory object the fs adapter reads into and writes from: it only uses `byte_array`. Anonymous mapped
    memory, so page-aligned, as O_DIRECT requires (LMCache's own L1 buffers are aligned too)."""

    def __init__(self, size: int, fill: int = 0):
        self._data = mmap.mmap(-1, size)
        if fill:
            self._data.write(bytes([fill]) * size)

    @property
    def byte_array(self) -> memoryview:
        return memoryview(self._data)


def _wait(poll, what: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = poll()
        if result is not None:
            return result
        time.sleep(0.0002)
    raise TimeoutError(f"{what} did not complete within {timeout_s:g} s")


def _adapter(pool: str, load_concurrency: int, odirect: bool, verify_checksum: bool):
    from lmcache.v1.distributed.l2_adapters import fs_l2_adapter as fs

    spec = {"base_path": pool, "load_concurrency": load_concurrency, "use_odirect": odirect}
    if verify_checksum:  # only then: upstream's adapter knows no such option
        if not hasattr(fs, "CHECKSUM_XATTR"):
            raise RuntimeError(f"this LMCache build ({fs.__file__}) has no chunk checksums (patches/0003)")
        spec["verify_checksum"] = True
    return fs, fs.FSL2Adapter(fs.FSL2AdapterConfig.from_dict(spec))


def _keys(chunks: int) -> list:
    from lmcache.v1.distributed.api import ObjectKey
    return [ObjectKey(chunk_hash=i.to_bytes(8, "big"), model_name=MODEL_NAME, kv_rank=0) for i in range(chunks)]


def _store_missing(adapter, keys: list, chunk_bytes: int, timeout_s: float) -> int:
    missing = [k for k in keys if not adapter._key_to_path(k).exists()]
    if missing:
        task = adapter.submit_store_task(missing, [_Buffer(chunk_bytes, 7) for _ in missing])
        _wait(lambda: adapter.pop_completed_store_tasks().get(task), "store", timeout_s)
    return len(missing)


def _with_checksum(fs, files: list[Path]) -> int | None:
    """How many of the files carry the patched adapter's checksum (None for a build without checksums)."""
    name = getattr(fs, "CHECKSUM_XATTR", None)
    if name is None:
        return None
    return sum(1 for path in files if name in os.listxattr(path))


def store(pool: str, chunks: int, chunk_bytes: int, odirect: bool = False, verify_checksum: bool = False,
          timeout_s: float = 600.0) -> dict:
    """Write the chunks the pool lacks, and nothing else."""
    fs, adapter = _adapter(pool, 1, odirect, verify_checksum)
    try:
        keys = _keys(chunks)
        written = _store_missing(adapter, keys, chunk_bytes, timeout_s)
        files = [adapter._key_to_path(k) for k in keys]
    finally:
        adapter.close()
    return {"stored": written, "chunks": chunks, "files_with_checksum": _with_checksum(fs, files)}


def measure(pool: str, chunks: int, chunk_bytes: int, load_concurrency: int, odirect: bool = False,
            timeout_s: float = 600.0, quiet: dict | None = None, verify_checksum: bool = False) -> dict:
    import lmcache

    fs, adapter = _adapter(pool, load_concurrency, odirect, verify_checksum)
    try:
        keys = _keys(chunks)
        _store_missing(adapter, keys, chunk_bytes, timeout_s)
        files = [adapter._key_to_path(k) for k in keys]
        with_checksum = _with_checksum(fs, files)
        buffers = [_Buffer(chunk_bytes) for _ in keys]
        for path in files:
            pagecache.drop(path)
        resident = sum(pagecache.resident_bytes(path) for path in files)
        found = wait_quiet(QuietBounds(**quiet)) if quiet is not None else None  # right before the timed load
        start = time.perf_counter()
        task = adapter.submit_load_task(keys, buffers)
        bitmap = _wait(lambda: adapter.query_load_result(task), "load", timeout_s)
        seconds = time.perf_counter() - start
        loaded = sum(1 for i in range(chunks) if bitmap.test(i))
        if loaded != chunks:
            raise RuntimeError(f"{pool}: only {loaded} of {chunks} chunks loaded")
        if any(bytes(b.byte_array[:1]) != b"\x07" or bytes(b.byte_array[-1:]) != b"\x07" for b in buffers):
            raise RuntimeError(f"{pool}: a loaded chunk does not hold the bytes that were stored")
    finally:
        adapter.close()
    total = chunks * chunk_bytes
    return {"lmcache_version": getattr(lmcache, "__version__", None),
            "adapter_reads_concurrently": hasattr(fs, "DEFAULT_LOAD_CONCURRENCY"),
            "chunks": chunks, "chunk_bytes": chunk_bytes, "bytes": total, "load_concurrency": load_concurrency,
            "resident_bytes_before": resident, "page_cache": page_cache(odirect),
            "verify_checksum": verify_checksum, "files_with_checksum": with_checksum,
            "seconds": seconds, "gb_per_s": total / seconds / 1e9, "quiet": found}


def page_cache(odirect: bool) -> str:
    """How a load defeats the page cache."""
    return "O_DIRECT (the adapter's use_odirect), files dropped first" if odirect else "posix_fadvise DONTNEED"


CHECKED = ":checked"


def load_spec(text: str) -> tuple[int, bool]:
    """A `--load-concurrency` value: `N`, or `N:checked` for a load that checks each chunk's checksum."""
    bound, checked = (text[:-len(CHECKED)], True) if text.endswith(CHECKED) else (text, False)
    if not bound.isdigit() or int(bound) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a load bound is a positive integer, optionally with {CHECKED}")
    return int(bound), checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", required=True)
    parser.add_argument("--chunks", type=int, default=256)
    parser.add_argument("--chunk-mib", type=float, default=1.0)
    parser.add_argument("--load-concurrency", type=load_spec, nargs="+", default=[(16, False)],
                        help=f"one load per bound, in order; N{CHECKED} checks each chunk's checksum on that load")
    parser.add_argument("--odirect", action="store_true", help="the adapter reads with O_DIRECT (use_odirect)")
    parser.add_argument("--verify-checksum", action="store_true",
                        help="store a CRC-32 with each chunk and check it on load (patched build: patches/0003)")
    parser.add_argument("--store-only", action="store_true", help="write the missing chunks; load nothing")
    parser.add_argument("--quiet", type=json.loads, help="wait for a quiet machine before each load: JSON of "
                        "kvtier.probes.quiet.QuietBounds")
    parser.add_argument("--serve", action="store_true",
                        help="answer requests, one JSON line each on stdin, until its end (see above)")
    args = parser.parse_args(argv)
    Path(args.pool).mkdir(parents=True, exist_ok=True)
    if not args.serve:
        _answer(args, args.store_only, args.verify_checksum, args.load_concurrency)
        return 0
    for line in sys.stdin:
        request = json.loads(line)
        _answer(args, bool(request.get("store_only")), args.verify_checksum or bool(request.get("verify_checksum")),
                [load_spec(text) for text in request.get("load_concurrency", [])])
    return 0


def _answer(args: argparse.Namespace, store_only: bool, verify_checksum: bool,
            loads: list[tuple[int, bool]]) -> None:
    chunk_bytes = int(args.chunk_mib * 2**20)
    if store_only:
        print(json.dumps(store(args.pool, args.chunks, chunk_bytes, args.odirect, verify_checksum)), flush=True)
        return
    for bound, checked in loads:
        print(json.dumps(measure(args.pool, args.chunks, chunk_bytes, bound, args.odirect, quiet=args.quiet,
                                 verify_checksum=verify_checksum or checked)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
