"""R5, the soak's tables, from its raw files (kvtier.runs.soak): one row per window of the soak clock, one row per
fault, and what the telemetry cost.

A window's requests are those due in it (`labels.at_s`); its counters are the servers' /metrics series from the
samples, made monotonic across restarts (a server that starts again counts from zero: what it counted before is
kept, what it counts after is added), taken at the last sample in the window against the last one before it. A
window is *steady* when no fault touched it: none fired, no server exited or restarted, and no fault was still
being recovered from, in it; the first window (warm-up) is not steady either.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..bench.records import latest_per_request, read_records
from ..core.config import read_json
from ..core.errors import KvtierError
from ..runs.campaign import L1_HITS, L2_HITS, SOURCE

NS = 1e9
MB = 1024 * 1024
L2_STORED = "lmcache_mp_l2_store_completed_objects_chunks_total"
L2_LOADED = "lmcache_mp_l2_prefetch_load_completed_chunks_total"
# Events that start a fault's disturbance, and those that end it (kvtier.runs.soak's events.jsonl).
ENDS = {"kill_lmcache": "serving", "kill_vllm": "serving", "pool_full": "cleared", "corrupt_chunk": "fault"}
GRACE_S = 5.0  # after a fault's end, requests still in flight from before it may fail: counted with the fault


def _jsonl(path: Path) -> list[dict]:
    return list(read_records(path))


def load(run_dir: str | os.PathLike) -> dict:
    """The soak's record, its requests (the newest record of each), samples and events."""
    run_dir = Path(run_dir)
    run = read_json(run_dir / "run.json", "soak record (run.json)")
    if run.get("kind") != "soak":
        raise KvtierError(f"{run_dir / 'run.json'}: not a soak's record")
    records = latest_per_request(read_records(run_dir / "requests.jsonl"))
    samples = _jsonl(run_dir / "samples.jsonl")
    if not samples:
        raise KvtierError(f"{run_dir / 'samples.jsonl'}: no telemetry sample")
    return {"run": run, "records": records, "samples": samples, "events": _jsonl(run_dir / "events.jsonl"),
            "window_s": float(run["config"]["window_s"]), "duration_s": float(run["config"]["duration_s"])}


def fault_spans(events: list[dict], faults: list[dict]) -> list[dict]:
    """Each fault that fired: its kind, when it fired, when it ended (the stack serving again, the pool freed, the
    probe done), and every event between."""
    spans = []
    for index, fault in enumerate(faults):
        mine = [e for e in events if e.get("fault") == index]
        fired = next((e for e in mine if e["kind"] == "fault"), None)
        if fired is None:
            continue
        end_kind = ENDS[fault["kind"]]
        ended = next((e for e in mine if e["kind"] == end_kind and e["t"] >= fired["t"]
                      and (end_kind != "fault" or e is fired)), None)
        spans.append({"fault": index, "kind": fault["kind"], "at_s": fault["at_s"], "fired_s": fired["t"],
                      "end_s": ended["t"] if ended else None, "fired": fired, "events": mine,
                      "skipped": bool(fired.get("skipped"))})
    return spans


def _monotonic(samples: list[dict], server: str) -> pd.DataFrame:
    """Each counter of a server over the samples, made monotonic across restarts; rows are sample times."""
    rows, last, total = [], {}, {}
    for sample in samples:
        found = (sample.get("counters") or {}).get(server)
        if not found:
            continue
        row = {"t": sample["t"]}
        for key, value in found.items():
            if key.endswith("_usage_bytes"):
                continue
            previous = last.get(key)
            step = value if previous is None or value < previous else value - previous
            if previous is None:
                step = value if rows else 0.0  # the first sample is the baseline
            total[key] = total.get(key, 0.0) + step
            last[key] = value
        row.update(total)
        rows.append(row)
    return pd.DataFrame(rows)


