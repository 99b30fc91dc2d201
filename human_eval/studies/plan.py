"""``maxbench study plan``: how many items and raters a study needs, by simulating it with the
report's own tests.

The simulated study compares ``systems`` systems on the same items (the paired design), every
annotator judging every item (``raters`` annotators, as ``study create`` does when
``--annotators`` is left at K). Each text has a latent quality

    item effect (sd ``ITEM_SD``) + system effect + annotator bias (sd ``ANNOTATOR_SD``) + noise (sd 1),

the reference system at 0 and every other one ``effect`` within-system standard deviations
(``TOTAL_SD``) better: ``effect`` is Cohen's d of one rating. From the latent quality:

- likert: a 1-5 rating (thresholds at -1.5, -0.5, 0.5, 1.5); the report's paired test,
  ``statistics.wilcoxon_paired`` on per-item means, Holm over the comparisons with the reference;
- direct: a 0-100 slider value (50 + 15 x quality, rounded and clipped); ``direct.z_scores`` per
  annotator, then the same Wilcoxon and Holm (what ``maxbench report`` does for a direct study);
- pairwise: every pair of systems on every item, the better latent text preferred (item effect and
  annotator bias cancel: P(prefer) = Phi(difference / sqrt 2), no ties); ``pairwise.sign_tests``
  (exact sign test per pair, Holm over the pairs);
- best-worst: tuples of up to 4 systems per item (all of them with 4 or fewer), best and worst
  the highest and lowest latent quality of the tuple; ``best_worst.counting_scores`` with
  bootstrap intervals, detected when the reference's and the other's 95% intervals do not overlap
  (the report gives intervals, not a test: a conservative criterion).

Power is the share of ``n_sim`` simulated studies in which the first non-reference system differs
significantly from the reference (Holm-adjusted p < alpha). Each (judgment, items, raters) cell has
its own seeded generator, so the same command prints the same table. With ``pilot`` ratings (a
long-format export), ``effect`` is the smallest non-zero Cohen's d between the reference and another
system in the pilot's first aspect.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from maxbench.errors import MaxbenchError
from maxbench.human_eval.analysis.best_worst import TUPLE_SIZE, BestWorst, counting_scores
from maxbench.human_eval.analysis.pairwise import PairJudgment, sign_tests
from maxbench.human_eval.analysis.ratings import Ratings
from maxbench.human_eval.analysis.statistics import wilcoxon_paired
from maxbench.multiple_testing import holm

JUDGMENTS = ("likert", "direct", "pairwise", "best-worst")
ITEMS = (15, 20, 30, 40, 50, 75, 100, 150, 200, 300)
# Below 14 items the report's Wilcoxon on tied means is an exhaustive permutation test (seconds a
# call): too slow to simulate hundreds of times, so the planner starts at MIN_ITEMS.
MIN_ITEMS = 14
RATERS = (3,)
N_SIM = 100
ITEM_SD = 1.0
ANNOTATOR_SD = 0.5
TOTAL_SD = math.sqrt(1 + ITEM_SD**2 + ANNOTATOR_SD**2)
LIKERT_CUTS = np.array([-1.5, -0.5, 0.5, 1.5])
BW_BOOT = 100


def preference(effect: float) -> float:
    """P(a system ``effect`` better is preferred to the reference) in the simulated pairwise study."""
    from scipy.stats import norm

    return float(norm.cdf(effect * TOTAL_SD / math.sqrt(2)))


def _latent(rng: np.random.Generator, effect: float, items: int, raters: int, systems: int) -> np.ndarray:
    """(items, systems, raters) latent qualities."""
    shift = np.r_[0.0, np.full(systems - 1, effect * TOTAL_SD)]
    return (
        rng.normal(0, ITEM_SD, (items, 1, 1))
        + shift[None, :, None]
        + rng.normal(0, ANNOTATOR_SD, (1, 1, raters))
        + rng.normal(0, 1, (items, systems, raters))
    )


def _wilcoxon_holm(item_means: np.ndarray, alpha: float) -> bool:
    """The report's paired test of each system against the reference (system 0), Holm; system 1 detected?"""
    p = [wilcoxon_paired(item_means[:, 0], item_means[:, s], "two-sided").pvalue for s in range(1, item_means.shape[1])]
    adjusted = holm(p)
    return adjusted[0] is not None and adjusted[0] < alpha


