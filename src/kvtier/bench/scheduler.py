"""When requests are sent: closed loop at a fixed concurrency, or open loop at given arrival times.

Closed loop: `concurrency` workers, each with its own keep-alive connection, each sending its next request as
soon as the previous one completes. Open loop: requests leave at their arrival times (Poisson or a trace's
timestamps) whether or not earlier ones have completed, on a pool of connections capped at `max_connections`.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Callable

from .backend import Prepared, execute
from .http import Connection, Endpoint
from .records import new_record


@dataclass(frozen=True)
class RunContext:
    endpoint: Endpoint
    run_id: str
    segment: int
    timeout_s: float
    connect_timeout_s: float = 10.0


OnRecord = Callable[[dict], None]


def _record(ctx: RunContext, prepared: Prepared, concurrency: int | None) -> dict:
    return new_record(ctx.run_id, ctx.segment, prepared.request_id, prepared.phase, concurrency, prepared.labels)


async def closed_loop(ctx: RunContext, requests: list[Prepared], concurrency: int, on_record: OnRecord) -> None:
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    pending = iter(requests)

    async def worker() -> None:
        conn = Connection(ctx.endpoint, ctx.connect_timeout_s, ctx.timeout_s)
        try:
            for prepared in pending:
                on_record(await execute(conn, prepared, _record(ctx, prepared, concurrency), ctx.timeout_s))
        finally:
            conn.close()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(requests)))))


def poisson_arrivals(count: int, rate_per_s: float, seed: int) -> list[float]:
    """Arrival offsets (s) of a Poisson process: exponential gaps, seeded."""
    if rate_per_s <= 0:
        raise ValueError(f"rate must be positive, got {rate_per_s}")
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate_per_s)
        out.append(t)
    return out


async def open_loop(ctx: RunContext, requests: list[Prepared], arrivals_s: list[float], on_record: OnRecord,
                    max_connections: int = 4096) -> None:
    idle: list[Connection] = []
    slots = asyncio.Semaphore(max_connections)
    tasks = set()

    async def one(prepared: Prepared) -> None:
        conn = idle.pop() if idle else Connection(ctx.endpoint, ctx.connect_timeout_s, ctx.timeout_s)
        try:
            on_record(await execute(conn, prepared, _record(ctx, prepared, None), ctx.timeout_s))
        finally:
            if conn.writer is not None:
                idle.append(conn)
            slots.release()

    start = time.monotonic()
    for prepared, at in zip(requests, arrivals_s):
        delay = start + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        task = asyncio.ensure_future(one(prepared))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    for conn in idle:
        conn.close()
