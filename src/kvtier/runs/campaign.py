"""A campaign: every tier's cold-resume run, then the R2-shaped readings, attribution and correctness tables.

    raw_data/runs/<campaign>/<tier>/          one `kvtier bench` run directory per tier (tier_run.run_tier), and
                                              cross_instance/ for R3 (tier_run.run_cross_instance)
    raw_data/runs/<campaign>/R2_readings.csv  TTFT p50 and output tok/s per tier x concurrency: only valid windows
    raw_data/runs/<campaign>/attribution.csv  which source served each window's prompt tokens, and the verdict
    raw_data/runs/<campaign>/correctness.csv  greedy outputs of each resume against the recompute tier's
    raw_data/runs/<campaign>/conditions.json  workload, and the platform (each run's probes/platform.json)

Attribution rules (a window that breaks its rule is invalid: shown as such, never reported as a reading):
    recompute    at least 95 % of prompt tokens computed locally, none from a cache or a connector
    engine       at least half of the prompt tokens from vLLM's own prefix cache
    dram         at least half from the connector, served by LMCache L1, none by L2
    local_disk,  at least half from the connector, served by LMCache L2
    shared_pool
    cross_instance  the same on the reader (instance B), and the writer (instance A) served no prompt token
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ..bench.records import latest_per_request, read_records
from ..bench.runner import RUN_FILE
from ..core.atomic import write_text
from ..core.table_io import write_table
from ..core.tiers import CROSS_INSTANCE, TIER_NAMES
from ..probes import platform_probe, quiet
from ..probes.platform_probe import PLATFORM_FILE
from .tier_run import POOL_FILE

SOURCE = 'vllm:prompt_tokens_by_source_total'
L1_HITS, L2_HITS = "lmcache_mp_lookup_hit_l1_tokens_total", "lmcache_mp_lookup_hit_l2_tokens_total"


def _sum(deltas: dict, name: str, label: str | None = None) -> float:
    return sum(v for k, v in deltas.items() if k.split("{", 1)[0] == name and (label is None or label in k))


def attribution(tier: str, window: dict) -> dict:
    vllm = window["server_metrics"].get("vllm", {}).get("deltas", {})
    lmcache = window["server_metrics"].get("lmcache", {}).get("deltas", {})
    row = {
        "tier": tier, "concurrency": window["concurrency"], "prompt_tokens": window["prompt_tokens"],
        "local_compute": _sum(vllm, SOURCE, 'source="local_compute"'),
        "local_cache_hit": _sum(vllm, SOURCE, 'source="local_cache_hit"'),
        "external_kv_transfer": _sum(vllm, SOURCE, 'source="external_kv_transfer"'),
        "l1_hit_tokens": _sum(lmcache, L1_HITS), "l2_hit_tokens": _sum(lmcache, L2_HITS),
    }
    prompt = row["prompt_tokens"] or 0
    half = prompt / 2
    rules = {
        "recompute": (row["local_compute"] >= 0.95 * prompt and not row["local_cache_hit"]
                      and not row["external_kv_transfer"], "prompt computed locally"),
        "engine": (row["local_cache_hit"] >= half, "prefix from vLLM's prefix cache"),
        "dram": (row["external_kv_transfer"] >= half and row["l1_hit_tokens"] >= half and not row["l2_hit_tokens"],
                 "prefix from LMCache L1"),
        "local_disk": (row["external_kv_transfer"] >= half and row["l2_hit_tokens"] >= half,
                       "prefix from LMCache L2"),
    }
    rules["shared_pool"] = rules["local_disk"]
    writer = window["server_metrics"].get("writer_vllm", {})
    row["writer_prompt_tokens"] = _sum(writer.get("deltas", {}), SOURCE) if writer else None
    # R3: the reader's prefix came from L2, i.e. from the chunks the writer stored; the writer served nothing.
    rules[CROSS_INSTANCE] = (rules["local_disk"][0] and writer.get("available", False)
                             and not row["writer_prompt_tokens"], "prefix from the pool the other instance wrote")
    valid, expected = rules[tier]
    row["valid"] = bool(valid and prompt > 0 and window["requests"]["failed"] == 0)
    found = window.get("quiet") or {}  # kvtier.probes.quiet: empty when the run did not check
    row["quiet"] = found.get("quiet")
    row["quiet_waited_s"] = found.get("waited_s")
    row["rule"] = expected
    if window["requests"]["failed"]:
        row["rule"] += f"; {window['requests']['failed']} request(s) failed"
    return row


def _outputs(run_dir: Path) -> dict[tuple[str, int], str]:
    """{(session, concurrency): output text} of the resume requests of one tier."""
    out = {}
    for r in latest_per_request(read_records(run_dir / "requests.jsonl")):
        if r["phase"].startswith("resume-c") and r["error"] is None:
            out[(r["labels"]["session"], r["concurrency"])] = r["output_text"]
    return out


def aggregate(campaign_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """Build the campaign's tables from its tier run directories and write them as CSV."""
    campaign_dir = Path(campaign_dir)
    tiers = [t for t in (*TIER_NAMES, CROSS_INSTANCE) if (campaign_dir / t / "summary.json").is_file()]
    readings, attributions, correctness, quiet_of = [], [], [], []
    reference = _outputs(campaign_dir / "recompute") if "recompute" in tiers else {}
    for tier in tiers:
        summary = json.loads((campaign_dir / tier / "summary.json").read_text())
        outputs = _outputs(campaign_dir / tier)
        for window in summary["windows"]:
            row = attribution(tier, window)
            attributions.append(row)
            quiet_of.append((tier, window))
            c = window["concurrency"]
            pairs = [(s, text) for (s, conc), text in outputs.items() if conc == c]
            matched = sum(1 for s, text in pairs if reference.get((s, c)) == text)
            compared = sum(1 for s, _ in pairs if (s, c) in reference)
            correctness.append({"tier": tier, "concurrency": c, "sessions": len(pairs), "compared": compared,
                                "identical_to_recompute": matched,
                                "all_identical": bool(compared and matched == compared == len(pairs))})
            ttft = window["ttft_s"] or {}
            readings.append({"tier": tier, "concurrency": c,
                             "ttft_p50_s": ttft.get("p50") if row["valid"] else None,
                             "output_tok_s": window["output_tok_s"]["aggregate"] if row["valid"] else None})
    windows = [(f"{tier} at concurrency {w['concurrency']}", w.get("quiet")) for tier, w in quiet_of]
    written = {**conditions(campaign_dir, tiers), "quiet": quiet.summary(windows)}
    write_text(campaign_dir / "conditions.json", json.dumps(written, indent=2) + "\n")
    tables = {"R2_readings": pd.DataFrame(readings, columns=["tier", "concurrency", "ttft_p50_s", "output_tok_s"]),
              "attribution": pd.DataFrame(attributions), "correctness": pd.DataFrame(correctness)}
    for name, frame in tables.items():
        write_table(frame, campaign_dir / f"{name}.csv")
    return tables


