"""A benchmark run, start to finish, in its run directory (DESIGN.md, "Data contracts"):

    run.json          config, versions, seeds, host, start/end, status (running | complete | incomplete)
    requests.jsonl    one record per completed request, appended and flushed as each completes
    metrics/          <window>.<source>.before.prom / .after.prom: server /metrics around each measured window
    summary.json      per measured window: statistics, /metrics deltas, TTFT reconciliation

A run is a list of phases (populate, then one resume per concurrency for cold resume; one window per
concurrency or rate for random requests; one window for a trace). An interrupted run is marked incomplete;
`resume` skips the phases that finished and reruns the others whole in a new segment, and every statistic uses
the newest record of each request, so no window mixes two segments.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .. import __version__
from ..core import web
from ..core.atomic import write_text
from ..core.config import load_yaml
from ..core.errors import KvtierError
from ..core.paths import schema_path
from ..core.vcs import git_revision
from . import backend, metrics, scheduler, summary, workloads
from .http import Endpoint
from .progress import Progress
from .records import RecordWriter, latest_per_request, read_records
from .tokens import ServerTokenizer, alphabet

RUN_FILE, REQUESTS_FILE, SUMMARY_FILE, METRICS_DIR = "run.json", "requests.jsonl", "summary.json", "metrics"
WORKLOADS = ("cold-resume", "multi-turn", "random", "trace")


@dataclass
class BenchConfig:
    base_url: str
    model: str
    workload: str = "cold-resume"
    endpoint: str = "completions"
    concurrency: list[int] = field(default_factory=lambda: [8, 16, 32])
    rate_per_s: float | None = None          # open loop (Poisson) instead of closed loop, for `random`
    sessions: int = 16                       # cold-resume
    context_tokens: int = 4096
    followup_tokens: int = 32
    output_tokens: int = 32
    requests: int = 64                       # random
    input_tokens: int = 512
    trace: str | None = None                 # trace
    time_scale: float = 1.0
    length_scale: float = 1.0
    max_requests: int | None = None
    max_input_tokens: int | None = None
    seed: int = 0
    timeout_s: float = 600.0
    ttft_sla_s: float | None = None
    metrics_urls: dict[str, str] = field(default_factory=dict)   # source name -> /metrics URL
    evict: str = "none"                      # none | reset-prefix-cache | a shell command
    populate_url: str | None = None          # cold-resume: populate through this server instead (another
                                             # instance on the same shared pool: the R3 protocol)
    populate_sessions: int | None = None     # cold-resume: populate only the first N sessions (None: all);
                                             # recompute keeps no KV, so populate is only its warm-up
    turns: int = 4                           # multi-turn: turns per conversation (the first opens it)
    reuse: float = 1.0                       # multi-turn: fraction of later turns that return to a conversation

    def check(self) -> None:
        if self.workload not in WORKLOADS:
            raise KvtierError(f"workload {self.workload!r}: expected one of {', '.join(WORKLOADS)}")
        if self.endpoint not in backend.ENDPOINTS:
            raise KvtierError(f"endpoint {self.endpoint!r}: expected one of {', '.join(backend.ENDPOINTS)}")
        bad = [c for c in self.concurrency if c < 1]
        if not self.concurrency or bad:
            raise KvtierError(f"concurrency {self.concurrency}: every value must be an integer >= 1")
        if self.rate_per_s is not None and self.rate_per_s <= 0:
            raise KvtierError(f"rate {self.rate_per_s}: must be > 0 requests/s")
        for name in ("sessions", "context_tokens", "output_tokens", "requests", "input_tokens"):
            if getattr(self, name) < 1:
                raise KvtierError(f"{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.timeout_s <= 0:
            raise KvtierError(f"timeout {self.timeout_s}: must be > 0 s")
        if self.workload == "trace" and not self.trace:
            raise KvtierError("the trace workload needs --trace FILE")
        Endpoint.parse(self.base_url)
        if self.populate_sessions is not None and not 1 <= self.populate_sessions <= self.sessions:
            raise KvtierError(f"populate sessions {self.populate_sessions}: must be from 1 to sessions "
                              f"({self.sessions})")
        if self.turns < 2:
            raise KvtierError(f"turns {self.turns}: a multi-turn conversation has at least 2")
        if not 0 <= self.reuse <= 1:
            raise KvtierError(f"reuse {self.reuse}: a fraction of the later turns, from 0 to 1")
        if self.workload == "multi-turn" and self.followup_tokens < 1:
            raise KvtierError("followup-tokens 0: each turn of a multi-turn workload appends at least one token")
        if self.populate_url:
            if self.workload != "cold-resume":
                raise KvtierError("a populate URL applies to the cold-resume workload only")
            Endpoint.parse(self.populate_url)


@dataclass
class Phase:
    name: str
    items: list[workloads.Item]
    concurrency: int | None          # closed loop at this concurrency, or None: open loop at item arrivals
    measured: bool
    evict_before: bool = False


# ------------------------------------------------------------------------------------------------------------
# The server

def preflight(cfg: BenchConfig, timeout_s: float = 10.0, base_url: str | None = None) -> dict:
    """Refuse to start against a server that is down or does not serve the model, naming what is wrong."""
    base_url = base_url or cfg.base_url
    url = f"{base_url.rstrip('/')}/v1/models"
    try:
        models = web.get_json(url, timeout_s)
    except web.ERRORS as exc:
        raise KvtierError(f"server {base_url} is not reachable ({url}: {getattr(exc, 'reason', exc)})") from None
    served = [m.get("id") for m in models.get("data", [])]
    if cfg.model not in served:
        raise KvtierError(f"model {cfg.model!r} is not served at {base_url} (served: {', '.join(served) or 'none'})")
    return next(m for m in models["data"] if m.get("id") == cfg.model)


def reset_prefix_cache(base_url: str) -> None:
    """Empty vLLM's prefix cache (POST /reset_prefix_cache, exposed with VLLM_SERVER_DEV_MODE=1)."""
    try:
        body = web.request(f"{base_url.rstrip('/')}/reset_prefix_cache", method="POST", timeout_s=60)
    except OSError as exc:
        raise KvtierError(f"evict: POST /reset_prefix_cache failed ({exc}); vLLM exposes it only with "
                          "VLLM_SERVER_DEV_MODE=1") from None
    try:
        succeeded = json.loads(body).get("success", True) if body.strip() else True
    except ValueError:
        succeeded = True
    if not succeeded:
        raise KvtierError("evict: vLLM refused to reset its prefix cache (blocks still held by running requests)")


