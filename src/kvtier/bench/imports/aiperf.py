"""aiperf's profile export (`aiperf profile ... --artifact-dir DIR`: DIR/profile_export_aiperf.json): one window.

Each metric is a record {unit, avg, p1 ... p99, min, max, std, count, sum}; percentiles are linearly interpolated
(numpy's default). Its TTFT ends at the first content response and, by aiperf's own flag, its percentiles
include failed requests; its inter_token_latency is per request (latency - TTFT) / (output tokens - tokens of
the first chunk), what kvtier calls TPOT, and its inter_chunk_latency the gaps between chunks, kvtier's ITL. Its
output token counts and output rate come from its own tokenizer on the returned text; kvtier's from the server's
usage (aiperf's usage totals are mapped to kvtier's token counts)."""

from __future__ import annotations

from pathlib import Path

from ...core.config import read_json
from ...core.errors import KvtierError
from .common import Imported, Window

TOOL = "aiperf"
DEFINITIONS = {
    "ttft_s": "aiperf: first content response minus request start, per request, failed requests included in "
              "its percentiles; pNN linearly interpolated",
    "tpot_s": "aiperf: (request latency - TTFT) / (output tokens - tokens of the first chunk), per request (its "
              "inter_token_latency)",
    "itl_s": "aiperf: gaps between streamed chunks, pooled over requests (its inter_chunk_latency)",
    "e2e_s": "aiperf: final response minus request start, per request (its request_latency)",
    "output_tok_s": "aiperf: output tokens counted by its tokenizer on the returned text / benchmark duration",
    "request_rate_per_s": "aiperf: valid requests / benchmark duration",
    "duration_s": "aiperf: benchmark duration",
    "requests": "aiperf: completed_request_count (ok), request_count (total), errors from error_summary",
    "tokens": "aiperf: the server's usage totals (total_usage_prompt_tokens, total_usage_completion_tokens)",
}
DISTRIBUTIONS = {"time_to_first_token": "ttft_s", "inter_token_latency": "tpot_s",
                 "inter_chunk_latency": "itl_s", "request_latency": "e2e_s"}
STATISTICS = {"avg": "mean", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
SCALARS = {"benchmark_duration": "duration_s", "request_throughput": "request_rate_per_s",
           "output_token_throughput": "output_tok_s.aggregate", "completed_request_count": "requests.ok",
           "request_count": "requests.total", "total_usage_prompt_tokens": "prompt_tokens",
           "total_usage_completion_tokens": "output_tokens"}
TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}
METADATA = ("schema_version", "aiperf_version", "benchmark_id", "input_config", "run_info", "start_time",
            "end_time", "was_cancelled", "is_complete")


def _record(export: dict, key: str, path: Path) -> dict:
    record = export.get(key)
    if not isinstance(record, dict) or not isinstance(record.get("avg"), (int, float)):
        raise KvtierError(f"{path}: key {key!r} = {record!r}: expected a metric record with 'unit' and 'avg'; "
                          "is this aiperf's profile_export_aiperf.json?")
    return record


def _seconds(record: dict, key: str, path: Path) -> float:
    unit = record.get("unit")
    if unit not in TO_SECONDS:
        raise KvtierError(f"{path}: key {key!r}: unit {unit!r} is not a time unit ({', '.join(TO_SECONDS)})")
    return TO_SECONDS[unit]


def parse(path: Path) -> Imported:
    export = read_json(path, "aiperf profile export")
    if not isinstance(export, dict) or "aiperf_version" not in export:
        raise KvtierError(f"{path}: an aiperf profile export is a JSON object with 'aiperf_version'")
    metrics: dict[str, float] = {}
    for key, family in DISTRIBUTIONS.items():
        record = _record(export, key, path)
        scale = _seconds(record, key, path)
        for theirs, ours in STATISTICS.items():
            if isinstance(record.get(theirs), (int, float)):
                metrics[f"{family}.{ours}"] = record[theirs] * scale
    for key, ours in SCALARS.items():
        record = _record(export, key, path)
        metrics[ours] = record["avg"] * (_seconds(record, key, path) if ours == "duration_s" else 1)
    errors = export.get("error_summary") or []
    if not isinstance(errors, list):
        raise KvtierError(f"{path}: key 'error_summary' = {errors!r}: expected a list")
    failed = export.get("error_request_count")
    metrics["requests.failed"] = (failed["avg"] if isinstance(failed, dict) and "avg" in failed
                                  else sum(e.get("count", 1) for e in errors if isinstance(e, dict)))
    unmapped = []
    for key, value in export.items():
        if key in DISTRIBUTIONS or key in SCALARS or key in METADATA or key in ("error_summary",
                                                                                "error_request_count"):
            continue
        if key in ("telemetry_data",):
            unmapped.append({"field": key, "value": f"{{{', '.join(sorted(value))}}}" if isinstance(value, dict)
                             else value, "why": "GPU and server telemetry: not a client metric"})
            continue
        shown = {k: value[k] for k in ("unit", "avg", "p50") if k in value} if isinstance(value, dict) else value
        why = ("its own tokenizer's count of the returned text; kvtier counts the server's usage"
               if key in ("total_output_tokens", "total_osl", "output_sequence_length", "output_token_count")
               else "no counterpart in kvtier's summary")
        unmapped.append({"field": key, "value": shown, "why": why})
    for key in DISTRIBUTIONS:
        for stat in ("p1", "p5", "p10", "p25", "p75", "min", "max", "std"):
            if stat in export[key]:
                unmapped.append({"field": f"{key}.{stat}", "value": export[key][stat],
                                 "why": "kvtier's summary keeps mean, p50, p90, p95, p99"})
    phases = [p for p in (export.get("input_config") or {}).get("phases", []) if isinstance(p, dict)]
    profiling = next((p for p in phases if p.get("kind") == "profiling"), {})
    concurrency = profiling.get("concurrency") if isinstance(profiling.get("concurrency"), int) else None
    window = Window(window=f"c{concurrency}" if concurrency else "profiling", concurrency=concurrency,
                    metrics=metrics, definitions=dict(DEFINITIONS))
    return Imported(tool=TOOL, tool_version=export.get("aiperf_version"), windows=[window], unmapped=unmapped,
                    metadata={k: export[k] for k in METADATA if k in export})