def _delta(series: pd.DataFrame, start: float, end: float, name: str, label: str = "") -> float | None:
    if series.empty:
        return None
    columns = [c for c in series.columns if c != "t" and c.split("{", 1)[0] == name and label in c]
    if not columns:
        return 0.0
    before, inside = series[series["t"] < start], series[series["t"] < end]
    if inside.empty:
        return None
    first = before.iloc[-1][columns].fillna(0).sum() if not before.empty else 0.0
    return float(inside.iloc[-1][columns].fillna(0).sum() - first)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def windows(data: dict) -> pd.DataFrame:
    """One row per window of the soak clock (see the module docstring)."""
    width, duration = data["window_s"], data["duration_s"]
    faults = data["run"]["config"]["fault_list"]
    spans = fault_spans(data["events"], faults)
    vllm, lmcache = _monotonic(data["samples"], "vllm"), _monotonic(data["samples"], "lmcache")
    soak = [r for r in data["records"] if r["phase"] == "soak"]
    rows = []
    for number in range(max(1, math.ceil(duration / width))):
        start, end = number * width, min(duration, (number + 1) * width)
        mine = [r for r in soak if start <= r["labels"]["at_s"] < end]
        ok = [r for r in mine if r["error"] is None]
        causes: dict[str, int] = {}
        for r in mine:
            if r["error"] is not None:
                causes[r["error"]["class"]] = causes.get(r["error"]["class"], 0) + 1
        ttft = [(r["first_token_ns"] - r["send_ns"]) / NS for r in ok if r["first_token_ns"] is not None]
        tokens = sum(r["completion_tokens"] or len(r["token_ns"]) for r in ok)
        inside = [s for s in data["samples"] if start <= s["t"] < end] or [
            min(data["samples"], key=lambda s: abs(s["t"] - start))]
        touched = [s["kind"] for s in spans if _overlaps(s, start, end) and not s["skipped"]]
        prompt = _delta(vllm, start, end, SOURCE)
        external = _delta(vllm, start, end, SOURCE, 'source="external_kv_transfer"')
        l1, l2 = _delta(lmcache, start, end, L1_HITS), _delta(lmcache, start, end, L2_HITS)
        l1_share = l1 / (l1 + l2) if l1 is not None and l2 is not None and (l1 + l2) > 0 else 0.0

        def share(value, prompt=prompt):
            return value / prompt if value is not None and prompt else None

        chunk = _chunk_bytes(inside)
        row = {"window": number, "start_s": start, "end_s": end, "requests": len(mine), "ok": len(ok),
               "failed": len(mine) - len(ok), "failed_by_cause": json.dumps(causes, sort_keys=True),
               "ttft_p50_s": _pct(ttft, 50), "ttft_p99_s": _pct(ttft, 99), "output_tok_s": tokens / (end - start),
               "engine_frac": share(_delta(vllm, start, end, SOURCE, 'source="local_cache_hit"')),
               "l1_frac": share(external * l1_share if external is not None else None),
               "l2_frac": share(external * (1 - l1_share) if external is not None else None),
               "recompute_frac": share(_delta(vllm, start, end, SOURCE, 'source="local_compute"')),
               "l2_hit_tokens": l2}
        for server in ("vllm", "lmcache"):
            up = [s["servers"][server] for s in inside if server in s["servers"]]
            row[f"{server}_rss_mb"] = max((u["rss_bytes"] for u in up), default=0) / MB or None
            row[f"{server}_anon_mb"] = max((u.get("anon_bytes", 0) for u in up), default=0) / MB or None
            row[f"{server}_fds"] = max((u["fds"] for u in up), default=None)
        last = inside[-1]["pool"]
        row.update({"pool_files": last["files"], "pool_mb": last["bytes"] / MB,
                    "free_mb": (min(s["pool"]["free_bytes"] for s in inside if s["pool"]["free_bytes"] is not None)
                                / MB if any(s["pool"]["free_bytes"] is not None for s in inside) else None)})
        for name, counter in (("l2_write_mb_s", L2_STORED), ("l2_read_mb_s", L2_LOADED)):
            chunks = _delta(lmcache, start, end, counter)
            row[name] = chunks * chunk / MB / (end - start) if chunks is not None and chunk else None
        row["faults"] = ", ".join(touched)
        row["steady"] = number > 0 and not touched
        rows.append(row)
    return pd.DataFrame(rows)


def _overlaps(span: dict, start: float, end: float) -> bool:
    stop = (span["end_s"] if span["end_s"] is not None else math.inf) + GRACE_S
    return span["fired_s"] < end and stop >= start


def _chunk_bytes(samples: list[dict]) -> float | None:
    """The size of one chunk file, from the pool's files and bytes (every chunk of one model is the same size)."""
    for sample in reversed(samples):
        if sample["pool"]["files"]:
            return sample["pool"]["bytes"] / sample["pool"]["files"]
    return None


def failures(data: dict) -> dict:
    """Failed soak requests, inside a fault's span (with its grace) or outside every one, by cause."""
    faults = data["run"]["config"]["fault_list"]
    spans = [s for s in fault_spans(data["events"], faults) if not s["skipped"]]
    inside, outside = {}, {}
    for r in data["records"]:
        if r["phase"] != "soak" or r["error"] is None:
            continue
        at = r["labels"]["at_s"]
        where = inside if any(s["fired_s"] - GRACE_S <= at <= (s["end_s"] or math.inf) + GRACE_S for s in spans) \
            else outside
        where[r["error"]["class"]] = where.get(r["error"]["class"], 0) + 1
    return {"during_faults": inside, "outside_faults": outside}


