"""What to send: cold-resume sessions, multi-turn conversations, fixed-shape random requests, and replays of
Mooncake traces.

Every workload is seeded and built before the clock starts. Prompts are token ids (exact lengths, counted with
the served model's tokenizer); the chat endpoint gets them detokenized to text.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..core.errors import KvtierError
from .tokens import sequence

TRACE_BLOCK_TOKENS = 512  # Mooncake's hash_ids name 512-token prefix blocks


@dataclass
class Item:
    """One request to make: prompt token ids, output length, its phase and labels, and (traces) arrival time."""
    request_id: str
    phase: str
    prompt: list[int]
    output_tokens: int
    labels: dict = field(default_factory=dict)
    arrival_s: float | None = None


@dataclass
class Session:
    id: str
    context: list[int]
    followup: list[int]


def sessions(ids: list[int], count: int, context_tokens: int, followup_tokens: int, seed: int) -> list[Session]:
    """`count` sessions, each a context of exactly `context_tokens` tokens that shares no prefix with another."""
    if count < 1 or context_tokens < 1 or followup_tokens < 0:
        raise KvtierError(f"sessions need count >= 1, context_tokens >= 1, followup_tokens >= 0; got "
                          f"{count}, {context_tokens}, {followup_tokens}")
    out = []
    for i in range(count):
        rng = random.Random(f"{seed}/session/{i}")
        out.append(Session(f"s{i:04d}", sequence(rng, ids, context_tokens), sequence(rng, ids, followup_tokens)))
    return out


def populate(sessions_: list[Session]) -> list[Item]:
    """Send each context once (one output token) so that the tiers under test store its KV."""
    return [Item(f"{s.id}/populate", "populate", s.context, 1, {"session": s.id}) for s in sessions_]


def resume(sessions_: list[Session], output_tokens: int, concurrency: int) -> list[Item]:
    """Context plus follow-up turn for every session: the cold resume."""
    return [Item(f"{s.id}/resume/c{concurrency}", "resume", s.context + s.followup, output_tokens,
                 {"session": s.id}) for s in sessions_]


@dataclass
class Conversation:
    """One conversation of a multi-turn workload: its context, and every turn's text so far. Turn k's prompt is
    the context, then for each earlier turn its follow-up and a stand-in answer, then turn k's follow-up: what a
    chat client resends, with the model's own answers replaced by fixed tokens so that the whole workload is
    known before the clock starts (the engine caches the prompt it computed, so a return reuses the previous
    turn's prompt, not the stand-in)."""
    id: str
    rng: random.Random
    prompt: list[int]
    turns: int = 0


def multi_turn(ids: list[int], sessions_: int, context_tokens: int, followup_tokens: int, answer_tokens: int,
               turns: int, reuse: float, seed: int, tag: str = "mt") -> tuple[list[Item], list[Item]]:
    """A multi-turn workload, round-robin over `sessions_` conversation slots: (the opening turn of each slot,
    the later turns in the order they are sent).

    The later turns are (turns - 1) x sessions_ requests. Each takes the next slot in round-robin order and, with
    probability `reuse` (seeded), returns to that slot's conversation with its next turn; otherwise it opens a new
    conversation there (a fresh context, which shares no prefix with any other). So `reuse` is the fraction of
    later turns whose prefix was sent before, and the working set stays `sessions_` conversations: whether a
    returning prefix is still in a cache follows from the cache's capacity and its own eviction, never from a
    reset. Labels: `session`, `turn` (1 for an opening) and `returning`."""
    if sessions_ < 1 or context_tokens < 1 or followup_tokens < 1 or answer_tokens < 0 or turns < 2:
        raise KvtierError(f"multi-turn needs sessions >= 1, context_tokens >= 1, followup_tokens >= 1, answer "
                          f"tokens >= 0 and turns >= 2; got {sessions_}, {context_tokens}, {followup_tokens}, "
                          f"{answer_tokens}, {turns}")
    if not 0 <= reuse <= 1:
        raise KvtierError(f"multi-turn reuse {reuse}: a fraction of the later turns, from 0 to 1")
    opened = 0

    def open_one() -> Conversation:
        nonlocal opened
        rng = random.Random(f"{seed}/{tag}/conversation/{opened}")
        opened += 1
        return Conversation(f"{tag}-{opened - 1:04d}", rng, sequence(rng, ids, context_tokens))

    def next_turn(conversation: Conversation, returning: bool) -> Item:
        if conversation.turns:  # the previous turn's stand-in answer
            conversation.prompt = conversation.prompt + sequence(conversation.rng, ids, answer_tokens)
        conversation.prompt = conversation.prompt + sequence(conversation.rng, ids, followup_tokens)
        conversation.turns += 1
        return Item(f"{conversation.id}/turn{conversation.turns}", "turn", conversation.prompt, answer_tokens or 1,
                    {"session": conversation.id, "turn": conversation.turns, "returning": returning})

    slots = [open_one() for _ in range(sessions_)]
    opening = [next_turn(c, returning=False) for c in slots]
    choose = random.Random(f"{seed}/{tag}/reuse")
    later = []
    for i in range((turns - 1) * sessions_):
        slot = i % sessions_
        returning = choose.random() < reuse
        if not returning:
            slots[slot] = open_one()
        later.append(next_turn(slots[slot], returning))
    return opening, later


def random_requests(ids: list[int], count: int, input_tokens: int, output_tokens: int, seed: int,
                    tag: str = "random") -> list[Item]:
    rng = random.Random(f"{seed}/{tag}")
    return [Item(f"{tag}/{i:06d}", tag, sequence(rng, ids, input_tokens), output_tokens) for i in range(count)]


@dataclass(frozen=True)
class TraceRequest:
    line: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def json_records(path: Path) -> Iterator[tuple[int, dict]]:
    """The JSON object on each non-blank line of a trace file, with its line number; a bad line is an error that
    names the file and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KvtierError(f"{path}: trace file not found") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise KvtierError(f"{path}, line {number}: not JSON") from None
        if not isinstance(row, dict):
            raise KvtierError(f"{path}, line {number}: expected a JSON object")
        yield number, row


def load_trace(path: str | os.PathLike, limit: int | None = None) -> list[TraceRequest]:
    """Mooncake FAST'25 trace lines: {timestamp (ms), input_length, output_length, hash_ids}. A bad line is an
    error naming the file, the line and the field."""
    path = Path(path)
    out = []
    for number, row in json_records(path):
        for name, kind in (("timestamp", (int, float)), ("input_length", int), ("output_length", int),
                           ("hash_ids", list)):
            if name not in row:
                raise KvtierError(f"{path}, line {number}: missing field '{name}'")
            if not isinstance(row[name], kind) or isinstance(row[name], bool):
                raise KvtierError(f"{path}, line {number}: field '{name}' = {row[name]!r} has the wrong type")
        if row["timestamp"] < 0 or row["input_length"] < 1 or row["output_length"] < 1:
            raise KvtierError(f"{path}, line {number}: timestamp must be >= 0 and lengths >= 1, got "
                              f"{row['timestamp']}, {row['input_length']}, {row['output_length']}")
        if not all(isinstance(h, int) and not isinstance(h, bool) for h in row["hash_ids"]):
            raise KvtierError(f"{path}, line {number}: field 'hash_ids' must be a list of integers")
        out.append(TraceRequest(number, float(row["timestamp"]), row["input_length"], row["output_length"],
                                tuple(row["hash_ids"])))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise KvtierError(f"{path}: no requests")
    return out


def trace_requests(trace: list[TraceRequest], ids: list[int], seed: int, time_scale: float = 1.0,
                   length_scale: float = 1.0, max_input_tokens: int | None = None) -> list[Item]:
    """Replay a trace: each hash id becomes one shared block of tokens, so requests that share hash ids share a
    prefix exactly as in production. `length_scale` shrinks blocks, inputs and outputs alike; `time_scale`
    stretches (>1) or compresses (<1) the arrival times."""
    if time_scale <= 0 or length_scale <= 0:
        raise KvtierError(f"time_scale and length_scale must be positive, got {time_scale}, {length_scale}")
    block = max(1, round(TRACE_BLOCK_TOKENS * length_scale))
    blocks: dict[int, list[int]] = {}
    t0 = trace[0].timestamp_ms
    items = []
    for i, req in enumerate(trace):
        length = max(1, round(req.input_length * length_scale))
        if max_input_tokens:
            length = min(length, max_input_tokens)
        prompt: list[int] = []
        for h in req.hash_ids:
            if len(prompt) >= length:
                break
            if h not in blocks:
                blocks[h] = sequence(random.Random(f"{seed}/block/{h}"), ids, block)
            prompt += blocks[h]
        if len(prompt) < length:  # the trace's last block is partial, or hash_ids run short: unique filler
            prompt += sequence(random.Random(f"{seed}/tail/{i}"), ids, length - len(prompt))
        items.append(Item(f"trace/{req.line:06d}", "trace", prompt[:length],
                          max(1, round(req.output_length * length_scale)),
                          {"trace_line": req.line, "hash_ids": len(req.hash_ids)},
                          arrival_s=(req.timestamp_ms - t0) / 1000.0 * time_scale))
    return items
