"""R1: the parallel-read patch and checkpoint saves, measured here (raw_data/runs/<campaign>/R1/).

From the raw records of kvtier.runs.r1: cold-read bandwidth of one LMCache fs L2 worker per build (upstream,
patched) beside fio's direct-read bandwidth per queue depth on the same directory (the device limit), the
checkpoint-save write bandwidth per target and writer, and the resume of 12k-token sessions from L2 against the
raw read time of their chunk files. Every ratio is taken between figures of one run; a figure is the median over
the run's rounds. The published R1 figures (a MI308X node and a network flash pool) are context, not a target.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..bench.records import read_records
from ..bench.runner import RUN_FILE, read_completed
from ..core.errors import KvtierError
from ..core.table_io import write_table
from ..probes import platform_probe, quiet
from ..probes.ckptsave import CheckpointSpec
from ..probes.platform_probe import PLATFORM_FILE
from ..runs.campaign import attribution
from ..runs.r1 import (
    BUILDS,
    CHECKPOINT_FILE,
    CHECKSUM,
    COLDREAD_FILE,
    ENGINE_HIT_RUN,
    FIO_FILE,
    FIXED,
    MINUTES_SPENT,
    RAWREAD_FILE,
    RESUME_RUN,
)
from . import sequential, stats, tables
from .conditions import platform_lines, quiet_line

# A device "rewards parallelism" when fio's best queue depth reads at least this much faster than depth 1.
PARALLEL_GAIN = 1.5
PATCHED_VS_DEVICE = 0.8  # patched >= 0.8 x fio at its best queue depth
PATCHED_VS_UPSTREAM = 2.0  # on a device that rewards parallelism; else patched >= upstream
RESUME_VS_RAW = 2.0  # resume TTFT of a session <= 2 x the raw read time of its chunk files
# Checking each chunk's CRC-32 on load (patches/0003) keeps at least 0.9 x the patched build's cold-read bandwidth
# at the configured bound: kvtier's own bound for a check that is on by default, not a figure of the report.
CHECKSUM_VS_PATCHED = 0.9
READERS = (*BUILDS, CHECKSUM)
RUN_ENDED = "ended with the run"
TARGET_COLUMNS = ["target", "figure", "low", "high", "rounds", "interval", "threshold", "at_least", "verdict", "stop",
                  "to_decide", "outlier_rounds", "low_without_outliers", "high_without_outliers", "detail"]
OUTPUT_FILES = {"coldread": "R1_coldread.csv", "fio": "R1_fio.csv", "matching": "R1_matching.csv",
                "targets": "R1_targets.csv",
                "checkpoint": "R1_checkpoint.csv", "resume": "R1_resume.csv", "chart": "R1_chart"}
# The raw files of an R1 directory that the page reads, relative to it.
RAW_FILES = [f"reads/{name}" for name in (RUN_FILE, PLATFORM_FILE, COLDREAD_FILE, FIO_FILE, CHECKPOINT_FILE)] + [
    f"resume/{name}" for name in (RUN_FILE, RAWREAD_FILE, f"{RESUME_RUN}/summary.json",
                                  f"{RESUME_RUN}/requests.jsonl", f"{RESUME_RUN}/server_logs/lmcache.log",
                                  f"{ENGINE_HIT_RUN}/summary.json", f"{ENGINE_HIT_RUN}/requests.jsonl")]
_RETRIEVED = re.compile(r"Retrieved (\d+) tokens in ([0-9.]+) s")
_PREFETCHED = re.compile(r"Prefetch request completed \(L1\+L2\): (\d+)/(\d+) retained keys "
                         r"\((\d+) L1, (\d+) L2\) in ([0-9.]+) ms")


@dataclass(frozen=True)
class Measured:
    coldread_rounds: pd.DataFrame  # one row per build x round
    fio_rounds: pd.DataFrame  # one row per queue depth x round
    coldread: pd.DataFrame  # per build x load bound: median / min / max GB/s
    fio: pd.DataFrame  # per queue depth
    matching: pd.DataFrame  # the patched worker at each bound beside fio at the same depth
    checkpoint: pd.DataFrame  # per target x writer
    resume: pd.DataFrame | None  # per session resumed, with the raw read time per session
    targets: pd.DataFrame  # one row per target: figure, threshold, met
    conditions: dict


def _frame(path: Path, required: tuple[str, ...], made_by: str = "kvtier r1-reads") -> pd.DataFrame:
    if not path.is_file():
        raise KvtierError(f"{path}: missing (made by `{made_by}`)")
    frame = pd.DataFrame(list(read_records(path)))
    missing = [c for c in required if c not in frame.columns]
    if frame.empty or missing:
        raise KvtierError(f"{path}: no records" if frame.empty else f"{path}: records lack {missing}")
    return frame


def _quiet_of(rounds: pd.DataFrame, label: str) -> list[tuple[str, dict | None]]:
    """(what was measured, in which round; its quiet record) for each record (kvtier.probes.quiet)."""
    if "quiet" not in rounds.columns:
        return [(label, None)] * len(rounds)
    return [(f"{label.format(**row)}, round {row['round']}",
             row["quiet"] if isinstance(row["quiet"], dict) else None) for row in rounds.to_dict("records")]


def _spread(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    grouped = frame.groupby(by, sort=False)["gb_per_s"]
    return pd.DataFrame({"rounds": grouped.count(), "gb_per_s_median": grouped.median(),
                         "gb_per_s_min": grouped.min(), "gb_per_s_max": grouped.max()}).reset_index()


def retrieve_lines(log: Path) -> dict:
    """LMCache's own timings of the L2 prefetches and of the retrieves into the engine, from its log."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    retrieved = [(int(n), float(s)) for n, s in _RETRIEVED.findall(text) if int(n)]
    prefetched = [(int(l2), float(ms) / 1000) for _, _, _, l2, ms in _PREFETCHED.findall(text) if int(l2)]
    return {"retrieved": retrieved, "prefetched_l2": prefetched}


