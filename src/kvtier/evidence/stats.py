"""One statistics module for every measured comparison: a median over rounds, an interval, and a verdict word.

A measured figure is never one shot: each comparison runs in k interleaved rounds, and every round gives one
reading per side (tier, build, bound). Sides measured in the same round are paired, so a ratio is taken per
round first (what drifted during that round hits both sides) and then summarised over the rounds:

- the point estimate is the median of the per-round values;
- the interval is a percentile bootstrap of that median (seeded, so a rerun prints the same bounds) when there
  are at least `BOOTSTRAP_MIN_ROUNDS` rounds (scipy.stats.bootstrap);
- below that the bootstrap of a median is unreliable. The min–max of k rounds holds the true median with
  probability 1 - 2^(1-k) whatever the distribution, so it is the interval once that reaches the confidence
  (k ≥ 6 for 95 %). With fewer rounds no distribution-free interval reaches 95 % (three rounds' min–max: 75 %, so
  a true null would read faster or slower one time in four); the interval is then Student's t on the logarithm
  of the samples — round-to-round noise taken as log-normal, the usual model for times and ratios — which is
  wide when the rounds disagree, as it should be (scipy.stats.t). The method is always named with the interval;
- one round gives no interval at all, and no verdict.

Words: a ratio whose interval lies wholly above 1 is *faster* (or higher), wholly below 1 *slower*, and one that
holds 1 is *no difference measured*. A target is MET only when its interval clears the threshold, NOT MET when the
interval lies wholly on the wrong side, and UNDECIDED otherwise; the point estimate is always shown beside it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from statistics import median
from typing import Iterable

CONFIDENCE = 0.95
BOOTSTRAP_MIN_ROUNDS = 8
BOOTSTRAP_RESAMPLES = 4000
SEED = 0

FASTER, SLOWER, NO_DIFFERENCE, ONE_ROUND = "faster", "slower", "no difference measured", "one round: not decided"
MET, NOT_MET, UNDECIDED = "MET", "NOT MET", "UNDECIDED"


@dataclass(frozen=True)
class Estimate:
    point: float  # the median over the rounds
    low: float  # the interval; equal to `point` for one round
    high: float
    rounds: int
    method: str  # how the interval was made, in words a page can print

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def text(self, digits: int = 3) -> str:
        if self.rounds < 2:
            return f"{self.point:.{digits}g} ({self.method})"
        return f"{self.point:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}] ({self.method})"

    def record(self, prefix: str = "") -> dict:
        """Flat columns for a table: point, low, high, rounds, method."""
        return {f"{prefix}{name}": value for name, value in asdict(self).items()}


def _clean(samples: Iterable[float]) -> list[float]:
    values = [float(v) for v in samples if _present(v)]
    if any(math.isinf(v) for v in values):
        raise ValueError(f"an infinite sample among {values}")
    return values


def min_max_coverage(rounds: int) -> float:
    """The probability that [min, max] of k samples holds the true median, for any continuous distribution."""
    return 1 - 2 ** (1 - rounds)


def estimate(samples: Iterable[float], confidence: float = CONFIDENCE, seed: int = SEED,
             resamples: int = BOOTSTRAP_RESAMPLES, bootstrap_min_rounds: int = BOOTSTRAP_MIN_ROUNDS,
             unit: str = "rounds", log: bool = True) -> Estimate:
    """The median of `samples` (missing values left out) with its interval; `unit` names what the samples are
    in the method text (rounds, or e.g. sessions). `log`: a small-sample t interval is taken on the log of the
    samples (times, ratios: positive, multiplicative noise); False for figures of any sign (a gain in %)."""
    values = _clean(samples)
    if not values:
        raise ValueError("no samples to estimate from")
    point = median(values)
    k = len(values)
    if k == 1:
        return Estimate(point, point, point, 1, f"one {unit.removesuffix('s')}: no interval")
    if k < bootstrap_min_rounds and min_max_coverage(k) >= confidence:
        return Estimate(point, min(values), max(values), k,
                        f"min–max of {k} {unit}, holds the median with p ≥ {100 * min_max_coverage(k):.1f} %")
    if k < bootstrap_min_rounds:
        return _student(values, point, confidence, unit, log)
    low, high = _bootstrap_median(values, confidence, seed, resamples)
    return Estimate(point, low, high, k, f"bootstrap {100 * confidence:g} % of the median of {k} {unit}")


def mean_and_sd(xs: list[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (k - 1) of at least two values."""
    centre = sum(xs) / len(xs)
    return centre, math.sqrt(sum((x - centre) ** 2 for x in xs) / (len(xs) - 1))


