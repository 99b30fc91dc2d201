"""Multiple testing: Holm's step-down adjustment, shared by the statistics of ratings
(``maxbench.human_eval.analysis``) and the verdicts of a reproduction
(``maxbench.benchmark.reproduce.verdicts``), which controls the family-wise error over a paper's
claims with it."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["holm"]


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (plain Holm, not statsmodels' default Holm-Sidak).

    The i-th smallest of m p-values becomes max over j <= i of min(1, (m - j + 1) p_(j)).
    None entries (tests that could not be run) are not counted in m and stay None.
    """
    present = [(p, i) for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    m = len(present)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted
