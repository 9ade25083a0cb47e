"""guidellm's benchmark report (`guidellm run --output kind=json,...`, report version 2): one window per benchmark.

Its metrics are distributions by request status (successful / errored / incomplete / total), each with mean,
median and percentiles; kvtier keeps the successful requests'. Its percentiles are read off the empirical CDF
(the smallest value whose cumulative share reaches the rank, no interpolation). Its TTFT ends at the first
streamed iteration; its inter_token_latency is per request (last - first iteration) / (output tokens - 1), which
is what vLLM and kvtier call TPOT. It reports no aggregate output rate: kvtier derives one from its totals."""

from __future__ import annotations

from pathlib import Path

from ...core.config import read_json
from ...core.errors import KvtierError
from .common import Imported, Window

TOOL = "guidellm"
PERCENTILE = "the smallest value whose cumulative share reaches the rank (empirical CDF, no interpolation)"
DEFINITIONS = {
    "ttft_s": f"guidellm: first streamed iteration minus request start, per successful request; pNN = {PERCENTILE}",
    "tpot_s": "guidellm: (last iteration - first iteration) / (output tokens - 1), per successful request "
              "(its inter_token_latency_ms)",
    "e2e_s": "guidellm: request end minus request start, per successful request (its request_latency)",
    "output_tok_s": "kvtier from guidellm's totals: output tokens of the successful requests / benchmark duration",
    "request_rate_per_s": "kvtier from guidellm's totals: successful requests / benchmark duration",
    "duration_s": "guidellm: the benchmark's duration (warm-up and cool-down excluded)",
    "requests": "guidellm: request_totals; ok = successful, failed = errored, total includes the incomplete "
                "(cancelled when the benchmark stopped)",
    "tokens": "guidellm: prompt and output tokens of the successful requests, from the server's usage (its own "
              "count where the server gives none)",
}
# guidellm metric -> (kvtier family, factor to seconds)
DISTRIBUTIONS = {"time_to_first_token_ms": ("ttft_s", 1e-3), "inter_token_latency_ms": ("tpot_s", 1e-3),
                 "request_latency": ("e2e_s", 1.0)}
STATISTICS = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
WHY = {
    "time_to_first_output_token_ms": "first content (non-reasoning) token; kvtier's TTFT is the first token",
    "time_per_output_token_ms": "(last iteration - request start) / output tokens, first token included: no "
                                "counterpart in kvtier's summary",
    "output_tokens_per_second": "a distribution of per-iteration rates, not the aggregate rate kvtier reports",
}


def _shown(value):
    """A compact, faithful view of a metric kvtier does not map (the whole record is in the copied source)."""
    if isinstance(value, dict) and isinstance(value.get("successful"), dict):
        s = value["successful"]
        return {k: s.get(k) for k in ("mean", "median", "count") if k in s}
    if isinstance(value, dict):
        return f"{{{', '.join(sorted(value))}}}"
    return value


def _successful(metrics: dict, name: str, path: Path, where: str) -> dict:
    entry = metrics.get(name)
    if not isinstance(entry, dict) or not isinstance(entry.get("successful"), dict):
        raise KvtierError(f"{path}: {where}.metrics.{name}: expected a distribution by status "
                          "(successful / errored / incomplete / total); is this a guidellm report?")
    return entry["successful"]


def _window(index: int, benchmark: dict, path: Path) -> tuple[Window, list[dict]]:
    where = f"benchmarks[{index}]"
    metrics, duration = benchmark.get("metrics"), benchmark.get("duration")
    if not isinstance(metrics, dict) or not isinstance(duration, (int, float)) or duration <= 0:
        raise KvtierError(f"{path}: {where}: needs 'metrics' and a positive 'duration' (got {duration!r})")
    totals = metrics.get("request_totals")
    if not isinstance(totals, dict) or not all(isinstance(totals.get(k), int) for k in ("successful", "errored",
                                                                                         "total")):
        raise KvtierError(f"{path}: {where}.metrics.request_totals: expected successful / errored / total counts")
    values: dict[str, float] = {"duration_s": duration, "requests.ok": totals["successful"],
                                "requests.failed": totals["errored"], "requests.total": totals["total"]}
    for name, (family, scale) in DISTRIBUTIONS.items():
        stats = _successful(metrics, name, path, where)
        if isinstance(stats.get("mean"), (int, float)):
            values[f"{family}.mean"] = stats["mean"] * scale
        for theirs, ours in STATISTICS.items():
            value = (stats.get("percentiles") or {}).get(theirs)
            if isinstance(value, (int, float)):
                values[f"{family}.{ours}"] = value * scale
    for name, ours in (("prompt_token_count", "prompt_tokens"), ("output_token_count", "output_tokens")):
        values[ours] = _successful(metrics, name, path, where).get("total_sum", 0)
    values["output_tok_s.aggregate"] = values["output_tokens"] / duration
    values["request_rate_per_s"] = totals["successful"] / duration
    unmapped = [{"field": f"{where}.metrics.request_totals.incomplete", "value": totals.get("incomplete"),
                 "why": "cancelled when the benchmark stopped; counted in total only"}]
    mapped = {*DISTRIBUTIONS, "request_totals", "prompt_token_count", "output_token_count"}
    for name, value in metrics.items():
        if name not in mapped:
            unmapped.append({"field": f"{where}.metrics.{name}", "value": _shown(value),
                             "why": WHY.get(name, "no counterpart in kvtier's summary")})
    for key, value in benchmark.items():
        if key in ("metrics", "duration"):
            continue
        shown = (f"[{sum(len(v) for v in value.values() if isinstance(v, list))} per-request records]"
                 if key == "requests" and isinstance(value, dict) else _shown(value))
        unmapped.append({"field": f"{where}.{key}", "value": shown,
                         "why": "per-request records: kvtier imports the summary" if key == "requests"
                         else "about the run, not a metric (the source file is kept whole)"})
    strategy = (benchmark.get("config") or {}).get("strategy") or {}
    concurrency = strategy.get("streams") if strategy.get("type_") == "concurrent" else None
    concurrency = concurrency if isinstance(concurrency, int) else None
    name = f"c{concurrency}" if concurrency else f"{strategy.get('type_', 'benchmark')}-{index}"
    return Window(window=name, concurrency=concurrency, metrics=values, definitions=dict(DEFINITIONS)), unmapped


def parse(path: Path) -> Imported:
    report = read_json(path, "guidellm report")
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), list):
        raise KvtierError(f"{path}: a guidellm report is a JSON object with a 'benchmarks' list")
    metadata = report.get("metadata") if isinstance(report.get("metadata"), dict) else {}
    if metadata.get("version") not in (None, 2):
        raise KvtierError(f"{path}: metadata.version = {metadata.get('version')!r}: kvtier reads guidellm's "
                          "report version 2")
    windows, unmapped = [], []
    for index, benchmark in enumerate(report["benchmarks"]):
        if not isinstance(benchmark, dict):
            raise KvtierError(f"{path}: benchmarks[{index}]: expected an object")
        window, left = _window(index, benchmark, path)
        windows.append(window)
        unmapped += left
    names = [w.window for w in windows]
    if len(set(names)) != len(names):  # the same strategy twice: number them
        for index, window in enumerate(windows):
            window.window = f"{window.window}-{index}"
    spec = (report.get("config") or {}).get("spec") or {}
    return Imported(tool=TOOL, tool_version=metadata.get("guidellm_version"), windows=windows, unmapped=unmapped,
                    metadata={"guidellm": metadata, **{k: spec[k] for k in ("profile", "data", "constraints")
                                                        if k in spec},
                              "target": (spec.get("backend") or {}).get("target")})
