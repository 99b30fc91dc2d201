"""Perplexity and epsilon-perplexity of the log-probabilities an output layer gave to reference
tokens (teacher-forced), the pure computation behind the ``ref-ppl`` metric
(benchmark/metrics/perplexity.py) and POSG's held-out figures (systems/layers/posg/fit.py).

A sparse layer (sparsemax, POSG without its catch-all) gives some reference tokens probability
0, so plain perplexity is infinite; epsilon-perplexity (Martins et al. 2020) adds epsilon to
every probability and renormalises, p' = (p + eps) / (1 + eps |V|), which is a mixture with the
uniform distribution of weight eps|V| / (1 + eps|V|); the number of zero-probability tokens is
reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_EPSILON = 1e-6


@dataclass(frozen=True)
class ReferencePerplexity:
    """Perplexity of references under a system's own distribution."""

    ppl: float  # exp(mean NLL); infinite when some reference token had probability 0
    eps_ppl: float  # the same with p' = (p + epsilon) / (1 + epsilon * vocab_size)
    epsilon: float
    vocab_size: int
    n_tokens: int
    n_zero: int  # reference tokens the system gave probability exactly 0
    rows: np.ndarray  # per reference: [sum log p', tokens, zero tokens, sum log p over nonzero tokens]


def _row_stats(logprobs, epsilon: float, vocab_size: int) -> list[float]:
    lp = np.array([-np.inf if v is None else v for v in logprobs], dtype=np.float64)
    if np.any(lp > 1e-9) or np.any(np.isnan(lp)):
        raise ValueError("log-probabilities must be <= 0 (use None or -inf for probability 0)")
    # log((p + eps) / (1 + eps V)) computed without leaving log space
    mixed = np.logaddexp(lp, math.log(epsilon)) - math.log1p(epsilon * vocab_size)
    zero = np.isneginf(lp)
    return [float(mixed.sum()), float(lp.size), float(zero.sum()), float(lp[~zero].sum())]


def reference_perplexity(
    logprob_rows: Sequence[Sequence[float | None]], vocab_size: int, epsilon: float = DEFAULT_EPSILON
) -> ReferencePerplexity:
    """Perplexity and epsilon-perplexity of references from the system's per-token log-probabilities.

    Parameters
    ----------
    logprob_rows : sequence of sequences of float or None
        For each reference text, the natural-log probability the system gave each of its
        tokens (teacher-forced); probability 0 is None or -inf. A value above 0 (beyond
        rounding) or NaN raises ValueError.
    vocab_size : int
        |V| of the system's distribution, >= 1.
    epsilon : float
        The epsilon of epsilon-perplexity, > 0.

    Returns
    -------
    ReferencePerplexity
        Corpus-level ``ppl`` (infinite when a token had probability 0) and ``eps_ppl`` over
        all tokens of all rows, the token and zero counts, and the per-row sums in ``rows``.
    """
    if vocab_size < 1 or not epsilon > 0:
        raise ValueError("vocab_size must be >= 1 and epsilon > 0")
    rows = np.array([_row_stats(r, epsilon, vocab_size) for r in logprob_rows], dtype=np.float64).reshape(-1, 4)
    total = rows.sum(axis=0)
    n, zeros = int(total[1]), int(total[2])
    ppl = math.inf if zeros else (math.exp(-total[3] / n) if n else math.nan)
    eps_ppl = math.exp(-total[0] / n) if n else math.nan
    return ReferencePerplexity(ppl, eps_ppl, epsilon, vocab_size, n, zeros, rows)


__all__ = ["DEFAULT_EPSILON", "ReferencePerplexity", "reference_perplexity"]
