"""Prediction-powered inference of a mean (PPI++; Angelopoulos, Duchi and Zrnic 2023).

n items have a human value ``y`` and a judge value ``f`` (the labelled set); N more items have
only a judge value ``g`` (the unlabelled set). The labelled items must be a random sample of all
items: that is the whole of the guarantee's assumption. For any lambda,

    theta(lambda) = mean(y) + lambda * (mean(g) - mean(f))

is unbiased for the mean of y over all items, with variance (estimated)

    var(lambda) = var(y - lambda f) / n + lambda^2 var(g) / N        (population variances, ddof 0)

and the 95% interval is theta +- z_{0.975} sqrt(var). Power tuning picks the lambda minimising
the variance, lambda* = cov(y, f) / ((1 + n/N) var(f u g)) (cov with ddof 0, the variance of f
over both sets pooled with ddof 1), clipped to [0, 1]: lambda = 0 is the classical human-only
estimate (a judge that does not help is ignored), lambda = 1 plain PPI. These are the choices of
``ppi-python`` 0.2.3's ``ppi_mean_ci`` and ``ppi_mean_pointestimate``, whose estimates and intervals
this equals to rounding. A judge's bias
cancels (it enters mean(g) and mean(f) alike); its noise and disagreement only widen the
interval. With N = 0 there is nothing to add: the estimate is the human-only one.

Every function takes arrays whose last axis is the items, so a whole simulation of studies
(leading axes) runs in one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95


@dataclass(frozen=True)
class MeanEstimate:
    """Estimate, standard error, interval, lambda (1 = plain PPI, 0 = human-only), the sample sizes and
    the two-sided p-value of "the mean is 0" (used for differences)."""

    estimate: np.ndarray
    se: np.ndarray
    low: np.ndarray
    high: np.ndarray
    lam: np.ndarray
    n: int
    N: int

    @property
    def p_value(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return 2 * stats.norm.sf(np.abs(self.estimate) / self.se)

    def at(self, *index) -> dict:
        """One study's numbers as plain floats (for reports)."""
        return {
            "estimate": float(self.estimate[index]),
            "se": float(self.se[index]),
            "low": float(self.low[index]),
            "high": float(self.high[index]),
            "lambda": float(self.lam[index]),
            "n": self.n,
            "N": self.N,
            "p": float(self.p_value[index]),
        }


def _interval(estimate, se, lam, n, N, level) -> MeanEstimate:
    z = stats.norm.ppf(0.5 + level / 2)
    return MeanEstimate(estimate, se, estimate - z * se, estimate + z * se, lam, n, N)


def power_tuned_lambda(y: np.ndarray, f: np.ndarray, g: np.ndarray) -> np.ndarray:
    """lambda* = cov(y, f) / ((1 + n/N) var(f and g pooled)), clipped to [0, 1]; 0 without unlabelled items."""
    n, N = y.shape[-1], g.shape[-1]
    if N == 0:
        return np.zeros(y.shape[:-1])
    cov = ((y - y.mean(-1, keepdims=True)) * (f - f.mean(-1, keepdims=True))).mean(-1)
    var = np.concatenate([f, g], axis=-1).var(-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = cov / ((1 + n / N) * var)
    return np.clip(np.nan_to_num(lam, nan=0.0), 0.0, 1.0)


def ppi_mean(
    y: np.ndarray, f: np.ndarray, g: np.ndarray, lam: float | np.ndarray | None = None, level: float = LEVEL
) -> MeanEstimate:
    """The PPI++ estimate of the mean of y (module docstring); ``lam`` None: power-tuned."""
    y, f, g = (np.asarray(a, dtype=float) for a in (y, f, g))
    n, N = y.shape[-1], g.shape[-1]
    if n < 2:
        raise ValueError("PPI needs two or more labelled items")
    lam = power_tuned_lambda(y, f, g) if lam is None else np.broadcast_to(np.asarray(lam, float), y.shape[:-1])
    lam_ = lam[..., None]
    estimate = y.mean(-1) + lam * ((g.mean(-1) if N else 0.0) - f.mean(-1))
    var = (y - lam_ * f).var(-1) / n
    if N >= 1:
        var = var + lam**2 * g.var(-1) / N
    return _interval(estimate, np.sqrt(var), lam, n, N, level)


def classical_mean(y: np.ndarray, level: float = LEVEL) -> MeanEstimate:
    """The human-only estimate: mean(y) +- z sd(y)/sqrt(n) (sd with ddof 0, as ``ppi-python``'s
    ``classical_mean_ci``; PPI with lambda 0 is exactly this)."""
    y = np.asarray(y, dtype=float)
    n = y.shape[-1]
    return _interval(y.mean(-1), y.std(-1) / np.sqrt(n), np.zeros(y.shape[:-1]), n, 0, level)


def judge_only_mean(f: np.ndarray, g: np.ndarray, level: float = LEVEL) -> MeanEstimate:
    """The judge alone over every item: mean(f u g) +- z sd/sqrt(n + N); biased when the judge is."""
    pooled = np.concatenate([np.asarray(f, float), np.asarray(g, float)], axis=-1)
    est = classical_mean(pooled, level)
    return MeanEstimate(est.estimate, est.se, est.low, est.high, np.ones(pooled.shape[:-1]), 0, pooled.shape[-1])


def humans_for_width(width: float, sd: float, rho: float, N: int | None = None, level: float = LEVEL) -> int:
    """The fewest human-rated items n whose PPI++ interval (at the optimal lambda, judge and people on
    one scale with correlation ``rho``) is at most ``width`` wide: the interval's variance is
    sd^2 (1 - rho^2 N/(n + N)) / n, which with N unlabelled items -> infinity is sd^2 (1 - rho^2) / n.
    ``N`` None: as many judged items as wanted."""
    z = stats.norm.ppf(0.5 + level / 2)
    half = width / 2

    def fits(n: int) -> bool:
        share = 1.0 if N is None else N / (n + N)
        return z * sd * np.sqrt(max(1 - rho**2 * share, 0.0) / n) <= half

    n = 2
    while not fits(n):
        n = n * 2 if n < 1 << 40 else n + 1
        if n > 1 << 40:
            raise ValueError("no sample size reaches that width")
    low, high = n // 2, n
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    return max(high if not fits(low) else low, 2)
