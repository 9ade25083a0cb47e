"""G4, the stability soak's gate (evidence R5), from the soak's windows and faults (kvtier.evidence.r5).

Lines, each PASS or FAIL with its figures (UNDECIDED where the soak gave too little to judge):

    failed requests     soak requests that failed outside every injected fault's span: at most `failed_budget`
    TTFT p99 drift      the median p99 of the last `drift_windows` steady windows against that of the first: the
                        change, in %, at most `ttft_p99_drift_max_pct`
    RSS growth          per server, how much its peak anonymous RSS (its heap: where a leak grows; not the
                        shared-memory L1 or the page cache, which fill up and stay full) grew over the steady windows
                        of the second half of the soak since its last (re)start, in MB: the least-squares slope
                        times the span, with its 95 % interval; PASS when the whole interval is at most
                        `rss_growth_max_mb`, FAIL when it is all above, UNDECIDED otherwise. A bound on the growth,
                        not on a rate: a ten-minute soak cannot tell a rate of a few hundred MB an hour from the
                        window-to-window wander of vLLM's heap (measured: the 95 % interval of the slope over four
                        steady minutes spanned [-9, 656] MB/h), but it can bound what grew while it ran; a 72-hour
                        soak sets its own bound for its own span
    pool held           the pool's bytes over the second half of the soak stay within `pool_bound_factor` x the
                        pool's budget (a pool without a budget is unbounded: FAIL)
    each fault          kill_lmcache / kill_vllm: the exit seen, the stack serving again within `recovery_max_s`, and
                        a prompt stored after the restart coming back from the pool unchanged; pool_full: no request failed while the pool
                        was full, and the soak went on; corrupt_chunk: the damaged chunks were not handed to the
                        engine (the control probe, intact, was), otherwise a silent corruption: FAIL, and a
                        changed output is a wrong answer

The gate FAILs when a line fails, is UNDECIDED when none failed and one could not be judged, and PASSes only
when every line does, except that of a fault this machine could not inject (pool_full
without root): that line is UNDECIDED with the reason, left out of the verdict, and named in the record's notes;
G4 judges the faults that were injected, and says which were not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.errors import KvtierError
from ..evidence import r5, stats
from .bom import FAIL, PASS

UNDECIDED = "UNDECIDED"


@dataclass(frozen=True)
class G4Settings:
    failed_budget: int = 0
    ttft_p99_drift_max_pct: float = 50.0
    drift_windows: int = 2
    rss_growth_max_mb: float = 64.0
    pool_bound_factor: float = 1.25
    recovery_max_s: float = 180.0

    def check(self) -> None:
        if self.failed_budget < 0 or self.drift_windows < 1 or self.pool_bound_factor < 1 or self.recovery_max_s <= 0:
            raise KvtierError(f"G4 settings {self}: failed_budget >= 0, drift_windows >= 1, pool_bound_factor >= 1, "
                              "recovery_max_s > 0")


def _line(name: str, verdict: str, figure, limit, why: str, **more) -> dict:
    return {"name": name, "verdict": verdict, "figure": figure, "limit": limit, "why": why, **more}


def _drift(steady: pd.DataFrame, settings: G4Settings) -> dict:
    name = "TTFT p99 drift %"
    p99 = steady["ttft_p99_s"].dropna()
    k = settings.drift_windows
    if len(p99) < 2 * k:
        return _line(name, UNDECIDED, None, settings.ttft_p99_drift_max_pct,
                     f"{len(p99)} steady windows with a TTFT; {2 * k} needed")
    first, last = float(np.median(p99.iloc[:k])), float(np.median(p99.iloc[-k:]))
    change = 100 * (last - first) / first
    return _line(name, PASS if change <= settings.ttft_p99_drift_max_pct else FAIL, round(change, 1),
                 settings.ttft_p99_drift_max_pct, f"median p99 of the first {k} steady windows {first:.3f} s, of the "
                 f"last {k} {last:.3f} s", first_s=first, last_s=last)


def _rss(server: str, table: pd.DataFrame, restarts: list[float], duration_s: float, settings: G4Settings) -> dict:
    name = f"{server} RSS growth MB"
    since = max([duration_s / 2, *restarts])
    column = f"{server}_anon_mb"
    rows = table[table["steady"] & (table["start_s"] >= since)].dropna(subset=[column])
    bound = settings.rss_growth_max_mb
    if len(rows) < 3:
        return _line(name, UNDECIDED, None, bound,
                     f"{len(rows)} steady windows in the second half since its last start; 3 needed")
    hours = ((rows["start_s"] + rows["end_s"]) / 2 / 3600).to_numpy()
    slope, low, high = _slope_interval(hours, rows[column].to_numpy(dtype=float))
    span_h = float(rows["end_s"].iloc[-1] - rows["start_s"].iloc[0]) / 3600
    growth, growth_low, growth_high = slope * span_h, low * span_h, high * span_h
    # The interval decides, as every comparison here: peaks that wander by a few MB from window to window leave a
    # short soak's growth uncertain by tens of MB.
    verdict = PASS if growth_high <= bound else FAIL if growth_low > bound else UNDECIDED
    return _line(name, verdict, round(growth, 1), bound,
                 f"over {len(rows)} steady windows from {rows['start_s'].iloc[0]:g} s ({span_h * 60:.1f} min): "
                 f"anonymous RSS {rows[column].iloc[0]:.0f} to {rows[column].iloc[-1]:.0f} MB; slope {slope:.0f} "
                 f"MB/h [{low:.0f}, {high:.0f}]; 95 % interval of the growth over the span [{growth_low:.1f}, "
                 f"{growth_high:.1f}] MB", low=round(growth_low, 1), high=round(growth_high, 1),
                 slope_mb_per_h=round(slope, 1), span_min=round(span_h * 60, 2))


def _slope_interval(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """The least-squares slope of y on x and its 95 % interval (Student's t on n - 2 degrees of freedom)."""
    n = len(x)
    dx = x - x.mean()
    slope = float((dx * (y - y.mean())).sum() / (dx * dx).sum())
    residuals = y - (y.mean() + slope * dx)
    se = math.sqrt(float((residuals ** 2).sum()) / (n - 2) / float((dx * dx).sum()))
    half = stats.student_quantile(stats.CONFIDENCE, n - 2) * se
    return slope, slope - half, slope + half


def _pool(table: pd.DataFrame, quota_gb: float | None, duration_s: float, settings: G4Settings) -> dict:
    name = "pool held by eviction"
    late = table[table["start_s"] >= duration_s / 2]
    peak = float(late["pool_mb"].max()) if not late.empty else None
    if quota_gb is None:
        return _line(name, FAIL, peak, None, "the pool has no budget: LMCache's fs adapter evicts nothing by itself, "
                     "so the pool grows without bound")
    bound = quota_gb * 1024 * settings.pool_bound_factor
    return _line(name, PASS if peak is not None and peak <= bound else FAIL, None if peak is None else round(peak, 1),
                 round(bound, 1), f"peak pool MB over the second half against {settings.pool_bound_factor:g} x the "
                 f"budget of {quota_gb:g} GB")


def _fault(span: dict, table: pd.DataFrame, data: dict, settings: G4Settings) -> dict:
    name = f"{span['kind']} at {span['at_s']:g} s"
    events = span["events"]
    if span["skipped"]:
        return _line(name, UNDECIDED, None, None, f"not injected: {span['fired'].get('why')}", not_injected=True)
    if span["kind"] in ("kill_lmcache", "kill_vllm"):
        seen = next((e for e in events if e["kind"] == "exit"), None)
        serving = next((e for e in events if e["kind"] == "serving"), None)
        if seen is None or serving is None:
            return _line(name, FAIL, None, settings.recovery_max_s,
                         "the exit was not seen" if seen is None else "the stack never served again")
        took = serving["t"] - span["fired_s"]
        after = table[table["start_s"] >= serving["t"]]
        l2 = float(after["l2_hit_tokens"].fillna(0).sum())
        check = next((e["probe"] for e in events if e["kind"] == "pool_check"), None)
        served = bool(check and check["external_tokens"] and check["identical"])
        why = (f"exit seen {seen['t'] - span['fired_s']:.1f} s after the kill, serving again after {took:.1f} s; "
               + ("a prompt stored after the restart came back from the pool unchanged" if served else
                  "no round trip through the pool was checked after the restart" if check is None else
                  "WRONG ANSWER: a prompt stored after the restart came back from the pool changed"
                  if check["external_tokens"] and not check["identical"] else
                  "the pool did not serve a prompt stored after the restart")
               + f"; {l2:.0f} L2 hit tokens in the windows after")
        escalated = [e for e in events if e["kind"] == "restart" and e.get("why") != "exited"]
        if escalated:
            why += f"; {escalated[0]['server']} served nothing until it was restarted too ({escalated[0]['why']})"
        ok = took <= settings.recovery_max_s and served
        return _line(name, PASS if ok else FAIL, round(took, 1), settings.recovery_max_s, why,
                     recovered_s=round(took, 1), l2_hit_tokens_after=l2, pool_served_after=served)
    if span["kind"] == "pool_full":
        stop = span["end_s"] if span["end_s"] is not None else math.inf
        during = [r for r in data["records"] if r["phase"] == "soak"
                  and span["fired_s"] <= r["labels"]["at_s"] <= stop]
        failed = sum(r["error"] is not None for r in during)
        verdict = PASS if failed == 0 and span["end_s"] is not None else FAIL
        return _line(name, verdict, failed, 0, f"{len(during)} requests due while the pool was full, {failed} failed; "
                     f"the pool took {span['fired'].get('filled_bytes', 0) / r5.MB:.0f} MB of filler",
                     requests=len(during), failed=failed)
    probes = span["fired"].get("probes") or {}
    corrupted, control = probes.get("corrupted"), probes.get("control")
    if not corrupted or not control:
        return _line(name, UNDECIDED, None, None, "the probes did not run")
    chunks = ", ".join(corrupted["chunks"][:3]) + (" ..." if len(corrupted["chunks"]) > 3 else "")
    if not span["fired"].get("damaged", True) or corrupted.get("files_present_before_resend", 1) == 0:
        return _line(name, UNDECIDED, None, None, f"none of the damaged prompt's chunk files ({chunks}) was in the "
                     "pool when it was sent again, so its answer proves nothing")
    if not control["external_tokens"] or not control["identical"]:
        return _line(name, UNDECIDED, None, None, "the intact control probe was not served from the pool unchanged, "
                     "so the damaged one proves nothing")
    if corrupted["external_tokens"]:
        wrong = not corrupted["identical"]
        return _line(name, FAIL, corrupted["external_tokens"], 0,
                     ("WRONG ANSWER: " if wrong else "silent corruption: ") + f"{corrupted['external_tokens']:.0f} "
                     f"prompt tokens served from the damaged chunks ({chunks}); the output "
                     + ("differs from the recompute" if wrong else "happens to equal the recompute"),
                     wrong_answer=wrong, chunks=corrupted["chunks"])
    return _line(name, PASS, 0, 0, f"the damaged chunks ({chunks}) were not handed to the engine; the output equals "
                 "the recompute" if corrupted["identical"] else "the damaged chunks were refused", chunks=corrupted["chunks"])


def lines(data: dict, table: pd.DataFrame, settings: G4Settings) -> list[dict]:
    settings.check()
    steady = table[table["steady"]]
    failed = r5.failures(data)
    outside = sum(failed["outside_faults"].values())
    out = [_line("failed requests outside faults", PASS if outside <= settings.failed_budget else FAIL, outside,
                 settings.failed_budget, f"by cause: {failed['outside_faults'] or 'none'}; during faults: "
                 f"{failed['during_faults'] or 'none'}"),
           _drift(steady, settings)]
    for server in ("vllm", "lmcache"):
        restarts = [e["t"] for e in data["events"] if e["kind"] == "ready" and e.get("server") == server]
        out.append(_rss(server, table, restarts, data["duration_s"], settings))
    out.append(_pool(table, data["run"]["metadata"].get("pool_quota_gb"), data["duration_s"], settings))
    for span in r5.fault_spans(data["events"], data["run"]["config"]["fault_list"]):
        out.append(_fault(span, table, data, settings))
    fired = {s["fault"] for s in r5.fault_spans(data["events"], data["run"]["config"]["fault_list"])}
    for index, fault in enumerate(data["run"]["config"]["fault_list"]):
        if index not in fired:
            out.append(_line(f"{fault['kind']} at {fault['at_s']:g} s", FAIL, None, None, "scheduled, never fired"))
    return out


def _judged(rows: list[dict]) -> list[dict]:
    return [r for r in rows if not r.get("not_injected")]


def verdict(rows: list[dict]) -> str:
    """FAIL when a judged line failed (or none could be judged), PASS when every one passed, otherwise UNDECIDED
    (as G3): a line the soak gave too little to judge is not a failure, and `gates.stop_on_undecided` decides
    whether it stops what follows."""
    words = {r["verdict"] for r in _judged(rows)}
    if not words or FAIL in words:
        return FAIL
    return PASS if words == {PASS} else UNDECIDED


def notes(rows: list[dict]) -> list[str]:
    """What the verdict leaves out: each fault that could not be injected here, and why."""
    return [f"{r['name']} was not injected and is not judged ({r['why'].removeprefix('not injected: ')})"
            for r in rows if r.get("not_injected")]


def text(rows: list[dict]) -> str:
    judged = _judged(rows)
    left_out = len(rows) - len(judged)
    out = [f"G4 stability soak: {verdict(rows)} ({sum(r['verdict'] == PASS for r in judged)} of {len(judged)} lines "
           f"PASS" + (f"; {left_out} fault(s) not injected, not judged" if left_out else "") + ")"]
    out += [f"  {r['verdict']:9s} {r['name']}: {r['figure']} (limit {r['limit']}): {r['why']}" for r in rows]
    return "\n".join(out)
