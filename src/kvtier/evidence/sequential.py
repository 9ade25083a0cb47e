"""Sequential rounds: more rounds only where a comparison is still undecided, with its coverage kept.

A comparison (a ratio against 1, a figure against a target) is judged after a minimum of rounds and again after
each further round, up to a fixed maximum: it stops as soon as its interval clears the threshold. Looking again
and stopping when it looks decided is optional stopping, and with an ordinary 95 % interval at every look the
chance that one of the looks misses the truth grows with the number of looks (a true null of 1 is then "decided"
far more often than one time in twenty; tests/test_sequential.py measures it).

The procedure here spends the error rate over the looks (Lan & DeMets 1983, "Discrete sequential boundaries for
clinical trials", Biometrika 70(3); Jennison & Turnbull 2000, "Group Sequential Methods with Applications to
Clinical Trials", ch. 7): with `max_rounds` = N fixed in advance, the look after k rounds may spend

    a(k/N) - a((k-1)/N)   of   a(t) = alpha * ln(1 + (e - 1) t)     (the Pocock-type spending function)

and its interval is Student's t on the logarithm of the k per-round values at that level (times and ratios: the
noise multiplicative, as in kvtier.evidence.stats). The first look spends a(min/N) at once. The levels add up to
alpha over every look, so by the union bound the interval a comparison stops with holds the truth with
probability at least 1 - alpha, whatever the stopping rule did: more conservative than the exact group-sequential
boundaries, and valid without their normal-theory correlation between looks.

One round that is an outlier (its log more than `OUTLIER_MADS` scaled median absolute deviations from the median
of the logs: Hampel's rule) never decides alone: the comparison is decided only when the interval without it
clears the threshold on the same side too. Both intervals are kept and shown; no round is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import median

from . import stats

OUTLIER_MADS = 3.0  # Hampel's rule: |x - median| > 3 x 1.4826 x MAD (the MAD scaled to a normal sigma)
MAD_TO_SIGMA = 1.4826
PROJECTION_CAP = 200  # rounds: beyond this, "more rounds would not decide it at this spread"

DECIDED, ROUNDS_SPENT, MINUTES_SPENT, RUNNING = "decided", "rounds spent", "minutes spent", "running"


@dataclass(frozen=True)
class Plan:
    """How many rounds a comparison gets: at least `min_rounds`, at most `max_rounds`, at `confidence` overall."""
    min_rounds: int
    max_rounds: int
    confidence: float = stats.CONFIDENCE

    def __post_init__(self):
        if not 2 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"sequential rounds: 2 <= min_rounds ({self.min_rounds}) <= max_rounds "
                             f"({self.max_rounds})")
        if not 0 < self.confidence < 1:
            raise ValueError(f"sequential rounds: confidence {self.confidence} not in (0, 1)")

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    def spent(self, rounds: int) -> float:
        """The error rate spent by the look after `rounds` rounds, the earlier looks included."""
        t = min(rounds, self.max_rounds) / self.max_rounds
        return self.alpha * math.log(1 + (math.e - 1) * t)

    def look_alpha(self, rounds: int) -> float:
        """What the look after `rounds` rounds may spend: all of a(min/N) at the first look, then increments."""
        if rounds < self.min_rounds:
            raise ValueError(f"no look before the minimum of {self.min_rounds} rounds (asked {rounds})")
        if rounds == self.min_rounds:
            return self.spent(rounds)
        if rounds > self.max_rounds:
            raise ValueError(f"no look after the maximum of {self.max_rounds} rounds (asked {rounds})")
        return self.spent(rounds) - self.spent(rounds - 1)

    def text(self) -> str:
        return (f"{self.min_rounds} to {self.max_rounds} rounds, {100 * self.confidence:g} % overall, spent over "
                "the looks (Lan–DeMets, Pocock type)")


def applies(plan: Plan | None, rounds: int) -> bool:
    """Whether a comparison of `rounds` rounds was measured under `plan` (within its looks), so that its interval
    is the plan's; otherwise it takes kvtier.evidence.stats' fixed-round interval."""
    return plan is not None and plan.min_rounds <= rounds <= plan.max_rounds


def interval(samples: list[float], plan: Plan, look: int | None = None) -> stats.Estimate:
    """The interval of the look after `look` rounds (len(samples) by default): Student's t on the log mean of the
    samples at that look's level (kvtier.evidence.stats), widened if need be to hold the median beside it."""
    values = [float(v) for v in samples]
    k = len(values)
    if any(v <= 0 or math.isnan(v) for v in values):
        raise ValueError(f"sequential interval of {values}: needs positive values (times, ratios)")
    point = median(values)
    if k < 2:
        return stats.Estimate(point, point, point, k, "one round: no interval")
    level = 1 - plan.look_alpha(k if look is None else look)
    figure = stats._student(values, point, level, "rounds", log=True)
    return replace(figure, method=f"sequential Student's t on the log mean of {k} rounds, this look at "
                                  f"{100 * level:.2f} % ({plan.text()})")