def _resumed(run_dir: Path, tier: str) -> tuple[dict, list[dict]]:
    """The attribution of a tier run's one resume window, and its completed resume records in send order."""
    path = run_dir / "summary.json"
    if not path.is_file():
        raise KvtierError(f"{path}: missing (made by `kvtier r1-resume`)")
    windows = [w for w in json.loads(path.read_text())["windows"] if w["kind"] == "resume"]
    if len(windows) != 1:
        raise KvtierError(f"{run_dir}: expected one resume window, found {len(windows)}")
    window = windows[0]
    records = [r for r in read_records(run_dir / "requests.jsonl")
               if r["phase"] == window["window"] and r["error"] is None and r["first_token_ns"]]
    if not records:
        raise KvtierError(f"{run_dir}: no completed request in window {window['window']}")
    return attribution(tier, window), sorted(records, key=lambda r: r["send_ns"])


def _ttft(record: dict) -> float:
    return (record["first_token_ns"] - record["send_ns"]) / 1e9


def raw_read_rounds(resume_dir: Path) -> pd.DataFrame:
    """The timed raw reads of the resumed sessions' chunk files, one per round (all sessions' files together)."""
    return _frame(resume_dir / RAWREAD_FILE, ("seconds", "files", "bytes"), "kvtier r1-resume")


def load_resume(resume_dir: Path) -> pd.DataFrame:
    """Per session resumed from L2: its TTFT, the raw read time of its share of the chunk files, and the TTFT of
    the same session resumed from vLLM's own prefix cache (the engine-hit floor, no storage involved)."""
    read_completed(resume_dir)
    run_dir = resume_dir / RESUME_RUN
    row, records = _resumed(run_dir, "local_disk")
    floor_row, floor_records = _resumed(resume_dir / ENGINE_HIT_RUN, "engine")
    if not floor_row["valid"]:
        raise KvtierError(f"{resume_dir / ENGINE_HIT_RUN}: the sessions did not resume from vLLM's prefix cache "
                          f"({floor_row['local_cache_hit']:g} of {floor_row['prompt_tokens']} prompt tokens hit); "
                          "raise runs.engine_kv_gib so that the engine holds every resumed session")
    floor = {r["labels"]["session"]: _ttft(r) for r in floor_records}
    raw = raw_read_rounds(resume_dir)
    sessions = len(records)
    raw_s = float(raw["seconds"].median()) / sessions  # every session is the same length: equal shares
    logs = retrieve_lines(run_dir / "server_logs" / "lmcache.log")
    rows = []
    for record in records:
        ttft, engine_hit = _ttft(record), floor.get(record["labels"]["session"])
        rows.append({"request_id": record["request_id"], "prompt_tokens": record["prompt_tokens"],
                     "ttft_s": ttft, "raw_read_s": raw_s, "ttft_over_raw_read": ttft / raw_s,
                     "engine_hit_ttft_s": engine_hit,
                     "beyond_engine_hit_over_raw_read": None if engine_hit is None else (ttft - engine_hit) / raw_s,
                     "chunk_bytes": int(raw["bytes"].iloc[0]) / sessions,
                     "window_l2_hit_tokens": row["l2_hit_tokens"], "window_valid": row["valid"]})
    frame = pd.DataFrame(rows)
    retrieved = [s for n, s in logs["retrieved"]][-sessions:]
    prefetched = [s for _, s in logs["prefetched_l2"]][-sessions:]
    frame["lmcache_prefetch_l2_s"] = prefetched if len(prefetched) == sessions else None
    frame["lmcache_retrieve_s"] = retrieved if len(retrieved) == sessions else None
    return frame


