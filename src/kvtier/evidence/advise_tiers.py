"""`kvtier advise --sweep`: for storage a user describes (each tier's read bandwidth, from the command line or from
another machine's G2 record), where a cold resume from that tier beats recomputing the context, and whether it
meets a TTFT p50 SLA, at the workload's operating points. Predicted, never measured: by the bandwidth sweep's
service model (kvtier.evidence.sweep), with the error the model showed on the sweep's held-out cells attached.

What a prediction rests on, per operating point (concurrency c at a context of n tokens):
- the engine's own part, read off the sweep's measured windows on this machine: the resume from DRAM (the floor)
  and the recompute, medians over rounds at the same concurrency, interpolated between measured contexts (log-log);
- the device's part, the model's: `l2_overhead + share x max(0, c x n x KV bytes per token / read bandwidth -
  head_start)` (kvtier.evidence.sweep.ServiceModel);
- `--prefill-tok-s` describes a faster or slower engine: recompute then takes `c x n / prefill rate` (the way this
  machine's recompute windows read, every request's prefill sharing the engine), and the floor scales with it.

A prediction is a verdict only outside the model's error band (its worst relative error on held-out cells): the L2
resume beats recompute when even `TTFT x (1 + error)` is under recompute's, recompute is faster when
`TTFT x (1 - error)` is over it, and anything between reads "within the model's error". Every step outside what the
sweep measured is named on the answer as an extrapolation (device time outside the fitted range, a context or a
concurrency the sweep did not measure, an engine scaled from this one): the validated error does not cover it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import KvtierError
from ..runs.sweep import DRAM, RECOMPUTE
from ..stack.emulated import parse_rate
from . import stats
from .sweep import Sweep

BEATS, LOSES, WITHIN = "beats recompute", "recompute faster", "within the model's error"
TIER_ARGUMENT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)=(?P<rate>.+)$")


@dataclass(frozen=True)
class Hardware:
    """What the user describes: each tier's read bandwidth (bytes/s), optionally the engine's prefill rate and
    the served model's KV bytes per token (default: the sweep's)."""
    tiers: dict[str, float]
    prefill_tok_s: float | None = None
    kv_bytes_per_token: int | None = None
    source: str = "command line"

    def __post_init__(self):
        if not self.tiers:
            raise KvtierError("advise: describe at least one tier (--tier NAME=BANDWIDTH or --g2 RECORD)")
        for name, bps in self.tiers.items():
            if not (isinstance(bps, (int, float)) and math.isfinite(bps) and bps > 0):
                raise KvtierError(f"advise: tier {name!r} read bandwidth {bps!r}: must be > 0")
        if self.prefill_tok_s is not None and not (math.isfinite(self.prefill_tok_s) and self.prefill_tok_s > 0):
            raise KvtierError(f"advise: --prefill-tok-s {self.prefill_tok_s!r}: must be > 0")
        if self.kv_bytes_per_token is not None and not self.kv_bytes_per_token > 0:
            raise KvtierError(f"advise: --kv-bytes-per-token {self.kv_bytes_per_token!r}: must be > 0")


def parse_tier(text: str) -> tuple[str, float]:
    """`NAME=BANDWIDTH` (e.g. `pool=12.5GB/s`) -> (name, bytes/s); refused naming what is wrong."""
    match = TIER_ARGUMENT.match(text.strip())
    if not match:
        raise KvtierError(f"--tier {text!r}: expected NAME=BANDWIDTH, e.g. nvme=7GB/s")
    return match["name"], float(parse_rate(match["rate"], f"--tier {match['name']}"))


def tiers_from_g2(record: str | Path) -> dict[str, float]:
    """Each storage path's read bandwidth in a G2 record (kvtier gate-g2's JSON, any machine's): the best median
    sequential read over its queue depths, in bytes/s."""
    path = Path(record)
    try:
        data = json.loads(path.read_text())
        lines = data["lines"]
    except FileNotFoundError:
        raise KvtierError(f"{path}: G2 record not found") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KvtierError(f"{path}: not a G2 record ({exc.__class__.__name__}: {exc})") from None
    best: dict[str, float] = {}
    for line in lines:
        if not isinstance(line, dict) or line.get("kind") != "storage" or line.get("rw") != "read":
            continue
        median = line.get("median")
        if isinstance(median, (int, float)) and median > 0:
            best[line["path"]] = max(best.get(line["path"], 0.0), float(median) * 1e9)  # G2 reads GB/s
    if not best:
        raise KvtierError(f"{path}: no sequential read line in this G2 record (lines of kind 'storage', rw 'read')")
    return best


def _engine_table(sweep: Sweep, run: str) -> pd.Series:
    rows = sweep.rows[sweep.rows["run"] == run]
    return rows.groupby(["concurrency", "context_tokens"])["ttft_p50_s"].median()


def _interpolate(contexts: list[int], values: list[float], context: float) -> float:
    """Log-log between the measured contexts; past either end, along the nearest two (the caller says so)."""
    x, y = np.log(contexts), np.log(values)
    if len(contexts) == 1:
        return float(values[0])
    i = int(np.clip(np.searchsorted(x, np.log(context)), 1, len(x) - 1))
    slope = (y[i] - y[i - 1]) / (x[i] - x[i - 1])
    return float(np.exp(y[i - 1] + slope * (np.log(context) - x[i - 1])))


def engine_times(sweep: Sweep, context: float, concurrency: int) -> tuple[float, float, list[str]]:
    """(floor, recompute) TTFT p50 on this machine at a point, with what was extrapolated to get them."""
    floors, recomputes = _engine_table(sweep, DRAM), _engine_table(sweep, RECOMPUTE)
    measured_c = sorted(set(floors.index.get_level_values(0)) & set(recomputes.index.get_level_values(0)))
    if not measured_c:
        raise KvtierError("advise: the sweep holds no concurrency with both a DRAM and a recompute window")
    reference = min(measured_c, key=lambda c: (abs(c - concurrency), c))
    notes = []
    contexts = sorted(set(floors[reference].index) & set(recomputes[reference].index))
    if not contexts[0] <= context <= contexts[-1]:
        notes.append(f"context {context:g} outside the sweep's {contexts[0]}-{contexts[-1]} tokens")
    floor = _interpolate(contexts, [floors[reference][x] for x in contexts], context)
    recompute = _interpolate(contexts, [recomputes[reference][x] for x in contexts], context)
    if concurrency != reference:
        # Recompute shares the engine among the c prefills; the floor (one chunked load, the follow-up's prefill)
        # is kept as measured.
        recompute *= concurrency / reference
        notes.append(f"concurrency {concurrency} not measured (the sweep's: {', '.join(map(str, measured_c))}): "
                     f"recompute scaled by {concurrency}/{reference} from there, the floor kept")
    return floor, recompute, notes


def fitted_device_range(sweep: Sweep) -> tuple[float, float]:
    """The device time (in-flight bytes / read cap, seconds) over the cells the model was fitted on."""
    fitted = sweep.predictions[sweep.predictions["used"] == "fitted"]
    moved = (fitted["concurrency"] * fitted["context_tokens"] * sweep.model.kv_bytes_per_token / fitted["read_bps"])
    return float(moved.min()), float(moved.max())


def validated_error(sweep: Sweep) -> float:
    """The model's worst relative error on the sweep's held-out cells (the band every verdict must clear)."""
    if sweep.model is None:
        raise KvtierError(f"advise: the sweep's service model could not be fitted ({sweep.model_note})")
    held = sweep.predictions[sweep.predictions["used"] == "held out"]
    if held.empty:
        raise KvtierError("advise: the sweep's model was judged on no held-out cell; its error is unknown")
    return float(held["error"].abs().max())


def _word(predicted: float, limit: float, error: float, below: str, above: str, between: str) -> str:
    if predicted * (1 + error) < limit:
        return below
    if predicted * (1 - error) > limit:
        return above
    return between


def predict(sweep: Sweep, hardware: Hardware, points: list[dict], sla_p50_s: float | None = None) -> list[dict]:
    """Per operating point and tier: the predicted TTFT p50, recompute's, the verdict against recompute, the
    bandwidth at which the tier would break even there, the SLA verdict, and every extrapolation made."""
    error = validated_error(sweep)
    model = sweep.model
    kv_bytes = hardware.kv_bytes_per_token or model.kv_bytes_per_token
    scaled = replace(model, kv_bytes_per_token=int(kv_bytes))
    low, high = fitted_device_range(sweep)
    out = []
    for point in points:
        context, c = float(point["context_tokens"]), int(point["concurrency"])
        floor, recompute, notes = engine_times(sweep, context, c)
        if hardware.prefill_tok_s is not None:
            factor = (c * context / hardware.prefill_tok_s) / recompute
            floor, recompute = floor * factor, recompute * factor
            notes.append(f"engine scaled by {factor:.3g} from this machine's (prefill {hardware.prefill_tok_s:g} "
                         "tok/s given)")
        breakeven = scaled.breakeven_bps(context, c, recompute, floor)
        tiers = {}
        for name, bps in hardware.tiers.items():
            device_s = c * context * kv_bytes / bps
            extrapolated = list(notes)
            if not low <= device_s <= high:
                extrapolated.append(f"device time {device_s:.3g} s outside the fitted {low:.3g}-{high:.3g} s")
            ttft = scaled.ttft(context, c, bps, floor)
            answer = {"read_mb_s": bps / 1e6, "device_s": device_s, "ttft_p50_s": ttft,
                      "vs_recompute": ttft / recompute,
                      "verdict": _word(ttft, recompute, error, BEATS, LOSES, WITHIN),
                      "extrapolated": extrapolated}
            if sla_p50_s is not None:
                answer["sla"] = _word(ttft, sla_p50_s, error, stats.MET, stats.NOT_MET, stats.UNDECIDED)
            tiers[name] = answer
        out.append({"point": point["name"], "concurrency": c, "context_tokens": context, "floor_s": floor,
                    "recompute_s": recompute, "breakeven_mb_s": None if breakeven is None else breakeven / 1e6,
                    "sla_p50_s": sla_p50_s, "tiers": tiers})
    return out


def header(sweep: Sweep, hardware: Hardware) -> str:
    held = sweep.predictions[sweep.predictions["used"] == "held out"]["error"].abs()
    low, high = fitted_device_range(sweep)
    kv = hardware.kv_bytes_per_token or sweep.model.kv_bytes_per_token
    return (f"Each tier against recompute, predicted by the bandwidth sweep's service model (evidence S): "
            f"validated on {len(held)} held-out cells, median |error| {held.median():.1%}, worst {held.max():.1%} "
            f"(the band each verdict must clear); fitted over device times {low:.3g}-{high:.3g} s; "
            f"{kv} KV bytes a token; tiers from {hardware.source}.")


def text(sweep: Sweep, hardware: Hardware, predicted: list[dict]) -> str:
    lines = [header(sweep, hardware)]
    for p in predicted:
        even = ("no bandwidth: the floor is not under recompute" if p["breakeven_mb_s"] is None
                else f"{p['breakeven_mb_s']:.4g} MB/s")
        lines.append(f"{p['point']} ({p['context_tokens']:.0f} tokens) at concurrency {p['concurrency']}: recompute "
                     f"{p['recompute_s']:.3f} s, floor {p['floor_s']:.3f} s; a tier breaks even at {even}")
        for name, t in p["tiers"].items():
            sla = f"; SLA p50 <= {p['sla_p50_s']:g} s: {t['sla']}" if "sla" in t else ""
            lines.append(f"  {name} ({t['read_mb_s']:.4g} MB/s): TTFT p50 {t['ttft_p50_s']:.3f} s, "
                         f"{t['vs_recompute']:.2f} x recompute: {t['verdict']}{sla}")
            if t["extrapolated"]:
                lines.append(f"    EXTRAPOLATED, the validated error does not cover it: {'; '.join(t['extrapolated'])}")
    return "\n".join(lines)


def any_beats(predicted: list[dict]) -> bool:
    """A tier beats recompute (or meets the SLA, where one is given) inside the range the model was validated on."""
    return any(not t["extrapolated"] and (t.get("sla", t["verdict"]) in (BEATS, stats.MET))
               for p in predicted for t in p["tiers"].values())
