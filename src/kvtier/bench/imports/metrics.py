"""The comparable metrics of a run, whatever made it: a kvtier bench run (summary.json, one entry per window) or an
imported one (imported.json). Names are kvtier's summary paths (ttft_s.p50, output_tok_s.aggregate, requests.ok),
values in its units (seconds, tokens, per second)."""

from __future__ import annotations

import functools
from pathlib import Path

from ...core.config import load_yaml, read_json
from ...core.errors import KvtierError
from ...core.paths import schema_path
from .common import IMPORTED_FILE, Window

DISTRIBUTIONS = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
STATISTICS = ("p50", "p90", "p95", "p99", "mean")
SUMMARY_FILE = "summary.json"


@functools.cache
def kvtier_definitions() -> dict[str, str]:
    """What kvtier means by each metric family: the summary schema's own descriptions (read once)."""
    schema = load_yaml(schema_path("summary"))
    window = schema["properties"]["windows"]["items"]["properties"]
    found = {name: f"kvtier bench: {window[name]['description']}" for name in (*DISTRIBUTIONS, "duration_s",
                                                                               "request_rate_per_s")}
    found["output_tok_s"] = f"kvtier bench: {window['output_tok_s']['properties']['aggregate']['description']}"
    found["requests"] = "kvtier bench: requests of the window, ok and failed (a failure is recorded with its cause)"
    found["tokens"] = "kvtier bench: prompt and completion tokens of successful requests, as the server's usage says"
    return found


def of_summary_window(entry: dict) -> Window:
    metrics: dict[str, float] = {}
    for family in DISTRIBUTIONS:
        for stat in STATISTICS:
            if isinstance(entry.get(family), dict) and isinstance(entry[family].get(stat), (int, float)):
                metrics[f"{family}.{stat}"] = entry[family][stat]
    for key in ("total", "ok", "failed"):
        if isinstance(entry.get("requests", {}).get(key), int):
            metrics[f"requests.{key}"] = entry["requests"][key]
    for key in ("duration_s", "request_rate_per_s", "output_tokens", "prompt_tokens"):
        if isinstance(entry.get(key), (int, float)):
            metrics[key] = entry[key]
    if isinstance((entry.get("output_tok_s") or {}).get("aggregate"), (int, float)):
        metrics["output_tok_s.aggregate"] = entry["output_tok_s"]["aggregate"]
    return Window(window=entry["window"], concurrency=entry.get("concurrency"), metrics=metrics,
                  definitions=dict(kvtier_definitions()))


def load(run: str | Path) -> tuple[str, list[Window]]:
    """(what made it, its windows) of a run folder: kvtier's (summary.json) or an imported one (imported.json)."""
    run = Path(run)
    if (run / IMPORTED_FILE).is_file():
        record = read_json(run / IMPORTED_FILE, "kvtier imported run")
        try:
            windows = [Window(**w) for w in record["windows"]]
            source = record["source"]
        except (KeyError, TypeError) as err:
            raise KvtierError(f"{run / IMPORTED_FILE}: not an imported run ({err})") from None
        version = f" {source['tool_version']}" if source.get("tool_version") else ""
        return f"{source['tool']}{version}, imported", windows
    if (run / SUMMARY_FILE).is_file():
        summary = read_json(run / SUMMARY_FILE, "kvtier bench summary")
        if not isinstance(summary, dict) or not isinstance(summary.get("windows"), list):
            raise KvtierError(f"{run / SUMMARY_FILE}: key 'windows' must list the run's windows")
        return "kvtier bench", [of_summary_window(w) for w in summary["windows"]]
    raise KvtierError(f"{run}: neither a kvtier run ({SUMMARY_FILE}) nor an imported one ({IMPORTED_FILE})")


def pick(run: str | Path, windows: list[Window], name: str | None) -> Window:
    if name is None:
        if len(windows) != 1:
            raise KvtierError(f"{run}: {len(windows)} windows ({', '.join(w.window for w in windows)}); "
                              f"name one with --window-a / --window-b")
        return windows[0]
    for window in windows:
        if window.window == name:
            return window
    raise KvtierError(f"{run}: no window {name!r}; it has {', '.join(w.window for w in windows)}")
