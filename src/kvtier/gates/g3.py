"""G3, the main gate: a candidate tier against a baseline tier, measured in the same rounds, by TTFT p50 reduction
and output tok/s gain, each with its interval over the rounds (kvtier.evidence.stats).

Per concurrency, a round gives one paired ratio per metric (candidate / baseline). The TTFT reduction is
100 × (1 − ratio) and the throughput gain 100 × (ratio − 1), so their intervals come from the ratio's. A line is
MET only when its whole interval clears the threshold (the lower bound of the reduction at least
`ttft_reduction_min_pct`, of the gain at least `tok_gain_min_pct`), NOT MET when the whole interval misses it,
UNDECIDED otherwise. With the campaign's correctness, one more line per tier compared (other than recompute): its
greedy outputs identical to recompute's in every round, else UNDECIDED until explained. The gate PASSes only when
every line is MET, FAILs when a line is NOT MET, and is UNDECIDED otherwise: it has not been passed, and the rounds did not show it failed either (kvtier.gates.record says what the
pipeline does then).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..core.errors import KvtierError
from ..evidence import sequential, stats, tables
from .bom import FAIL, PASS


@dataclass(frozen=True)
class G3Settings:
    candidate: str
    baseline: str
    ttft_reduction_min_pct: float = 25.0
    tok_gain_min_pct: float = 0.0

    def check(self) -> None:
        if self.candidate == self.baseline:
            raise KvtierError(f"G3 compares two tiers: candidate and baseline are both {self.candidate!r}")
        if not 0 <= self.ttft_reduction_min_pct < 100:
            raise KvtierError(f"G3 ttft_reduction_min_pct {self.ttft_reduction_min_pct!r}: a percentage in [0, 100)")


def _percent(ratio: stats.Estimate, sign: int) -> stats.Estimate:
    """A ratio's estimate as a percentage change: sign -1 for a reduction (1 − r), +1 for a gain (r − 1)."""
    ends = sorted(100 * sign * (v - 1) for v in (ratio.low, ratio.high))
    return stats.Estimate(100 * sign * (ratio.point - 1), ends[0], ends[1], ratio.rounds, ratio.method)


def lines(by_round: pd.DataFrame, settings: G3Settings, plan: sequential.Plan | None = None) -> list[dict]:
    """One line per (concurrency, metric) measured for both tiers in at least one common round; under the
    campaign's sequential `plan`, each interval is the one of its last look (kvtier.evidence.sequential)."""
    settings.check()
    rows = []
    tiers = set(by_round["tier"])
    for tier in (settings.candidate, settings.baseline):
        if tier not in tiers:
            raise KvtierError(f"G3: no readings of tier {tier!r} (tiers: {', '.join(sorted(tiers))})")
    for c in sorted(set(by_round.loc[by_round["tier"] == settings.candidate, "concurrency"])):
        for metric, sign, threshold, name in (
                ("ttft_p50_s", -1, settings.ttft_reduction_min_pct, "TTFT p50 reduction %"),
                ("output_tok_s", +1, settings.tok_gain_min_pct, "output tok/s gain %")):
            mine, theirs = (tables.per_round(by_round, metric, tier=t, concurrency=c)
                            for t in (settings.candidate, settings.baseline))
            ratios = stats.paired_ratios(mine, theirs)
            if not ratios:
                continue
            fits = sequential.applies(plan, len(ratios))
            figure = _percent(sequential.interval(ratios, plan) if fits else stats.estimate(ratios), sign)
            rows.append({"name": f"concurrency {int(c)}: {name}", "concurrency": int(c), "metric": name, "threshold_pct": threshold,
                         "point_pct": figure.point, "low_pct": figure.low, "high_pct": figure.high,
                         "rounds": figure.rounds, "interval": figure.method,
                         "verdict": stats.target(figure, threshold, at_least=True)})
    if not rows:
        raise KvtierError(f"G3: {settings.candidate} and {settings.baseline} share no measured round")
    return rows


REFERENCE = "recompute"  # the tier whose greedy outputs every other tier's are compared with (kvtier.runs.campaign)


def correctness_lines(correctness: pd.DataFrame, settings: G3Settings) -> list[dict]:
    """Per tier of the comparison other than the reference: were its greedy outputs recompute's, request by request,
    in every round and concurrency (the campaign's correctness.csv)? MET when every compared output was identical;
    UNDECIDED when one differed (not a valid measurement until explained: the gate is not passed, nor shown to
    fail) or none was compared."""
    rows = []
    for tier in dict.fromkeys((settings.candidate, settings.baseline)):
        if tier == REFERENCE:
            continue
        mine = correctness[correctness["tier"] == tier]
        compared, identical = int(mine["compared"].sum()), int(mine["identical_to_recompute"].sum())
        differ = mine[mine["compared"] > mine["identical_to_recompute"]]
        detail = ("none compared" if not compared else "every one identical" if differ.empty else
                  "differ in " + ", ".join(f"round {int(r)} at concurrency {int(c)}"
                                           for r, c in zip(differ["round"], differ["concurrency"]))
                  + ": not a valid measurement until explained")
        rows.append({"name": f"greedy outputs: {tier} identical to {REFERENCE}'s", "concurrency": None,
                     "metric": f"greedy outputs identical to {REFERENCE}'s", "figure": f"{identical} of {compared}",
                     "unit": "requests", "rounds": int(mine["round"].nunique()), "detail": detail,
                     "verdict": stats.MET if compared and identical == compared else stats.UNDECIDED})
    return rows


def verdict(rows: list[dict]) -> str:
    words = {r["verdict"] for r in rows}
    if not rows or stats.NOT_MET in words:
        return FAIL
    return PASS if words == {stats.MET} else stats.UNDECIDED


def text(rows: list[dict], settings: G3Settings) -> str:
    out = [f"G3 main gate, {settings.candidate} against {settings.baseline}: {verdict(rows)} "
           f"({sum(r['verdict'] == stats.MET for r in rows)} of {len(rows)} lines MET)"]
    out += [f"  {r['verdict']:9s} c{r['concurrency']} {r['metric']} ≥ {r['threshold_pct']:g}: {r['point_pct']:.1f} "
            f"[{r['low_pct']:.1f}, {r['high_pct']:.1f}]" if "point_pct" in r else
            f"  {r['verdict']:9s} {r['name']}: {r['figure']} ({r['detail']})" for r in rows]
    return "\n".join(out)
