"""The statistics of frontiers: interpolation at a matched value, its joint bootstrap interval and
its coverage, dominance, and the tuning budget's closed form."""

import itertools
import math

import numpy as np
import pytest

from maxbench.benchmark.metrics import frontiers as fr
from maxbench.multiple_testing import holm


def constant_curve(name, xs, ys, n_prompts=8):
    """A curve whose every prompt scores each point's value: its intervals are points."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    return fr.Curve(
        name,
        "temp",
        tuple(range(len(xs))),
        tuple(f"{name}/{i}" for i in range(len(xs))),
        fr.samples_from_per_prompt(np.tile(xs, (n_prompts, 1))),
        fr.samples_from_per_prompt(np.tile(ys, (n_prompts, 1))),
    )


def test_matched_value_is_the_linear_interpolation_between_the_bracketing_points():
    a = constant_curve("a", [0.1, 0.3, 0.5], [0.9, 0.7, 0.2])
    b = constant_curve("b", [0.2, 0.6], [0.4, 0.8])
    m = fr.matched(a, b, 0.4, n_resamples=200)
    assert [s.segment for s in m.a_segments] == [1] and [s.segment for s in m.b_segments] == [0]
    assert m.a_segments[0].estimate == pytest.approx(0.45)  # 0.7 + (0.4-0.3)/(0.5-0.3) * (0.2-0.7)
    assert m.b_segments[0].estimate == pytest.approx(0.6)  # 0.4 + (0.4-0.2)/(0.6-0.2) * (0.8-0.4)
    (d,) = m.differences
    assert d.estimate == pytest.approx(-0.15)
    assert d.interval.low == pytest.approx(-0.15) and d.interval.high == pytest.approx(-0.15)
    assert m.a_segments[0].knob_values == (1, 2)


def test_a_curve_that_brackets_the_value_twice_reports_each_segment_and_each_pair():
    a = constant_curve("a", [0.1, 0.5, 0.2], [0.2, 0.6, 1.0])  # x goes up, then back
    b = constant_curve("b", [0.0, 1.0], [0.0, 1.0])
    m = fr.matched(a, b, 0.3, n_resamples=100)
    assert [s.segment for s in m.a_segments] == [0, 1]
    assert [s.estimate for s in m.a_segments] == pytest.approx([0.4, 0.6 + (0.3 - 0.5) / (0.2 - 0.5) * 0.4])
    assert [(d.a, d.b) for d in m.differences] == [(0, 0), (1, 0)]
    assert [d.estimate for d in m.differences] == pytest.approx([0.1, 0.6 + 0.8 / 3 - 0.3])


def test_a_value_on_a_point_is_reported_once():
    a = constant_curve("a", [0.1, 0.3, 0.5], [0.9, 0.7, 0.2])
    assert fr.bracketing(a.x.value, 0.3) == [0]
    b = constant_curve("b", [0.0, 1.0], [0.0, 1.0])
    m = fr.matched(a, b, 0.3, n_resamples=50)
    assert [s.estimate for s in m.a_segments] == pytest.approx([0.7])


def test_curves_that_do_not_reach_the_value_have_no_overlap_and_are_never_extrapolated():
    a = constant_curve("a", [0.1, 0.3], [0.9, 0.7])
    b = constant_curve("b", [0.6, 0.9], [0.4, 0.8])
    m = fr.matched(a, b, 0.4, n_resamples=50)
    assert not m.overlap and m.differences == () and m.b_segments == ()
    assert m.a_segments == ()  # 0.4 lies beyond a's last point: no value on the line through it
    d = fr.dominance(a, b, "higher", n_resamples=50)
    assert d.shared is None and d.verdict == "no overlap"


def simulated(rng, n_sets, n_prompts, mu_x, mu_y, u, noise=0.08):
    """Per-prompt values (sets, P, K): each point's mean plus the prompt's effect ``u`` (sets, P, 1),
    shared by every point of both curves (they were scored on the same prompts), and noise of its own."""
    k = len(mu_x)
    x = mu_x + 0.3 * u + rng.standard_normal((n_sets, n_prompts, k)) * noise
    y = mu_y + u + rng.standard_normal((n_sets, n_prompts, k)) * noise
    return x, y


def test_the_matched_difference_s_95_percent_interval_covers_the_truth_in_95_percent_of_simulated_data_sets():
    """1000 simulated data sets (>= 400), 60 prompts, 1000 resamples each: the interval of A minus B at
    the matched value covers the difference computed on the points' true means in 95% +- 3%."""
    rng = np.random.default_rng(7)
    n_sets, n_prompts, target = 1000, 60, 0.45
    ax_mu, ay_mu = np.array([0.2, 0.4, 0.6, 0.8]), np.array([0.9, 0.8, 0.55, 0.3])
    bx_mu, by_mu = np.array([0.3, 0.5, 0.7]), np.array([0.7, 0.6, 0.4])
    truth = (0.8 + (target - 0.4) / 0.2 * (0.55 - 0.8)) - (0.7 + (target - 0.3) / 0.2 * (0.6 - 0.7))
    u = rng.standard_normal((n_sets, n_prompts, 1)) * 0.2  # a strong prompt effect: resampling the
    # curves on different draws of prompts would not cancel it in A - B, and would over-cover
    ax, ay = simulated(rng, n_sets, n_prompts, ax_mu, ay_mu, u)
    bx, by = simulated(rng, n_sets, n_prompts, bx_mu, by_mu, u)
    covered = 0
    for i in range(n_sets):
        a = fr.Curve("a", "t", (1, 2, 3, 4), ("a1", "a2", "a3", "a4"),
                     fr.samples_from_per_prompt(ax[i]), fr.samples_from_per_prompt(ay[i]))  # fmt: skip
        b = fr.Curve("b", "t", (1, 2, 3), ("b1", "b2", "b3"),
                     fr.samples_from_per_prompt(bx[i]), fr.samples_from_per_prompt(by[i]))  # fmt: skip
        m = fr.matched(a, b, target, n_resamples=1000, seed=i)
        assert m.method == fr.JOINT_METHOD
        # one pair of segments (the means are monotone in x): those the data bracket the value on, the
        # true curves' own (A's 1, B's 0) but for a rare data set whose points moved past the value
        (d,) = m.differences
        covered += d.interval.low <= truth <= d.interval.high
    print(f"coverage {covered / n_sets:.4f} over {n_sets} data sets")
    assert 0.92 <= covered / n_sets <= 0.98, covered / n_sets


