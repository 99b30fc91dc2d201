"""How well an automatic metric agrees with human ratings: Kendall's tau-b and Spearman's rho
(``scipy.stats``) between per-text metric values and per-text mean ratings, at item level (one
point per rated text) and at system level (one point per system: its mean metric value and its mean
rating over the rated texts), each with a percentile bootstrap interval that resamples prompts (all
texts of a drawn prompt together, so the texts of one prompt stay paired, at both levels).

It lives in ``core`` because both the explorer (``benchmark/explorer``) and the significance report
(``human_eval/report/render.py``) show it, and those two packages never import each other. The bootstrap
computes tau-b and rho of every resample at once; a test checks them against ``scipy.stats`` too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from maxbench.intervals import ConfidenceInterval

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
LEVEL = 0.95


@dataclass(frozen=True)
class Correlation:
    """Kendall's tau-b and Spearman's rho over ``n`` points with their bootstrap intervals and
    scipy's p-values; None (with ``reason``) where undefined (fewer than 3 points, a constant side)."""

    n: int
    tau: float | None
    tau_ci: ConfidenceInterval | None
    tau_p: float | None
    rho: float | None
    rho_ci: ConfidenceInterval | None
    rho_p: float | None
    reason: str | None = None

    def to_json(self) -> dict:
        return {
            "n": self.n,
            "kendall_tau": self.tau,
            "kendall_ci": None if self.tau_ci is None else list(self.tau_ci),
            "kendall_p": self.tau_p,
            "spearman_rho": self.rho,
            "spearman_ci": None if self.rho_ci is None else list(self.rho_ci),
            "spearman_p": self.rho_p,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class MetricAspect:
    """The agreement of one metric with one rated aspect, at item and at system level."""

    metric: str
    aspect: str
    higher_is_better: bool | None
    item: Correlation
    system: Correlation

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "aspect": self.aspect,
            "higher_is_better": self.higher_is_better,
            "item_level": self.item.to_json(),
            "system_level": self.system.to_json(),
        }


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """tau-b of each row of ``x`` against the same row of ``y`` (shape (B, n)); NaN where a row is constant."""
    x, y = np.atleast_2d(x), np.atleast_2d(y)
    out = np.empty(x.shape[0])
    step = max(1, 2_000_000 // max(1, x.shape[1] ** 2))  # bounded memory for the n x n sign matrices
    for s in range(0, x.shape[0], step):
        dx = np.sign(x[s : s + step, :, None] - x[s : s + step, None, :])
        dy = np.sign(y[s : s + step, :, None] - y[s : s + step, None, :])
        concord = (dx * dy).sum((1, 2)) / 2
        tx, ty = np.abs(dx).sum((1, 2)) / 2, np.abs(dy).sum((1, 2)) / 2
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s : s + step] = concord / np.sqrt(tx * ty)
    return out


def spearman_rho(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho (Pearson's r of average ranks) of each row pair; NaN where a row is constant."""
    from scipy.stats import rankdata

    rx, ry = rankdata(np.atleast_2d(x), axis=1), rankdata(np.atleast_2d(y), axis=1)
    rx -= rx.mean(1, keepdims=True)
    ry -= ry.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(1) / np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))


def _interval(values: np.ndarray, level: float) -> ConfidenceInterval | None:
    v = values[np.isfinite(values)]
    if len(v) < 0.5 * len(values) or len(v) == 0:  # most resamples degenerate: no honest interval
        return None
    a = (1 - level) / 2
    return ConfidenceInterval(float(np.quantile(v, a)), float(np.quantile(v, 1 - a)))


