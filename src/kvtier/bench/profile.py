"""A workload's profile, the first step of document 000's method: measure the workload before choosing a scheme.

From a request log it reports what decides between keeping the KV cache in the engine and offloading it:

- the context-length distribution (histogram and p50/p90/p99 of prompt tokens);
- the concurrency peak: from each request's start and end when the log has both; otherwise from arrivals under
  a stated service-time model (prefill at a given rate, then one token per time-per-output-token), which the
  result names with its parameters;
- the prefix-reuse ratio: prompt tokens whose prefix was already seen by an earlier request. With block hashes
  (Mooncake's `hash_ids`, or `block_hashes` in a user's log) a block counts when an earlier request had the
  same chain of hashes up to it; with only a session id, a turn reuses its session's previous prompt and output
  (the multi-turn chat model: each turn's prompt extends the last); with neither, reuse cannot be measured and
  the result says so;
- the gaps before a session returns: from session ids when given, else from the hashes (a request continues the
  latest earlier one whose whole full-block prefix it repeats).

Formats: `mooncake` (JSONL: timestamp in ms, input_length, output_length, hash_ids), `jsonl` and `csv` (a user's
export: start_s, input_tokens, output_tokens; optional end_s, session_id, block_hashes, block_tokens). A bad line
is an error naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import KvtierError
from .workloads import TRACE_BLOCK_TOKENS, json_records, load_trace

FORMATS = ("mooncake", "jsonl", "csv")
HISTOGRAM_EDGES = (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)  # prompt tokens; the last bin is open
QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Request:
    line: int
    start_s: float
    input_tokens: int
    output_tokens: int
    end_s: float | None = None
    session: str | None = None
    blocks: tuple | None = None  # prefix-chained block hashes, each of `block_tokens` prompt tokens
    block_tokens: int = TRACE_BLOCK_TOKENS


@dataclass(frozen=True)
class ServiceModel:
    """How long a request holds a slot when the log has no end times: prefill, then decode. No defaults: the rates
    are the serving platform's (measure them, e.g. with `kvtier bench`), so the caller states them."""
    prefill_tok_s: float
    time_per_output_token_s: float

    def check(self) -> None:
        for name, value in (("prefill_tok_s", self.prefill_tok_s),
                            ("time_per_output_token_s", self.time_per_output_token_s)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise KvtierError(f"service model {name} = {value!r}: must be a number > 0")

    def seconds(self, request: Request) -> float:
        return request.input_tokens / self.prefill_tok_s + request.output_tokens * self.time_per_output_token_s


def detect_format(path: Path) -> str:
    if path.suffix.lower() == ".csv":
        return "csv"
    try:
        with open(path, encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip()), "")
    except FileNotFoundError:
        raise KvtierError(f"{path}: trace file not found") from None
    try:
        row = json.loads(first)
    except ValueError:
        raise KvtierError(f"{path}: unknown trace format (not CSV, first line not JSON); give --format "
                          f"({', '.join(FORMATS)})") from None
    if isinstance(row, dict) and {"input_length", "hash_ids"} <= set(row):
        return "mooncake"
    if isinstance(row, dict) and {"start_s", "input_tokens"} <= set(row):
        return "jsonl"
    raise KvtierError(f"{path}: unknown trace format (fields {sorted(row) if isinstance(row, dict) else row!r}); "
                      f"expected Mooncake's input_length/hash_ids or start_s/input_tokens/output_tokens")


def load(path: str | os.PathLike, fmt: str | None = None) -> list[Request]:
    """The requests of a log, in arrival order."""
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise KvtierError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "mooncake":
        requests = [Request(r.line, r.timestamp_ms / 1000, r.input_length, r.output_length, blocks=r.hash_ids)
                    for r in load_trace(path)]
    else:
        requests = [_record(path, number, row) for number, row in _rows(path, fmt)]
        if not requests:
            raise KvtierError(f"{path}: no requests")
    return sorted(requests, key=lambda r: (r.start_s, r.line))


def _rows(path: Path, fmt: str):
    if fmt != "csv":
        yield from json_records(path)
        return
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KvtierError(f"{path}: trace file not found") from None
    for number, row in enumerate(csv.DictReader(text.splitlines()), start=2):
        yield number, {k: v for k, v in row.items() if v not in (None, "")}


