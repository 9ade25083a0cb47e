"""A campaign: every tier's cold-resume run in each of k rounds, then the R2-shaped tables over the rounds.

    raw_data/runs/<campaign>/round-<r>/<kind>/  one `kvtier bench` run directory per tier and round
                                                (tier_run.run_tier), and cross_instance/ for R3
                                                (kvtier.runs.cross_instance); the rounds' order is rotated
                                                (kvtier.runs.order); a run starts its servers, or measures on
                                                those the tier before it started (runs.share_servers)
    raw_data/runs/<campaign>/R2_rounds.csv      TTFT p50 and output tok/s per round x tier x concurrency: only
                                                valid windows (the raw material of every interval)
    raw_data/runs/<campaign>/R2_readings.csv    the median over the rounds of each tier x concurrency, in the
                                                published R2 table's shape (what `kvtier audit --runs` reads)
    raw_data/runs/<campaign>/attribution.csv    which source served each window's prompt tokens, and the verdict
    raw_data/runs/<campaign>/correctness.csv    greedy outputs of each resume against the same round's recompute
    raw_data/runs/<campaign>/conditions.json    workload, rounds and the order they ran in, and the platform
                                                (each run's probes/platform.json)

Attribution rules (a window that breaks its rule is invalid: shown as such, never reported as a reading):
    recompute    at least 95 % of prompt tokens computed locally, none from a cache or a connector
    engine       at least half of the prompt tokens from vLLM's own prefix cache
    dram         at least half from the connector, served by LMCache L1, none by L2
    local_disk,  at least half from the connector, served by LMCache L2
    shared_pool
    cross_instance  the same on the reader (instance B), and the writer (instance A) had stopped before B started
                    (its hand-off, kvtier.runs.cross_instance)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..bench.records import latest_per_request, read_records
from ..bench.runner import RUN_FILE
from ..core.atomic import write_text
from ..core.errors import KvtierError
from ..core.table_io import write_table
from ..core.tiers import CROSS_INSTANCE, L2_TIERS, TIER_NAMES
from ..probes import platform_probe, quiet
from ..probes.platform_probe import PLATFORM_FILE
from .cross_instance import POOL_FILE

SOURCE = 'vllm:prompt_tokens_by_source_total'
L1_HITS, L2_HITS = "lmcache_mp_lookup_hit_l1_tokens_total", "lmcache_mp_lookup_hit_l2_tokens_total"


def series_sum(deltas: dict, name: str, label: str | None = None) -> float:
    """The sum of a metric's series (`name`, any labels; those whose labels contain `label` when given)."""
    return sum(v for k, v in deltas.items() if k.split("{", 1)[0] == name and (label is None or label in k))


def token_sources(window: dict) -> dict:
    """Where a window's prompt tokens came from, by the servers' /metrics deltas: computed by vLLM, its prefix
    cache, the connector (LMCache), and LMCache's L1 and L2 hits."""
    vllm = window["server_metrics"].get("vllm", {}).get("deltas", {})
    lmcache = window["server_metrics"].get("lmcache", {}).get("deltas", {})
    return {"prompt_tokens": window["prompt_tokens"],
            "local_compute": series_sum(vllm, SOURCE, 'source="local_compute"'),
            "local_cache_hit": series_sum(vllm, SOURCE, 'source="local_cache_hit"'),
            "external_kv_transfer": series_sum(vllm, SOURCE, 'source="external_kv_transfer"'),
            "l1_hit_tokens": series_sum(lmcache, L1_HITS), "l2_hit_tokens": series_sum(lmcache, L2_HITS)}


def attribution(tier: str, window: dict, handoff: dict | None = None) -> dict:
    """Where a window's prompt came from and whether that is its tier's (rules above); `handoff` is an R3 run's
    (run.json metadata: kvtier.runs.cross_instance)."""
    row = {"tier": tier, "concurrency": window["concurrency"], **token_sources(window)}
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
    # R3: the reader's prefix came from L2, i.e. from the chunks the writer stored, and the writer had stopped
    # before the reader started (so it served nothing, and the reader's caches held nothing of A's sessions).
    row["writer_stopped"] = (bool(handoff) and handoff["writer_stopped"] <= handoff["reader_started"]
                             if tier == CROSS_INSTANCE else None)
    rules[CROSS_INSTANCE] = (rules["local_disk"][0] and row["writer_stopped"],
                             "prefix from the pool the other instance wrote, after it stopped")
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