def _by_size(idx: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tau-b and rho of every resample (its drawn texts ``idx[b]``), resamples of one size computed together."""
    tau, rho = np.empty(len(idx)), np.empty(len(idx))
    sizes = np.array([len(i) for i in idx])
    for size in np.unique(sizes):
        rows = np.flatnonzero(sizes == size)
        ii = np.stack([idx[b] for b in rows])
        tau[rows], rho[rows] = kendall_tau_b(x[ii], y[ii]), spearman_rho(x[ii], y[ii])
    return tau, rho


def _point(x: np.ndarray, y: np.ndarray, boot: tuple[np.ndarray, np.ndarray] | None, level: float) -> Correlation:
    """The correlations of the points (x, y); ``boot``: (tau, rho) of each bootstrap resample."""
    from scipy.stats import kendalltau, spearmanr

    n = len(x)
    if n < 3:
        return Correlation(n, None, None, None, None, None, None, f"{n} points (at least 3 needed)")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        side = "metric" if np.ptp(x) == 0 else "rating"
        return Correlation(n, None, None, None, None, None, None, f"the {side} is the same for every point")
    tau = kendalltau(x, y)
    rho = spearmanr(x, y)
    tau_ci = rho_ci = None
    if boot is not None:
        tau_ci, rho_ci = _interval(boot[0], level), _interval(boot[1], level)
    return Correlation(
        n, float(tau.statistic), tau_ci, float(tau.pvalue), float(rho.statistic), rho_ci, float(rho.pvalue)
    )


def correlate(
    units: Sequence[tuple[str, str, float, float]],
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = LEVEL,
) -> tuple[Correlation, Correlation]:
    """(item level, system level) correlations of ``units``: (prompt, system, metric value, mean
    rating) for each rated text whose metric value is finite. The bootstrap draws prompts with
    replacement ``n_resamples`` times (seeded) and takes every text of each drawn prompt."""
    units = [u for u in units if u[2] is not None and math.isfinite(u[2]) and math.isfinite(u[3])]
    prompts = sorted({u[0] for u in units})
    systems = sorted({u[1] for u in units})
    x = np.array([u[2] for u in units], dtype=float)
    y = np.array([u[3] for u in units], dtype=float)
    p_index = {p: i for i, p in enumerate(prompts)}
    s_index = np.array([systems.index(u[1]) for u in units], dtype=int)
    of_prompt = np.array([p_index[u[0]] for u in units], dtype=int)
    # counts[b, j]: how often resample b drew prompt j; a text's weight is its prompt's count
    counts = None
    if n_resamples > 0 and prompts:
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, len(prompts), size=(n_resamples, len(prompts)))
        counts = np.zeros((n_resamples, len(prompts)), dtype=int)
        np.add.at(counts, (np.arange(n_resamples)[:, None], draws), 1)

    item_boot = None
    if counts is not None and len(units) >= 3:
        w = counts[:, of_prompt]  # (B, units): how often each text is drawn
        idx = [np.repeat(np.arange(len(units)), w[b]) for b in range(n_resamples)]
        item_boot = _by_size(idx, x, y)
    item = _point(x, y, item_boot, level)

    sums = np.zeros((2, len(systems)))
    n_of = np.bincount(s_index, minlength=len(systems)).astype(float)
    np.add.at(sums[0], s_index, x)
    np.add.at(sums[1], s_index, y)
    sx, sy = sums[0] / np.maximum(n_of, 1), sums[1] / np.maximum(n_of, 1)
    system_boot = None
    if counts is not None and len(systems) >= 3:
        w = counts[:, of_prompt].astype(float)  # (B, units)
        onehot = np.zeros((len(units), len(systems)))
        onehot[np.arange(len(units)), s_index] = 1
        nw = w @ onehot
        with np.errstate(invalid="ignore", divide="ignore"):
            bx, by = (w * x) @ onehot / nw, (w * y) @ onehot / nw  # (B, systems): per-system means
        system_boot = (kendall_tau_b(bx, by), spearman_rho(bx, by))
    system = _point(sx, sy, system_boot, level)
    return item, system


def metric_rating_table(
    metrics: dict[str, dict[tuple[str, str], float]],
    ratings: dict[str, dict[tuple[str, str], float]],
    higher_is_better: dict[str, bool | None] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[MetricAspect]:
    """Every metric against every aspect. ``metrics[name][(prompt, system)]`` is the metric's value
    for that text (or for that prompt's texts of that system), ``ratings[aspect][(prompt, system)]``
    the text's mean rating; texts a side lacks are left out."""
    out = []
    for metric, values in metrics.items():
        for aspect, rated in ratings.items():
            units = [(k[0], k[1], values[k], v) for k, v in sorted(rated.items()) if values.get(k) is not None]
            item, system = correlate(units, n_resamples, seed)
            out.append(MetricAspect(metric, aspect, (higher_is_better or {}).get(metric), item, system))
    return out


def per_prompt_metrics(systems: dict) -> tuple[dict, dict]:
    """From the ``systems`` table of a ``scores.json`` (``{system: {"scores": {name: {"per_prompt": ...}}}}``):
    ``({score: {(prompt, system): value}}, {score: higher_is_better})`` for every score with per-prompt values."""
    metrics: dict = {}
    hib: dict = {}
    for system, entry in systems.items():
        for name, e in (entry.get("scores") or {}).items():
            if e.get("per_prompt") and len(e["per_prompt"]) > 1:
                metrics.setdefault(name, {}).update({(pid, system): v for pid, v in e["per_prompt"].items()})
                hib[name] = e.get("higher_is_better")
    return metrics, hib


def mean_ratings(rows: Iterable[tuple[str, str, str, float]]) -> dict[str, dict[tuple[str, str], float]]:
    """``{aspect: {(prompt, system): mean rating}}`` from (prompt, system, aspect, value) rows."""
    acc: dict[str, dict[tuple[str, str], list[float]]] = {}
    for prompt, system, aspect, value in rows:
        if value is not None:
            acc.setdefault(aspect, {}).setdefault((prompt, system), []).append(float(value))
    return {a: {k: sum(v) / len(v) for k, v in d.items()} for a, d in acc.items()}
