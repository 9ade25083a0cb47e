"""The bandwidth sweep: cold-resume TTFT from an emulated L2 tier at several read caps, beside recompute and DRAM.

Inside an emulation (kvtier.stack.emulated: the command runs in the cgroup that caps the tier's device), two server
starts serve the whole sweep: the offload stack (vLLM + LMCache, L1 in DRAM and L2 on the swept tier's path) and
the recompute stack (vLLM alone, its prefix cache emptied before every resume). For each context length, in
rounds, each a run of the cold-resume workload into a directory of its own:

    recompute   the recompute stack, every resume prefilled
    dram        the offload stack after the engine's prefix cache is reset: the KV comes from LMCache's L1
    cap-<B/s>   the offload stack after its engine cache and L1 are emptied and the pool's files made cold, with
                the tier's read cap rewritten to B bytes/s first: the KV comes from L2 through the capped device

The sessions of a context are populated once (its first run, which stores their KV in L1 and L2); every later
run warms up with one request and resumes the same sessions. The order of the runs is rotated from round to round
so that no cap is always measured first or last. One row per window is appended to sweep.jsonl (and flushed) as it
is measured; the caps' original values are restored at the end, whatever happens.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..bench.records import RecordWriter
from ..bench.runner import Runner
from ..core.errors import KvtierError
from ..probes import quiet
from ..probes.platform_probe import PLATFORM_FILE
from ..stack import emulated
from ..stack.model import kv_bytes_per_token
from .run_record import RunRecord
from .tier_run import TierSettings, TierStack, bench_config, probe_platform, refuse_existing, start_together

SWEEP_FILE = "sweep.jsonl"
RECOMPUTE, DRAM, CAP_PREFIX = "recompute", "dram", "cap-"
# The swept tier: local_disk, whose LMCache shares its server start with dram (kvtier.core.tiers.SHARED_SERVERS).
# Which path it is matters not: its device is the emulated one, at the cap being swept.
TIER = "local_disk"


@dataclass(frozen=True)
class SweepSettings:
    contexts: list[int] = field(default_factory=lambda: [1024, 2048, 4096])
    read_caps: list[str] = field(default_factory=lambda: ["10MB/s", "25MB/s", "50MB/s", "100MB/s", "250MB/s",
                                                           "1GB/s"])
    concurrency: list[int] = field(default_factory=lambda: [4])
    sessions: int = 8
    rounds: int = 3

    def __post_init__(self):
        for name in ("contexts", "read_caps", "concurrency"):
            if not getattr(self, name):
                raise KvtierError(f"sweep {name}: at least one")
        if any(not isinstance(c, int) or c < 16 for c in self.contexts):
            raise KvtierError(f"sweep contexts {self.contexts}: integers of 16 tokens or more")
        if any(not isinstance(c, int) or c < 1 for c in self.concurrency):
            raise KvtierError(f"sweep concurrency {self.concurrency}: integers of 1 or more")
        caps = self.caps_bps()
        if len(set(caps)) != len(caps):
            raise KvtierError(f"sweep read_caps {self.read_caps}: each cap once")
        for name in ("sessions", "rounds"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise KvtierError(f"sweep {name} {value!r}: a positive integer")
        if self.sessions < max(self.concurrency):
            raise KvtierError(f"sweep sessions {self.sessions}: at least the highest concurrency "
                              f"({max(self.concurrency)}), so that every slot resumes a session")

    def caps_bps(self) -> list[int]:
        return [emulated.parse_rate(cap, f"sweep.read_caps[{i}]") for i, cap in enumerate(self.read_caps)]


def labels(settings: SweepSettings) -> list[str]:
    """The runs of one context in round 0's order: the baselines, then the caps from the slowest."""
    return [RECOMPUTE, DRAM, *(f"{CAP_PREFIX}{bps}" for bps in sorted(settings.caps_bps()))]


def order(settings: SweepSettings, round_: int) -> list[str]:
    """Round r's order: round 0's rotated by r, so that each run takes each position in turn."""
    runs = labels(settings)
    shift = round_ % len(runs)
    return runs[shift:] + runs[:shift]