ROUND_PREFIX = "round-"
READING_COLUMNS = ["tier", "concurrency", "ttft_p50_s", "output_tok_s"]


def round_dir(round_: int | str) -> str:
    """The folder of one round's runs, relative to the campaign."""
    return f"{ROUND_PREFIX}{round_}"


@dataclass(frozen=True)
class RunRef:
    round: int
    kind: str  # a tier, or cross_instance
    path: Path
    start: str  # run.json's start: the order the runs were actually measured in


def runs_of(campaign_dir: str | os.PathLike) -> list[RunRef]:
    """Every finished run of a campaign, in the order it was measured."""
    campaign_dir, found = Path(campaign_dir), []
    for folder in campaign_dir.glob(f"{ROUND_PREFIX}*"):
        number = folder.name[len(ROUND_PREFIX):]
        if not folder.is_dir() or not number.isdigit():
            continue
        for kind in (*TIER_NAMES, CROSS_INSTANCE):
            run = folder / kind
            if (run / "summary.json").is_file():
                start = json.loads((run / RUN_FILE).read_text()).get("start", "")
                found.append(RunRef(int(number), kind, run, start))
    return sorted(found, key=lambda r: (r.start, r.round, r.kind))


def aggregate(campaign_dir: str | os.PathLike, sequential: dict | None = None) -> dict[str, pd.DataFrame]:
    """Build the campaign's tables from its runs and write them as CSV, with its conditions; `sequential`: how its
    rounds were decided (kvtier.evidence.campaign_rounds.record), kept in the conditions."""
    campaign_dir = Path(campaign_dir)
    runs = runs_of(campaign_dir)
    if not runs:
        raise KvtierError(f"{campaign_dir}: no finished tier run under {round_dir('<r>')}/<tier>/")
    tables = collect(campaign_dir, runs)
    quiet_of = tables.pop("quiet")
    written = {**conditions(campaign_dir, runs), "quiet": quiet.summary(quiet_of),
               "sequential": sequential or {"stop": "fixed rounds", "rounds": len({r.round for r in runs})}}
    write_text(campaign_dir / "conditions.json", json.dumps(written, indent=2) + "\n")
    for name, frame in tables.items():
        write_table(frame, campaign_dir / f"{name}.csv")
    return tables


def collect(campaign_dir: Path, runs: list[RunRef]) -> dict:
    """The campaign's tables from `runs` (runs_of), written nowhere: R2_rounds, R2_readings, attribution and
    correctness, and `quiet` (each window's quiet check, named)."""
    rounds, attributions, correctness, quiet_of = [], [], [], []
    references = {r.round: _outputs(r.path) for r in runs if r.kind == "recompute"}
    for run in runs:
        summary = json.loads((run.path / "summary.json").read_text())
        handoff = json.loads((run.path / RUN_FILE).read_text()).get("metadata", {}).get("handoff")
        outputs, reference = _outputs(run.path), references.get(run.round, {})
        for window in summary["windows"]:
            row = {"round": run.round, **attribution(run.kind, window, handoff)}
            attributions.append(row)
            quiet_of.append((f"{run.kind} (round {run.round}) at concurrency {window['concurrency']}",
                             window.get("quiet")))
            c = window["concurrency"]
            pairs = [(s, text) for (s, conc), text in outputs.items() if conc == c]
            matched = sum(1 for s, text in pairs if reference.get((s, c)) == text)
            compared = sum(1 for s, _ in pairs if (s, c) in reference)
            correctness.append({"round": run.round, "tier": run.kind, "concurrency": c, "sessions": len(pairs),
                                "compared": compared, "identical_to_recompute": matched,
                                "all_identical": bool(compared and matched == compared == len(pairs))})
            ttft = window["ttft_s"] or {}
            rounds.append({"round": run.round, "tier": run.kind, "concurrency": c,
                           "ttft_p50_s": ttft.get("p50") if row["valid"] else None,
                           "output_tok_s": window["output_tok_s"]["aggregate"] if row["valid"] else None})
    by_round = _in_order(pd.DataFrame(rounds, columns=["round", *READING_COLUMNS]), ["tier", "concurrency", "round"])
    return {"R2_rounds": by_round, "R2_readings": medians(by_round),
            "attribution": _in_order(pd.DataFrame(attributions), ["tier", "concurrency", "round"]),
            "correctness": _in_order(pd.DataFrame(correctness), ["tier", "concurrency", "round"]),
            "quiet": quiet_of}


