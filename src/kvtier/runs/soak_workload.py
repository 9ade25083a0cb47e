"""What a soak sends, and when: an unbounded, seeded stream of requests with open-loop arrival times, built block
by block so that a 72-hour soak never holds more than one block in memory, and a resumed soak regenerates
exactly the requests it had planned.

    sessions  multi-turn conversations with prefix reuse (kvtier.bench.workloads.multi_turn), `slots`
              conversations at a time; each block opens new ones, so the pool keeps growing until the
              eviction policy has to work, and a returning turn finds its prefix in the engine, L1 or L2
              depending on how long ago it was sent; Poisson arrivals at `rate_per_s`
    trace     a Mooncake trace (kvtier.bench.workloads.trace_requests) at its own arrival times scaled by
              `time_scale`, looped; each loop draws its prefix blocks from a new seed, so a loop reuses
              prefixes within itself exactly as the trace does, and the pool grows from loop to loop

Every request's id names its block (`soak/b<block>/...`), and its `at_s` (the soak-clock second it is due) is in
its labels: the window it belongs to, whatever segment of a resumed soak sent it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..bench import scheduler, workloads
from ..core.errors import KvtierError

KINDS = ("sessions", "trace")


@dataclass(frozen=True)
class SoakWorkload:
    kind: str = "sessions"
    # sessions
    rate_per_s: float = 0.5
    slots: int = 8
    context_tokens: int = 1024
    followup_tokens: int = 32
    output_tokens: int = 16
    turns: int = 4
    reuse: float = 0.75
    # trace
    trace: str | None = None
    time_scale: float = 1.0
    length_scale: float = 1.0
    max_input_tokens: int | None = None
    max_requests: int | None = None
    seed: int = 0

    def check(self, max_model_len: int | None = None) -> None:
        if self.kind not in KINDS:
            raise KvtierError(f"soak workload kind {self.kind!r}: one of {', '.join(KINDS)}")
        if self.kind == "trace":
            if not self.trace:
                raise KvtierError("soak workload kind trace: set soak.workload.trace to a trace file")
            if self.time_scale <= 0 or self.length_scale <= 0:
                raise KvtierError(f"soak workload time_scale {self.time_scale} and length_scale {self.length_scale}: "
                                  "both > 0")
            return
        if self.rate_per_s <= 0:
            raise KvtierError(f"soak workload rate_per_s {self.rate_per_s}: must be > 0")
        if self.slots < 1 or self.turns < 2 or self.context_tokens < 1 or self.followup_tokens < 1:
            raise KvtierError(f"soak workload: slots >= 1, turns >= 2, context_tokens >= 1, followup_tokens >= 1; got "
                              f"{self.slots}, {self.turns}, {self.context_tokens}, {self.followup_tokens}")
        if not 0 <= self.reuse <= 1:
            raise KvtierError(f"soak workload reuse {self.reuse}: a fraction from 0 to 1")
        longest = self.context_tokens + self.turns * (self.followup_tokens + self.output_tokens)
        if max_model_len is not None and longest > max_model_len:
            raise KvtierError(f"soak workload: a conversation reaches {longest} tokens (context {self.context_tokens} "
                              f"+ {self.turns} turns), over max_model_len {max_model_len}")


def _block(workload: SoakWorkload, ids: list[int], number: int, trace) -> tuple[list[workloads.Item], float]:
    """Block `number`'s requests with arrivals relative to the block's start, and the block's length (s)."""
    seed = workload.seed * 1_000_003 + number
    if workload.kind == "trace":
        items = workloads.trace_requests(trace, ids, seed, workload.time_scale, workload.length_scale,
                                         workload.max_input_tokens)
        items.sort(key=lambda item: item.arrival_s)
        # The next loop starts one mean gap after this one's last arrival.
        span = items[-1].arrival_s + (items[-1].arrival_s / max(1, len(items) - 1) if len(items) > 1 else 1.0)
    else:
        opening, later = workloads.multi_turn(ids, workload.slots, workload.context_tokens, workload.followup_tokens,
                                              workload.output_tokens, workload.turns, workload.reuse, seed,
                                              tag=f"b{number}")
        items = opening + later
        arrivals = scheduler.poisson_arrivals(len(items) + 1, workload.rate_per_s, seed)
        for item, at in zip(items, arrivals):
            item.arrival_s = at
        span = arrivals[-1]  # one more gap: the next block's first request comes a gap after this one's last
    for item in items:
        item.request_id = f"soak/b{number}/{item.request_id.replace('trace/', 'line')}"
        item.phase = "soak"
    return items, span


def stream(workload: SoakWorkload, ids: list[int], duration_s: float) -> Iterator[workloads.Item]:
    """Every request due before `duration_s` on the soak clock, in arrival order, with `at_s` (and `block`) in its
    labels and `arrival_s` set to `at_s`."""
    workload.check()
    trace = workloads.load_trace(workload.trace, workload.max_requests) if workload.kind == "trace" else None
    start, number = 0.0, 0
    while start < duration_s:
        items, span = _block(workload, ids, number, trace)
        if span <= 0:
            raise KvtierError(f"soak workload: block {number} has no length (one request, or a trace whose requests "
                              "all arrive at once)")
        for item in items:
            at = start + item.arrival_s
            if at >= duration_s:
                return
            item.arrival_s = at
            item.labels = {**item.labels, "at_s": round(at, 6), "block": number}
            yield item
        start, number = start + span, number + 1