def _student(values: list[float], point: float, confidence: float, unit: str, log: bool) -> Estimate:
    """Student's t interval of the mean log (the geometric mean) when asked and every sample is positive, else of
    the mean; widened, if need be, to hold the median printed beside it."""
    k = len(values)
    logs = log and all(v > 0 for v in values)
    centre, spread = mean_and_sd([math.log(v) for v in values] if logs else values)
    half = student_quantile(confidence, k - 1) * spread / math.sqrt(k)
    low, high = (math.exp(centre - half), math.exp(centre + half)) if logs else (centre - half, centre + half)
    scale = "log " if logs else ""
    return Estimate(point, min(low, point), max(high, point), k,
                    f"Student's t {100 * confidence:g} % on the {scale}mean of {k} {unit} (too few for min–max)")


@lru_cache(maxsize=256)
def student_quantile(confidence: float, df: float) -> float:
    """The t such that P(|T| < t) = confidence (two-sided), for Student's t with `df` degrees of freedom."""
    from scipy import stats as scipy_stats  # here, not at the top: the workflow imports this module to parse
    return float(scipy_stats.t.ppf((1 + confidence) / 2, df))


def _bootstrap_median(values: list[float], confidence: float, seed: int, resamples: int) -> tuple[float, float]:
    """A seeded percentile bootstrap of the median (scipy.stats.bootstrap), so a rerun prints the same bounds."""
    import numpy as np
    from scipy import stats as scipy_stats
    result = scipy_stats.bootstrap((np.asarray(values),), np.median, confidence_level=confidence,
                                   n_resamples=resamples, method="percentile", vectorized=True,
                                   random_state=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _present(value) -> bool:
    return value is not None and not math.isnan(value)


def paired_by_round(numerator: dict, denominator: dict) -> dict:
    """{round: numerator / denominator} of the rounds that measured both sides ({round: value}), in round
    order; a round missing either side, or with a zero denominator, is left out."""
    rounds = sorted(set(numerator) & set(denominator))
    return {r: numerator[r] / denominator[r] for r in rounds
            if _present(numerator[r]) and _present(denominator[r]) and denominator[r] != 0}


def paired_ratios(numerator: dict, denominator: dict) -> list[float]:
    """Per-round ratios of two sides measured in the same rounds, in round order (paired_by_round)."""
    return list(paired_by_round(numerator, denominator).values())


def ratio(numerator: dict, denominator: dict, **options) -> Estimate:
    """The median over rounds of numerator / denominator, paired by round, with its interval."""
    values = paired_ratios(numerator, denominator)
    if not values:
        raise ValueError(f"no round has both sides (rounds {sorted(numerator)} against {sorted(denominator)})")
    return estimate(values, **options)


def quotient(numerator: Estimate, denominator: Estimate) -> Estimate:
    """The ratio of two figures measured apart (not paired by round): the point is the ratio of the points, the
    interval runs from low / high to high / low, so it holds the true ratio whenever both intervals hold theirs."""
    if denominator.low <= 0:
        raise ValueError(f"a denominator interval that reaches zero: {denominator.text()}")
    rounds = min(numerator.rounds, denominator.rounds)
    method = (f"numerator {numerator.method}; denominator {denominator.method}; interval from their ends"
              if rounds > 1 else "one round: no interval")
    return Estimate(numerator.point / denominator.point, numerator.low / denominator.high,
                    numerator.high / denominator.low, rounds, method)


def word(speedup: Estimate) -> str:
    """faster / slower / no difference measured, for a ratio where above 1 means better (a speed-up, a
    throughput or bandwidth gain)."""
    if speedup.rounds < 2:
        return ONE_ROUND
    if speedup.low > 1:
        return FASTER
    if speedup.high < 1:
        return SLOWER
    return NO_DIFFERENCE


def target(figure: Estimate, threshold: float, at_least: bool = True) -> str:
    """MET when the whole interval clears the threshold, NOT MET when it lies wholly on the wrong side,
    UNDECIDED when it straddles the threshold or there is only one round."""
    if figure.rounds < 2:
        return UNDECIDED
    good_low, good_high = (figure.low >= threshold, figure.high >= threshold) if at_least else \
        (figure.high <= threshold, figure.low <= threshold)
    if good_low and good_high:
        return MET
    if not good_low and not good_high:
        return NOT_MET
    return UNDECIDED

