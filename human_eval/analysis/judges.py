"""A judge (a model rater) measured against the people of the same study, and the estimates
that combine the two. Plain data in, numbers out: the report (``human_eval/report/judges.py``)
reads the database and renders.

- **Agreement on a scale** (Likert, direct assessment), per criterion, on the texts both rated:
  Krippendorff's alpha (ordinal) of the people, and of the people with the judge's argmax as one
  more rater; Pearson's r and Spearman's rho between the judge's expected score and the people's
  mean rating of each text; Kendall's tau between the systems' mean ratings and the systems' mean
  judge scores (the ranking).
- **Agreement on pairs**: the share of people's pairwise judgments that the judge (its argmax, in
  the order the person saw) repeats; the judge's order consistency (a pair judged in both orders
  gives the same text, or a tie both times) and position bias (mean p(A) - p(B) over both
  orders, which a judge without bias puts at 0 since every pair is shown both ways).
- **Length-controlled win rate** (AlpacaEval's GLM, Dubois et al. 2024): per system against
  the baseline, logit P(system wins) = theta + phi tanh(d / sd(d)), d the words of the system's
  text minus the baseline's, fitted by maximum likelihood with ties as half a win; the
  length-controlled win rate is sigmoid(theta), the win rate at equal length. A small ridge
  (``RIDGE``) keeps the fit finite when one side always wins.
- **PPI++** (``ppi``): each system's mean and each difference against the baseline from the
  people's items plus the judge's other items, beside the people-only estimate, with Holm over
  the systems as in the human report.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from maxbench.human_eval.analysis.ppi import classical_mean, ppi_mean
from maxbench.human_eval.analysis.statistics import krippendorff_alpha
from maxbench.multiple_testing import holm

RIDGE = 1e-3


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def correlation(a: Sequence[float], b: Sequence[float]) -> dict:
    """Pearson's r and Spearman's rho over paired values; None where undefined (< 3 points, a constant)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"pearson": None, "spearman": None, "n": len(a)}
    return {
        "pearson": _finite(stats.pearsonr(a, b).statistic),
        "spearman": _finite(stats.spearmanr(a, b).statistic),
        "n": len(a),
    }


def ranking_tau(human: Mapping[str, float], judge: Mapping[str, float]) -> dict:
    systems = sorted(set(human) & set(judge))
    if len(systems) < 2:
        return {"tau": None, "systems": len(systems)}
    tau = stats.kendalltau([human[s] for s in systems], [judge[s] for s in systems]).statistic
    return {"tau": _finite(tau), "systems": len(systems)}


def scale_agreement(
    human: Mapping[tuple, Sequence[int]],
    judge_expected: Mapping[tuple, float],
    judge_argmax: Mapping[tuple, int],
    domain: Sequence[int],
) -> dict:
    """One criterion's agreement. Keys are texts (``(prompt code, system)``); ``human`` holds each
    text's ratings by people, the judge dicts its expected score and argmax label."""
    both = sorted(set(human) & set(judge_expected))
    index = {v: i for i, v in enumerate(domain)}
    people = np.zeros((len(both), len(domain)))
    for row, unit in enumerate(both):
        for v in human[unit]:
            if v in index:
                people[row, index[v]] += 1
    with_judge = people.copy()
    for row, unit in enumerate(both):
        if judge_argmax[unit] in index:
            with_judge[row, index[judge_argmax[unit]]] += 1
    means = [float(np.mean(human[u])) for u in both]
    by_system_h, by_system_j = defaultdict(list), defaultdict(list)
    for unit, m in zip(both, means, strict=True):
        by_system_h[unit[1]].append(m)
        by_system_j[unit[1]].append(judge_expected[unit])
    return {
        "items": len(both),
        "ratings": int(people.sum()),
        "alpha_people": krippendorff_alpha(people, domain, "ordinal") if both else None,
        "alpha_people_and_judge": krippendorff_alpha(with_judge, domain, "ordinal") if both else None,
        **correlation([judge_expected[u] for u in both], means),
        "ranking": ranking_tau(
            {s: float(np.mean(v)) for s, v in by_system_h.items()},
            {s: float(np.mean(v)) for s, v in by_system_j.items()},
        ),
    }


FLIP = {1: 2, 2: 1, 0: 0}


def pair_behaviour(units: Mapping[tuple, tuple[int, Mapping[str, float]]]) -> dict:
    """Order consistency and position bias of a judge's pairwise units: ``units`` maps (a, b) as shown
    (a in place A) to (value, probabilities over "A", "B" and maybe "T")."""
    pairs = [(a, b) for a, b in units if (b, a) in units and a < b]
    consistent = sum(units[(a, b)][0] == FLIP[units[(b, a)][0]] for a, b in pairs)
    bias = [p.get("A", 0.0) - p.get("B", 0.0) for _, p in units.values()]
    first = [v for v, _ in units.values() if v in (1, 2)]
    return {
        "units": len(units),
        "pairs_both_orders": len(pairs),
        "order_consistency": consistent / len(pairs) if pairs else None,
        "position_bias": math.fsum(bias) / len(bias) if bias else None,  # exactly rounded: any order of units
        "share_first": sum(v == 1 for v in first) / len(first) if first else None,
    }