def run_sweep(sweep: SweepSettings, settings: TierSettings, run_dir: str | os.PathLike) -> dict:
    """The whole sweep into `run_dir` (new); returns run.json's record. Refuses, before anything starts, a tier
    that this command does not run emulated."""
    run_dir = Path(run_dir)
    refuse_existing(run_dir)
    inside = emulated.in_command()
    if not inside or TIER not in inside.get("tiers", {}):
        raise KvtierError(f"sweep: tier {TIER} is not emulated in this command (emulation: "
                          f"{', '.join(inside['tiers']) if inside else 'none'}); a sweep rewrites the tier's device "
                          "cap, so it runs only with the config's emulation on (kvtier.stack.emulated)")
    configured = inside["tiers"][TIER]["configured"]["read_bps"]
    check = quiet.hook(settings.quiet)  # refuses bad quiet bounds before anything starts; run before each window
    offload = TierStack(("dram", TIER), settings, run_dir / "server_logs" / "offload")
    recompute = TierStack(("recompute",), settings, run_dir / "server_logs" / "recompute")
    metadata = {"sweep": asdict(sweep), "caps_bps": sorted(sweep.caps_bps()), "configured_read_bps": configured,
                # What one resumed token reads from L2: the model that explains the sweep needs it.
                "kv_bytes_per_token": kv_bytes_per_token(settings.model_dir, settings.dtype),
                "emulation": inside, "platform": PLATFORM_FILE}
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunRecord(run_dir, "sweep-run", asdict(settings), metadata):
        probe_platform(settings, run_dir)
        try:
            with start_together(offload, recompute), RecordWriter(run_dir / SWEEP_FILE) as rows:
                for index, context in enumerate(sweep.contexts):
                    _sweep_context(sweep, settings, index, context, offload, recompute, run_dir, rows, check)
        finally:
            emulated.set_read_cap(TIER, configured)
    return json.loads((run_dir / "run.json").read_text())


def _sweep_context(sweep: SweepSettings, settings: TierSettings, index: int, context: int, offload: TierStack,
                   recompute: TierStack, run_dir: Path, rows: RecordWriter, check) -> None:
    # Another seed per context: the sessions of two contexts share no prefix, so one context's KV never serves
    # another's resume.
    ctx = dataclasses.replace(settings, context_tokens=context, sessions=sweep.sessions,
                              concurrency=list(sweep.concurrency), seed=settings.seed + 1000 * (index + 1))
    populated = False
    for round_ in range(sweep.rounds):
        for label in order(sweep, round_):
            stack, tier = (recompute, RECOMPUTE) if label == RECOMPUTE else (
                offload, DRAM if label == DRAM else TIER)
            warmup = {} if stack is offload and not populated else {"populate_sessions": 1}
            if stack is offload:
                populated = True
            read_bps = int(label[len(CAP_PREFIX):]) if label.startswith(CAP_PREFIX) else None
            in_force = emulated.set_read_cap(TIER, read_bps) if read_bps else None
            out = run_dir / f"L{context}" / f"round-{round_ + 1}" / label
            cfg = bench_config(stack, ctx, f"tier:{tier}", metrics_urls=stack.metrics_urls(), **warmup)
            summary = Runner(cfg, out, evict=functools.partial(stack.evict, tier), progress=False,
                             labels={"tier": tier, "sweep": label}, quiet=check,
                             metadata={"sweep": label, "read_bps": read_bps, "in_force": in_force,
                                       "context_tokens": context, "round": round_ + 1}).run()
            for window in summary["windows"]:
                if window["kind"] != "resume":
                    continue
                rows.write({"context_tokens": context, "round": round_ + 1, "run": label, "tier": tier,
                            "read_bps": read_bps, "read_bps_in_force": (in_force or {}).get("read_bps"),
                            "concurrency": window["concurrency"], "ttft_p50_s": window["ttft_s"]["p50"],
                            "ttft_p99_s": window["ttft_s"]["p99"], "requests": window["requests"]["ok"],
                            "failed": window["requests"]["failed"], "prompt_tokens": window["prompt_tokens"],
                            "cached_tokens": window["cached_tokens"],
                            "run_dir": os.path.relpath(out, run_dir)})