def _target(name: str, figure: stats.Estimate, threshold: float, at_least: bool, detail: str) -> dict:
    return {"target": name, "figure": figure.point, "low": figure.low, "high": figure.high,
            "rounds": figure.rounds, "interval": figure.method, "threshold": threshold, "at_least": at_least,
            "verdict": stats.target(figure, threshold, at_least), "detail": detail}


@dataclass(frozen=True)
class ReadTarget:
    """A target on the reads: its per-round ratios, and what one more round of it has to measure."""
    name: str
    by_round: dict[int, float]  # the ratio in each round that measured both sides
    threshold: float
    at_least: bool
    detail: str
    loads: dict[str, tuple[int, ...]]  # reader (build, or the checking build) -> its load bounds
    depths: tuple[int, ...] = ()  # fio's queue depths


def _stop(judgement: sequential.Judgement, plan: sequential.Plan | None, budget_spent: bool) -> str:
    """Why a read target's rounds stopped, the run being over: one the judge did not ask more of (its rounds
    short of the maximum, the budget not spent) ended with the run's other targets."""
    if plan is None:
        return FIXED
    reason = sequential.stop_reason(judgement, plan, budget_spent)
    return RUN_ENDED if reason == sequential.RUNNING else reason


def _judged(target: ReadTarget, plan: sequential.Plan | None, budget_spent: bool = False) -> dict:
    """A read target's row: its interval (the sequential one under a plan, else kvtier.evidence.stats'), its
    verdict, any outlier round (Hampel; decided only when the interval without it agrees), why it stopped and
    what would decide it."""
    rounds = list(target.by_round)
    judgement = sequential.judge(list(target.by_round.values()), target.threshold, plan)
    good = 1 if target.at_least else -1
    verdict = stats.MET if judgement.side == good else stats.NOT_MET if judgement.side == -good else stats.UNDECIDED
    figure, without = judgement.figure, judgement.without
    return {"target": target.name, "figure": figure.point, "low": figure.low, "high": figure.high,
            "rounds": figure.rounds, "interval": figure.method, "threshold": target.threshold,
            "at_least": target.at_least, "verdict": verdict,
            "stop": _stop(judgement, plan, budget_spent),
            "to_decide": sequential.what_would_decide(judgement),
            "outlier_rounds": " ".join(str(rounds[i]) for i in judgement.outliers),
            "low_without_outliers": without.low if without else None,
            "high_without_outliers": without.high if without else None, "detail": target.detail}


def _by_bound(coldread: pd.DataFrame) -> pd.Series:
    """The patched worker's median GB/s per load bound."""
    return coldread[coldread["build"] == "patched"].set_index("load_concurrency")["gb_per_s_median"]


def matching(coldread_rounds: pd.DataFrame, fio_rounds: pd.DataFrame) -> pd.DataFrame:
    """The patched worker at each load bound beside fio at the same queue depth: both medians, and their ratio
    paired by round with its interval (kvtier.evidence.stats)."""
    patched = _by_bound(_spread(coldread_rounds, ["build", "load_concurrency"]))
    rows = []
    for depth, limit in _spread(fio_rounds, ["iodepth"]).set_index("iodepth")["gb_per_s_median"].items():
        if depth not in patched.index:
            continue
        ratio = stats.ratio(tables.per_round(coldread_rounds, "gb_per_s", build="patched", load_concurrency=depth),
                            tables.per_round(fio_rounds, "gb_per_s", iodepth=depth))
        rows.append({"depth": int(depth), "fio_gb_per_s": float(limit), "patched_gb_per_s": float(patched[depth]),
                     "patched_over_fio": ratio.point, "low": ratio.low, "high": ratio.high, "rounds": ratio.rounds})
    return pd.DataFrame(rows, columns=["depth", "fio_gb_per_s", "patched_gb_per_s", "patched_over_fio", "low", "high",
                                       "rounds"])


