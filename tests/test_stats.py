"""kvtier.evidence.stats on synthetic samples with known answers."""

import math
import random

import pytest

from kvtier.evidence import stats
from kvtier.runs import order


def test_a_clear_effect_is_faster_and_its_interval_excludes_one():
    rng = random.Random(1)
    baseline = {r: 2.0 + rng.uniform(-0.1, 0.1) for r in range(12)}  # TTFT of the baseline, s
    tier = {r: 1.0 + rng.uniform(-0.05, 0.05) for r in range(12)}
    speedup = stats.ratio(baseline, tier)
    assert speedup.rounds == 12 and speedup.method.startswith("bootstrap 95 %")
    assert 1.8 < speedup.low <= speedup.point <= speedup.high < 2.2
    assert stats.word(speedup) == stats.FASTER
    assert stats.word(stats.ratio(tier, baseline)) == stats.SLOWER
    assert stats.target(speedup, 1.5) == stats.MET and stats.target(speedup, 2.5) == stats.NOT_MET


def test_no_effect_reads_no_difference_measured():
    rng = random.Random(2)
    a = {r: 1.0 + rng.gauss(0, 0.05) for r in range(10)}
    b = {r: 1.0 + rng.gauss(0, 0.05) for r in range(10)}
    ratio = stats.ratio(a, b)
    assert ratio.holds(1.0) and stats.word(ratio) == stats.NO_DIFFERENCE
    assert stats.target(ratio, 1.0) == stats.UNDECIDED  # straddles the threshold: neither MET nor NOT MET


def test_one_outlier_moves_neither_the_median_nor_the_verdict():
    rounds = {r: 2.0 for r in range(9)}
    rounds[4] = 40.0  # one round hit by the disk writing back an install
    steady = stats.estimate(rounds.values())
    assert steady.point == 2.0 and steady.high == 2.0, steady
    assert stats.word(stats.ratio(rounds, {r: 1.0 for r in range(9)})) == stats.FASTER


def test_six_or_seven_rounds_give_min_max_and_say_so():
    six = stats.estimate([1.0, 3.0, 2.0, 2.5, 1.5, 2.2])
    assert (six.low, six.high) == (1.0, 3.0)
    assert "min–max of 6 rounds" in six.method and "96.9 %" in six.method
    assert stats.min_max_coverage(5) == pytest.approx(0.9375)


def test_too_few_rounds_for_min_max_give_students_t_on_the_log():
    # Three rounds' min–max holds the median only 75 % of the time, so it is not the interval; Student's t with
    # 2 degrees of freedom is (4.303 from any table), on the log of the samples.
    assert stats.student_quantile(0.95, 2) == pytest.approx(4.3027, abs=1e-4)
    assert stats.student_quantile(0.95, 1) == pytest.approx(12.7062, abs=1e-4)
    assert stats.student_quantile(0.95, 30) == pytest.approx(2.0423, abs=1e-4)
    small = stats.estimate([1.0, 4.0, 2.0])
    assert small.point == 2.0 and "Student's t 95 % on the log mean of 3 rounds" in small.method
    factor = math.exp(4.3027 * math.log(2) / math.sqrt(3))  # logs 0, ln 4, ln 2: mean ln 2, sd ln 2
    assert (small.low, small.high) == pytest.approx((2.0 / factor, 2.0 * factor), rel=1e-3)
    # A true null, three rounds: with min–max a quarter of such nulls would read faster or slower; t holds 1
    # in about 95 % of them.
    rng = random.Random(5)
    nulls = [stats.estimate([rng.lognormvariate(0, 0.1) for _ in range(3)]) for _ in range(2000)]
    assert 0.93 < sum(n.holds(1.0) for n in nulls) / len(nulls) < 0.97
    # A clear effect still reads as one, and samples at or below zero fall back to the plain mean.
    assert stats.word(stats.estimate([2.0, 2.1, 1.95])) == stats.FASTER
    assert "on the mean of 3" in stats.estimate([-1.0, 0.0, 1.0]).method


def test_one_round_has_no_interval_and_decides_nothing():
    one = stats.ratio({0: 3.0}, {0: 1.0})
    assert one.rounds == 1 and one.low == one.high == 3.0 and "no interval" in one.method
    assert stats.word(one) == stats.ONE_ROUND and stats.target(one, 2.0) == stats.UNDECIDED


def test_targets_at_most_and_missing_rounds():
    resume_over_raw = stats.estimate([1.6, 1.7, 1.8, 1.75, 1.65])
    assert stats.target(resume_over_raw, 2.0, at_least=False) == stats.MET
    assert stats.target(stats.estimate([2.2, 2.4, 2.3]), 2.0, at_least=False) == stats.NOT_MET
    assert stats.target(stats.estimate([1.9, 2.1, 2.0]), 2.0, at_least=False) == stats.UNDECIDED
    # A round that lacks one side (an invalid window) is left out of the pairs, never counted as zero.
    assert stats.paired_ratios({0: 2.0, 1: None, 2: 4.0}, {0: 1.0, 1: 1.0, 2: 2.0, 3: 1.0}) == [2.0, 2.0]
    with pytest.raises(ValueError, match="no round has both sides"):
        stats.ratio({0: 1.0}, {1: 1.0})


