"""n-gram counting shared by Distinct, Uniq, KLD and MS-Jaccard.

An n-gram is a tuple of word tokens; for count vectors it is identified by Python's hash of
that tuple (64 bits), which is stable within one process, the only place these keys live.
Two different n-grams sharing a hash would merge; among 10^6 n-grams the chance is ~3e-8.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from .stats import count_matrix


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return list(zip(*(tokens[i:] for i in range(n))))


def hashed_counts(token_lists: Sequence[Sequence[str]], n: int) -> list[Counter]:
    return [Counter(map(hash, zip(*(toks[i:] for i in range(n))))) for toks in token_lists]


def count_blocks(groups: Sequence[tuple[np.ndarray, list[Counter]]],
                 n_prompts: int) -> tuple[np.ndarray, list[sp.csr_matrix]]:
    """Per-prompt count matrices for several groups of texts over one shared key space.

    Each group is (prompt index of each text, that text's hashed n-gram counts); the result
    is the sorted keys and one (n_prompts, len(keys)) matrix per group.
    """
    keys = set()
    for _, counters in groups:
        for c in counters:
            keys.update(c)
    key_array = np.array(sorted(keys), dtype=np.int64)
    return key_array, [count_matrix(index, n_prompts, counters, key_array) for index, counters in groups]
