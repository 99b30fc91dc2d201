"""Bootstrap intervals over prompts and paired tests between systems."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats

from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.benchmark.metrics.stats import PromptStats, bootstrap_ci, mean_stats, paired_test, seed_averaged
from maxbench.intervals import ConfidenceInterval


def test_mean_stats_value_and_per_prompt():
    # prompt a: texts 1.0 and 3.0, prompt b: 5.0 and an undefined text (NaN, left out)
    stats = mean_stats(["a", "b"], np.array([0, 0, 1, 1]), np.array([1.0, 3.0, 5.0, np.nan]))
    assert stats.value() == pytest.approx(3.0)
    assert stats.per_prompt() == {"a": 2.0, "b": 5.0}


def test_bootstrap_of_a_mean_equals_scipy_on_the_values():
    values = np.random.default_rng(1).normal(size=40)
    stats = mean_stats([str(i) for i in range(40)], np.arange(40), values)
    ci = bootstrap_ci(stats, n_resamples=1000, seed=7)
    want = scipy.stats.bootstrap(
        (values,), np.mean, n_resamples=1000, method="percentile", rng=np.random.default_rng(7)
    ).confidence_interval
    low, high = ci.confidence_interval
    assert isinstance(ci.confidence_interval, ConfidenceInterval)
    assert low == pytest.approx(want.low, abs=1e-12) and high == pytest.approx(want.high, abs=1e-12)
    assert low < values.mean() < high
    assert bootstrap_ci(stats, n_resamples=1000, seed=7) == ci  # seeded: reproducible
    assert bootstrap_ci(stats, n_resamples=1000, seed=8) != ci


def test_bootstrap_of_a_corpus_score_reweights_prompts():
    # distinct-1 corpus over three prompts: a resample is the corpus of the drawn prompts
    b = TextBatch(["a b", "a a", "c d"], ["p", "q", "r"])
    score = get_metric("distinct").compute(b).scores["distinct-1-corpus"]
    assert score.value == pytest.approx(4 / 6)
    # p twice and r once: tokens a b a b c d -> {a,b,c,d} / 6
    assert score.stats.evaluate(np.array([[2.0, 0.0, 1.0]]))[0] == pytest.approx(4 / 6)
    # q alone: {a} / 2
    assert score.stats.evaluate(np.array([[0.0, 1.0, 0.0]]))[0] == pytest.approx(1 / 2)
    # type counts are not bootstrapped (a duplicated prompt adds no type, so every resample would
    # score below the data); the jackknife interval is centred on the value, and clipped to the
    # score's range: leaving out p, q, r gives 3/4, 4/4, 2/4, se = sqrt(2/3 * 1/8), and
    # 4/6 + 1.96 se = 1.23 is above any Distinct-1 there can be
    half = scipy.stats.norm.ppf(0.975) * np.sqrt(2 / 3 / 8)
    unclipped = bootstrap_ci(score.stats, n_resamples=200, seed=0).confidence_interval
    assert "jackknife" in bootstrap_ci(score.stats).method
    assert unclipped == pytest.approx((4 / 6 - half, 4 / 6 + half), abs=1e-12)
    ci = bootstrap_ci(score.stats, n_resamples=200, seed=0, bounds=score.range)
    assert score.range == (0.0, 1.0)
    assert ci.confidence_interval == pytest.approx((4 / 6 - half, 1.0), abs=1e-12)
    assert ci.method.endswith("clipped to the score's range [0, 1]")


def test_jackknife_interval_by_hand():
    # uniq of 'a b' | 'c' | 'c d e' is 5; leaving out one prompt gives 3, 5, 3 (mean 11/3)
    # se = sqrt(2/3 * ((2/3)^2 + (4/3)^2 + (2/3)^2)) = sqrt(2/3 * 24/9) = 4/3
    score = get_metric("uniq").compute(TextBatch(["a b", "c", "c d e"], ["p", "q", "r"])).scores["uniq"]
    ci = bootstrap_ci(score.stats, level=0.95, bounds=score.range)
    half = scipy.stats.norm.ppf(0.975) * 4 / 3
    assert ci.confidence_interval == pytest.approx((5 - half, 5 + half), abs=1e-12)  # inside [0, inf): unchanged
    assert ci.method.endswith("clipped to the score's range [0, inf)")


def test_paired_permutation_test_is_exact_for_few_prompts():
    # six prompts: the mean difference under every swap pattern is enumerable (2^6 = 64 < 1000,
    # so scipy runs the exact test); two-sided p = share of patterns at least as extreme
    a = np.array([3.0, 2.0, 4.0, 5.0, 1.0, 6.0])
    b = np.array([1.0, 2.5, 1.0, 2.0, 1.5, 2.0])
    ids = [str(i) for i in range(6)]
    sa, sb = (mean_stats(ids, np.arange(6), x) for x in (a, b))
    res = paired_test(sa, sb, n_resamples=1000, seed=0)
    d = a - b
    null = [np.mean(np.array(signs) * d) for signs in itertools.product([1, -1], repeat=6)]
    want = np.mean(np.abs(null) >= abs(d.mean()) - 1e-12)
    assert res.difference == pytest.approx(d.mean())
    assert res.p_value == pytest.approx(want, abs=1e-12)
    assert res.confidence_interval.low < res.difference < res.confidence_interval.high


def test_paired_test_on_corpus_counts_with_different_vocabularies():
    # distinct-1 corpus: A = {'a b', 'c d'} -> 4/4, B = {'a a', 'a a'} -> 1/4; swapping prompt 1
    # gives A' = {'a a','c d'} 3/4 vs B' = {'a b','a a'} 2/4, swapping prompt 2 the mirror image,
    # swapping both -0.75: the null is {0.75, 0.25, -0.25, -0.75}, two-sided p = 2 * 1/4
    dist = get_metric("distinct")
    a = dist.compute(TextBatch(["a b", "c d"], ["p1", "p2"])).scores["distinct-1-corpus"]
    b = dist.compute(TextBatch(["a a", "a a"], ["p1", "p2"])).scores["distinct-1-corpus"]
    res = paired_test(a.stats, b.stats, n_resamples=1000, seed=0)
    assert res.difference == pytest.approx(0.75)
    assert res.p_value == pytest.approx(0.5)


def test_paired_test_uses_only_shared_prompts():
    sa = mean_stats(["x", "y", "z"], np.arange(3), np.array([1.0, 2.0, 3.0]))
    sb = mean_stats(["z", "y"], np.arange(2), np.array([0.0, 0.0]))
    res = paired_test(sa, sb, n_resamples=100)
    assert res.n_prompts == 2 and res.difference == pytest.approx(2.5)
    with pytest.raises(ValueError):
        paired_test(sa, mean_stats(["w"], np.arange(1), np.array([1.0])))


# ---------------------------------------------------------------- seed-averaged comparisons


def _per_prompt(values) -> PromptStats:
    ids = [f"p{i:03d}" for i in range(len(values))]
    return mean_stats(ids, np.arange(len(values)), np.asarray(values, dtype=float))


def _seeds(effects, n=80, noise=0.02, seed=5):
    """Per-prompt scores of a baseline (around 10) and of a method whose seed s is 1 + effects[s]
    times it, each with a little per-prompt noise: (method seeds, baseline seeds)."""
    rng = np.random.default_rng(seed)
    base = 10 + rng.normal(0, 1, n)
    a, b = [], []
    for e in effects:
        b.append(_per_prompt(base * (1 + rng.normal(0, noise, n))))
        a.append(_per_prompt(base * (1 + e) * (1 + rng.normal(0, noise, n))))
    return a, b


def test_a_seed_averaged_comparison_is_the_ratio_and_difference_of_the_seeds_mean_scores():
    a, b = _seeds([0.10, 0.12, 0.08])
    got = seed_averaged(a, b, n_resamples=500)
    ma, mb = np.mean([s.value() for s in a]), np.mean([s.value() for s in b])
    assert got.n_seeds == 3 and got.n_prompts == 80
    assert got.a == pytest.approx(ma) and got.b == pytest.approx(mb)
    assert got.difference[0] == pytest.approx(ma - mb)
    assert got.log_ratio[0] == pytest.approx(math.log(ma / mb))
    assert got.log_ratio[1] < got.log_ratio[0] < got.log_ratio[2]
    assert 0 < math.expm1(got.log_ratio[1]) and math.expm1(got.log_ratio[2]) < 0.2  # about +10%, above 0
    assert got.difference[1] < got.difference[0] < got.difference[2]


def test_seeds_that_disagree_widen_the_interval_past_zero_where_each_seed_alone_excludes_it():
    # each seed's own paired comparison is clear (+15%, -12%, +3%), but the seeds disagree: the
    # seed-averaged interval must carry that variation, not only the prompts'
    a, b = _seeds([0.15, -0.12, 0.03])
    for x, y in zip(a, b):
        c = paired_test(x, y, n_resamples=300)
        lo, hi = c.confidence_interval
        assert lo > 0 or hi < 0
    got = seed_averaged(a, b, n_resamples=1000)
    assert got.log_ratio[1] < 0 < got.log_ratio[2]
    assert got.difference[1] < 0 < got.difference[2]
    agree = seed_averaged(*_seeds([0.02, 0.02, 0.02]), n_resamples=1000)
    assert agree.log_ratio[2] - agree.log_ratio[1] < (got.log_ratio[2] - got.log_ratio[1]) / 4


def test_a_seed_averaged_comparison_refuses_what_it_cannot_estimate():
    a, b = _seeds([0.1, 0.1])
    with pytest.raises(ValueError, match="same number of seeds"):
        seed_averaged(a, b[:1])
    jack = PromptStats(a[0].prompt_ids, a[0].blocks, a[0].finalize, bootstrap_ok=False)
    assert seed_averaged([jack, a[1]], b) is None  # a distinct-n-gram score: no prompt bootstrap
    zero = [_per_prompt(np.zeros(80)), _per_prompt(np.zeros(80))]
    got = seed_averaged(zero, b, n_resamples=200)
    assert got.log_ratio is None and got.difference[0] < 0  # no ratio scale at 0; the difference stays
    # prompts scored by every system only: one system short of a prompt leaves it out for all
    short = [s.select(s.prompt_ids[:40]) for s in a]
    assert seed_averaged(short, b, n_resamples=200).n_prompts == 40


def test_a_seed_averaged_interval_covers_the_true_difference_about_95_percent_of_the_time():
    # 200 simulated comparisons of 3 seed pairs on 60 prompts, the true difference 0: each prompt has
    # its own difference shared by the seeds, each seed its own shift (sd 0.3, the seeds disagreeing)
    # and its own per-prompt noise. A percentile bootstrap over seed pairs covered about 74% of such
    # cases; the t interval on Welch-Satterthwaite df must stay near 95%
    rng = np.random.default_rng(11)
    n, hits = 60, 0
    for _ in range(200):
        base = 10 + rng.normal(0, 1, n)
        shared = rng.normal(0, 0.5, n)  # a prompt's own difference, the same for every seed
        a, b = [], []
        for _ in range(3):
            a.append(_per_prompt(base + shared + rng.normal(0, 0.3) + rng.normal(0, 0.3, n)))
            b.append(_per_prompt(base + rng.normal(0, 0.3) + rng.normal(0, 0.3, n)))
        got = seed_averaged(a, b, n_resamples=200)
        _, lo, hi, se, df = got.difference
        hits += lo <= 0 <= hi
    assert 0.90 <= hits / 200 <= 0.99
