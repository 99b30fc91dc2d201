"""Statistics of pairwise preference judgments (one text against another, "A", "B" or a tie).

- ``bradley_terry``: Bradley-Terry strengths of the systems, fitted by ``choix``
  (``ilsr_pairwise_dense``: Iterative Luce Spectral Ranking on the win matrix), on the log
  scale and centred at 0; a tie counts as half a win for each side. ``choix``'s
  regularisation ``BT_ALPHA`` keeps a strength finite when a system wins or loses every
  comparison. Percentile intervals come from resampling items (prompts), each bringing all of
  its judgments, as in a new study drawing other prompts.
- ``sign_tests``: per pair of systems, the two-sided exact binomial (sign) test of the
  decisive judgments (ties dropped) against 1/2 (``scipy.stats.binomtest``), with Holm's
  correction over the pairs (``maxbench.multiple_testing.holm``).
- ``pairwise_agreement``: the agreement of annotators who judged the same pair of texts:
  Krippendorff's alpha at the nominal level over the outcomes (first system better, second
  better, tie), and the raw rate at which two such annotators gave the same outcome.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from maxbench.human_eval.analysis.statistics import krippendorff_alpha, percentile_ci, seeded_rng
from maxbench.intervals import ConfidenceInterval
from maxbench.multiple_testing import holm

BT_ALPHA = 0.01


@dataclass(frozen=True)
class PairJudgment:
    """One annotator's judgment of two texts for one prompt (``item``) and criterion.

    ``left``/``right`` are the systems in the order shown; ``winner`` is one of them, or
    None for a tie."""

    item: str
    annotator: str
    left: str
    right: str
    winner: str | None


@dataclass(frozen=True)
class Strength:
    """A system's Bradley-Terry log-strength (centred over the systems) and its interval."""

    system: str
    score: float
    ci: ConfidenceInterval | None
    wins: float  # ties count half
    comparisons: int


@dataclass(frozen=True)
class SignTest:
    """Two-sided exact binomial test of one pair's decisive judgments."""

    first: str
    second: str
    first_wins: int
    second_wins: int
    ties: int
    pvalue: float | None
    pvalue_holm: float | None = None


def win_matrix(systems: Sequence[str], judgments: Sequence[PairJudgment]) -> np.ndarray:
    """``m[i, j]``: how often system i beat system j (a tie adds 1/2 to both cells)."""
    index = {s: k for k, s in enumerate(systems)}
    m = np.zeros((len(systems), len(systems)))
    for j in judgments:
        a, b = index[j.left], index[j.right]
        if j.winner is None:
            m[a, b] += 0.5
            m[b, a] += 0.5
        else:
            w = index[j.winner]
            m[w, b if w == a else a] += 1
    return m


def _fit(m: np.ndarray) -> np.ndarray:
    import choix

    return np.asarray(choix.ilsr_pairwise_dense(m, alpha=BT_ALPHA))


def bradley_terry(
    systems: Sequence[str], judgments: Sequence[PairJudgment], n_boot: int, seed: int, aspect: str = ""
) -> list[Strength]:
    systems = list(systems)
    m = win_matrix(systems, judgments)
    scores = _fit(m)
    by_item: dict[str, list[PairJudgment]] = defaultdict(list)
    for j in judgments:
        by_item[j.item].append(j)
    items = sorted(by_item)
    per_item = np.stack([win_matrix(systems, by_item[i]) for i in items]) if items else np.zeros((0, *m.shape))
    rng = seeded_rng(seed, "bradley-terry", aspect)
    replicates = np.full((n_boot, len(systems)), np.nan)
    for b in range(n_boot):
        picked = rng.integers(0, len(items), size=len(items))
        replicates[b] = _fit(per_item[picked].sum(axis=0))
    comparisons = (m + m.T).sum(axis=1)
    return [
        Strength(
            s,
            float(scores[k]),
            percentile_ci(replicates[:, k], len(items)),
            float(m[k].sum()),
            int(round(comparisons[k])),
        )
        for k, s in enumerate(systems)
    ]


def sign_tests(systems: Sequence[str], judgments: Sequence[PairJudgment]) -> list[SignTest]:
    from scipy.stats import binomtest

    tests = []
    for first, second in itertools.combinations(systems, 2):
        between = [j for j in judgments if {j.left, j.right} == {first, second}]
        w1 = sum(1 for j in between if j.winner == first)
        w2 = sum(1 for j in between if j.winner == second)
        ties = len(between) - w1 - w2
        p = float(binomtest(w1, w1 + w2, 0.5, alternative="two-sided").pvalue) if w1 + w2 else None
        tests.append(SignTest(first, second, w1, w2, ties, p))
    adjusted = holm([t.pvalue for t in tests])
    return [SignTest(**{**t.__dict__, "pvalue_holm": p}) for t, p in zip(tests, adjusted)]


@dataclass(frozen=True)
class PairAgreement:
    alpha_nominal: float | None
    rate: float | None  # share of annotator pairs on one comparison that gave the same outcome
    n_units: int  # comparisons (item, pair of systems) judged by two or more annotators


def pairwise_agreement(judgments: Sequence[PairJudgment]) -> PairAgreement:
    outcomes: dict[tuple, list[int]] = defaultdict(list)
    for j in judgments:
        first, second = sorted((j.left, j.right))
        outcomes[(j.item, first, second)].append(2 if j.winner is None else (0 if j.winner == first else 1))
    pairable = [v for v in outcomes.values() if len(v) >= 2]
    if not pairable:
        return PairAgreement(None, None, 0)
    counts = np.array([[v.count(k) for k in range(3)] for v in outcomes.values()], dtype=float)
    alpha = krippendorff_alpha(counts, [0, 1, 2], "nominal")
    same = total = 0
    for v in pairable:
        for x, y in itertools.combinations(v, 2):
            same += x == y
            total += 1
    return PairAgreement(alpha, same / total, len(pairable))
