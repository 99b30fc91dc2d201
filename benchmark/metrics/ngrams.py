"""n-gram counting shared by Distinct, Uniq, KLD and MS-Jaccard.

An n-gram is a tuple of word tokens; for count vectors it is identified by a 64-bit key: each
token becomes the first 8 bytes of its BLAKE2b digest and the n-gram Python's hash of that tuple
of ints. Neither depends on PYTHONHASHSEED (str hashes do), so the keys, their sorted order and
hence the order in which corpus-level sums add up are the same in every process: scores are
identical to the last bit from run to run. Two different n-grams sharing a key would merge;
among 10^6 n-grams the chance is ~3e-8.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from maxbench.benchmark.metrics.stats import count_matrix


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return list(zip(*(tokens[i:] for i in range(n))))


@functools.lru_cache(maxsize=1 << 20)
def token_key(token: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little", signed=True
    )


def hashed_counts(token_lists: Sequence[Sequence[str]], n: int) -> list[Counter]:
    counts = []
    for toks in token_lists:
        ids = [token_key(t) for t in toks]
        counts.append(Counter(map(hash, zip(*(ids[i:] for i in range(n))))))
    return counts


def count_blocks(
    groups: Sequence[tuple[np.ndarray, list[Counter]]], n_prompts: int
) -> tuple[np.ndarray, list[sp.csr_matrix]]:
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