def _cross_instance(campaign_dir: Path) -> dict:
    """What instance A left on the pool before B resumed (written by the R3 run's first eviction)."""
    path = campaign_dir / CROSS_INSTANCE / POOL_FILE
    return {"pool_after_populate": json.loads(path.read_text()) if path.is_file() else None}


def _platform(campaign_dir: Path, tier: str) -> dict:
    return platform_probe.read(campaign_dir / tier / PLATFORM_FILE)


def conditions(campaign_dir: Path, tiers: list[str]) -> dict:
    """The campaign's conditions, from its runs' own records: the workload from run.json, the platform from each
    run's probe (R4). The runs must agree on host, versions and model; where they do not, `consistent` says so."""
    runs = {tier: json.loads((campaign_dir / tier / RUN_FILE).read_text()) for tier in tiers}
    run = runs[tiers[0]] if tiers else {}
    settings = run.get("config", {})
    probes = {tier: _platform(campaign_dir, tier) for tier in tiers}
    first = next(iter(probes.values()), None)
    pools = {}
    for tier in tiers:
        if runs[tier].get("metadata", {}).get("pool"):
            name = "shared_pool" if tier == CROSS_INSTANCE else tier
            pools[tier] = probes[tier]["storage"][name]
    # Every probe records both pool paths, so this holds whichever tiers ran.
    same = bool(first) and first["storage"]["local_disk"]["st_dev"] == first["storage"]["shared_pool"]["st_dev"]

    def signature(p: dict) -> tuple:
        return (p["host"]["node"], p["cpu"]["model"], json.dumps(p["software"]["packages"], sort_keys=True),
                p["software"]["lmcache"]["patch_set"], (p["model"] or {}).get("config_hash"))

    return {
        "workload": {k: settings.get(k) for k in ("sessions", "context_tokens", "followup_tokens", "output_tokens",
                                                  "concurrency", "seed")},
        "served_model": settings.get("model"),
        "max_model_len": run.get("server_model", {}).get("max_model_len"),
        "platform": first,
        "platform_file": {tier: f"{tier}/{PLATFORM_FILE}" for tier in tiers},
        "consistent": len({signature(p) for p in probes.values()}) <= 1,
        "pools": pools,
        "pools_on_same_device": same,
        "tiers": tiers,
        CROSS_INSTANCE: _cross_instance(campaign_dir) if CROSS_INSTANCE in tiers else None,
    }