def test_the_bootstrap_is_seeded_so_reruns_print_the_same_bounds():
    samples = [random.Random(3).uniform(0, 1) for _ in range(20)]
    assert stats.estimate(samples) == stats.estimate(samples)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_rotation_balances_positions_and_gives_abba_for_two(n):
    items = list("ABCDE"[:n])
    orders = order.rotation(items, 2 * n)
    assert all(sorted(order) == items for order in orders)
    for item in items:
        positions = [order.index(item) for order in orders]
        assert sorted(positions) == sorted(list(range(n)) * 2), (item, positions)
    if n == 2:
        assert ["".join(o) for o in order.rotation(items, 4)] == ["AB", "BA", "BA", "AB"]


def test_a_quotient_of_figures_measured_apart_takes_its_interval_from_their_ends():
    ttft = stats.Estimate(2.2, 2.0, 2.4, 3, "min–max")  # sessions' TTFT, s
    raw = stats.Estimate(1.05, 1.0, 1.1, 2, "min–max")  # raw read rounds, s
    q = stats.quotient(ttft, raw)
    assert (q.point, q.low, q.high, q.rounds) == pytest.approx((2.2 / 1.05, 2.0 / 1.1, 2.4 / 1.0, 2))
    assert stats.target(q, 2.0, at_least=False) == stats.UNDECIDED  # [1.82, 2.4] straddles the bound
    assert stats.target(stats.quotient(ttft, stats.Estimate(2.05, 2.0, 2.1, 2, "min–max")), 2.0,
                        at_least=False) == stats.MET
    assert stats.quotient(stats.estimate([3.0]), raw).method == "one round: no interval"
    with pytest.raises(ValueError, match="reaches zero"):
        stats.quotient(ttft, stats.Estimate(0.5, 0.0, 1.0, 2, "min–max"))


def test_the_schedule_chains_every_run_after_the_one_before():
    plan = order.units_in_order(["A", "B", "C"], 2)
    assert order.schedule(["A", "B", "C"], 2) == [(1, "A"), (1, "B"), (1, "C"), (2, "C"), (2, "B"), (2, "A")]
    assert order.before(plan, 1, ["A"]) == [] and order.before(plan, 2, ["C"]) == [(1, "C")]
    assert [order.before(plan, r, unit) for r, unit in plan[1:]] == [[(r, *unit)] for r, unit in plan[:-1]]


def test_tiers_that_share_servers_run_back_to_back_in_the_rounds_direction():
    from kvtier.core.tiers import server_units
    kinds = ["recompute", "engine", "dram", "local_disk", "shared_pool", "cross_instance"]
    units = server_units(kinds)
    assert units == [("recompute", "engine"), ("dram", "local_disk"), ("shared_pool",), ("cross_instance",)]
    assert server_units(kinds, share=False) == [(k,) for k in kinds]
    assert server_units(["engine", "dram", "shared_pool"]) == [("engine",), ("dram",), ("shared_pool",)]
    plan = order.units_in_order(units, 3)
    assert plan[4:6] == [(2, ("cross_instance",)), (2, ("shared_pool",))]
    assert plan[6:] == [(2, ("dram", "local_disk")), (2, ("recompute", "engine")),
                        (3, ("dram", "local_disk")), (3, ("shared_pool",)), (3, ("cross_instance",)),
                        (3, ("recompute", "engine"))]
    assert order.schedule(units, 1) == [(1, kind) for kind in kinds]
    assert order.before(plan, 2, ["recompute", "engine"]) == [(2, "dram"), (2, "local_disk")]


def test_a_rounds_tier_runs_between_two_r3_runs_are_one_stretch():
    units = [("recompute", "engine"), ("dram", "local_disk"), ("shared_pool",), ("cross_instance",)]
    plan = order.units_in_order(units, 4)
    names = order.stretches(plan, ("cross_instance",))
    assert set(names) == {(r, frozenset(u)) for r, u in plan if u != ("cross_instance",)}  # R3 in none
    by_name = {}
    for r, unit in plan:
        if (r, frozenset(unit)) in names:
            by_name.setdefault(names[(r, frozenset(unit))], []).append((r, unit))
    # Round 3 is dram, pool, R3, recompute: R3 splits it; every stretch lies within one round, in plan order.
    assert by_name["round3_1"] == [(3, ("dram", "local_disk")), (3, ("shared_pool",))]
    assert by_name["round3_2"] == [(3, ("recompute", "engine"))]
    assert sorted(by_name) == ["round1_1", "round2_1", "round3_1", "round3_2", "round4_1", "round4_2"]
    for members in by_name.values():
        at = [plan.index(m) for m in members]
        assert at == list(range(at[0], at[0] + len(at))), members  # back to back: nothing of R3 between
    assert order.stretches(order.units_in_order([("dram",)], 2), ("cross_instance",)) == {
        (1, frozenset({"dram"})): "round1_1", (2, frozenset({"dram"})): "round2_1"}