def test_points_without_additive_per_prompt_values_are_drawn_from_their_own_intervals():
    s = fr.Samples(np.array([0.5, 0.6]), None, np.array([0.01, 0.0]))
    draws = s.draw(np.ones((4000, 3)), np.random.default_rng(0))
    assert draws[:, 0].std() == pytest.approx(0.01, rel=0.05) and np.all(draws[:, 1] == 0.6)
    assert fr.se_from_interval(0.4, 0.6, 0.95) == pytest.approx(0.1 / 1.959964, rel=1e-6)
    a = fr.Curve("a", "t", (1, 2), ("a1", "a2"), s, s)
    b = constant_curve("b", [0.0, 1.0], [0.0, 1.0])
    assert fr.matched(a, b, 0.55, n_resamples=50).method == fr.NORMAL_METHOD
    # a point without an interval leaves the comparison without one, never with a point interval
    bare = fr.Samples(np.array([0.5, 0.6]), None, np.array([0.01, np.nan]))
    m = fr.matched(fr.Curve("a", "t", (1, 2), ("a1", "a2"), bare, bare), b, 0.55, n_resamples=50)
    assert m.differences[0].estimate == pytest.approx(0.0) and m.differences[0].interval is None


def test_a_curve_above_the_other_over_the_shared_range_dominates_and_crossing_curves_cross_where_they_meet():
    a = constant_curve("a", [0.0, 0.5, 1.0], [0.6, 0.7, 0.8])
    b = constant_curve("b", [0.2, 1.2], [0.2, 0.4])
    d = fr.dominance(a, b, "higher", n_resamples=50)
    assert d.shared == pytest.approx((0.2, 1.0)) and d.verdict == "a dominates" and not d.crossings
    assert fr.dominance(a, b, "lower", n_resamples=50).verdict == "b dominates"
    c = constant_curve("c", [0.0, 1.0], [1.0, 0.0])  # meets a (0.6 + 0.2x on [0, 1]) at x = 1/3
    d = fr.dominance(a, c, "higher", n_resamples=50, grid=31)
    assert d.verdict == "the curves cross"
    (cross,) = d.crossings
    assert cross.x == pytest.approx(1 / 3, abs=1e-9)
    assert cross.interval.low <= 1 / 3 <= cross.interval.high
    assert [s.better for s in d.stretches] == ["b", "neither", "a"]


@pytest.mark.parametrize("goal", ["higher", "lower", "closest"])
def test_the_expected_best_of_n_draws_equals_the_mean_over_every_subset_of_n_points(goal):
    values = [0.31, 0.12, 0.5, 0.44, 0.27, math.nan]  # an undefined point is not a setting one can draw
    human = 0.3
    defined = [v for v in values if math.isfinite(v)]
    curve = fr.expected_best(values, goal, human)
    assert len(curve) == len(defined)
    for n in range(1, len(defined) + 1):
        subsets = list(itertools.combinations(defined, n))
        key = {"higher": lambda v: v, "lower": lambda v: -v, "closest": lambda v: -abs(v - human)}[goal]
        brute = sum(max(s, key=key) for s in subsets) / len(subsets)
        assert curve[n - 1] == pytest.approx(brute)


