"""Verdict rules of a reproduction, and the combination of per-fold differences into one interval.

Absolute numbers of GPT-2/OPT-class models cannot be held against SmolLM2's or Gemma's, so a claim
is judged by the sign of maxbench's paired difference (method - baseline; method / baseline for a
ratio claim) and its 95% interval:

- **reproduced**: the interval lies wholly on the paper's side of the null (0, or 1 for a ratio),
  and, where the paper's effect is comparable (``Claim.comparable``), it also contains that effect;
- **not reproduced**: the interval lies wholly on the other side of the null, or, where the effect is
  comparable, it lies on the paper's side but excludes the paper's effect;
- **not comparable**: no interval (the claim cannot run offline, a score is undefined, too few
  folds or prompts), or an interval that contains the null: too wide to decide either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import norm

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_COMPARABLE = "not comparable"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    why: str


def decide(
    direction: str,
    estimate: float | None,
    low: float | None,
    high: float | None,
    null: float = 0.0,
    paper_effect: float | None = None,
    comparable: bool = False,
    runnable: bool = True,
    reason: str = "",
) -> Verdict:
    """The verdict for one claim row (see the module docstring for the rules)."""
    if not runnable:
        return Verdict(NOT_COMPARABLE, reason or "the protocol cannot run offline")
    if estimate is None or low is None or high is None or not all(map(math.isfinite, (estimate, low, high))):
        return Verdict(NOT_COMPARABLE, reason or "no interval: the score is undefined or too few folds/prompts")
    sign = 1 if direction == "higher" else -1
    paper_side = sign * (low - null) > 0 and sign * (high - null) > 0
    other_side = sign * (low - null) < 0 and sign * (high - null) < 0
    if other_side:
        return Verdict(
            NOT_REPRODUCED, f"the interval lies {'below' if sign > 0 else 'above'} {null:g}: the opposite sign"
        )
    if not paper_side:
        return Verdict(NOT_COMPARABLE, f"the interval contains {null:g}: too wide to decide")
    if comparable and paper_effect is not None and not low <= paper_effect <= high:
        return Verdict(NOT_REPRODUCED, f"same sign, but the interval excludes the paper's effect {paper_effect:g}")
    return Verdict(
        REPRODUCED,
        "the interval lies on the paper's side"
        + (f" and contains its effect {paper_effect:g}" if comparable and paper_effect is not None else ""),
    )


@dataclass(frozen=True)
class Combined:
    """One difference over folds: the mean, its interval, and the folds' spread."""

    estimate: float | None
    low: float | None
    high: float | None
    n_folds: int
    method: str


def combine_folds(diffs: list[tuple[float | None, float | None, float | None]], level: float = 0.95) -> Combined:
    """Per-fold (difference, ci_low, ci_high) -> the mean difference over folds with an interval.

    Folds hold disjoint prompts, so their estimates are independent: each fold's standard error is
    its interval's width / (2 z), and the mean's is sqrt(sum se_k^2) / K (a normal interval). One fold
    keeps its own interval. A fold whose difference or interval is missing makes the result undefined.
    """
    z = norm.ppf(0.5 + level / 2)
    if not diffs:
        return Combined(None, None, None, 0, "no folds")
    if any(d is None or lo is None or hi is None for d, lo, hi in diffs):
        return Combined(None, None, None, len(diffs), "a fold has no difference or interval")
    if len(diffs) == 1:
        d, lo, hi = diffs[0]
        return Combined(d, lo, hi, 1, "the fold's paired interval")
    k = len(diffs)
    mean = sum(d for d, _, _ in diffs) / k
    se = math.sqrt(sum(((hi - lo) / (2 * z)) ** 2 for _, lo, hi in diffs)) / k
    return Combined(
        mean, mean - z * se, mean + z * se, k, f"mean over {k} folds, normal interval, se = sqrt(sum se_k^2)/K"
    )


def ratio_interval(ratios: list[float], level: float = 0.95) -> Combined:
    """A ratio measured once per fold (e.g. time per token) -> its mean and a t interval over folds
    (on the log scale, so the interval stays positive); fewer than two folds give no interval."""
    from scipy.stats import t

    good = [r for r in ratios if r is not None and r > 0 and math.isfinite(r)]
    if len(good) < 2:
        return Combined(good[0] if good else None, None, None, len(good), "fewer than two folds: no interval")
    logs = [math.log(r) for r in good]
    k = len(logs)
    m = sum(logs) / k
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (k - 1))
    h = t.ppf(0.5 + level / 2, k - 1) * sd / math.sqrt(k)
    return Combined(
        math.exp(m), math.exp(m - h), math.exp(m + h), k, f"geometric mean over {k} folds, t interval on log scale"
    )
