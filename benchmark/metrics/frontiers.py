"""The statistics of frontiers: systems compared along their own sweeps, not at one point each.

A sweep's points, in the knob's order, are a curve in a plane of two scores: ``x`` the matching
score (a diversity score by default), ``y`` the quality score. Everything here works on the curves'
per-prompt values, so that one bootstrap resample of prompts moves every point of every curve at
once (the same prompt indices for all of them, as ``stats.paired_test`` resamples two systems):

- **Matched comparison.** Each curve's quality at a value ``x*`` of the matching score, by linear
  interpolation between adjacent points in the knob's order: on a segment ``k`` whose ends bracket
  ``x*`` (``x_k <= x* <= x_k+1`` or the reverse), ``y = y_k + (x* - x_k) / (x_k+1 - x_k) * (y_k+1 - y_k)``.
  A curve that is not monotone in ``x`` may bracket ``x*`` on several segments: each is reported, and
  the difference is given for each pair of segments. A curve whose points do not reach ``x*`` has no
  value there: the comparison says "no overlap" and never extrapolates. The interval is the
  percentile interval over resamples of prompts; a resample evaluates the same segment's line at
  ``x*`` (the estimator is the line through the two points, a smooth function of their means, so the
  percentile bootstrap applies to it as to any smooth statistic).
  Each difference carries the two-sided bootstrap p-value of "no difference" that its percentile
  interval inverts (twice the smaller share of resamples on either side of 0); ``adjust`` gives a
  family of comparisons (a plane's) Holm's step-down adjusted p-values. The intervals stay
  per comparison: the adjusted p says which differences hold for the family.
- **Dominance.** On a grid over the shared range of ``x``, the advantage of curve A over curve B: the
  difference of their best interpolated quality at each ``x`` (best by the quality score's goal,
  among the segments bracketing that ``x``), with pointwise intervals. Where the interval lies above
  0, A dominates; below 0, B; where the estimate changes sign, the curves cross, and the stretch of
  ``x`` around the crossing where the interval holds 0 bounds where the crossing is.
- **Tuning budget.** The expected best quality found with ``N`` points drawn at random, without
  replacement, from a sweep of ``K`` points, for ``N = 1..K`` (closed form): with the points' values
  sorted from worst to best by the goal, ``v_(1), ..., v_(K)``, the best of ``N`` draws is ``v_(i)`` with
  probability ``C(i-1, N-1) / C(K, N)``, so ``E[best of N] = sum_i v_(i) C(i-1, N-1) / C(K, N)``.
  Its interval is the percentile interval of the same closed form applied to each resample's point
  values, drawn as for the other statistics (one draw of prompt weights for every point of every
  sweep), the points re-sorted by the goal within each resample: the ranking is part of what is
  uncertain. Each resample's value is a weighted mean of that resample's point values (the weights
  sum to 1), so the interval stays on the score's own scale. A closest-to-human goal ranks by the
  distance to the human value, held fixed (as in dominance).

Resampling a score through its per-prompt values is exact only where the score is the mean of its
per-prompt values (a mean of per-text values with one text per prompt, or with each prompt's texts
equally many: BLEU-n, Self-BLEU with its pool fixed, per-text distinct-n, ROUGE, METEOR). A corpus-level
score (MAUVE, corpus distinct-n, perplexity over all tokens) has per-prompt values that do not add up
to it, or none: its points are drawn instead from a normal distribution with the standard error that
its own stored interval implies (``(high - low) / (2 z)``), clipped to the score's declared range (a
normal knows none: MAUVE near 1 would be drawn above 1), each point independently of the others.
That ignores the correlation between points scored on the same prompts, and says so in the method.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from math import comb

import numpy as np
import scipy.stats

from maxbench.intervals import ConfidenceInterval
from maxbench.multiple_testing import holm

#: a quality score's goal: higher is better, lower is better, or closest to the human value
GOALS = ("higher", "lower", "closest")

JOINT_METHOD = "percentile bootstrap over prompts, resampled jointly for every point of both curves"
NORMAL_METHOD = (
    "parametric bootstrap: each point drawn from a normal with the standard error its own interval implies, "
    "clipped to the score's range, points independent (a score without per-prompt values that add up to it)"
)
#: points on the shared range of x where dominance is evaluated
GRID = 41


@dataclass(frozen=True)
class Samples:
    """One score at each point of one curve, as a resampler sees it.

    ``per_prompt`` is (P, K): each point's value on each prompt (NaN where undefined), columns in the
    knob's order, rows in the run's one prompt order; None where the score's per-prompt values do not
    add up to it. Then ``value`` (K,) and ``se`` (K,) (the standard error its interval implies; NaN for a
    point without an interval, which leaves every interval that depends on it undefined) are used.
    """

    value: np.ndarray
    per_prompt: np.ndarray | None = None
    se: np.ndarray | None = None
    #: the score's range: the normal draws are clipped to it (a normal knows no range; per-prompt
    #: resamples are weighted means of values in range, so they stay there by themselves)
    bounds: tuple[float, float] = (-math.inf, math.inf)

    def draw(self, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The score at each point under each row of prompt weights (R, P): (R, K)."""
        if self.per_prompt is not None:
            defined = np.isfinite(self.per_prompt)
            vals = np.where(defined, self.per_prompt, 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                return (weights @ vals) / (weights @ defined.astype(np.float64))
        # a point without an interval has no spread to draw from: its draws are NaN, and so is every
        # interval that depends on it (never a point interval that looks exact)
        se = np.full_like(self.value, np.nan) if self.se is None else self.se
        draws = self.value[None, :] + se[None, :] * rng.standard_normal((weights.shape[0], self.value.size))
        return np.clip(draws, *self.bounds)

    @property
    def joint(self) -> bool:
        return self.per_prompt is not None


def samples_from_per_prompt(per_prompt: np.ndarray) -> Samples:
    """Samples of a score that is the mean of its per-prompt values (columns: points)."""
    per_prompt = np.asarray(per_prompt, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        value = np.nanmean(np.where(np.isfinite(per_prompt), per_prompt, np.nan), axis=0)
    return Samples(value, per_prompt)


def se_from_interval(low: float | None, high: float | None, level: float) -> float:
    """The standard error a normal interval of this width at ``level`` would have (NaN without one)."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return math.nan
    return (high - low) / (2 * float(scipy.stats.norm.ppf(0.5 + level / 2)))


@dataclass(frozen=True)
class Curve:
    """A sweep drawn in a plane: ``x`` the matching score, ``y`` the quality score, in the knob's order."""

    name: str
    knob: str
    values: tuple
    systems: tuple
    x: Samples
    y: Samples

    @property
    def n_points(self) -> int:
        return len(self.systems)


def weights(n_prompts: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(R, P) counts of each prompt in each resample (prompts drawn with replacement)."""
    idx = rng.integers(0, n_prompts, size=(n_resamples, n_prompts))
    flat = (np.arange(n_resamples)[:, None] * n_prompts + idx).ravel()
    return np.bincount(flat, minlength=n_resamples * n_prompts).reshape(n_resamples, n_prompts).astype(np.float64)


def bracketing(x: np.ndarray, target: float) -> list[int]:
    """The segments ``k`` (between points k and k+1) whose ends bracket ``target``; a target equal to
    a point's value is reported once, on the first segment that ends there."""
    out = []
    for k in range(len(x) - 1):
        a, b = x[k], x[k + 1]
        if not (math.isfinite(a) and math.isfinite(b)) or a == b:
            continue
        if min(a, b) <= target <= max(a, b):
            if out and out[-1] == k - 1 and x[k] == target:
                continue  # the point shared with the previous segment, already reported
            out.append(k)
    return out


def on_segment(x: np.ndarray, y: np.ndarray, k: int, target: float) -> np.ndarray:
    """The line through points k and k+1 at ``target`` (x, y: (..., K)); NaN where the points share x."""
    x0, x1, y0, y1 = x[..., k], x[..., k + 1], y[..., k], y[..., k + 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (target - x0) / (x1 - x0)
        return np.where(x1 != x0, y0 + t * (y1 - y0), np.nan)


def percentile(dist: np.ndarray, level: float) -> ConfidenceInterval | None:
    """Percentile interval of a bootstrap distribution (its finite values) along axis 0."""
    dist = np.asarray(dist, dtype=np.float64)
    alpha = (1 - level) / 2
    finite = dist[np.isfinite(dist)]
    if finite.size < 2:
        return None
    return ConfidenceInterval(float(np.quantile(finite, alpha)), float(np.quantile(finite, 1 - alpha)))


def bootstrap_p(dist: np.ndarray) -> float | None:
    """The two-sided bootstrap p-value of "the difference is 0": twice the smaller share of resamples
    on either side of 0, each share counted as (k + 1) / (R + 1) so that it is never 0, at most 1.
    It is the smallest level 1 - a at which the percentile interval of the same resamples excludes 0
    (the test the interval inverts). None where fewer than two resamples are finite."""
    dist = np.asarray(dist, dtype=np.float64)
    finite = dist[np.isfinite(dist)]
    if finite.size < 2:
        return None
    side = min(int(np.count_nonzero(finite <= 0)), int(np.count_nonzero(finite >= 0)))
    return min(1.0, 2 * (side + 1) / (finite.size + 1))


def adjust(comparisons: list[Matched]) -> list[Matched]:
    """The comparisons with every difference's ``holm_p``: Holm's step-down adjustment over all of
    their differences together (one family: each pair of bracketing segments of each comparison is
    one test), which bounds the chance of any false "differs" among them at the level used."""
    flat = [d.p_value for m in comparisons for d in m.differences]
    adjusted = iter(holm(flat))
    return [
        replace(m, differences=tuple(replace(d, holm_p=next(adjusted)) for d in m.differences)) for m in comparisons
    ]


@dataclass(frozen=True)
class SegmentValue:
    """A curve's quality at the matched value on one segment: between ``knob_values`` (its ends)."""

    segment: int
    knob_values: tuple
    estimate: float
    interval: ConfidenceInterval | None


@dataclass(frozen=True)
class Difference:
    """Curve A's quality minus curve B's at the matched value, on A's segment ``a`` and B's ``b``:
    ``p_value`` tests a difference of 0 (``bootstrap_p``), ``holm_p`` is it adjusted over a family of
    comparisons (``adjust``; None until adjusted)."""

    a: int
    b: int
    estimate: float
    interval: ConfidenceInterval | None
    p_value: float | None = None
    holm_p: float | None = None


@dataclass(frozen=True)
class Matched:
    """A matched comparison of curve ``a`` with curve ``b`` at ``target`` of the matching score."""

    a: str
    b: str
    target: float
    a_segments: tuple[SegmentValue, ...]
    b_segments: tuple[SegmentValue, ...]
    differences: tuple[Difference, ...]
    method: str
    level: float
    n_resamples: int

    @property
    def overlap(self) -> bool:
        return bool(self.a_segments and self.b_segments)


def _method(a: Curve, b: Curve) -> str:
    """How the resamples were drawn: jointly over prompts, from each point's own interval, or each
    score its own way (the matching score and the quality score may differ)."""
    x, y = a.x.joint and b.x.joint, a.y.joint and b.y.joint
    if x and y:
        return JOINT_METHOD
    if not (x or y):
        return NORMAL_METHOD
    return "; ".join(
        f"{name}: {JOINT_METHOD if joint else NORMAL_METHOD}"
        for name, joint in (("the matching score", x), ("the quality score", y))
    )


def _draws(curves, n_resamples, seed):
    """Resampled (x, y) of each curve, all from one draw of prompt weights: [(R, K), (R, K)] per curve."""
    rng = np.random.default_rng(seed)
    n_prompts = next((s.per_prompt.shape[0] for c in curves for s in (c.x, c.y) if s.per_prompt is not None), 1)
    w = weights(n_prompts, n_resamples, rng)
    return [(c.x.draw(w, rng), c.y.draw(w, rng)) for c in curves]


def matched(a: Curve, b: Curve, target: float, n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> Matched:
    """Compare curves ``a`` and ``b`` at ``target`` of the matching score (module docstring)."""
    (ax, ay), (bx, by) = _draws([a, b], n_resamples, seed)
    method = _method(a, b)

    def segments(curve, rx, ry):
        out, dists = [], {}
        for k in bracketing(curve.x.value, target):
            est = float(on_segment(curve.x.value, curve.y.value, k, target))
            dist = on_segment(rx, ry, k, target)
            dists[k] = dist
            out.append(SegmentValue(k, (curve.values[k], curve.values[k + 1]), est, percentile(dist, level)))
        return tuple(out), dists

    a_seg, a_dist = segments(a, ax, ay)
    b_seg, b_dist = segments(b, bx, by)
    diffs = tuple(
        Difference(sa.segment, sb.segment, sa.estimate - sb.estimate, percentile(dist, level), bootstrap_p(dist))
        for sa in a_seg
        for sb in b_seg
        for dist in (a_dist[sa.segment] - b_dist[sb.segment],)
    )
    return Matched(a.name, b.name, target, a_seg, b_seg, diffs, method, level, n_resamples)


def advantage(y: np.ndarray, goal: str, human: float | None = None) -> np.ndarray:
    """Quality on a scale where more is better: ``y``, ``-y``, or ``-|y - human|`` by the goal."""
    if goal == "higher":
        return y
    if goal == "lower":
        return -y
    if goal == "closest":
        if human is None or not math.isfinite(human):
            raise ValueError("a closest-to-human goal needs the human value")
        return -np.abs(y - human)
    raise ValueError(f"unknown goal {goal!r}; expected one of {', '.join(GOALS)}")


def _best_on_curve(x, y, segs, grid_x, goal, human):
    """(…, G) best advantage at each grid x among each grid point's segments (NaN where none)."""
    out = np.full(x.shape[:-1] + (len(grid_x),), np.nan)
    for g, (gx, ks) in enumerate(zip(grid_x, segs)):
        if ks:
            vals = np.stack([advantage(on_segment(x, y, k, gx), goal, human) for k in ks], axis=-1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a resample where every segment is degenerate: NaN
                out[..., g] = np.nanmax(vals, axis=-1)
    return out


@dataclass(frozen=True)
class Stretch:
    """A stretch ``[low, high]`` of the matching score where one verdict holds: ``a``, ``b`` (that
    curve is better, its interval excludes 0) or ``neither``."""

    low: float
    high: float
    better: str


@dataclass(frozen=True)
class Crossing:
    """Where the curves cross: the estimate of x, and the stretch around it where the interval holds 0."""

    x: float
    interval: ConfidenceInterval


@dataclass(frozen=True)
class Dominance:
    """Curve ``a`` against curve ``b`` over their shared range of the matching score."""

    a: str
    b: str
    shared: tuple[float, float] | None
    grid: tuple[float, ...]
    advantage: tuple[float, ...]
    intervals: tuple[ConfidenceInterval | None, ...]
    stretches: tuple[Stretch, ...]
    crossings: tuple[Crossing, ...]
    method: str

    @property
    def verdict(self) -> str:
        if self.shared is None:
            return "no overlap"
        kinds = {s.better for s in self.stretches}
        if kinds == {"a"}:
            return f"{self.a} dominates"
        if kinds == {"b"}:
            return f"{self.b} dominates"
        if self.crossings:
            return "the curves cross"
        return "neither dominates throughout"


def dominance(
    a: Curve,
    b: Curve,
    goal: str,
    human: float | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    grid: int = GRID,
) -> Dominance:
    """Where curve ``a`` lies above curve ``b`` (better by ``goal``) over the shared range (module docstring)."""
    method = _method(a, b)
    xa, xb = a.x.value[np.isfinite(a.x.value)], b.x.value[np.isfinite(b.x.value)]
    if not (xa.size and xb.size):
        return Dominance(a.name, b.name, None, (), (), (), (), (), method)
    low, high = max(xa.min(), xb.min()), min(xa.max(), xb.max())
    if low > high:
        return Dominance(a.name, b.name, None, (), (), (), (), (), method)
    gx = np.linspace(low, high, grid) if high > low else np.array([low])
    sa = [bracketing(a.x.value, v) for v in gx]
    sb = [bracketing(b.x.value, v) for v in gx]
    (ax, ay), (bx, by) = _draws([a, b], n_resamples, seed)
    est = _best_on_curve(a.x.value, a.y.value, sa, gx, goal, human) - _best_on_curve(
        b.x.value, b.y.value, sb, gx, goal, human
    )
    dist = _best_on_curve(ax, ay, sa, gx, goal, human) - _best_on_curve(bx, by, sb, gx, goal, human)
    cis = [percentile(dist[:, g], level) for g in range(len(gx))]

    def verdict(ci):
        if ci is None or ci.low <= 0 <= ci.high:
            return "neither"
        return "a" if ci.low > 0 else "b"

    stretches: list[Stretch] = []
    for g, ci in enumerate(cis):
        v = verdict(ci)
        if stretches and stretches[-1].better == v:
            stretches[-1] = Stretch(stretches[-1].low, float(gx[g]), v)
        else:
            stretches.append(Stretch(float(gx[g]), float(gx[g]), v))
    crossings = []
    for g in range(len(gx) - 1):
        e0, e1 = est[g], est[g + 1]
        if np.isfinite(e0) and np.isfinite(e1) and (e0 == 0 or e0 * e1 < 0):
            cx = float(gx[g] if e0 == 0 else gx[g] + e0 / (e0 - e1) * (gx[g + 1] - gx[g]))
            lo, hi = g, g + 1
            while lo > 0 and verdict(cis[lo - 1]) == "neither" and verdict(cis[lo]) == "neither":
                lo -= 1
            while hi < len(gx) - 1 and verdict(cis[hi + 1]) == "neither" and verdict(cis[hi]) == "neither":
                hi += 1
            crossings.append(Crossing(cx, ConfidenceInterval(float(gx[lo]), float(gx[hi]))))
    return Dominance(
        a.name,
        b.name,
        (float(low), float(high)),
        tuple(float(v) for v in gx),
        tuple(float(v) for v in est),
        tuple(cis),
        tuple(stretches),
        tuple(crossings),
        method,
    )


def _best_of_n_weights(k: int) -> np.ndarray:
    """(K, K): row ``N-1`` holds the probability that the ``i``-th worst of K points is the best of N
    drawn without replacement, ``C(i-1, N-1) / C(K, N)`` (each row sums to 1)."""
    return np.array(
        [[comb(i - 1, n - 1) / comb(k, n) for i in range(1, k + 1)] for n in range(1, k + 1)], dtype=np.float64
    )


def expected_best(values, goal: str, human: float | None = None) -> list[float]:
    """E[best of N points drawn without replacement] for N = 1..K, on the score's own scale
    (module docstring's closed form); undefined values (NaN, None) are left out of the sweep."""
    vals = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    k = vals.size
    order = np.argsort(advantage(vals, goal, human), kind="stable")
    ranked = vals[order]  # worst to best
    return [float(v) for v in _best_of_n_weights(k) @ ranked]


def expected_best_draws(draws: np.ndarray, goal: str, human: float | None = None) -> np.ndarray:
    """The closed form of ``expected_best`` on each row of ``draws`` (R, K), each row's points ranked by
    the goal on their own values: (R, K), column ``N-1`` the expected best of N; a row with an
    undefined point is NaN throughout (it has no ranking)."""
    draws = np.asarray(draws, dtype=np.float64)
    r, k = draws.shape
    if k == 0:
        return np.empty((r, 0))
    undefined = ~np.isfinite(draws).all(axis=1)
    safe = np.where(np.isfinite(draws), draws, 0.0)
    order = np.argsort(advantage(safe, goal, human), axis=1, kind="stable")
    ranked = np.take_along_axis(safe, order, axis=1)  # each row worst to best
    out = ranked @ _best_of_n_weights(k).T
    out[undefined] = np.nan
    return out


@dataclass(frozen=True)
class Budget:
    """A sweep's tuning-budget curve: the expected best quality of N of its defined points, N = 1..K,
    each with its interval (module docstring), and how the resamples were drawn."""

    name: str
    estimates: tuple[float, ...]
    intervals: tuple[ConfidenceInterval | None, ...]
    method: str
    level: float


def budgets(
    curves: list[Curve],
    goal: str,
    human: float | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> list[Budget]:
    """Each curve's tuning-budget curve with intervals, every curve's points resampled on one draw of
    prompts; a point undefined in the estimate (NaN) is left out of its sweep, as in ``expected_best``."""
    draws = _draws(curves, n_resamples, seed) if curves else []
    out = []
    for c, (_, ry) in zip(curves, draws):
        keep = np.isfinite(c.y.value)
        est = expected_best(c.y.value.tolist(), goal, human)
        dist = expected_best_draws(ry[:, keep], goal, human)
        out.append(
            Budget(
                c.name,
                tuple(est),
                tuple(percentile(dist[:, n], level) for n in range(dist.shape[1])),
                JOINT_METHOD if c.y.joint else NORMAL_METHOD,
                level,
            )
        )
    return out
