"""Statistics of a measured window, as defined in workflow/schemas/summary.schema.yaml.

    TTFT       first non-empty token − send
    ITL        gap between consecutive token chunks of one stream (pooled over requests)
    TPOT       (last token − first token) / (completion tokens − 1), per request with at least two tokens
    E2E        end of response − send
    output tok/s, aggregate    completion tokens of successful requests / window duration
    output tok/s, per request  completion tokens / E2E of that request
    goodput    successful requests whose TTFT ≤ the SLA, per second of the window
Percentiles are numpy's linear interpolation; times in seconds.
"""

from __future__ import annotations

import numpy as np

NS = 1e9
PERCENTILES = (50, 90, 95, 99)


def distribution(values: list[float]) -> dict | None:
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    out = {f"p{p}": float(np.percentile(arr, p)) for p in PERCENTILES}
    out.update(mean=float(arr.mean()), min=float(arr.min()), max=float(arr.max()), count=int(arr.size))
    return out


def window_stats(records: list[dict], ttft_sla_s: float | None) -> dict:
    ok = [r for r in records if r["error"] is None]
    failed = [r for r in records if r["error"] is not None]
    start = min((r["send_ns"] for r in records if r["send_ns"] is not None), default=None)
    end = max((r["end_ns"] for r in records if r["end_ns"] is not None), default=None)
    duration = (end - start) / NS if start is not None and end is not None and end > start else None
    ttft = [(r["first_token_ns"] - r["send_ns"]) / NS for r in ok if r["first_token_ns"] is not None]
    e2e = [(r["end_ns"] - r["send_ns"]) / NS for r in ok]
    itl, tpot, per_request = [], [], []
    for r in ok:
        marks = r["token_ns"]
        itl += [(b - a) / NS for a, b in zip(marks, marks[1:])]
        n = r["completion_tokens"] or len(marks)
        if n > 1 and len(marks) >= 2:
            tpot.append((marks[-1] - marks[0]) / NS / (n - 1))
        if n and r["end_ns"] > r["send_ns"]:
            per_request.append(n / ((r["end_ns"] - r["send_ns"]) / NS))
    output_tokens = sum((r["completion_tokens"] or len(r["token_ns"])) for r in ok)
    errors: dict[str, int] = {}
    for r in failed:
        errors[r["error"]["class"]] = errors.get(r["error"]["class"], 0) + 1
    stats = {
        "requests": {"total": len(records), "ok": len(ok), "failed": len(failed), "errors": errors},
        "duration_s": duration,
        "ttft_s": distribution(ttft),
        "itl_s": distribution(itl),
        "tpot_s": distribution(tpot),
        "e2e_s": distribution(e2e),
        "output_tokens": output_tokens,
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
        "cached_tokens": (sum(r["cached_tokens"] for r in ok if r["cached_tokens"] is not None)
                          if any(r["cached_tokens"] is not None for r in ok) else None),
        "output_tok_s": {"aggregate": output_tokens / duration if duration else None,
                         "per_request": distribution(per_request)},
        "request_rate_per_s": len(ok) / duration if duration else None,
    }
    if ttft_sla_s is not None:
        within = sum(1 for t in ttft if t <= ttft_sla_s)
        stats["goodput"] = {"ttft_sla_s": ttft_sla_s, "requests_within_sla": within,
                            "fraction": within / len(records) if records else None,
                            "requests_per_s": within / duration if duration else None}
    return stats


def reconcile(client: dict, server: dict | None) -> dict:
    """Client TTFT against vLLM's TTFT histogram over the same window. The server measures from the request's
    arrival in the engine, the client from its send: the difference is HTTP, queueing outside the engine and
    the client itself."""
    if server is None or client.get("ttft_s") is None:
        return {"available": False, "why": "no server TTFT histogram delta for this window"
                if server is None else "no successful requests"}
    c = client["ttft_s"]
    return {
        "available": True,
        "client_count": c["count"], "server_count": server["count"],
        "client_mean_s": c["mean"], "server_mean_s": server["mean_s"],
        "client_p50_s": c["p50"], "server_p50_s": server["p50_s"],
        "mean_difference_s": c["mean"] - server["mean_s"],
        "note": "server p50 is interpolated within histogram buckets",
    }
