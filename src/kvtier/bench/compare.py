"""`kvtier compare RUN_A RUN_B`: the metrics two runs share, side by side, each AGREE or DIFFER.

B is the reference: a metric agrees when |A - B| <= max(tolerance x |B|, abs_tolerance_s), the absolute floor
applying to times only (metrics in seconds), so that two clients a few milliseconds apart on a fast request do not
differ by a large ratio. Where the two tools define a metric differently, both definitions are printed beside it."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import KvtierError
from .imports.common import Window


@dataclass(frozen=True)
class Row:
    metric: str
    a: float
    b: float
    verdict: str     # AGREE or DIFFER

    @property
    def relative(self) -> float | None:
        return None if self.b == 0 else self.a / self.b - 1


def _family(metric: str) -> str:
    head = metric.split(".", 1)[0]
    return "tokens" if head in ("output_tokens", "prompt_tokens") else head


TIMES = ("ttft_s", "itl_s", "tpot_s", "e2e_s", "duration_s")


def is_time(metric: str) -> bool:
    return _family(metric) in TIMES


def compare(a: Window, b: Window, tolerance: float, abs_tolerance_s: float = 0.0,
            metrics: list[str] | None = None) -> tuple[list[Row], list[str], list[str]]:
    """The rows of the metrics both windows have (or `metrics`), and the metrics only A, only B has."""
    if tolerance < 0 or abs_tolerance_s < 0:
        raise KvtierError(f"tolerance {tolerance!r} and abs tolerance {abs_tolerance_s!r} must not be negative")
    common = [m for m in a.metrics if m in b.metrics]
    if metrics:
        unknown = [m for m in metrics if m not in common]
        if unknown:
            raise KvtierError(f"--metric {', '.join(unknown)}: not in both runs; both have {', '.join(common)}")
        common = list(metrics)
    if not common:
        raise KvtierError("the two runs share no metric")
    rows = []
    for metric in common:
        x, y = float(a.metrics[metric]), float(b.metrics[metric])
        bound = max(tolerance * abs(y), abs_tolerance_s if is_time(metric) else 0.0)
        rows.append(Row(metric, x, y, "AGREE" if abs(x - y) <= bound else "DIFFER"))
    return (rows, sorted(set(a.metrics) - set(b.metrics)), sorted(set(b.metrics) - set(a.metrics)))


def different_definitions(a: Window, b: Window, rows: list[Row]) -> dict[str, tuple[str, str]]:
    families = sorted({_family(r.metric) for r in rows})
    return {f: (a.definitions.get(f, "(not stated)"), b.definitions.get(f, "(not stated)")) for f in families
            if a.definitions.get(f) != b.definitions.get(f)}


def text(label_a: str, label_b: str, a: Window, b: Window, rows: list[Row], only_a: list[str], only_b: list[str],
         tolerance: float, abs_tolerance_s: float) -> str:
    lines = [f"A: {label_a}, window {a.window}", f"B: {label_b}, window {b.window}", "",
             f"{'metric':<24} {'A':>14} {'B':>14} {'A/B - 1':>9}  verdict"]
    for row in rows:
        unit = " s" if is_time(row.metric) else ""
        rel = "" if row.relative is None else f"{row.relative * 100:+.1f} %"
        lines.append(f"{row.metric:<24} {row.a:>12.6g}{unit:2} {row.b:>12.6g}{unit:2} {rel:>9}  {row.verdict}")
    definitions = different_definitions(a, b, rows)
    if definitions:
        lines += ["", "defined differently:"]
        for family, (da, db) in definitions.items():
            lines += [f"  {family}", f"    A: {da}", f"    B: {db}"]
    if only_a:
        lines += ["", "only in A: " + ", ".join(only_a)]
    if only_b:
        lines += ["", "only in B: " + ", ".join(only_b)]
    agree = sum(r.verdict == "AGREE" for r in rows)
    lines += ["", f"{agree} AGREE, {len(rows) - agree} DIFFER (|A - B| <= max({tolerance:g} x |B|, "
                  f"{abs_tolerance_s:g} s for times))"]
    return "\n".join(lines)
