"""`vllm bench serve --save-result` (vLLM's serving benchmark): its result JSON, one window per file.

Its latencies are in milliseconds: mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms (pNN as --metric-percentiles
asks, 99 by default; numpy.percentile, linear interpolation). Its TTFT ends at the first streamed event with a
choice, whatever its text (kvtier's ends at the first non-empty token chunk)."""

from __future__ import annotations

import re
from pathlib import Path

from ...core.config import read_json
from ...core.errors import KvtierError
from .common import Imported, Window, require

TOOL = "vllm bench serve"
DEFINITIONS = {
    "ttft_s": "vllm bench serve: first streamed event with a choice minus send, per successful request; median = "
              "numpy.median, pNN = numpy.percentile (linear)",
    "tpot_s": "vllm bench serve: (latency - TTFT) / (output tokens - 1), per request with more than one token",
    "itl_s": "vllm bench serve: gaps between streamed events, pooled over requests",
    "e2e_s": "vllm bench serve: last event minus send, per successful request",
    "output_tok_s": "vllm bench serve: output tokens of successful requests / benchmark duration",
    "request_rate_per_s": "vllm bench serve: completed requests / benchmark duration",
    "duration_s": "vllm bench serve: benchmark duration (first send to last response)",
    "requests": "vllm bench serve: completed and failed requests",
    "tokens": "vllm bench serve: prompt tokens of every request as sent, output tokens counted by its tokenizer",
}
FAMILIES = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2el": "e2e_s"}
LATENCY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
SCALARS = {"duration": "duration_s", "completed": "requests.ok", "failed": "requests.failed",
           "total_input_tokens": "prompt_tokens", "total_output_tokens": "output_tokens",
           "output_throughput": "output_tok_s.aggregate", "request_throughput": "request_rate_per_s"}
METADATA = ("date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
            "burstiness", "max_concurrency", "sampling_params", "ramp_up_strategy", "ramp_up_start_rps",
            "ramp_up_end_rps", "vllm_version")


def parse(path: Path) -> Imported:
    result = read_json(path, "vllm bench serve result")
    if not isinstance(result, dict):
        raise KvtierError(f"{path}: a vllm bench serve result is a JSON object")
    require(result, "completed", path, (int,))
    require(result, "duration", path)
    metrics, unmapped = {}, []
    for key, value in sorted(result.items()):
        found = LATENCY.match(key)
        if key in METADATA:
            continue
        if key in SCALARS and isinstance(value, (int, float)):
            metrics[SCALARS[key]] = value
        elif found and isinstance(value, (int, float)):
            stat, family = found.groups()
            if stat == "std":
                unmapped.append({"field": key, "value": value, "why": "kvtier's summary keeps no standard deviation"})
                continue
            name = "p50" if stat == "median" else stat
            if name not in ("p50", "p90", "p95", "p99", "mean"):
                unmapped.append({"field": key, "value": value, "why": "kvtier's summary keeps p50, p90, p95, p99"})
                continue
            metrics[f"{FAMILIES[family]}.{name}"] = value / 1000
        else:
            shown = value if not isinstance(value, list) else f"[{len(value)} per-request values]"
            unmapped.append({"field": key, "value": shown, "why": "no counterpart in kvtier's summary"})
    if isinstance(result.get("num_prompts"), int):
        metrics["requests.total"] = result["num_prompts"]
    concurrency = result.get("max_concurrency") if isinstance(result.get("max_concurrency"), int) else None
    window = Window(window=f"c{concurrency}" if concurrency else "open-loop", concurrency=concurrency,
                    metrics=metrics, definitions=dict(DEFINITIONS))
    return Imported(tool=TOOL, tool_version=_version(result), windows=[window], unmapped=unmapped,
                    metadata={k: result[k] for k in METADATA if k in result})


def _version(result: dict) -> str | None:
    # The result carries no version of its own; kvtier's peer runs add it under `vllm_version` (--metadata).
    return result.get("vllm_version")

