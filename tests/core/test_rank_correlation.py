"""Metric-vs-rating correlations (core/rank_correlation.py) against scipy.stats directly."""

import numpy as np
import pytest
from scipy import stats

from maxbench.rank_correlation import correlate, kendall_tau_b, mean_ratings, metric_rating_table, spearman_rho


def test_vectorised_tau_b_and_rho_equal_scipy_on_tied_data():
    rng = np.random.default_rng(3)
    x = rng.integers(1, 6, size=(40, 25)).astype(float)  # Likert-like: many ties
    y = x + rng.normal(0, 1.5, size=x.shape).round()
    tau, rho = kendall_tau_b(x, y), spearman_rho(x, y)
    for b in range(len(x)):
        assert tau[b] == pytest.approx(stats.kendalltau(x[b], y[b]).statistic, abs=1e-12)
        assert rho[b] == pytest.approx(stats.spearmanr(x[b], y[b]).statistic, abs=1e-12)


def test_item_and_system_level_points_are_scipys_on_the_texts_and_on_system_means():
    rng = np.random.default_rng(0)
    units = []
    for p in range(30):
        for s in range(4):
            m = s + rng.normal()
            units.append((f"p{p}", f"s{s}", m, float(np.clip(np.round(3 + 0.5 * m + rng.normal()), 1, 5))))
    item, system = correlate(units, n_resamples=300, seed=1)
    x, y = np.array([u[2] for u in units]), np.array([u[3] for u in units])
    assert item.n == 120 and item.tau == pytest.approx(stats.kendalltau(x, y).statistic)
    assert item.rho == pytest.approx(stats.spearmanr(x, y).statistic)
    assert item.tau_p == pytest.approx(stats.kendalltau(x, y).pvalue)
    sx = [np.mean([u[2] for u in units if u[1] == s]) for s in ("s0", "s1", "s2", "s3")]
    sy = [np.mean([u[3] for u in units if u[1] == s]) for s in ("s0", "s1", "s2", "s3")]
    assert system.n == 4 and system.tau == pytest.approx(stats.kendalltau(sx, sy).statistic)
    assert system.rho == pytest.approx(stats.spearmanr(sx, sy).statistic)
    # the intervals hold the point estimate and lie in [-1, 1]; the same seed gives the same interval
    for c in (item, system):
        assert -1 <= c.tau_ci.low <= c.tau <= c.tau_ci.high <= 1
        assert -1 <= c.rho_ci.low <= c.rho <= c.rho_ci.high <= 1
    assert correlate(units, n_resamples=300, seed=1) == (item, system)
    assert correlate(units, n_resamples=300, seed=2)[0].tau_ci != item.tau_ci


def test_item_bootstrap_interval_matches_a_plain_loop_over_resampled_prompts():
    rng = np.random.default_rng(5)
    units = [(f"p{p}", f"s{s}", rng.normal(), float(rng.integers(1, 6))) for p in range(12) for s in range(3)]
    units = units[:-1]  # one prompt with fewer texts: resamples of different sizes
    item, _ = correlate(units, n_resamples=200, seed=7)
    prompts = sorted({u[0] for u in units})
    draws = np.random.default_rng(7).integers(0, len(prompts), size=(200, len(prompts)))
    taus = []
    for d in draws:
        picked = [u for j in sorted(d) for u in units if u[0] == prompts[j]]
        taus.append(stats.kendalltau([u[2] for u in picked], [u[3] for u in picked]).statistic)
    assert item.tau_ci.low == pytest.approx(np.quantile(taus, 0.025))
    assert item.tau_ci.high == pytest.approx(np.quantile(taus, 0.975))


def test_undefined_correlations_say_why():
    item, system = correlate([("p1", "a", 1.0, 3.0), ("p2", "a", 2.0, 3.0), ("p3", "b", 3.0, 3.0)])
    assert item.tau is None and "rating is the same" in item.reason
    assert system.tau is None and "2 points" in system.reason


def test_table_joins_texts_by_prompt_and_system():
    ratings = mean_ratings([("p1", "a", "fluency", 4), ("p1", "a", "fluency", 2), ("p2", "a", "fluency", 5)])
    assert ratings == {"fluency": {("p1", "a"): 3.0, ("p2", "a"): 5.0}}
    table = metric_rating_table({"ppl": {("p1", "a"): 10.0, ("p9", "a"): 1.0}}, ratings, {"ppl": False}, 0)
    assert [(r.metric, r.aspect, r.item.n, r.higher_is_better) for r in table] == [("ppl", "fluency", 1, False)]