def monitor_share(data: dict) -> float | None:
    """The telemetry thread's CPU seconds over the soak's wall seconds, per segment summed (its clock restarts)."""
    cpu = wall = 0.0
    segment: list[dict] = []
    for sample in data["samples"] + [None]:
        if sample is None or (segment and sample["monitor_cpu_s"] < segment[-1]["monitor_cpu_s"]):
            if len(segment) > 1:
                cpu += segment[-1]["monitor_cpu_s"] - segment[0]["monitor_cpu_s"]
                wall += segment[-1]["wall"] - segment[0]["wall"]
            segment = []
        if sample is not None:
            segment.append(sample)
    return cpu / wall if wall > 0 else None


OUTPUT_FILES = {"windows": "R5_windows.csv", "faults": "R5_faults.csv", "chart": "R5_soak"}


def faults_table(data: dict) -> pd.DataFrame:
    """One row per scheduled fault: when it was due and fired, what it did, how long until the stack served again
    (or the pool was freed), and for a corrupted chunk what the damaged and the intact probe came back as."""
    spans = {s["fault"]: s for s in fault_spans(data["events"], data["run"]["config"]["fault_list"])}
    rows = []
    for index, fault in enumerate(data["run"]["config"]["fault_list"]):
        span = spans.get(index)
        row = {"fault": index, "kind": fault["kind"], "at_s": fault["at_s"], "fired_s": None, "skipped": False,
               "recovered_after_s": None, "what_happened": "never fired"}
        if span is not None:
            row.update(fired_s=span["fired_s"], skipped=span["skipped"], what_happened=_what(span))
            if span["end_s"] is not None and fault["kind"] != "corrupt_chunk":
                row["recovered_after_s"] = round(span["end_s"] - span["fired_s"], 3)
        rows.append(row)
    return pd.DataFrame(rows, columns=["fault", "kind", "at_s", "fired_s", "skipped", "recovered_after_s",
                                       "what_happened"])


def _what(span: dict) -> str:
    fired, events = span["fired"], span["events"]
    if span["skipped"]:
        return f"not injected: {fired.get('why')}"
    kind = span["kind"]
    if kind in ("kill_lmcache", "kill_vllm"):
        parts = [f"SIGKILL to {fired.get('server')} (pid {fired.get('pid')})"]
        for e in events:
            if e["kind"] == "exit":
                parts.append(f"exit {e.get('code')} seen at {e['t']:.1f} s")
            elif e["kind"] == "ready":
                parts.append(f"{e.get('server')} restarted in {e.get('took_s'):.1f} s")
            elif e["kind"] == "serving":
                parts.append(f"serving at {e['t']:.1f} s")
            elif e["kind"] == "pool_check":
                probe = e["probe"]
                parts.append("a prompt stored after it came back from the pool "
                             + ("unchanged" if probe["external_tokens"] and probe["identical"] else
                                "CHANGED" if probe["external_tokens"] else "(not from the pool)"))
        return "; ".join(parts)
    if kind == "pool_full":
        cleared = next((e for e in events if e["kind"] == "cleared"), None)
        return (f"{fired.get('filled_bytes', 0) / MB:.0f} MB of filler, {fired.get('free_bytes', 0) / MB:.1f} MB left"
                + (f"; freed at {cleared['t']:.1f} s" if cleared else "; never freed"))
    probes = fired.get("probes") or {}
    out = []
    for role in ("corrupted", "control"):
        p = probes.get(role)
        if p:
            out.append(f"{role} probe ({len(p['chunks'])} chunk files): {p['external_tokens']:.0f} tokens from the "
                       f"pool, output {'unchanged' if p['identical'] else 'CHANGED'}")
    return "; ".join(out) or "the probes did not run"


def chart(data: dict, table: pd.DataFrame | None = None):
    from .charts import soak_chart
    table = windows(data) if table is None else table
    return soak_chart(table, faults_table(data))


def write_evidence(data: dict, out_dir: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    from ..core.table_io import write_table
    from .charts import save_chart
    out_dir = Path(out_dir)
    table = windows(data)
    return [write_table(table, out_dir / OUTPUT_FILES["windows"]),
            write_table(faults_table(data), out_dir / OUTPUT_FILES["faults"]),
            *save_chart(chart(data, table), out_dir / OUTPUT_FILES["chart"], png_scale)]