def chance_agreement(matched: Sequence[tuple]) -> float | None:
    """The agreement of two raters who choose independently with their own shares of each answer
    (Cohen's expected agreement): sum over answers of p_people(answer) p_judge(answer), over the
    (people's answer, judge's answer) pairs ``matched``. A judge that always answers "A" gets the
    people's share of "A" here, not 1/choices."""
    if not matched:
        return None
    n = len(matched)
    people, judge = Counter(h for h, _ in matched), Counter(j for _, j in matched)
    return sum(people[a] * judge[a] for a in people) / n**2


def pairwise_agreement(people: Sequence[tuple[tuple, int]], units: Mapping[tuple, tuple[int, Mapping]]) -> dict:
    """The share of people's judgments ((a, b) as shown, value) the judge repeats on the same order,
    and the share two independent raters with these answer shares would reach (``chance_agreement``)."""
    matched = [(v, units[key][0]) for key, v in people if key in units]
    same = sum(h == j for h, j in matched)
    return {
        "judgments": len(matched),
        "agreement": same / len(matched) if matched else None,
        "chance": chance_agreement(matched),
    }


def length_controlled_win_rate(outcome: Sequence[float], length_diff: Sequence[float]) -> dict:
    """Raw and length-controlled win rate of one system against the baseline (module docstring);
    ``outcome`` 1 win, 0.5 tie, 0 loss, ``length_diff`` the system's words minus the baseline's."""
    y = np.asarray(outcome, float)
    d = np.asarray(length_diff, float)
    if len(y) == 0:
        return {"win_rate": None, "lc_win_rate": None, "length_coef": None, "n": 0}
    sd = d.std()
    x = np.column_stack([np.ones_like(d), np.tanh(d / sd) if sd > 0 else np.zeros_like(d)])
    beta = np.zeros(2)
    for _ in range(100):  # Newton's method on the ridge-penalised Bernoulli log-likelihood
        p = 1 / (1 + np.exp(-x @ beta))
        grad = x.T @ (y - p) - RIDGE * beta
        hess = (x * (p * (1 - p))[:, None]).T @ x + RIDGE * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return {
        "win_rate": float(y.mean()),
        "lc_win_rate": float(1 / (1 + np.exp(-beta[0]))),
        "length_coef": float(beta[1]),
        "n": len(y),
    }


def _clipped(entry: dict, low: float, high: float) -> dict:
    """A normal interval's ends moved inside the estimand's range [low, high] (a normal knows no
    range: a win rate near 0 would reach below 0); the estimate and its standard error are kept, and
    ``clipped`` says whether an end moved."""
    lo, hi = max(entry["low"], low), min(entry["high"], high)
    return entry | {"low": lo, "high": hi, "clipped": (lo, hi) != (entry["low"], entry["high"])}


def ppi_table(
    human: Mapping[tuple, float],
    judge: Mapping[tuple, float],
    baseline: str | None,
    bounds: tuple[float, float],
    level: float = 0.95,
) -> dict:
    """Per system: the people-only and the PPI++ mean over texts (keys ``(prompt code, system)``,
    ``human`` the people's mean per text they rated, ``judge`` the judge's score per text it
    judged); per other system: the difference against ``baseline`` over prompts, paired, with
    two-sided p-values Holm-adjusted over the systems (each estimate separately). ``bounds`` is the
    range of a text's score (a Likert scale's ends, 0-1 for a win, -1-1 for a best-worst count): each
    mean's interval is clipped to it, each difference's to ``(low - high, high - low)``."""
    lo, hi = bounds
    systems = sorted({s for _, s in judge} | {s for _, s in human})
    out: dict = {"systems": {}, "differences": {}}
    for s in systems:
        labelled = sorted(u for u in human if u[1] == s and u in judge)
        rest = sorted(u for u in judge if u[1] == s and u not in human)
        if len(labelled) < 2:
            continue
        y = np.array([human[u] for u in labelled])
        f = np.array([judge[u] for u in labelled])
        g = np.array([judge[u] for u in rest])
        out["systems"][s] = {
            "people": _clipped(classical_mean(y, level).at(), lo, hi),
            "ppi": _clipped(ppi_mean(y, f, g, level=level).at(), lo, hi),
        }
    if baseline is None or baseline not in systems:
        return out
    prompts = sorted({c for c, _ in judge} | {c for c, _ in human})
    for s in systems:
        if s == baseline:
            continue
        lab = [c for c in prompts if all((c, t) in human and (c, t) in judge for t in (s, baseline))]
        rest = [
            c
            for c in prompts
            if all((c, t) in judge for t in (s, baseline)) and not all((c, t) in human for t in (s, baseline))
        ]
        if len(lab) < 2:
            continue
        y = np.array([human[(c, s)] - human[(c, baseline)] for c in lab])
        f = np.array([judge[(c, s)] - judge[(c, baseline)] for c in lab])
        g = np.array([judge[(c, s)] - judge[(c, baseline)] for c in rest])
        out["differences"][s] = {
            "people": _clipped(classical_mean(y, level).at(), lo - hi, hi - lo),
            "ppi": _clipped(ppi_mean(y, f, g, level=level).at(), lo - hi, hi - lo),
        }
    for kind in ("people", "ppi"):
        names = sorted(out["differences"])
        adjusted = holm([out["differences"][s][kind]["p"] for s in names])
        for s, p in zip(names, adjusted, strict=True):
            out["differences"][s][kind]["p_holm"] = p
    return out