def _number(path: Path, number: int, row: dict, name: str, integer: bool, minimum: float, required: bool = True):
    if name not in row:
        if required:
            raise KvtierError(f"{path}, line {number}: missing field '{name}'")
        return None
    value = row[name]
    try:
        parsed = int(value) if integer and not isinstance(value, float) else float(value)
    except (TypeError, ValueError):
        raise KvtierError(f"{path}, line {number}: field '{name}' = {value!r} is not a number") from None
    if isinstance(value, bool) or not math.isfinite(parsed) or (integer and parsed != int(parsed)):
        raise KvtierError(f"{path}, line {number}: field '{name}' = {value!r} is not a valid "
                          f"{'integer' if integer else 'number'}")
    if parsed < minimum:
        raise KvtierError(f"{path}, line {number}: field '{name}' = {value!r} must be >= {minimum:g}")
    return int(parsed) if integer else parsed


def _record(path: Path, number: int, row: dict) -> Request:
    start = _number(path, number, row, "start_s", False, 0)
    end = _number(path, number, row, "end_s", False, start, required=False)
    blocks = row.get("block_hashes")
    if isinstance(blocks, str):  # CSV: space-separated
        blocks = blocks.split()
    if blocks is not None and not isinstance(blocks, list):
        raise KvtierError(f"{path}, line {number}: field 'block_hashes' must be a list")
    session = row.get("session_id")
    return Request(number, start, _number(path, number, row, "input_tokens", True, 1),
                   _number(path, number, row, "output_tokens", True, 0), end_s=end,
                   session=None if session is None else str(session),
                   blocks=None if blocks is None else tuple(str(b) for b in blocks),
                   block_tokens=_number(path, number, row, "block_tokens", True, 1, required=False)
                   or TRACE_BLOCK_TOKENS)


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), so a reader can recompute it."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distribution(values: list[float]) -> dict:
    return {"count": len(values), "mean": sum(values) / len(values), "min": min(values), "max": max(values),
            **{f"p{round(100 * q)}": quantile(values, q) for q in QUANTILES}}


def histogram(values: list[int], edges: tuple[int, ...] = HISTOGRAM_EDGES) -> list[dict]:
    bins = []
    for i, low in enumerate(edges):
        high = edges[i + 1] if i + 1 < len(edges) else None
        count = sum(1 for v in values if v >= low and (high is None or v < high))
        bins.append({"from_tokens": low, "to_tokens": high, "requests": count})
    return bins


def concurrency(requests: list[Request], service: ServiceModel | None) -> dict:
    """The peak and the time-weighted distribution of requests in flight, by a sweep over start and end events."""
    measured = all(r.end_s is not None for r in requests)
    if not measured:
        if service is None:
            raise KvtierError("the log has no end_s on every request: the concurrency needs a service-time model "
                              "(--prefill-tok-s and --time-per-output-token-s, this platform's rates)")
        service.check()
    spans = [(r.start_s, r.end_s if measured else r.start_s + service.seconds(r)) for r in requests]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda e: (e[0], e[1]))
    level, peak, weighted, last = 0, 0, {}, events[0][0]
    for time, step in events:
        if time > last:
            weighted[level] = weighted.get(level, 0.0) + (time - last)
            last = time
        level += step
        peak = max(peak, level)
    total = sum(weighted.values())
    by_time = sorted(weighted.items())

    def level_at(q: float) -> int:
        acc = 0.0
        for value, seconds in by_time:
            acc += seconds
            if acc >= q * total:
                return value
        return by_time[-1][0]
    source = ("measured: each request's start_s to end_s" if measured else
              f"modelled from arrivals: a request holds a slot for input_tokens / {service.prefill_tok_s:g} tok/s "
              f"+ output_tokens × {service.time_per_output_token_s:g} s (the log has no end times)")
    return {"peak": peak, "source": source,
            "service_model": None if measured else {"prefill_tok_s": service.prefill_tok_s,
                                                    "time_per_output_token_s": service.time_per_output_token_s},
            **({f"time_weighted_p{round(100 * q)}": level_at(q) for q in QUANTILES} if total > 0 else {})}