def test_where_a_curve_turns_back_dominance_takes_its_best_segment_at_each_value():
    a = constant_curve("a", [0.0, 1.0, 0.0], [0.1, 0.1, 0.9])  # at every x: 0.1 on one segment, more on the other
    b = constant_curve("b", [0.0, 1.0], [0.5, 0.5])
    d = fr.dominance(a, b, "higher", n_resamples=50, grid=11)
    # the better segment runs from (1, 0.1) back to (0, 0.9): 0.9 - 0.8 x, above 0.5 below x = 0.5
    assert d.advantage == pytest.approx([0.4 - 0.08 * g for g in range(11)])
    (cross,) = d.crossings
    assert cross.x == pytest.approx(0.5)
    assert fr.dominance(a, b, "lower", n_resamples=50, grid=11).verdict == "a dominates"  # its 0.1 < 0.5 everywhere


def test_the_tuning_budget_s_95_percent_interval_covers_the_true_expected_best_in_95_percent_of_data_sets():
    """600 simulated data sets (>= 400), two sweeps on the same 60 prompts, 1000 resamples each: the
    interval of the expected best of N covers the closed form on the points' true means in 95% +- 3%
    at every N (N = 1 the sweep's mean, N = K its best point). An interval scaled wrongly (too narrow,
    too wide, or each sweep resampled on prompts of its own while the truth is per sweep) misses this."""
    rng = np.random.default_rng(11)
    n_sets, n_prompts = 600, 60
    mu_a = np.array([0.20, 0.35, 0.50, 0.62, 0.75])
    mu_b = np.array([0.40, 0.30, 0.55])
    truth_a, truth_b = fr.expected_best(mu_a, "higher"), fr.expected_best(mu_b, "higher")
    u = rng.standard_normal((n_sets, n_prompts, 1)) * 0.15  # the prompt's effect, shared by every point
    ya = mu_a + u + rng.standard_normal((n_sets, n_prompts, 5)) * 0.1
    yb = mu_b + u + rng.standard_normal((n_sets, n_prompts, 3)) * 0.1
    x = fr.samples_from_per_prompt(np.zeros((n_prompts, 5)))
    covered_a, covered_b = np.zeros(5), np.zeros(3)
    for i in range(n_sets):
        a = fr.Curve("a", "t", tuple(range(5)), tuple(f"a{k}" for k in range(5)), x, fr.samples_from_per_prompt(ya[i]))
        b = fr.Curve("b", "t", tuple(range(3)), tuple(f"b{k}" for k in range(3)), x, fr.samples_from_per_prompt(yb[i]))
        ba, bb = fr.budgets([a, b], "higher", n_resamples=1000, seed=i)
        assert ba.method == fr.JOINT_METHOD
        covered_a += [ci.low <= t <= ci.high for ci, t in zip(ba.intervals, truth_a)]
        covered_b += [ci.low <= t <= ci.high for ci, t in zip(bb.intervals, truth_b)]
    rates = np.concatenate([covered_a, covered_b]) / n_sets
    print("coverage by N:", np.round(rates, 4))
    assert np.all((0.92 <= rates) & (rates <= 0.98)), rates


@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # the undefined point's column
@pytest.mark.parametrize("goal", ["higher", "lower", "closest"])
def test_the_tuning_budget_s_intervals_hold_its_estimates_and_stay_within_the_points_own_range(goal):
    rng = np.random.default_rng(3)
    per_prompt = np.array([0.1, 0.3, 0.5, 0.7]) + rng.standard_normal((40, 4)) * 0.05
    per_prompt[:, 2] = np.clip(per_prompt[:, 2], 0, 1)
    curve = fr.Curve("a", "t", (1, 2, 3, 4), ("a1", "a2", "a3", "a4"),
                     fr.samples_from_per_prompt(per_prompt), fr.samples_from_per_prompt(per_prompt))  # fmt: skip
    (b,) = fr.budgets([curve], goal, human=0.45, n_resamples=500)
    assert b.estimates == pytest.approx(fr.expected_best(curve.y.value, goal, 0.45))
    low, high = per_prompt.mean(axis=0).min() - 0.1, per_prompt.mean(axis=0).max() + 0.1
    for est, ci in zip(b.estimates, b.intervals):
        assert ci.low <= est <= ci.high and low <= ci.low and ci.high <= high
        assert ci.high - ci.low < 0.1  # the scale of a mean of 40 prompts (sd 0.05), not of one prompt
    # a sweep without spread has point intervals at its estimates; an undefined point is left out
    flat = constant_curve("c", [0.1, 0.2, 0.3], [0.4, math.nan, 0.9])
    (c,) = fr.budgets([flat], goal, human=0.45, n_resamples=50)
    assert len(c.intervals) == 2
    assert [v for ci in c.intervals for v in (ci.low, ci.high)] == pytest.approx([e for e in c.estimates for _ in "lh"])