def read_targets(coldread_rounds: pd.DataFrame, fio_rounds: pd.DataFrame,
                 load_concurrency: int) -> tuple[list[ReadTarget], bool]:
    """The targets on the reads, each as its per-round ratios (both sides read in the same round, in alternating
    order); the best load bound and queue depth are chosen on the medians. Also whether the device rewards
    parallel reads."""
    coldread = _spread(coldread_rounds, ["build", "load_concurrency"])
    by_depth = _spread(fio_rounds, ["iodepth"]).set_index("iodepth")["gb_per_s_median"]
    by_bound = _by_bound(coldread)
    best_depth, best_bound = int(by_depth.idxmax()), int(by_bound.idxmax())
    depth_1 = by_depth.get(1, by_depth.iloc[0])
    rewards = bool(by_depth.max() >= PARALLEL_GAIN * depth_1)

    def patched(bound: int) -> dict:
        return tables.per_round(coldread_rounds, "gb_per_s", build="patched", load_concurrency=bound)

    def fio(depth: int) -> dict:
        return tables.per_round(fio_rounds, "gb_per_s", iodepth=depth)

    upstream = tables.per_round(coldread_rounds, "gb_per_s", build="upstream")
    found = [
        ReadTarget("patched at its best load bound / fio at its best queue depth",
                   stats.paired_by_round(patched(best_bound), fio(best_depth)), PATCHED_VS_DEVICE, True,
                   f"patched {by_bound.max():.3f} GB/s at load bound {best_bound}; fio best {by_depth.max():.3f} "
                   f"GB/s at depth {best_depth} (medians)", {"patched": (best_bound,)}, (best_depth,)),
        ReadTarget("patched at its best load bound / upstream" + ("" if rewards else
                                                                   " (device does not reward parallelism)"),
                   stats.paired_by_round(patched(best_bound), upstream), PATCHED_VS_UPSTREAM if rewards else 1.0, True,
                   f"patched {by_bound.max():.3f} vs upstream {stats.estimate(upstream.values()).point:.3f} GB/s; "
                   f"fio best depth / depth 1 = {by_depth.max() / depth_1:.2f} (rewards parallelism at ≥ "
                   f"{PARALLEL_GAIN})", {"patched": (best_bound,), "upstream": (1,)}),
    ]
    if load_concurrency in by_depth.index and load_concurrency in by_bound.index:
        found.append(ReadTarget(
            f"patched at the configured bound {load_concurrency} / fio at depth {load_concurrency}",
            stats.paired_by_round(patched(load_concurrency), fio(load_concurrency)), PATCHED_VS_DEVICE, True,
            f"patched {by_bound[load_concurrency]:.3f} GB/s; fio {by_depth[load_concurrency]:.3f} GB/s at depth "
            f"{load_concurrency} (medians)", {"patched": (load_concurrency,)}, (load_concurrency,)))
    if CHECKSUM in set(coldread_rounds["build"]):
        found.append(_checksum_target(coldread_rounds, load_concurrency))
    return found, rewards