def _full_blocks(request: Request) -> int:
    return min(len(request.blocks), request.input_tokens // request.block_tokens)


def _block_tokens(request: Request, index: int) -> int:
    """Prompt tokens in block `index` (the last block may be partial)."""
    return max(0, min(request.block_tokens, request.input_tokens - index * request.block_tokens))


def reuse(requests: list[Request]) -> dict:
    """The fraction of prompt tokens whose prefix an earlier request had already sent."""
    total = sum(r.input_tokens for r in requests)
    if all(r.blocks is not None for r in requests):
        seen: set[tuple] = set()
        reused = 0
        for r in requests:
            chain = tuple(r.blocks)
            for i in range(len(chain)):
                key = chain[:i + 1]  # a block counts only with the same prefix before it, as a prefix cache keys it
                if key in seen:
                    reused += _block_tokens(r, i)
                else:
                    seen.add(key)
        return {"ratio": reused / total, "reused_tokens": reused, "prompt_tokens": total,
                "method": "block hashes: a block counts when an earlier request had the same chain up to it"}
    if all(r.session is not None for r in requests):
        last: dict[str, Request] = {}
        reused = 0
        for r in requests:
            previous = last.get(r.session)
            if previous is not None:
                reused += min(r.input_tokens, previous.input_tokens + previous.output_tokens)
            last[r.session] = r
        return {"ratio": reused / total, "reused_tokens": reused, "prompt_tokens": total,
                "method": "session ids: each turn reuses its session's previous prompt and output"}
    return {"ratio": None, "reused_tokens": None, "prompt_tokens": total,
            "method": "not measurable: the log has neither block hashes nor session ids on every request"}


def return_gaps(requests: list[Request]) -> dict:
    """Seconds between a session's turn and its next one."""
    gaps = []
    if all(r.session is not None for r in requests):
        last: dict[str, float] = {}
        for r in requests:
            if r.session in last:
                gaps.append(r.start_s - last[r.session])
            last[r.session] = r.start_s
        method = "session ids"
    elif all(r.blocks is not None for r in requests):
        # A turn's prompt repeats its session's previous prompt whole. A prefix that many requests repeat (a
        # shared system prompt) is not a session: each prompt is continued once, by the first request to repeat
        # it; later ones branch from it.
        open_turns: dict[tuple, float] = {}  # a request's full-block prefix -> when it was sent, until continued
        for r in requests:
            chain = tuple(r.blocks)
            parent = next((chain[:n] for n in range(len(chain), 0, -1) if chain[:n] in open_turns), None)
            if parent is not None:
                gaps.append(r.start_s - open_turns.pop(parent))  # the longest earlier prompt it repeats whole
            full = _full_blocks(r)
            if full:
                open_turns[chain[:full]] = r.start_s
        method = ("block hashes: a request continues the earlier one whose whole full-block prompt it repeats "
                  "(the longest; each prompt continued once)")
    else:
        return {"returns": 0, "method": "not measurable: no session ids or block hashes"}
    out = {"returns": len(gaps), "method": method}
    if gaps:
        out["gap_s"] = distribution(gaps)
    return out


def profile(requests: list[Request], service: ServiceModel | None = None, source: str | None = None) -> dict:
    if not requests:
        raise KvtierError("a profile needs at least one request")
    inputs = [r.input_tokens for r in requests]
    return {
        "source": source,
        "requests": len(requests),
        "span_s": max(r.end_s or r.start_s for r in requests) - requests[0].start_s,
        "context_tokens": distribution(inputs),
        "context_histogram": histogram(inputs),
        "output_tokens": distribution([r.output_tokens for r in requests]),
        "concurrency": concurrency(requests, service),
        "prefix_reuse": reuse(requests),
        "session_returns": return_gaps(requests),
    }


def text(result: dict) -> str:
    """The profile for a terminal."""
    ctx, conc, reuse_, returns = (result["context_tokens"], result["concurrency"], result["prefix_reuse"],
                                  result["session_returns"])
    lines = [f"{result['requests']} requests over {result['span_s']:.1f} s"
             + (f" ({result['source']})" if result.get("source") else ""),
             f"context tokens: p50 {ctx['p50']:.0f}, p90 {ctx['p90']:.0f}, p99 {ctx['p99']:.0f} (max {ctx['max']:.0f})",
             f"concurrency peak: {conc['peak']} ({conc['source']})",
             "prefix reuse: " + (f"{100 * reuse_['ratio']:.1f} % of prompt tokens" if reuse_["ratio"] is not None
                                 else "not measured") + f" ({reuse_['method']})"]
    if returns.get("gap_s"):
        gap = returns["gap_s"]
        lines.append(f"session returns: {returns['returns']}, gap p50 {gap['p50']:.1f} s, p90 {gap['p90']:.1f} s "
                     f"({returns['method']})")
    else:
        lines.append(f"session returns: none found ({returns['method']})")
    lines.append("context histogram (prompt tokens: requests): " + ", ".join(
        f"{b['from_tokens']}–{b['to_tokens'] or '∞'}: {b['requests']}" for b in result["context_histogram"]))
    return "\n".join(lines)