def test_a_tuning_budget_from_points_without_per_prompt_values_draws_from_their_intervals_and_says_so():
    s = fr.Samples(np.array([0.5, 0.6]), None, np.array([0.01, 0.01]))
    (b,) = fr.budgets([fr.Curve("a", "t", (1, 2), ("a1", "a2"), s, s)], "higher", n_resamples=2000)
    assert b.method == fr.NORMAL_METHOD
    assert b.intervals[0].high - b.intervals[0].low == pytest.approx(2 * 1.96 * 0.01 / 2**0.5, rel=0.1)
    bare = fr.Samples(np.array([0.5, 0.6]), None, np.array([0.01, np.nan]))
    (b,) = fr.budgets([fr.Curve("a", "t", (1, 2), ("a1", "a2"), bare, bare)], "higher", n_resamples=50)
    assert b.intervals == (None, None)  # a point without an interval: no interval, never a point one


def test_a_matched_difference_s_p_value_is_the_level_at_which_its_interval_excludes_zero():
    """Twice the smaller share of resamples on either side of 0, each share (k + 1) / (R + 1)."""
    dist = np.array([-1.0] * 3 + [1.0] * 97)
    assert fr.bootstrap_p(dist) == pytest.approx(2 * 4 / 101)
    assert fr.bootstrap_p(np.ones(99)) == pytest.approx(2 / 100)  # never 0
    assert fr.bootstrap_p(np.zeros(10)) == 1.0  # at most 1
    assert fr.bootstrap_p(np.array([np.nan, 1.0])) is None
    # the p says what the interval says: 0 outside the 95% interval <=> p below 0.05 (here, away from the edge)
    rng = np.random.default_rng(3)
    for shift in (0.0, 0.5, 1.0, 2.0, 3.0, 4.0):
        d = rng.standard_normal(4000) + shift
        ci = fr.percentile(d, 0.95)
        assert (fr.bootstrap_p(d) < 0.05) == (not ci.low <= 0 <= ci.high), shift


def test_holm_adjusts_every_matched_difference_of_a_family_together():
    b = constant_curve("b", [0.0, 1.0], [0.0, 1.0], n_prompts=40)
    noisy = np.random.default_rng(0)

    def curve(name, shift):
        per_prompt_y = np.tile([shift, 1.0 + shift], (40, 1)) + noisy.standard_normal((40, 2)) * 0.3
        return fr.Curve(name, "t", (1, 2), (f"{name}1", f"{name}2"),
                        fr.samples_from_per_prompt(np.tile([0.0, 1.0], (40, 1))),
                        fr.samples_from_per_prompt(per_prompt_y))  # fmt: skip

    comparisons = [fr.matched(curve(n, s), b, 0.5, n_resamples=400, seed=i)
                   for i, (n, s) in enumerate((("far", 0.5), ("near", 0.08), ("none", 0.0)))]  # fmt: skip
    raw = [d.p_value for m in comparisons for d in m.differences]
    assert all(d.holm_p is None for m in comparisons for d in m.differences)  # not adjusted until asked
    adjusted = [d.holm_p for m in fr.adjust(comparisons) for d in m.differences]
    assert adjusted == pytest.approx(holm(raw))
    assert raw[0] < 0.05 and adjusted[0] < 0.05  # a large difference holds for the family
    assert all(h >= p for h, p in zip(adjusted, raw))


def test_points_drawn_from_their_intervals_stay_in_the_score_s_range_and_so_does_the_tuning_budget():
    """A MAUVE of 0.99 with a standard error of 0.05 is drawn above 1 by a normal; clipped to [0, 1],
    neither a draw nor the expected best of N leaves the score's range."""
    bounded = fr.Samples(np.array([0.99, 0.7]), None, np.array([0.05, 0.05]), bounds=(0.0, 1.0))
    draws = bounded.draw(np.ones((2000, 3)), np.random.default_rng(0))
    assert draws.max() == 1.0 and draws.min() >= 0.0
    unbounded = fr.Samples(np.array([0.99, 0.7]), None, np.array([0.05, 0.05]))
    assert unbounded.draw(np.ones((2000, 3)), np.random.default_rng(0)).max() > 1.0  # what the range prevents
    x = fr.samples_from_per_prompt(np.tile([0.1, 0.2], (8, 1)))
    (budget,) = fr.budgets([fr.Curve("a", "t", (1, 2), ("a1", "a2"), x, bounded)], "higher", None, 2000, 0, 0.95)
    assert all(ci.high <= 1.0 for ci in budget.intervals)
