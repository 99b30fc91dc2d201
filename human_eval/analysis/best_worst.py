"""Statistics of best-worst scaling: each page shows a tuple of texts (4 by default, one per
system where the study has that many) and the annotator picks the best and the worst.

- ``counting_scores``: a system's score is (times best - times worst) / times shown, in
  [-1, 1] (Louviere, Flynn and Marley's counting analysis, as in Kiritchenko and Mohammad
  2017), with percentile intervals from resampling items (prompts), each bringing all of its
  judgments.
- ``bws_agreement``: the rate at which two annotators of the same tuple chose the same best
  text, and the same worst text.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from maxbench.human_eval.analysis.statistics import percentile_ci, seeded_rng
from maxbench.intervals import ConfidenceInterval

TUPLE_SIZE = 4


@dataclass(frozen=True)
class BestWorst:
    """One annotator's choice among the texts of one tuple (systems in the order shown)."""

    item: str
    annotator: str
    shown: tuple[str, ...]
    best: str
    worst: str


@dataclass(frozen=True)
class CountingScore:
    system: str
    score: float | None
    ci: ConfidenceInterval | None
    best: int
    worst: int
    shown: int


def _counts(systems: Sequence[str], judgments: Sequence[BestWorst]) -> np.ndarray:
    """(3, systems): times best, times worst, times shown."""
    index = {s: k for k, s in enumerate(systems)}
    c = np.zeros((3, len(systems)))
    for j in judgments:
        c[0, index[j.best]] += 1
        c[1, index[j.worst]] += 1
        for s in j.shown:
            c[2, index[s]] += 1
    return c


def _scores(c: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (c[0] - c[1]) / c[2]


def counting_scores(
    systems: Sequence[str], judgments: Sequence[BestWorst], n_boot: int, seed: int, aspect: str = ""
) -> list[CountingScore]:
    systems = list(systems)
    c = _counts(systems, judgments)
    by_item: dict[str, list[BestWorst]] = defaultdict(list)
    for j in judgments:
        by_item[j.item].append(j)
    items = sorted(by_item)
    per_item = np.stack([_counts(systems, by_item[i]) for i in items]) if items else np.zeros((0, *c.shape))
    rng = seeded_rng(seed, "best-worst", aspect)
    picks = rng.integers(0, len(items), size=(n_boot, len(items)))
    replicates = np.stack([_scores(per_item[p].sum(axis=0)) for p in picks]) if items else np.zeros((0, len(systems)))
    point = _scores(c)
    return [
        CountingScore(
            s,
            None if not np.isfinite(point[k]) else float(point[k]),
            percentile_ci(replicates[:, k], len(items)),
            int(c[0, k]),
            int(c[1, k]),
            int(c[2, k]),
        )
        for k, s in enumerate(systems)
    ]


@dataclass(frozen=True)
class BwsAgreement:
    best_rate: float | None
    worst_rate: float | None
    n_units: int


def bws_agreement(judgments: Sequence[BestWorst]) -> BwsAgreement:
    by_unit: dict[tuple, list[BestWorst]] = defaultdict(list)
    for j in judgments:
        by_unit[(j.item, tuple(sorted(j.shown)))].append(j)
    pairs = [p for v in by_unit.values() for p in itertools.combinations(v, 2)]
    if not pairs:
        return BwsAgreement(None, None, 0)
    best = sum(a.best == b.best for a, b in pairs) / len(pairs)
    worst = sum(a.worst == b.worst for a, b in pairs) / len(pairs)
    return BwsAgreement(best, worst, sum(1 for v in by_unit.values() if len(v) >= 2))