def targets(coldread_rounds: pd.DataFrame, fio_rounds: pd.DataFrame, resume: pd.DataFrame | None,
            load_concurrency: int, raw_read_rounds: list[float] = (), plan: sequential.Plan | None = None,
            budget_spent: bool = False) -> tuple[pd.DataFrame, bool]:
    """Every R1 target as a figure with its interval and verdict: the reads' (read_targets), judged under the
    run's sequential plan when it had one, and the resume's, which sets the sessions' TTFTs against the raw-read
    rounds (each session's share of the chunk files)."""
    found, rewards = read_targets(coldread_rounds, fio_rounds, load_concurrency)
    rows = [_judged(target, plan, budget_spent) for target in found]
    if resume is not None:
        ttft = stats.estimate(resume["ttft_s"], unit="sessions")
        raw = stats.estimate(raw_read_rounds or resume["raw_read_s"])
        floor = float(resume["engine_hit_ttft_s"].median())
        figure = stats.quotient(ttft, raw)
        rows.append({**_target("resume TTFT / raw read time of its chunk files", figure, RESUME_VS_RAW, False,
                               f"TTFT p50 {ttft.point:.3f} s for {int(resume['prompt_tokens'].median())} prompt "
                               f"tokens over {len(resume)} sessions; raw read {raw.point:.4f} s of "
                               f"{resume['chunk_bytes'].median() / 2**20:.1f} MiB ({raw.rounds} rounds); the same "
                               f"sessions from vLLM's prefix cache take {floor:.3f} s ({floor / raw.point:.2f}× the "
                               f"raw read), so the L2 resume costs {(ttft.point - floor) / raw.point:.2f}× the raw "
                               "read beyond that floor"), "stop": FIXED, "to_decide": ""})
    return pd.DataFrame(rows, columns=TARGET_COLUMNS), rewards


def undecided_reads(reads_dir: str | os.PathLike, load_concurrency: int, plan: sequential.Plan) -> dict:
    """Between rounds of a sequential R1 reads run (kvtier.runs.r1.run_reads): the read targets still undecided
    after the rounds recorded so far, and what one more round of them measures: {"targets": [names],
    "loads": {reader: [bounds]}, "depths": [fio queue depths]}."""
    reads_dir = Path(reads_dir)
    coldread_rounds = _frame(reads_dir / COLDREAD_FILE, ("round", "build", "load_concurrency", "gb_per_s"))
    fio_rounds = _frame(reads_dir / FIO_FILE, ("round", "iodepth", "gb_per_s"))
    found, _ = read_targets(coldread_rounds, fio_rounds, load_concurrency)
    open_ = [t for t in found if not sequential.judge(list(t.by_round.values()), t.threshold, plan).decided]
    loads: dict[str, set[int]] = {}
    for target in open_:
        for reader, bounds in target.loads.items():
            loads.setdefault(reader, set()).update(bounds)
    return {"targets": [t.name for t in open_], "loads": {r: sorted(b) for r, b in loads.items()},
            "depths": sorted({d for t in open_ for d in t.depths})}


def _checksum_target(coldread_rounds: pd.DataFrame, load_concurrency: int) -> ReadTarget:
    """The checked loads against the unchecked ones of the same build, bound and files, paired by round. A load
    whose files carried no checksum checked nothing: the run is refused rather than a ratio of 1 printed."""
    checked = coldread_rounds[coldread_rounds["build"] == CHECKSUM]
    unchecked_files = checked["chunks"] - checked["files_with_checksum"].fillna(0)
    if (unchecked_files > 0).any():
        row = checked[unchecked_files > 0].iloc[0]
        raise KvtierError(f"{CHECKSUM} load in round {row['round']}: only {int(row['chunks'] - unchecked_files[row.name])} "
                          f"of {int(row['chunks'])} chunk files carried a checksum, so the load checked nothing")
    with_check = tables.per_round(coldread_rounds, "gb_per_s", build=CHECKSUM, load_concurrency=load_concurrency)
    without = tables.per_round(coldread_rounds, "gb_per_s", build="patched", load_concurrency=load_concurrency)
    return ReadTarget(f"patched checking each chunk's CRC-32 / patched, at the configured bound {load_concurrency}",
                      stats.paired_by_round(with_check, without), CHECKSUM_VS_PATCHED, True,
                      f"{stats.estimate(with_check.values()).point:.3f} vs "
                      f"{stats.estimate(without.values()).point:.3f} GB/s (medians), the same "
                      f"{int(checked['chunks'].iloc[0])} files, every one with its checksum (patches/0003; "
                      "lmcache.verify_checksum)", {"patched": (load_concurrency,), CHECKSUM: (load_concurrency,)})


