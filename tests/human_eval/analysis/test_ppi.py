"""PPI++ mean estimation (human_eval/analysis/ppi.py): the closed form on a fixture (the formulas of
ppi-python 0.2.3's ppi_mean_ci), and its coverage."""

import math
import statistics

import numpy as np
import pytest
from scipy import stats

from maxbench.human_eval.analysis.ppi import (
    classical_mean,
    humans_for_width,
    judge_only_mean,
    power_tuned_lambda,
    ppi_mean,
)

Y = [3.0, 4.0, 2.0, 5.0, 4.0, 3.0]  # people, on the labelled items
F = [3.5, 3.9, 2.8, 4.6, 4.4, 3.1]  # the judge, on the same items
G = [2.9, 4.2, 3.3, 4.8, 3.7, 2.6, 4.1, 3.0]  # the judge, on the items nobody rated
Z = stats.norm.ppf(0.975)


def test_ppi_with_lambda_one_is_the_closed_form_of_prediction_powered_inference():
    n, N = len(Y), len(G)
    rect = [y - f for y, f in zip(Y, F, strict=True)]
    theta = statistics.mean(G) + statistics.mean(rect)
    se = math.sqrt(statistics.pvariance(G) / N + statistics.pvariance(rect) / n)
    got = ppi_mean(np.array(Y), np.array(F), np.array(G), lam=1.0).at()
    assert got["estimate"] == pytest.approx(theta, rel=1e-12)
    assert got["se"] == pytest.approx(se, rel=1e-12)
    assert (got["low"], got["high"]) == pytest.approx((theta - Z * se, theta + Z * se), rel=1e-12)


def test_the_power_tuned_lambda_is_the_closed_form_and_minimises_the_variance():
    n, N = len(Y), len(G)
    pcov = statistics.covariance(Y, F) * (n - 1) / n
    lam = pcov / ((1 + n / N) * statistics.variance(F + G))
    assert 0 < lam < 1
    assert float(power_tuned_lambda(np.array(Y), np.array(F), np.array(G))) == pytest.approx(lam, rel=1e-12)
    tuned = ppi_mean(np.array(Y), np.array(F), np.array(G)).at()
    rect = [y - lam * f for y, f in zip(Y, F, strict=True)]
    assert tuned["estimate"] == pytest.approx(statistics.mean(Y) + lam * (statistics.mean(G) - statistics.mean(F)))
    assert tuned["se"] == pytest.approx(
        math.sqrt(statistics.pvariance(rect) / n + lam**2 * statistics.pvariance(G) / N)
    )
    # lambda* minimises the variance written with var(f u g) for var(f) and var(g): the PPI++ objective
    pooled = statistics.variance(F + G)

    def objective(x):
        return (statistics.pvariance(Y) - 2 * x * pcov) / n + x**2 * pooled * (1 / n + 1 / N)

    assert all(objective(lam) <= objective(x) + 1e-15 for x in np.linspace(0, 1, 101))


def test_without_judge_help_the_estimate_is_the_human_only_one():
    human = classical_mean(np.array(Y)).at()
    assert human["estimate"] == pytest.approx(statistics.mean(Y))
    assert human["se"] == pytest.approx(statistics.pstdev(Y) / math.sqrt(len(Y)))
    assert ppi_mean(np.array(Y), np.array(F), np.array(G), lam=0.0).at()["estimate"] == pytest.approx(human["estimate"])
    # a judge that anti-correlates with people gets lambda 0 (clipped), never a negative weight
    assert float(power_tuned_lambda(np.array(Y), -np.array(F), -np.array(G))) == 0.0
    assert ppi_mean(np.array(Y), np.array(F), np.array([])).at() == pytest.approx(human | {"N": 0}, rel=1e-12)


def test_with_a_biased_judge_ppi_covers_the_true_mean_in_95_percent_of_studies_and_the_judge_alone_does_not():
    """2000 simulated studies: 150 items rated by people, 1500 by the judge only. The judge reads
    quality with a slope of 0.7, a bias of +0.6 and noise; PPI's interval must cover the true mean
    in 95% +- 3% of the studies, the judge-only interval (biased) far less often."""
    rng = np.random.default_rng(52)
    studies, n, N, true_mean = 2000, 150, 1500, 3.2
    quality = rng.normal(true_mean, 0.9, size=(studies, n + N))
    human = quality + rng.normal(0, 0.6, size=quality.shape)
    judge = 0.7 * quality + 0.6 + 0.3 * true_mean + rng.normal(0, 0.5, size=quality.shape)
    y, f, g = human[:, :n], judge[:, :n], judge[:, n:]
    ppi = ppi_mean(y, f, g)
    covered = ((ppi.low <= true_mean) & (true_mean <= ppi.high)).mean()
    alone = judge_only_mean(f, g)
    judge_covered = ((alone.low <= true_mean) & (true_mean <= alone.high)).mean()
    classical = classical_mean(y)
    assert 0.92 <= covered <= 0.98, covered
    assert judge_covered < 0.5, judge_covered
    assert np.median(ppi.high - ppi.low) < np.median(classical.high - classical.low)  # the judge helps


def test_humans_for_width_is_the_smallest_n_reaching_the_width():
    sd, width = 1.0, 0.2
    classical = humans_for_width(width, sd, rho=0.0)
    assert classical == math.ceil((2 * Z * sd / width) ** 2)
    for rho, N in ((0.6, None), (0.8, 2000), (0.9, 500)):
        n = humans_for_width(width, sd, rho, N)

        def half(k, rho=rho, N=N):
            share = 1.0 if N is None else N / (k + N)
            return Z * sd * math.sqrt((1 - rho**2 * share) / k)

        assert half(n) <= width / 2 < half(n - 1)
        assert n < classical


# ppi-python 0.2.3 on the fixture (ppi_mean_pointestimate, ppi_mean_ci with alpha=0.05, classical_mean_ci),
# recorded here so the test needs no ppi-python (it brings numba, statsmodels, scikit-learn, gdown)
PPI_PYTHON = {
    None: (3.405831022769556, 2.849605493293114, 3.9620565522459983),
    1.0: (3.3583333333333334, 2.7743940839265284, 3.9422725827401384),
}
PPI_PYTHON_CLASSICAL = (2.7339128365189174, 4.266087163481083)


@pytest.mark.parametrize("lam", [None, 1.0])
def test_the_estimate_and_interval_equal_ppi_pythons_on_the_fixture(lam):
    got = ppi_mean(np.array(Y), np.array(F), np.array(G), lam=lam).at()
    assert (got["estimate"], got["low"], got["high"]) == pytest.approx(PPI_PYTHON[lam], rel=1e-12)
    human = classical_mean(np.array(Y)).at()
    assert (human["low"], human["high"]) == pytest.approx(PPI_PYTHON_CLASSICAL, rel=1e-12)
