"""Server /metrics (Prometheus text) snapshots around a measured window, their deltas, and a reconciliation of
the client's TTFT with vLLM's own TTFT histogram over the same window."""

from __future__ import annotations

import math
import re

from ..core import web

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")
TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"


def fetch(url: str, timeout_s: float = 10.0) -> str:
    return web.get_text(url, timeout_s)


def parse(text: str) -> dict[str, float]:
    """{'name{labels}': value} for every sample line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match:
            try:
                samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
            except ValueError:
                continue
    return samples


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Change of every cumulative series (counters, histogram sums, counts and buckets) that changed. A series
    absent before counts from zero: Prometheus clients create a labelled counter at its first increment."""
    out = {}
    for key, value in after.items():
        name = key.split("{", 1)[0]
        if name.endswith(COUNTER_SUFFIXES) and value != before.get(key, 0.0):
            out[key] = value - before.get(key, 0.0)
    return out


def _le(key: str) -> float:
    match = re.search(r'le="([^"]+)"', key)
    return math.inf if match.group(1) in ("+Inf", "Inf") else float(match.group(1))


def histogram(delta: dict[str, float], name: str) -> dict | None:
    """count, sum, mean and p50/p90/p99 (Prometheus histogram_quantile interpolation) of a histogram's delta."""
    count = sum(v for k, v in delta.items() if k.startswith(f"{name}_count"))
    total = sum(v for k, v in delta.items() if k.startswith(f"{name}_sum"))
    buckets: dict[float, float] = {}
    for key, value in delta.items():
        if key.startswith(f"{name}_bucket"):
            le = _le(key)
            buckets[le] = buckets.get(le, 0.0) + value
    if count <= 0:
        return None
    bounds = sorted(buckets)

    def quantile(q: float) -> float | None:
        rank, lower, below = q * count, 0.0, 0.0
        for upper in bounds:
            cumulative = buckets[upper]
            if cumulative >= rank:
                if math.isinf(upper):
                    return lower
                inside = cumulative - below
                return lower + (upper - lower) * ((rank - below) / inside if inside else 0.0)
            lower, below = upper, cumulative
        return None

    return {"count": count, "sum_s": total, "mean_s": total / count, "p50_s": quantile(0.5),
            "p90_s": quantile(0.9), "p99_s": quantile(0.99)}