def standardise(values: np.ndarray) -> np.ndarray:
    """Per-annotator z-scores of (items, systems, raters) values: ``direct.z_scores`` on arrays (the
    tests check they agree); an annotator with one value throughout is left out (NaN), as there."""
    flat = values.reshape(-1, values.shape[2])
    sd = flat.std(axis=0, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (values - flat.mean(axis=0)) / np.where(sd > 0, sd, np.nan)
    return z


def _one_study(judgment: str, rng: np.random.Generator, effect: float, items: int, raters: int, systems: int, alpha):
    names = [f"s{s}" for s in range(systems)]
    if judgment == "likert":
        values = 1 + np.searchsorted(LIKERT_CUTS, _latent(rng, effect, items, raters, systems))
        return _wilcoxon_holm(values.mean(axis=2), alpha)
    if judgment == "direct":
        values = np.clip(np.round(50 + 15 * _latent(rng, effect, items, raters, systems)), 0, 100)
        return _wilcoxon_holm(standardise(values).mean(axis=2), alpha)
    quality = _latent(rng, effect, items, raters, systems)
    if judgment == "pairwise":
        judgments = [
            PairJudgment(
                f"i{i}", f"a{a}", names[x], names[y], names[x] if quality[i, x, a] > quality[i, y, a] else names[y]
            )
            for i in range(items)
            for x, y in itertools.combinations(range(systems), 2)
            for a in range(raters)
        ]
        test = sign_tests(names, judgments)[0]  # (s0, s1): the reference and the first other system
        return test.pvalue_holm is not None and test.pvalue_holm < alpha
    size = min(TUPLE_SIZE, systems)
    judgments = []
    for i in range(items):
        shown = (
            [0, 1, *rng.choice(np.arange(2, systems), size - 2, replace=False)] if systems > size else range(systems)
        )
        shown = [int(s) for s in shown]
        for a in range(raters):
            q = [quality[i, s, a] for s in shown]
            best, worst = shown[int(np.argmax(q))], shown[int(np.argmin(q))]
            judgments.append(BestWorst(f"i{i}", f"a{a}", tuple(names[s] for s in shown), names[best], names[worst]))
    seed = int(rng.integers(2**31))
    ref, other = counting_scores(names, judgments, BW_BOOT, seed)[:2]
    if ref.ci is None or other.ci is None:
        return False
    return ref.ci.high < other.ci.low or other.ci.high < ref.ci.low


def simulate_power(
    judgment: str,
    effect: float,
    items: int,
    raters: int,
    systems: int = 2,
    alpha: float = 0.05,
    n_sim: int = N_SIM,
    seed: int = 0,
) -> float:
    """Share of ``n_sim`` simulated studies in which the report's test detects the effect."""
    if judgment not in JUDGMENTS:
        raise MaxbenchError(f"unknown judgment type {judgment!r}: use one of {', '.join(JUDGMENTS)}")
    rng = np.random.default_rng([seed, JUDGMENTS.index(judgment), items, raters, systems])
    return sum(_one_study(judgment, rng, effect, items, raters, systems, alpha) for _ in range(n_sim)) / n_sim


@dataclass(frozen=True)
class PlanRow:
    judgment: str
    raters: int
    items: int | None  # None: no candidate reached the power
    power: float  # at ``items`` (or at the largest candidate)
    judgments: int | None  # judgments the design asks for (items x systems or pages x raters)


def _judgments(judgment: str, items: int, raters: int, systems: int) -> int:
    if judgment == "pairwise":
        return items * math.comb(systems, 2) * raters
    if judgment == "best-worst":
        return items * raters
    return items * systems * raters


def plan(
    effect: float,
    judgments: Sequence[str] = JUDGMENTS,
    systems: int = 2,
    power: float = 0.8,
    alpha: float = 0.05,
    n_sim: int = N_SIM,
    seed: int = 0,
    items_grid: Sequence[int] = ITEMS,
    raters_grid: Sequence[int] = RATERS,
) -> list[PlanRow]:
    """Per judgment type and number of raters, the fewest candidate items reaching ``power`` (a binary
    search over ``items_grid``: power rises with items)."""
    check_plan(effect, systems, power, alpha, n_sim, items_grid)
    grid = sorted(set(items_grid))
    rows = []
    for judgment in judgments:
        if judgment == "best-worst" and systems < 3:
            continue  # a tuple of two is a pairwise comparison; study create asks for three systems
        for raters in raters_grid:
            items, p = _smallest(
                grid,
                power,
                lambda n, j=judgment, r=raters: simulate_power(j, effect, n, r, systems, alpha, n_sim, seed),
            )
            ok = p >= power
            rows.append(
                PlanRow(
                    judgment,
                    raters,
                    items if ok else None,
                    p,
                    _judgments(judgment, items, raters, systems) if ok else None,
                )
            )
    return rows


def _smallest(grid: list[int], target: float, power_at) -> tuple[int, float]:
    """The first grid value whose power reaches ``target`` (binary search), with its power; the last
    value when none does."""
    seen: dict[int, float] = {}

    def at(k: int) -> float:
        if k not in seen:
            seen[k] = power_at(grid[k])
        return seen[k]

    low, high = 0, len(grid) - 1
    if at(high) < target:
        return grid[high], at(high)
    while low < high:
        mid = (low + high) // 2
        if at(mid) >= target:
            high = mid
        else:
            low = mid + 1
    return grid[low], at(low)


def check_plan(
    effect: float, systems: int, power: float, alpha: float, n_sim: int, items_grid: Sequence[int] = ITEMS
) -> None:
    if not math.isfinite(effect) or effect <= 0:
        raise MaxbenchError(f"--effect {effect:g} must be a positive Cohen's d (e.g. 0.3)")
    if not 0 < power < 1:
        raise MaxbenchError(f"--power {power:g} is not a probability in (0, 1); the usual target is 0.8")
    if not 0 < alpha < 1:
        raise MaxbenchError(f"--alpha {alpha:g} is not a significance level in (0, 1)")
    if systems < 2:
        raise MaxbenchError("--systems must be at least 2: a study compares systems")
    if min(items_grid) < MIN_ITEMS:
        raise MaxbenchError(f"--items must be {MIN_ITEMS} or more (smaller studies are not simulated: see plan.py)")
    if n_sim < 20:
        raise MaxbenchError(f"--n-sim {n_sim} is too few simulated studies for a power estimate; use 20 or more")


def pilot_effect(ratings: Ratings, reference: str | None = None) -> tuple[float, str]:
    """The smallest non-zero Cohen's d between the reference and another system in the pilot's first
    aspect, and a line saying where it comes from."""
    aspect = ratings.rows[0].criterion
    values: dict[str, list[float]] = {}
    for r in ratings.rows:
        if r.criterion == aspect and r.value is not None:
            values.setdefault(r.system, []).append(float(r.value))
    systems = sorted(values)
    if len(systems) < 2:
        raise MaxbenchError(
            f"the pilot {ratings.source} rates {len(systems)} system(s) on {aspect!r}: need two or more"
        )
    reference = reference or systems[0]
    if reference not in values:
        raise MaxbenchError(f"--reference {reference!r} is not rated in the pilot; systems: {', '.join(systems)}")
    found = []
    for other in systems:
        if other == reference:
            continue
        a, b = np.array(values[reference]), np.array(values[other])
        if a.size < 2 or b.size < 2:
            continue
        pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))
        if pooled > 0 and a.mean() != b.mean():
            found.append((abs(float(b.mean() - a.mean())) / pooled, other))
    if not found:
        raise MaxbenchError(f"the pilot {ratings.source} shows no difference between systems on {aspect!r}")
    d, other = min(found)
    return d, f"pilot {ratings.source}: Cohen's d {d:.3f} of {other!r} against {reference!r} on {aspect!r}"


def format_plan(
    rows: Sequence[PlanRow], effect: float, systems: int, power: float, alpha: float, n_sim: int, max_items: int
) -> str:
    head = (
        f"Smallest design reaching power {power:g} at alpha {alpha:g} (Holm), effect d = {effect:.3f} "
        f"(pairwise preference {preference(effect):.3f}), {systems} systems, {n_sim} simulated studies per cell"
    )
    table = [("judgment", "raters", "items", "power", "judgments")]
    for r in rows:
        table.append(
            (
                r.judgment,
                str(r.raters),
                str(r.items) if r.items else f"> {max_items}",
                f"{r.power:.3f}",
                str(r.judgments) if r.judgments else "-",
            )
        )
    widths = [max(len(row[k]) for row in table) for k in range(5)]
    lines = [head, ""] + ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    if systems < 3:
        lines.append("(best-worst: tuples need 3 or more systems; give --systems 3 or more to plan one)")
    return "\n".join(lines) + "\n"
