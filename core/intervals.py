"""The one interval type of maxbench (as scipy.stats' ``ConfidenceInterval``)."""

from __future__ import annotations

from typing import NamedTuple


class ConfidenceInterval(NamedTuple):
    """A two-sided confidence interval: ``low <= high``, in the statistic's own units.

    A named tuple, so ``low, high = ci`` and JSON serialisation as ``[low, high]`` keep working.
    """

    low: float
    high: float
