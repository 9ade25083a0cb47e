"""Evidence B's greedy-output mismatches, replayed alone: is a difference the CPU kernels' batch dependence, or
does the KV that offload loaded give another answer than recomputing it?

In a cell, offload serves the same seeded requests as engine_only, in the same order, and greedy decoding should
give the same tokens. When a request's output differs, it is sent again on each scheme's still running stack,
alone (batch of one), right after that scheme's vLLM prefix cache is reset: engine_only then recomputes the whole
prompt, offload loads what LMCache still holds of it (L1, else L2) and computes the rest. If the two replies
alone are the same, the difference came from serving it in a batch (the same prompt under other batch shapes takes
other kernel paths; vLLM's CPU kernels are not batch-invariant); if they still differ alone, the KV offload loaded
gives another answer than recomputing it at batch one, and the cell is not a valid measurement until that is
explained. `controls` requests whose outputs matched are replayed the same way, as a check of the method itself:
alone, they must agree too.

    <boundary_dir>/cells/replays.jsonl   one request record per replay (kvtier.bench.records), labels naming the
                                         request replayed, its cell and round, the scheme and why (mismatch or
                                         control)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..bench import backend
from ..bench.http import Connection, Endpoint
from ..bench.records import RecordWriter, new_record
from ..bench.runner import plan, reset_prefix_cache
from ..bench.tokens import ServerTokenizer, alphabet
from ..core.tiers import ENGINE_ONLY as ENGINE
from .boundary import CELLS_DIR, REPLAYS_FILE, BoundarySettings, cell_config, cell_outputs
from .tier_run import TierStack

MISMATCH, CONTROL = "mismatch", "control"


def chosen(outputs: dict, controls: int) -> list[tuple[int, int, int, str, str]]:
    """(round, context, concurrency, request id, why) of every request whose output differed between a scheme and
    engine_only, then up to `controls` that matched (the last round's, first cell, first requests)."""
    mismatched, matched = [], []
    for (round_, scheme, context, c), mine in sorted(outputs.items()):
        reference = outputs.get((round_, ENGINE, context, c))
        if scheme == ENGINE or reference is None:
            continue
        for rid in sorted(mine):
            if rid in reference:
                (mismatched if mine[rid][0] != reference[rid][0] else matched).append((round_, context, c, rid))
    last = max((m[0] for m in matched), default=None)
    controls_ = [m for m in matched if m[0] == last][:controls]
    return [(*m, MISMATCH) for m in mismatched] + [(*m, CONTROL) for m in controls_]


async def _alone(stack: TierStack, payload: dict, record: dict, timeout_s: float) -> dict:
    endpoint = Endpoint.parse(stack.vllm.base_url)
    prepared = backend.prepare(endpoint, "completions", record["request_id"], record["phase"], payload,
                               record["labels"])
    conn = Connection(endpoint, 10.0, timeout_s)
    try:
        return await backend.execute(conn, prepared, record, timeout_s)
    finally:
        conn.close()


def replay(settings: BoundarySettings, stacks: dict[str, TierStack], boundary_dir: str | Path,
           controls: int = 1) -> list[dict]:
    """Every mismatched request (and `controls` matched ones) sent again alone on each scheme, after its prefix
    cache is reset; the records are appended to cells/replays.jsonl as they come. Returns them."""
    boundary_dir = Path(boundary_dir)
    requests = chosen(cell_outputs(boundary_dir), controls)
    if not requests:
        return []
    tier = settings.tier_settings()
    engine = stacks[ENGINE]
    ids = {}
    records = []
    with RecordWriter(boundary_dir / CELLS_DIR / REPLAYS_FILE) as writer:
        for round_, context, c, rid, why in requests:
            payload, problem = None, None
            try:
                cfg = cell_config(settings, engine, round_, context, c)
                if cfg.seed not in ids:  # the alphabet a round's prompts were drawn from (the server's tokenizer)
                    ids[cfg.seed] = alphabet(ServerTokenizer(cfg.base_url, cfg.model), cfg.seed)
                items = {item.request_id: item for phase in plan(cfg, ids[cfg.seed]) for item in phase.items}
                item = items[rid]
                payload = backend.body("completions", tier.served_name, item.prompt, item.output_tokens)
            except Exception as exc:  # noqa: BLE001 - a replay that cannot be prepared is a recorded failure
                problem = f"replay not prepared: {type(exc).__name__}: {exc}"
            for scheme in settings.schemes:
                labels = {"replay_of": rid, "round": round_, "context_tokens": context, "concurrency": c,
                          "scheme": scheme, "why": why}
                record = new_record("replay", 0, f"{rid}/alone/{scheme}", "replay", 1, labels)
                # The grid is measured by now: a replay that fails is recorded as failed (the page says which),
                # never an exception that would fail the job and take the cells with it.
                try:
                    if problem:
                        raise RuntimeError(problem)
                    reset_prefix_cache(stacks[scheme].vllm.base_url)
                    record = asyncio.run(_alone(stacks[scheme], payload, record, tier.timeout_s))
                except Exception as exc:  # noqa: BLE001
                    record = {**record, "error": problem or f"{type(exc).__name__}: {exc}"}
                writer.write(record)
                records.append(record)
    return records