def load(r1_dir: str | os.PathLike) -> Measured:
    r1_dir = Path(r1_dir)
    reads_dir = r1_dir / "reads"
    run = read_completed(reads_dir)
    coldread_rounds = _frame(reads_dir / COLDREAD_FILE, ("round", "build", "load_concurrency", "gb_per_s",
                                                         "resident_bytes_before"))
    fio_rounds = _frame(reads_dir / FIO_FILE, ("round", "iodepth", "gb_per_s"))
    checkpoint_rounds = _frame(reads_dir / CHECKPOINT_FILE, ("round", "target", "writer", "gb_per_s"))
    missing = {"upstream", "patched"} - set(coldread_rounds["build"])
    if missing:
        raise KvtierError(f"{reads_dir / COLDREAD_FILE}: no records of build(s) {sorted(missing)}")
    keys = ["build", "load_concurrency"]
    extra = coldread_rounds.groupby(keys, as_index=False).agg(
        version=("lmcache_version", "first"), resident_bytes_before_max=("resident_bytes_before", "max"))
    coldread = _spread(coldread_rounds, keys).merge(extra, on=keys).sort_values(
        keys, key=lambda column: column.map(READERS.index) if column.name == "build" else column, ignore_index=True)
    fio = _spread(fio_rounds, ["iodepth"]).sort_values("iodepth").reset_index(drop=True)
    checkpoint = _spread(checkpoint_rounds, ["target", "writer"])
    resume_dir = r1_dir / "resume"
    resume = load_resume(resume_dir) if (resume_dir / RUN_FILE).is_file() else None
    settings = run["settings"]
    shares = (list(raw_read_rounds(resume_dir)["seconds"] / len(resume)) if resume is not None else [])
    plan = reads_plan(settings)
    looks = run.get("sequential", {})  # absent from runs made before sequential rounds: fixed rounds
    table, rewards = targets(coldread_rounds, fio_rounds, resume, settings["load_concurrency"], shares, plan,
                             budget_spent=looks.get("stop") == MINUTES_SPENT)
    platform = platform_probe.read(reads_dir / PLATFORM_FILE)
    conditions = {"chunks": settings["chunks"], "chunk_mib": settings["chunk_mib"],
                  "load_concurrency": settings["load_concurrency"], "rounds": settings["rounds"],
                  "plan": plan.text() if plan else None, "rounds_run": int(coldread_rounds["round"].max()) + 1,
                  "budget_s": settings.get("budget_s"), "stop": looks.get("stop", FIXED),
                  "verify_checksum": CHECKSUM in set(coldread_rounds["build"]),
                  "load_bounds": [int(bound) for bound in _by_bound(coldread).index],
                  "queue_depths": settings["queue_depths"], "page_cache": run["page_cache"], "fio": run["fio"],
                  "lmcache_versions": run["lmcache_versions"], "checkpoint_spec": run["checkpoint_spec"],
                  "device_rewards_parallelism": rewards, "platform": platform,
                  "platform_file": f"reads/{PLATFORM_FILE}",
                  "same_device": platform["storage"]["local_disk"]["st_dev"]
                  == platform["storage"]["shared_pool"]["st_dev"],
                  "quiet": quiet.summary(_quiet_of(coldread_rounds, "{build} load at bound {load_concurrency}")
                                         + _quiet_of(fio_rounds, "fio at depth {iodepth}")
                                         + _quiet_of(checkpoint_rounds, "{writer} save to {target}"))}
    return Measured(coldread_rounds, fio_rounds, coldread, fio, matching(coldread_rounds, fio_rounds), checkpoint,
                    resume, table,
                    conditions)


def reads_plan(settings: dict) -> sequential.Plan | None:
    """The sequential plan of an R1 reads run's settings: None for fixed rounds (max_rounds not above rounds)."""
    most = settings.get("max_rounds") or settings["rounds"]
    return sequential.Plan(settings["rounds"], most) if most > settings["rounds"] >= 2 else None


def _rounds_text(c: dict) -> str:
    """How many rounds the reads took, and under which plan they stopped."""
    if not c.get("plan"):
        return f"{c['rounds']} rounds"
    budget = f", at most {c['budget_s']:g} s in all" if c.get("budget_s") else ""
    return (f"{c['rounds_run']} rounds: {c['plan']}{budget}; a further round measures only what the targets still "
            f"undecided need (kvtier.evidence.sequential); stopped: {c['stop']}")