def evict_hook(cfg: BenchConfig) -> Callable[[], None]:
    """The eviction step of a cold resume. The tier runner passes its own; the CLI offers two."""
    if cfg.evict == "none":
        return lambda: None
    if cfg.evict == "reset-prefix-cache":
        return lambda: reset_prefix_cache(cfg.base_url)

    def command() -> None:
        done = subprocess.run(cfg.evict, shell=True, timeout=600, capture_output=True, text=True)
        if done.returncode != 0:
            raise KvtierError(f"evict command {cfg.evict!r} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return command


# ------------------------------------------------------------------------------------------------------------
# The plan

def plan(cfg: BenchConfig, ids: list[int]) -> list[Phase]:
    if cfg.workload == "cold-resume":
        sessions = workloads.sessions(ids, cfg.sessions, cfg.context_tokens, cfg.followup_tokens, cfg.seed)
        populated = sessions if cfg.populate_sessions is None else sessions[:cfg.populate_sessions]
        phases = [Phase("populate", workloads.populate(populated), cfg.concurrency[0], measured=False)]
        phases += [Phase(f"resume-c{c}", workloads.resume(sessions, cfg.output_tokens, c), c, measured=True,
                         evict_before=True) for c in cfg.concurrency]
        return phases
    if cfg.workload == "multi-turn":
        # Per concurrency its own conversations: the openings (unmeasured; the eviction, if any, comes before
        # them, never inside the window), then the later turns, measured, closed loop.
        phases = []
        for c in cfg.concurrency:
            opening, later = workloads.multi_turn(ids, cfg.sessions, cfg.context_tokens, cfg.followup_tokens,
                                                  cfg.output_tokens, cfg.turns, cfg.reuse, cfg.seed,
                                                  tag=f"mt-L{cfg.context_tokens}-c{c}")
            phases += [Phase(f"open-c{c}", opening, c, measured=False, evict_before=True),
                       Phase(f"turns-c{c}", later, c, measured=True)]
        return phases
    if cfg.workload == "random":
        if cfg.rate_per_s:
            items = workloads.random_requests(ids, cfg.requests, cfg.input_tokens, cfg.output_tokens, cfg.seed,
                                              tag=f"rate{cfg.rate_per_s:g}")
            for item, at in zip(items, scheduler.poisson_arrivals(len(items), cfg.rate_per_s, cfg.seed)):
                item.arrival_s = at
            return [Phase(f"rate{cfg.rate_per_s:g}", items, None, measured=True)]
        return [Phase(f"random-c{c}", workloads.random_requests(ids, cfg.requests, cfg.input_tokens,
                                                                 cfg.output_tokens, cfg.seed, tag=f"random-c{c}"),
                      c, measured=True) for c in cfg.concurrency]
    trace = workloads.load_trace(cfg.trace, cfg.max_requests)
    items = workloads.trace_requests(trace, ids, cfg.seed, cfg.time_scale, cfg.length_scale, cfg.max_input_tokens)
    items.sort(key=lambda item: item.arrival_s)
    return [Phase("trace", items, None, measured=True)]


def _prepared(cfg: BenchConfig, endpoint: Endpoint, phase: Phase, decode, labels: dict) -> list[backend.Prepared]:
    out = []
    for item in phase.items:
        prompt = decode(item.prompt) if cfg.endpoint == "chat" else item.prompt
        payload = backend.body(cfg.endpoint, cfg.model, prompt, item.output_tokens)
        out.append(backend.prepare(endpoint, cfg.endpoint, item.request_id, phase.name, payload,
                                   {**labels, **item.labels, "prompt_tokens_sent": len(item.prompt)}))
    return out


# ------------------------------------------------------------------------------------------------------------
# The run directory

def now_utc() -> str:
    """UTC now, to the second: the timestamps of every run.json."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def read_completed(run_dir: str | os.PathLike) -> dict:
    """A run's run.json, refused (naming it, its status and its error) unless the run completed."""
    from ..core.config import read_json
    path = Path(run_dir) / RUN_FILE
    run = read_json(path, "run record (run.json)")
    if run.get("status") != "complete":
        raise KvtierError(f"{path}: the run is {run.get('status')!r}, not complete ({run.get('error')})")
    return run


def write_run(run_dir: Path, run: dict) -> None:
    write_text(run_dir / RUN_FILE, json.dumps(run, indent=2) + "\n")


def _snapshot(cfg: BenchConfig, run_dir: Path, window: str, when: str) -> dict[str, str]:
    """Save each /metrics source's text; return {source: file} (a source that cannot be read is noted)."""
    saved = {}
    for source, url in cfg.metrics_urls.items():
        path = run_dir / METRICS_DIR / f"{window}.{source}.{when}.prom"
        try:
            write_text(path, metrics.fetch(url))
            saved[source] = path.relative_to(run_dir).as_posix()
        except OSError as exc:
            saved[source] = f"unavailable: {exc}"
    return saved


class Runner:
    def __init__(self, cfg: BenchConfig, run_dir: str | os.PathLike, evict: Callable[[], None] | None = None,
                 resume: bool = False, progress: bool | None = None, labels: dict | None = None,
                 metadata: dict | None = None, quiet: Callable[[], dict] | None = None, stop_after: str | None = None):
        cfg.check()
        # Recorded in run.json (e.g. the tier and its pool directory); on resume, added to what is there.
        self.metadata = metadata or {}
        # End the segment after this phase, leaving the run for another process to resume (R3's hand-off: instance
        # A populates, instance B resumes the same run): the segment is "handed-off", the run "incomplete".
        self.stop_after = stop_after
        self.cfg, self.run_dir, self.resume = cfg, Path(run_dir), resume
        self.labels = labels or {}  # added to every request's labels (e.g. the tier under test)
        self.evict = evict or evict_hook(cfg)
        # Called right before each measured window opens (after its eviction): waits until the machine is quiet
        # and returns what it found, recorded with the window (kvtier.probes.quiet.wait_quiet).
        self.quiet = quiet
        self.progress = Progress(enabled=progress)

    def _start(self) -> dict:
        run_file = self.run_dir / RUN_FILE
        if self.resume:
            if not run_file.is_file():
                raise KvtierError(f"{self.run_dir}: no {RUN_FILE} to resume")
            run = json.loads(run_file.read_text())
            if run["status"] == "complete":
                raise KvtierError(f"{self.run_dir}: the run is complete; start a new run directory to rerun it")
            run["segments"].append(self._segment())
            run["status"] = "running"
            run["metadata"] = {**run.get("metadata", {}), **self.metadata}
            return run
        if (run_file).exists() or (self.run_dir / REQUESTS_FILE).exists():
            raise KvtierError(f"{self.run_dir}: already holds a run; resume it (--resume) or choose a new directory")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        return {
            "run_id": self.run_dir.name, "kvtier_version": __version__, "source_revision": git_revision(),
            "argv": sys.argv, "config": asdict(self.cfg), "host": platform.node(), "python": platform.python_version(),
            "status": "running", "start": now_utc(), "end": None,
            "segments": [self._segment()],
            "phases_done": [], "windows": {}, "metadata": self.metadata,
        }

    def _segment(self) -> dict:
        """A new segment: when, on which host and against which server it ran (a resumed run may move)."""
        return {"start": now_utc(), "end": None, "status": "running", "host": platform.node(),
                "base_url": self.cfg.base_url}

    def run(self) -> dict:
        """Run to the end; return the summary. On interruption the run is left 'incomplete' and re-raised. With
        `stop_after`, run up to that phase and return run.json's record instead (no summary yet)."""
        # Everything that can refuse the run happens before anything is written.
        served = preflight(self.cfg)
        if self.cfg.populate_url:
            preflight(self.cfg, base_url=self.cfg.populate_url)
        tokenizer = ServerTokenizer(self.cfg.base_url, self.cfg.model)
        phases = plan(self.cfg, alphabet(tokenizer, self.cfg.seed))
        if self.stop_after and self.stop_after not in [phase.name for phase in phases]:
            raise KvtierError(f"stop after {self.stop_after!r}: not a phase of this run "
                              f"({', '.join(phase.name for phase in phases)})")
        endpoint = Endpoint.parse(self.cfg.base_url)
        populate_endpoint = Endpoint.parse(self.cfg.populate_url) if self.cfg.populate_url else endpoint
        run = self._start()
        run["server_model"] = served
        write_run(self.run_dir, run)
        segment = len(run["segments"])
        try:
            with RecordWriter(self.run_dir / REQUESTS_FILE) as writer:
                for phase in phases:
                    if phase.name in run["phases_done"]:
                        continue
                    target = populate_endpoint if phase.name == "populate" else endpoint
                    prepared = _prepared(self.cfg, target, phase, tokenizer.decode, self.labels)
                    if phase.evict_before:
                        self.evict()
                    window = {"kind": phase.items[0].phase if phase.items else phase.name,
                              "concurrency": phase.concurrency, "segment": segment}
                    if phase.measured and self.quiet:
                        window["quiet"] = self.quiet()
                    if phase.measured:
                        window["metrics_before"] = _snapshot(self.cfg, self.run_dir, phase.name, "before")
                    window["start"] = now_utc()
                    self._run_phase(run["run_id"], segment, target, phase, prepared, writer)
                    window["end"] = now_utc()
                    if phase.measured:
                        window["metrics_after"] = _snapshot(self.cfg, self.run_dir, phase.name, "after")
                        run["windows"][phase.name] = window
                    run["phases_done"].append(phase.name)
                    write_run(self.run_dir, run)
                    if phase.name == self.stop_after:
                        break
        except BaseException:
            run["status"] = run["segments"][-1]["status"] = "incomplete"
            run["segments"][-1]["end"] = now_utc()
            write_run(self.run_dir, run)
            raise
        finally:
            self.progress.close()
        if self.stop_after and len(run["phases_done"]) < len(phases):
            run["status"], run["segments"][-1]["status"] = "incomplete", "handed-off"
            run["segments"][-1]["end"] = now_utc()
            write_run(self.run_dir, run)
            return run
        result = summarize(self.run_dir, run, self.cfg.ttft_sla_s)
        run["status"] = run["segments"][-1]["status"] = "complete"
        run["end"] = run["segments"][-1]["end"] = now_utc()
        write_run(self.run_dir, run)
        return result

    def _run_phase(self, run_id: str, segment: int, endpoint: Endpoint, phase: Phase,
                   prepared: list[backend.Prepared], writer: RecordWriter) -> None:
        ctx = scheduler.RunContext(endpoint, run_id, segment, self.cfg.timeout_s)
        self.progress.start(phase.name, len(prepared))

        def on_record(record: dict) -> None:
            writer.write(record)
            self.progress.update(record["error"] is None)

        if phase.concurrency is not None:
            job = scheduler.closed_loop(ctx, prepared, phase.concurrency, on_record)
        else:
            job = scheduler.open_loop(ctx, prepared, [item.arrival_s for item in phase.items], on_record)
        run_async(job)


def run_async(job) -> None:
    """Run a coroutine on uvloop where it is installed (it is, with vLLM); SIGTERM interrupts like Ctrl-C."""
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover
        loop = asyncio.new_event_loop()
    task = loop.create_task(job)
    handled = False
    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        handled = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        pass
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        raise KeyboardInterrupt("terminated") from None
    finally:
        if handled:  # hand SIGTERM back: a closed loop must not swallow it
            loop.remove_signal_handler(signal.SIGTERM)
            # The loop leaves its own handler (uvloop) or SIG_DFL (asyncio), never the caller's: put that back, or a
            # SIGTERM between two phases (an eviction, a server stop) would be swallowed, or kill without cleanup.
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        loop.close()


def summarize(run_dir: Path, run: dict, ttft_sla_s: float | None) -> dict:
    """summary.json from requests.jsonl and the /metrics snapshots, validated against its schema."""
    records = latest_per_request(read_records(run_dir / REQUESTS_FILE))
    windows = []
    for name, window in run["windows"].items():
        mine = [r for r in records if r["phase"] == name]
        stats = summary.window_stats(mine, ttft_sla_s)
        server = {}
        for source, before in window.get("metrics_before", {}).items():
            after = window.get("metrics_after", {}).get(source, "")
            if before.startswith("unavailable") or after.startswith("unavailable") or not after:
                server[source] = {"available": False}
                continue
            delta = metrics.deltas(metrics.parse((run_dir / before).read_text()),
                                   metrics.parse((run_dir / after).read_text()))
            server[source] = {"available": True, "deltas": delta}
        vllm_delta = next((s["deltas"] for s in server.values() if s.get("available")
                           and any(k.startswith(metrics.TTFT_HISTOGRAM) for k in s["deltas"])), None)
        server_ttft = metrics.histogram(vllm_delta, metrics.TTFT_HISTOGRAM) if vllm_delta else None
        windows.append({"window": name, "kind": window["kind"],
                        "concurrency": window["concurrency"], "segment": window["segment"],
                        "start": window["start"], "end": window["end"], **stats,
                        "server_metrics": server, "server_ttft": server_ttft,
                        "ttft_reconciliation": summary.reconcile(stats, server_ttft),
                        "quiet": window.get("quiet")})
    result = {"run_id": run["run_id"], "schema": "summary.schema.yaml", "windows": windows,
              "unmeasured_requests": len([r for r in records if r["phase"] not in run["windows"]])}
    validate_summary(result)
    write_text(run_dir / SUMMARY_FILE, json.dumps(result, indent=2) + "\n")
    return result


def validate_summary(result: dict) -> None:
    import jsonschema
    errors = list(jsonschema.Draft202012Validator(load_yaml(schema_path("summary"))).iter_errors(result))
    if errors:
        raise KvtierError(f"summary.json does not match its schema: {errors[0].message} at "
                          f"{'/'.join(map(str, errors[0].absolute_path))}")
