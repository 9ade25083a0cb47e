"""Evidence B's boundary run: keep the KV cache in the engine, or offload it, over a grid of concurrency x context.

Two schemes on one server configuration, started side by side once and measured cell by cell, round by round:

    engine_only  vLLM with its prefix cache and a fixed KV capacity (`engine_kv_tokens`), no connector: a
                 conversation the engine has evicted is recomputed
    offload      the same vLLM with the LMCache MP server (L1 in DRAM, L2 on the local-disk path, the configured
                 build): an evicted conversation is reloaded

A cell (context L, concurrency c) serves `sessions_per_slot` x c multi-turn conversations closed loop at c
(kvtier.bench.workloads.multi_turn): their openings, then the later turns, measured. Nothing is reset inside a
cell, so whether a returning prefix is still in the engine follows from its capacity and its own LRU; between
cells both schemes' caches are emptied, so every cell starts alike. Cells run in the grid's order (reversed
every other round) and the two schemes alternate which goes first from cell to cell (A B, B A, ...).

    <boundary_dir>/cells/round-<r>/<scheme>/L<context>-c<concurrency>/   one `kvtier bench` run per scheme and cell
    <boundary_dir>/cells/server_logs/<scheme>/                          that scheme's servers, for every round
    <boundary_dir>/cells/probes/platform.json                           the platform (R4)

`aggregate` turns the rounds into B_rounds.csv (what kvtier.evidence.boundary reads), the attribution of every
cell, the greedy outputs of offload against engine_only, and conditions.json.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import pandas as pd

from ..bench.records import latest_per_request, read_records
from ..bench.runner import RUN_FILE, BenchConfig, Runner
from ..core.atomic import write_text
from ..core.errors import KvtierError
from ..core.table_io import write_table
from ..core.tiers import ENGINE_ONLY as ENGINE
from ..core.tiers import OFFLOAD, SCHEMES
from ..probes import platform_probe, quiet
from ..probes.platform_probe import PLATFORM_FILE
from .campaign import ROUND_PREFIX, round_dir, token_sources
from .tier_run import TierSettings, TierStack, probe_platform, server_commands, start_together, wait_pool_settled

CELLS_DIR = "cells"  # <boundary_dir>/cells/: the measured runs; the tables beside it
ROUNDS_FILE = "B_rounds.csv"  # one row per scheme x concurrency x context x round (kvtier.evidence.boundary)
STACK_OF = {ENGINE: "engine", OFFLOAD: "local_disk"}  # the servers each scheme runs (kvtier.runs.tier_run)
CELL = re.compile(r"^L(\d+)-c(\d+)$")


@dataclass
class BoundarySettings:
    """The grid and its workload; the servers' settings are TierSettings (`servers`), with `engine_kv_tokens`."""
    servers: dict
    contexts: list[int] = field(default_factory=lambda: [1024, 2048, 4096])
    concurrency: list[int] = field(default_factory=lambda: [2, 4, 8])
    sessions_per_slot: int = 2
    turns: int = 3
    reuse: float = 1.0
    followup_tokens: int = 32
    output_tokens: int = 16
    min_requests: int = 16  # measured requests (later turns) per cell window at least: low concurrency gets more turns
    replay_controls: int = 1  # matched requests replayed alone beside the mismatched ones (kvtier.runs.boundary_replay)
    schemes: list[str] = field(default_factory=lambda: list(SCHEMES))

    def __post_init__(self):
        unknown = [s for s in self.schemes if s not in SCHEMES]
        if unknown or not self.schemes:
            raise KvtierError(f"boundary schemes {self.schemes}: each one of {', '.join(SCHEMES)}")
        for name in ("contexts", "concurrency"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < 1 for v in values):
                raise KvtierError(f"boundary {name} {values}: a list of integers >= 1")
        if not isinstance(self.replay_controls, int) or isinstance(self.replay_controls, bool) \
                or self.replay_controls < 0:
            raise KvtierError(f"boundary replay_controls {self.replay_controls!r}: an integer >= 0")
        if self.sessions_per_slot < 1 or self.turns < 2 or not 0 <= self.reuse <= 1 or self.min_requests < 1:
            raise KvtierError(f"boundary: sessions_per_slot >= 1, turns >= 2, reuse in [0, 1], min_requests >= 1; "
                              f"got {self.sessions_per_slot}, {self.turns}, {self.reuse}, {self.min_requests}")
        tier = self.tier_settings()
        if not tier.engine_kv_tokens:
            raise KvtierError("boundary: servers.engine_kv_tokens must set the engine's KV capacity (tokens)")
        turns = max(self.turns_for(c) for c in self.concurrency)
        longest = max(self.contexts) + turns * (self.followup_tokens + self.output_tokens)
        if longest > tier.max_model_len:
            raise KvtierError(f"boundary: a conversation reaches {longest} tokens (context {max(self.contexts)} + "
                              f"{turns} turns, min_requests {self.min_requests} at concurrency "
                              f"{min(self.concurrency)}), over max_model_len {tier.max_model_len}")
        if tier.max_model_len > tier.engine_kv_tokens:
            raise KvtierError(f"boundary: engine_kv_tokens {tier.engine_kv_tokens} cannot hold one request of "
                              f"max_model_len {tier.max_model_len} (vLLM refuses to start)")

    def tier_settings(self) -> TierSettings:
        try:
            return TierSettings(**self.servers)
        except TypeError as exc:
            raise KvtierError(f"boundary servers: {exc}") from None

    def turns_for(self, concurrency: int) -> int:
        """Turns per conversation at this concurrency: `turns`, or more where sessions_per_slot x concurrency
        conversations would serve fewer than `min_requests` measured (later) turns. More turns rather than more
        conversations, so that the working set the engine's capacity meets stays the same."""
        sessions = self.sessions_per_slot * concurrency
        return max(self.turns, -(-self.min_requests // sessions) + 1)

    def cells(self, round_: int) -> list[tuple[int, int, int]]:
        """(index in the grid, context, concurrency) in the order round `round_` (from 1) measures them: the grid's,
        reversed in every other round."""
        grid = [(i, context, c) for i, (context, c) in
                enumerate((context, c) for context in self.contexts for c in self.concurrency)]
        return grid if round_ % 2 else grid[::-1]


def scheme_order(schemes: list[str], round_: int, grid_index: int) -> list[str]:
    """Which scheme goes first in a cell: alternating from one cell of the grid to the next, and for each cell from
    one round to the next."""
    return list(schemes) if (round_ + grid_index) % 2 else list(schemes)[::-1]


def cell_dir(context: int, concurrency: int) -> str:
    return f"L{context}-c{concurrency}"


class _CellReset:
    """Before a cell opens: empty the scheme's caches (engine prefix cache, LMCache L1, after the pool settles), so
    that every cell starts alike; never inside a cell."""

    def __init__(self, stack: TierStack):
        self.stack = stack

    def __call__(self) -> None:
        if self.stack.pool is not None:
            wait_pool_settled(self.stack.pool)
        self.stack.empty_caches()


@dataclass(frozen=True)
class BoundaryRounds:
    """How many rounds each cell gets: `rounds` for every cell, then, up to `max_rounds`, one more round at a time
    for each cell still undecided (kvtier.evidence.sequential), until its `cell_budget_s` seconds (both schemes
    together) are spent. `max_rounds` equal to `rounds`: a fixed number of rounds."""
    rounds: int
    max_rounds: int | None = None
    cell_budget_s: float | None = None

    def __post_init__(self):
        if self.rounds < 1:
            raise KvtierError(f"boundary rounds {self.rounds}: at least 1")
        if self.max_rounds is not None and self.max_rounds < self.rounds:
            raise KvtierError(f"boundary max_rounds {self.max_rounds}: at least rounds ({self.rounds})")
        if self.max_rounds is not None and self.max_rounds > self.rounds and self.rounds < 2:
            raise KvtierError(f"boundary rounds {self.rounds}: sequential rounds start from at least 2")
        if self.cell_budget_s is not None and self.cell_budget_s <= 0:
            raise KvtierError(f"boundary cell_budget_s {self.cell_budget_s}: seconds > 0")

    @property
    def most(self) -> int:
        return self.max_rounds or self.rounds


SEQUENTIAL_FILE = "sequential.json"  # <boundary_dir>/cells/: the plan, and per cell its rounds and why it stopped
FIXED, DECIDED, ROUNDS_SPENT, MINUTES_SPENT = "fixed rounds", "decided", "rounds spent", "minutes spent"


def cell_config(settings: BoundarySettings, stack: TierStack, round_: int, context: int, c: int) -> BenchConfig:
    """The client's configuration of one cell in one round on one scheme's stack: both schemes serve the same
    seeded conversations, turns and order in a round."""
    tier = settings.tier_settings()
    return BenchConfig(base_url=stack.vllm.base_url, model=tier.served_name, workload="multi-turn",
                       sessions=settings.sessions_per_slot * c, context_tokens=context,
                       followup_tokens=settings.followup_tokens,
                       output_tokens=settings.output_tokens, turns=settings.turns_for(c),
                       reuse=settings.reuse, concurrency=[c], seed=tier.seed + round_,
                       timeout_s=tier.timeout_s, metrics_urls=stack.metrics_urls())


def _measure_cell(settings: BoundarySettings, stacks: dict, out_dir: Path, round_: int, index: int, context: int,
                  c: int) -> list[dict]:
    """One cell of one round: each scheme in its turn's order; the summaries."""
    tier = settings.tier_settings()
    summaries = []
    for scheme in scheme_order(settings.schemes, round_, index):
        stack = stacks[scheme]
        cfg = cell_config(settings, stack, round_, context, c)
        metadata = {"scheme": scheme, "round": round_, "context_tokens": context, "concurrency": c,
                    "engine_kv_tokens": tier.engine_kv_tokens,
                    "cell_index": index, "servers": server_commands(stack),
                    "platform": f"../../../{PLATFORM_FILE}",
                    "server_logs": f"../../../server_logs/{scheme}"}
        run_dir = out_dir / round_dir(round_) / scheme / cell_dir(context, c)
        summaries.append(Runner(cfg, run_dir, evict=_CellReset(stack), progress=False,
                                labels={"scheme": scheme}, metadata=metadata,
                                quiet=quiet.hook(tier.quiet)).run())
    return summaries


def _write_sequential(out_dir: Path, plan: BoundaryRounds, cells: dict) -> None:
    record = {"rounds": plan.rounds, "max_rounds": plan.most, "cell_budget_s": plan.cell_budget_s,
              "cells": {name: cells[name] for name in sorted(cells)}}
    write_text(out_dir / SEQUENTIAL_FILE, json.dumps(record, indent=2) + "\n")


def run_rounds(settings: BoundarySettings, plan: BoundaryRounds | int, boundary_dir: str | os.PathLike,
               undecided: Callable[[pd.DataFrame], set] | None = None,
               after_rounds: Callable[[dict], object] | None = None) -> list[dict]:
    """The grid's rounds into `<boundary_dir>/cells/round-<r>/`: both schemes' servers started side by side once,
    `plan.rounds` rounds of every cell in each round's order, then (when `plan.max_rounds` is larger and
    `undecided` judges the rounds so far: (context, concurrency) of the cells still undecided) one more round at
    a time of the undecided cells within their budget; then `after_rounds` with the stacks still up ({scheme:
    stack}: kvtier.runs.boundary_replay); servers stopped whatever happens. Per cell, its rounds and why it
    stopped go to cells/sequential.json. Returns the cells' summaries."""
    plan = BoundaryRounds(plan) if isinstance(plan, int) else plan
    out_dir = Path(boundary_dir) / CELLS_DIR
    tier = settings.tier_settings()
    quiet.hook(tier.quiet)  # refuses bad bounds before anything starts
    if out_dir.exists() and any(out_dir.iterdir()):
        raise KvtierError(f"{out_dir}: already holds boundary cells; choose a new directory")
    stacks = {scheme: TierStack(STACK_OF[scheme], tier, out_dir / "server_logs" / scheme)
              for scheme in settings.schemes}  # refuses a missing model
    positions = json.loads((Path(tier.model_dir) / "config.json").read_text()).get("max_position_embeddings")
    if positions and tier.max_model_len > positions:
        raise KvtierError(f"boundary: max_model_len {tier.max_model_len} is over the model's "
                          f"max_position_embeddings {positions} ({tier.model_dir}); vLLM would refuse to start")
    probe_platform(tier, out_dir)
    sequential = plan.most > plan.rounds and undecided is not None
    ledger = {cell_dir(context, c): {"rounds": 0, "seconds": 0.0, "stop": FIXED if not sequential else None}
              for _, context, c in settings.cells(1)}
    summaries = []
    start_together(*stacks.values())
    try:
        for round_ in range(1, plan.most + 1):
            chosen = settings.cells(round_)
            if round_ > plan.rounds:
                if not sequential:
                    break
                open_cells = undecided(round_frame(Path(boundary_dir)))
                for _, context, c in chosen:
                    entry = ledger[cell_dir(context, c)]
                    if entry["stop"] is None and (context, c) not in open_cells:
                        entry["stop"] = DECIDED
                    elif entry["stop"] is None and plan.cell_budget_s and entry["seconds"] >= plan.cell_budget_s:
                        entry["stop"] = MINUTES_SPENT
                chosen = [cell for cell in chosen if ledger[cell_dir(cell[1], cell[2])]["stop"] is None]
                if not chosen:
                    break
            for index, context, c in chosen:
                began = time.monotonic()
                summaries += _measure_cell(settings, stacks, out_dir, round_, index, context, c)
                entry = ledger[cell_dir(context, c)]
                entry["rounds"] += 1
                entry["seconds"] = round(entry["seconds"] + time.monotonic() - began, 1)
            _write_sequential(out_dir, plan, ledger)
        if sequential:
            open_cells = undecided(round_frame(Path(boundary_dir)))
            for (_, context, c) in settings.cells(1):
                entry = ledger[cell_dir(context, c)]
                if entry["stop"] is None:
                    entry["stop"] = ROUNDS_SPENT if (context, c) in open_cells else DECIDED
        _write_sequential(out_dir, plan, ledger)
        if after_rounds is not None:
            after_rounds(stacks)
    finally:
        for stack in reversed(list(stacks.values())):
            stack.stop()
    return summaries


# ------------------------------------------------------------------------------------------------------------
# The tables

ROUND_COLUMNS = ["scheme", "concurrency", "context_tokens", "round", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
                 "output_tok_s", "requests", "ttft_paired_ratio", "paired_requests", "valid"]
PLAN_COLUMNS = ["min_rounds", "max_rounds", "stop"]  # from cells/sequential.json: how many rounds each cell got
KV_CAPACITY = re.compile(r"KV cache size: ([\d,]+) tokens")


def cells_of(boundary_dir: Path) -> list[tuple[int, str, int, int, Path]]:
    """(round, scheme, context, concurrency, run dir) of every finished cell."""
    found = []
    for folder in sorted((boundary_dir / CELLS_DIR).glob(f"{ROUND_PREFIX}*")):
        number = folder.name[len(ROUND_PREFIX):]
        if not number.isdigit():
            continue
        for scheme in SCHEMES:
            for run in sorted((folder / scheme).glob("L*-c*")):
                match = CELL.match(run.name)
                if match and (run / "summary.json").is_file():
                    found.append((int(number), scheme, int(match[1]), int(match[2]), run))
    return found


def _sources(scheme: str, window: dict) -> dict:
    """A cell's prompt tokens by source, as fractions, and whether the cell counts: no failed request, and for
    engine_only no token from a connector (it has none)."""
    row = token_sources(window)
    prompt = row["prompt_tokens"] or 0

    def share(value: float) -> float | None:
        return value / prompt if prompt else None

    valid = bool(prompt and window["requests"]["failed"] == 0
                 and (scheme != ENGINE or not row["external_kv_transfer"]))
    # What the connector delivered is vLLM's external_kv_transfer; LMCache's lookup hits only split it between L1
    # and L2 (they also count prefixes that vLLM then took from its own cache).
    hits = row["l1_hit_tokens"] + row["l2_hit_tokens"]
    l1 = row["external_kv_transfer"] * row["l1_hit_tokens"] / hits if hits else 0.0
    return {**row, "engine_frac": share(row["local_cache_hit"]), "l1_frac": share(l1),
            "l2_frac": share(row["external_kv_transfer"] - l1 if hits else 0.0),
            "recompute_frac": share(row["local_compute"]),
            "failed": window["requests"]["failed"], "valid": valid,
            "quiet": (window.get("quiet") or {}).get("quiet")}


def _outputs(run_dir: Path) -> dict[str, tuple[str, float | None]]:
    """{request id: (greedy output, TTFT in s)} of a cell's measured turns that succeeded."""
    return {r["request_id"]: (r["output_text"], (r["first_token_ns"] - r["send_ns"]) / 1e9
                              if r["first_token_ns"] is not None and r["send_ns"] is not None else None)
            for r in latest_per_request(read_records(run_dir / "requests.jsonl"))
            if r["phase"].startswith("turns-") and r["error"] is None}


def cell_outputs(boundary_dir: Path) -> dict[tuple[int, str, int, int], dict[str, tuple[str, float | None]]]:
    """{(round, scheme, context, concurrency): {request id: (greedy output, TTFT)}} of every finished cell."""
    return {(round_, scheme, context, c): _outputs(run) for round_, scheme, context, c, run in cells_of(boundary_dir)}


def _pair_requests(rows: list[dict], outputs: dict) -> None:
    """Per cell and round, the candidate's TTFT against engine_only's request by request (the same conversation,
    turn and order: both schemes serve the same seeded workload in a round), as the median of the per-request
    ratios, on the candidate's row (`ttft_paired_ratio`, `paired_requests`): what drifts inside a window hits both
    sides of a pair, so it spreads far less from round to round than a ratio of two p50s."""
    valid = {(r["round"], r["scheme"], r["context_tokens"], r["concurrency"]): r["valid"] for r in rows}
    for row in rows:
        row["ttft_paired_ratio"], row["paired_requests"] = None, None
        key = (row["round"], row["scheme"], row["context_tokens"], row["concurrency"])
        engine = (row["round"], ENGINE, row["context_tokens"], row["concurrency"])
        reference = outputs.get(engine)
        if row["scheme"] == ENGINE or reference is None or not (row["valid"] and valid.get(engine)):
            continue
        mine = outputs[key]
        ratios = [mine[rid][1] / reference[rid][1] for rid in mine
                  if rid in reference and mine[rid][1] and reference[rid][1]]
        if ratios:
            row["ttft_paired_ratio"], row["paired_requests"] = float(median(ratios)), len(ratios)


def _round_rows(cells: list) -> tuple[list[dict], dict, list]:
    """One row per finished cell run (scheme, cell, round): its readings (None when the round is not valid), the
    count of measured requests and the token sources; the greedy outputs and quiet records beside."""
    rows, outputs, quiet_of = [], {}, []
    for round_, scheme, context, c, run in cells:
        summary = json.loads((run / "summary.json").read_text())
        (window,) = summary["windows"]
        quiet_of.append((f"{scheme} {cell_dir(context, c)} (round {round_})", window.get("quiet")))
        sources = _sources(scheme, window)
        ttft = window["ttft_s"] or {}
        keep = sources["valid"]
        rows.append({"scheme": scheme, "concurrency": c, "context_tokens": context, "round": round_,
                     "ttft_p50_s": ttft.get("p50") if keep else None, "ttft_p90_s": ttft.get("p90") if keep else None,
                     "ttft_p99_s": ttft.get("p99") if keep else None,
                     "output_tok_s": window["output_tok_s"]["aggregate"] if keep else None,
                     "requests": window["requests"]["ok"],
                     **{k: v for k, v in sources.items() if k != "valid"}, "valid": keep,
                     "start": window["start"]})
        outputs[(round_, scheme, context, c)] = _outputs(run)
    _pair_requests(rows, outputs)
    return rows, outputs, quiet_of


def round_frame(boundary_dir: Path) -> pd.DataFrame:
    """The rounds measured so far as B_rounds.csv has them (what the sequential judge reads between rounds)."""
    rows, _, _ = _round_rows(cells_of(boundary_dir))
    return pd.DataFrame(rows, columns=ROUND_COLUMNS) if not rows else pd.DataFrame(rows)[ROUND_COLUMNS]


REPLAYS_FILE = "replays.jsonl"  # <boundary_dir>/cells/: mismatched requests replayed alone (runs.boundary_replay)
REPLAY_COLUMNS = ["round", "context_tokens", "concurrency", "request_id", "why", "identical_in_cell",
                  "identical_alone", "engine_alone_as_in_cell", "engine_alone_cached_tokens",
                  "offload_alone_cached_tokens", "failed"]


def replays_table(boundary_dir: Path, outputs: dict) -> pd.DataFrame:
    """One row per request replayed alone (cells/replays.jsonl): whether the schemes' outputs were identical in the
    cell and alone, whether engine_only alone said what it said in the cell, and the prompt tokens each replay
    found cached (offload's: what LMCache still held, vLLM's own prefix cache having been reset)."""
    path = boundary_dir / CELLS_DIR / REPLAYS_FILE
    by_request: dict[tuple, dict] = {}
    for r in (read_records(path) if path.is_file() else []):
        labels = r["labels"]
        key = (labels["round"], labels["context_tokens"], labels["concurrency"], labels["replay_of"], labels["why"])
        by_request.setdefault(key, {})[labels["scheme"]] = r
    rows = []
    for (round_, context, c, rid, why), alone in sorted(by_request.items()):
        in_cell = {scheme: outputs.get((round_, scheme, context, c), {}).get(rid, (None,))[0] for scheme in SCHEMES}
        failed = [s for s in SCHEMES if s not in alone or alone[s]["error"] is not None]
        texts = {s: alone[s]["output_text"] for s in alone}
        rows.append({"round": round_, "context_tokens": context, "concurrency": c, "request_id": rid, "why": why,
                     "identical_in_cell": in_cell[ENGINE] == in_cell[OFFLOAD],
                     "identical_alone": None if failed else texts[ENGINE] == texts[OFFLOAD],
                     "engine_alone_as_in_cell": None if failed else texts[ENGINE] == in_cell[ENGINE],
                     "engine_alone_cached_tokens": alone.get(ENGINE, {}).get("cached_tokens"),
                     "offload_alone_cached_tokens": alone.get(OFFLOAD, {}).get("cached_tokens"),
                     "failed": " ".join(failed)})
    return pd.DataFrame(rows, columns=REPLAY_COLUMNS)


def read_sequential(boundary_dir: Path) -> dict | None:
    path = boundary_dir / CELLS_DIR / SEQUENTIAL_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def aggregate(boundary_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """B_rounds.csv, B_attribution.csv and B_correctness.csv from the rounds' cells, and conditions.json."""
    boundary_dir = Path(boundary_dir)
    cells = cells_of(boundary_dir)
    if not cells:
        raise KvtierError(f"{boundary_dir}: no finished boundary cell under {CELLS_DIR}/{round_dir('<r>')}/<scheme>/"
                          "L<context>-c<concurrency>/")
    rounds, outputs, quiet_of = _round_rows(cells)
    frame = pd.DataFrame(rounds).sort_values(["context_tokens", "concurrency", "scheme", "round"], kind="stable")
    frame = frame.reset_index(drop=True)
    sequential = read_sequential(boundary_dir)
    measured = int(frame["round"].max())
    names = [cell_dir(context, c) for context, c in zip(frame["context_tokens"], frame["concurrency"])]
    frame["min_rounds"] = sequential["rounds"] if sequential else measured
    frame["max_rounds"] = sequential["max_rounds"] if sequential else measured
    frame["stop"] = [sequential["cells"].get(name, {}).get("stop") or FIXED if sequential else FIXED
                     for name in names]
    correctness = []
    for (round_, scheme, context, c), mine in outputs.items():
        if scheme == ENGINE or (round_, ENGINE, context, c) not in outputs:
            continue
        reference = outputs[(round_, ENGINE, context, c)]
        compared = [rid for rid in mine if rid in reference]
        correctness.append({"round": round_, "context_tokens": context, "concurrency": c, "requests": len(mine),
                            "compared": len(compared),
                            "identical": sum(1 for rid in compared if mine[rid][0] == reference[rid][0])})
    tables = {ROUNDS_FILE.removesuffix(".csv"): frame[ROUND_COLUMNS + PLAN_COLUMNS],
              "B_attribution": frame[[c for c in frame.columns if c not in ROUND_COLUMNS[4:11] + PLAN_COLUMNS]],
              "B_correctness": pd.DataFrame(correctness, columns=["round", "context_tokens", "concurrency",
                                                                  "requests", "compared", "identical"]),
              "B_replays": replays_table(boundary_dir, outputs)}
    for name, table in tables.items():
        write_table(table, boundary_dir / f"{name}.csv")
    written = {**conditions(boundary_dir, cells), "quiet": quiet.summary(quiet_of),
               "sequential": sequential}
    write_text(boundary_dir / "conditions.json", json.dumps(written, indent=2) + "\n")
    return tables


def _portable(argv: list[str] | None) -> list[str] | None:
    """A server command as a page shows it: the program by its file name (this environment's interpreter or
    console script), the flags as they ran."""
    return [Path(argv[0]).name, *argv[1:]] if argv else argv


def conditions(boundary_dir: Path, cells: list) -> dict:
    """The workload and servers from the cells' own records, each scheme's KV capacity as its vLLM reported it,
    the platform of the first round, and the order the cells ran in."""
    records = {run: json.loads((run / RUN_FILE).read_text()) for *_, run in cells}  # each run.json read once
    first = records[cells[0][4]]
    config = first["config"]
    capacity = {}
    for scheme in sorted({c[1] for c in cells}):
        log = boundary_dir / CELLS_DIR / "server_logs" / scheme / "vllm.log"
        found = KV_CAPACITY.findall(log.read_text(errors="replace")) if log.is_file() else []
        if found:
            capacity[scheme] = int(found[-1].replace(",", ""))
    order = sorted((records[run]["start"], round_, scheme, context, c) for round_, scheme, context, c, run in cells)
    platform_file = boundary_dir / CELLS_DIR / PLATFORM_FILE
    return {
        "workload": {**{k: config.get(k) for k in ("workload", "followup_tokens", "output_tokens", "turns", "reuse",
                                                   "seed")},
                     "contexts": sorted({c[2] for c in cells}), "concurrency": sorted({c[3] for c in cells})},
        "sessions_per_cell": {cell_dir(context, c): records[run]["config"]["sessions"]
                              for _, _, context, c, run in cells},
        "turns_per_cell": {cell_dir(context, c): records[run]["config"]["turns"] for _, _, context, c, run in cells},
        "engine_kv_tokens_reported": capacity,
        "servers": {scheme: {name: _portable(argv) for name, argv in records[run]["metadata"]["servers"].items()}
                    for _, scheme, _, _, run in cells},
        "engine_kv_tokens": first["metadata"].get("engine_kv_tokens"),
        "platform": platform_probe.read(platform_file) if platform_file.is_file() else None,
        "rounds": sorted({c[0] for c in cells}),
        "order": [{"round": r, "scheme": s, "cell": cell_dir(context, c), "start": start}
                  for start, r, s, context, c in order],
    }