def outliers(samples: list[float]) -> list[int]:
    """Positions of the rounds that are outliers by Hampel's rule on the logs (none below 3 rounds, none when
    the MAD is zero)."""
    if len(samples) < 3:
        return []
    logs = [math.log(v) for v in samples]
    centre = median(logs)
    mad = median(abs(x - centre) for x in logs)
    if mad == 0:
        return []
    return [i for i, x in enumerate(logs) if abs(x - centre) > OUTLIER_MADS * MAD_TO_SIGMA * mad]


def side(figure: stats.Estimate, threshold: float) -> int:
    """+1 when the interval lies wholly above the threshold, -1 wholly below, 0 when it holds it."""
    return 1 if figure.low > threshold else -1 if figure.high < threshold else 0


@dataclass(frozen=True)
class Judgement:
    figure: stats.Estimate  # every round
    side: int  # +1 above the threshold, -1 below, 0 undecided
    outliers: tuple[int, ...]  # positions of outlier rounds (Hampel), flagged, never dropped
    without: stats.Estimate | None  # the interval without the outlier rounds, when there are any
    more_rounds: int | None  # undecided: about how many more rounds would decide it at the observed spread

    @property
    def decided(self) -> bool:
        return self.side != 0


def judge(samples: list[float], threshold: float, plan: Plan | None) -> Judgement:
    """The comparison's interval at this look and whether it is decided against `threshold` (both with and
    without any outlier round), or about how many more rounds it would take. `plan` None: fixed rounds, the
    interval of kvtier.evidence.stats (with the same outlier rule)."""
    figure_of = (lambda values: interval(values, plan, look=len(samples))) if plan else stats.estimate
    figure = figure_of(samples)
    positive = all(v > 0 for v in samples)
    found = tuple(outliers(samples)) if positive else ()
    kept = [v for i, v in enumerate(samples) if i not in found]
    without = figure_of(kept) if found and len(kept) >= 2 else None
    decided = side(figure, threshold) if figure.rounds > 1 else 0
    if decided and found and (without is None or side(without, threshold) != decided):
        decided = 0
    more = None
    if not decided and len(samples) >= 2 and positive:
        more = rounds_to_decide(samples, threshold, plan or Plan(len(samples), len(samples)))
    return Judgement(figure, decided, found, without, more)


def rounds_to_decide(samples: list[float], threshold: float, plan: Plan) -> int | None:
    """About how many more rounds would clear the threshold if the log mean and spread stayed as observed, at the
    level of the plan's last look; None when no number up to PROJECTION_CAP would (the mean sits on the
    threshold, or fewer than two rounds)."""
    k = len(samples)
    if k < 2:
        return None
    centre, spread = stats.mean_and_sd([math.log(v) for v in samples])
    gap = abs(centre - math.log(threshold))
    if gap == 0:
        return None
    if spread == 0:
        return 0
    level = 1 - plan.look_alpha(plan.max_rounds) if plan.max_rounds > plan.min_rounds else plan.confidence
    for n in range(max(k, 2), PROJECTION_CAP + 1):
        if stats.student_quantile(level, n - 1) * spread / math.sqrt(n) < gap:
            return n - k
    return None


def stop_reason(judgement: Judgement, plan: Plan, budget_spent: bool = False) -> str:
    """Why a comparison has stopped (or not): decided, its rounds spent, its minutes spent, or still running."""
    if judgement.decided:
        return DECIDED
    if judgement.figure.rounds >= plan.max_rounds:
        return ROUNDS_SPENT
    return MINUTES_SPENT if budget_spent else RUNNING


def what_would_decide(judgement: Judgement) -> str:
    """For an undecided line: about how many more rounds, from the observed spread."""
    if judgement.decided:
        return ""
    if judgement.more_rounds is None:
        return "more rounds would not decide it at this spread (its median sits on the threshold)"
    return f"about {judgement.more_rounds} more round{'s' * (judgement.more_rounds != 1)} at the observed spread"