def conditions_markdown(conditions: dict) -> str:
    """The conditions printed above the R1 tables: what was read and written, how, and on what (the run's
    platform record)."""
    c, p = conditions, conditions["platform"]
    spec = CheckpointSpec(**c["checkpoint_spec"])
    storage = p["storage"]
    versions = ", ".join(f"{build} `{version}`" for build, version in c["lmcache_versions"].items())
    lines = [
        f"- **Cold reads**: {c['chunks']} chunk files × {c['chunk_mib']:g} MiB per load, one worker; the patched "
        f"build at load bounds {', '.join(map(str, c['load_bounds']))} (configured: {c['load_concurrency']}), "
        f"upstream one key at a time; {_rounds_text(c)}; page cache defeated by {c['page_cache']} in every load"
        + ("; the patched build once more at the configured bound checking each chunk's CRC-32 on load "
           "(patches/0003), on the same files, all written with their checksums" if c.get("verify_checksum") else ""),
        f"- **LMCache builds**: {versions}",
        f"- **Device limit**: {c['fio']}, O_DIRECT sequential read (libaio) of a file of the same size, block = "
        f"chunk size, queue depths {', '.join(map(str, c['queue_depths']))}",
        f"- **Checkpoint**: LoRA rank {spec.rank} on every projection of {spec.layers} layers (hidden {spec.hidden}, "
        f"MLP {spec.intermediate}, K/V {spec.kv_dim}), {spec.dtype}: {spec.parameters() / 1e6:.0f} M parameters, "
        f"{spec.bytes() / 1e6:.0f} MB in {spec.shards} safetensors shards, fsync per shard",
        *platform_lines(p, {"pool (cold reads, fio, checkpoint)": storage["shared_pool"],
                            "local disk (checkpoint)": storage["local_disk"]}, c["same_device"]),
        quiet_line(c.get("quiet"), "timed reads and saves"),
        f"- **Platform record**: `{c['platform_file']}`",
    ]
    return "\n".join(lines)


def published_context(claims) -> pd.DataFrame:
    """The report's R1 figures (claims ledger), to show beside the measured ones."""
    rows = [{"claim": c.id, "figure": c.claimed, "unit": c.quantity.get("unit"),
             "what": c.quantity.get("metric", "").replace("_", " ")
             + (f" ({c.quantity['conditions']})" if c.quantity.get("conditions") else ""), "quote": c.quote}
            for c in claims.claims if "R1" in c.evidence]
    return pd.DataFrame(rows)


def targets_text(measured: Measured) -> str:
    """One line per target: its verdict, the figure with its interval, the threshold and what the figure is of."""
    lines = []
    for row in measured.targets.itertuples():
        sign = "≥" if row.at_least else "≤"
        interval = f" [{row.low:.2f}, {row.high:.2f}]" if row.rounds > 1 else ""
        how = f"{row.rounds} rounds, stopped: {row.stop}" if row.stop != FIXED else ""
        if row.verdict == stats.UNDECIDED and row.to_decide:
            how += f"{'; ' if how else ''}to decide it: {row.to_decide}"
        if isinstance(row.outlier_rounds, str) and row.outlier_rounds:
            without = (f" [{row.low_without_outliers:.2f}, {row.high_without_outliers:.2f}] without it"
                       if pd.notna(row.low_without_outliers) else "")
            how += f"{'; ' if how else ''}outlier round(s) {row.outlier_rounds} (Hampel's rule){without}"
        lines.append(f"{row.verdict}: {row.target} = {row.figure:.2f}{interval} (target {sign} {row.threshold:g}; "
                     f"{row.interval}); {row.detail}" + (f" ({how})" if how else ""))
    if not measured.conditions["device_rewards_parallelism"]:
        lines.append("This device does not reward parallel reads (fio's best queue depth is less than "
                     f"{PARALLEL_GAIN}× depth 1), so the 2× gain over upstream cannot show here; the target is "
                     "patched ≥ upstream.")
    lines.append(f"A target is {stats.MET} only when its whole interval clears the threshold, {stats.NOT_MET} when "
                 f"the whole interval misses it, {stats.UNDECIDED} otherwise.")
    return "\n".join(lines)


def write_evidence(measured: Measured, out_dir: str | os.PathLike, png_scale: float = 2.0) -> list[Path]:
    from .charts import r1_chart, save_chart  # altair: loaded only to draw
    out_dir = Path(out_dir)
    written = [write_table(getattr(measured, name), out_dir / OUTPUT_FILES[name])
               for name in ("coldread", "fio", "matching", "targets", "checkpoint")]
    if measured.resume is not None:
        written.append(write_table(measured.resume, out_dir / OUTPUT_FILES["resume"]))
    return written + save_chart(r1_chart(measured.coldread, measured.fio), out_dir / OUTPUT_FILES["chart"],
                                png_scale=png_scale)