def _in_order(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Rows by tier in the report's order (TIER_NAMES, then cross_instance), then by the other keys."""
    rank = {kind: i for i, kind in enumerate((*TIER_NAMES, CROSS_INSTANCE))}
    ordered = frame.assign(_rank=frame["tier"].map(rank)).sort_values(["_rank", *keys[1:]], kind="stable")
    return ordered.drop(columns="_rank").reset_index(drop=True)


def medians(by_round: pd.DataFrame) -> pd.DataFrame:
    """The median over the rounds of every tier x concurrency (valid windows only; empty where none was)."""
    grouped = by_round.groupby(["tier", "concurrency"], sort=False)[["ttft_p50_s", "output_tok_s"]].median()
    return grouped.reset_index()[READING_COLUMNS]


def _cross_instance(run_dir: Path) -> dict:
    """What instance A left on the pool before B resumed, and the hosts of A and B (written by B from A's hand-off,
    kvtier.runs.cross_instance), in the first round's run."""
    path = run_dir / POOL_FILE
    return {"pool_after_populate": json.loads(path.read_text()) if path.is_file() else None}


def conditions(campaign_dir: Path, runs: list[RunRef]) -> dict:
    """The campaign's conditions, from its runs' own records: the workload from run.json, the platform from each
    run's probe (R4), and the rounds in the order they ran. The runs must agree on host, versions and model; where
    they do not, `consistent` says so."""
    records = {r.path: json.loads((r.path / RUN_FILE).read_text()) for r in runs}
    run = records[runs[0].path]
    settings = run.get("config", {})
    probes = {r.path: platform_probe.read(r.path / PLATFORM_FILE) for r in runs}
    first = probes[runs[0].path]
    pools = {}
    for r in runs:  # the pools the L2 tiers read (dram's LMCache may write one behind, never read it)
        pool = records[r.path].get("metadata", {}).get("pool")
        if r.kind in (*L2_TIERS, CROSS_INSTANCE) and r.kind not in pools and pool:
            pools[r.kind] = probes[r.path]["storage"]["shared_pool" if r.kind == CROSS_INSTANCE else r.kind]
    # Every probe records both pool paths, so this holds whichever tiers ran.
    same = first["storage"]["local_disk"]["st_dev"] == first["storage"]["shared_pool"]["st_dev"]

    def signature(p: dict) -> tuple:
        return (p["host"]["node"], p["cpu"]["model"], json.dumps(p["software"]["packages"], sort_keys=True),
                p["software"]["lmcache"]["patch_set"], (p["model"] or {}).get("config_hash"))

    kinds = [k for k in (*TIER_NAMES, CROSS_INSTANCE) if any(r.kind == k for r in runs)]
    cross = [r for r in runs if r.kind == CROSS_INSTANCE]
    return {
        "workload": {k: settings.get(k) for k in ("sessions", "context_tokens", "followup_tokens", "output_tokens",
                                                  "concurrency", "seed")},
        "served_model": settings.get("model"),
        "max_model_len": run.get("server_model", {}).get("max_model_len"),
        "platform": first,
        "platform_file": {f"{r.kind} round {r.round}": str(r.path.relative_to(campaign_dir) / PLATFORM_FILE)
                          for r in runs},
        "consistent": len({signature(p) for p in probes.values()}) <= 1,
        "pools": pools,
        "pools_on_same_device": same,
        "tiers": kinds,
        "rounds": sorted({r.round for r in runs}),
        # Each run, and the runs its servers measured before it (runs.share_servers; none: it started them).
        "order": [{"round": r.round, "kind": r.kind, "start": r.start,
                   "after_on_same_servers": records[r.path].get("metadata", {}).get("shared_servers", {}).get(
                       "measured_before", [])} for r in runs],
        CROSS_INSTANCE: _cross_instance(cross[0].path) if cross else None,
    }
