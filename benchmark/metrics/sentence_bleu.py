"""nltk's ``sentence_bleu`` for many hypotheses at once (a shared pool, the other texts, or each one's
own reference), exact and fast.

Texygen-style (nltk ``sentence_bleu``, ``SmoothingFunction().method1``, uniform weights 1/n over
orders 1..n):

- ``pool_bleu``: each generation against the whole reference set (the graphmax papers' BLEU-n);
- ``self_bleu``: each generation against all the *other* generations (leave-one-out Self-BLEU);
- ``paired_bleu``: each generation against its own reference only (the POSG authors' ``bleu_upto``).

``zero_count`` switches method1 for the POSG authors' own arithmetic (util/evaluate.py
``selfbleu``): a zero match count becomes that number (1e-100) and nothing else changes, not
even nltk's "no unigram matches scores 0".

Calling nltk once per hypothesis recounts every reference's n-grams each time: quadratic in
the number of texts. With a shared pool, the clipping count of an
n-gram (its largest count in any one reference) belongs to the pool, not to the hypothesis.
Leaving text i out changes it only for n-grams where text i holds that largest count; then
the second-largest count takes its place (equal to the largest on a tie). The closest
reference length is found the same way: text i's own length drops out of the candidates
only if no other text has it. Everything else is counting with numpy. The equality with nltk
to 1e-9 is tested in tests/benchmark/metrics/test_reference.py (``paired_bleu`` and ``zero_count``
in tests/benchmark/metrics/test_paper_variants.py) and measured in benchmarks/self_bleu.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# nltk SmoothingFunction().method1: a zero n-gram match count becomes epsilon / denominator.
METHOD1_EPSILON = 0.1
#: how the signatures of BLEU-n and Self-BLEU name this smoothing
SMOOTHING_ID = f"nltk-method1(eps={METHOD1_EPSILON})"


class _NgramIndex:
    """Integer ids for the n-grams (orders 1..max_n) of a list of token lists.

    ``per_order[n-1]`` holds three aligned arrays, one row per (text, n-gram type) present:
    the text's index, the type's id and its count in that text. ``n_types[n-1]`` is the
    number of distinct n-grams.
    """

    def __init__(self, token_lists: Sequence[Sequence[str]], max_n: int):
        vocab: dict[str, int] = {}
        flat = np.fromiter((vocab.setdefault(t, len(vocab)) for toks in token_lists for t in toks), dtype=np.int64)
        self.n_texts = len(token_lists)
        self.lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=self.n_texts)
        starts = np.cumsum(self.lengths) - self.lengths
        text_of = np.repeat(np.arange(self.n_texts, dtype=np.int64), self.lengths)
        # tokens from each position to the end of its text, that position included
        left = self.lengths[text_of] - (np.arange(flat.size, dtype=np.int64) - starts[text_of])
        self.per_order: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.n_types: list[int] = []
        ids = flat
        for n in range(1, max_n + 1):
            pos = np.nonzero(left >= n)[0]
            if n > 1:
                # an n-gram is an (n-1)-gram id followed by one token: pairs stay exact in int64
                types, inverse = np.unique(ids[pos] * max(len(vocab), 1) + flat[pos + n - 1], return_inverse=True)
                ids = np.full(flat.size, -1, dtype=np.int64)
                ids[pos] = inverse
                n_types = types.size
            else:
                n_types = len(vocab)
            width = max(n_types, 1)
            keys, counts = np.unique(text_of[pos] * width + ids[pos], return_counts=True)
            self.per_order.append((keys // width, keys % width, counts))
            self.n_types.append(n_types)


def _top_two(gram: np.ndarray, count: np.ndarray, n_types: int) -> tuple[np.ndarray, np.ndarray]:
    """Largest and second-largest count of each n-gram type over the texts that hold it."""
    first = np.zeros(n_types, dtype=np.int64)
    second = np.zeros(n_types, dtype=np.int64)
    if gram.size == 0:
        return first, second
    order = np.lexsort((-count, gram))
    g, c = gram[order], count[order]
    head = np.ones(g.size, dtype=bool)
    head[1:] = g[1:] != g[:-1]
    first[g[head]] = c[head]
    runner_up = np.zeros(g.size, dtype=bool)
    runner_up[1:] = head[:-1] & ~head[1:]
    second[g[runner_up]] = c[runner_up]
    return first, second


def _closest_lengths(hyp_len: np.ndarray, ref_lens: np.ndarray) -> np.ndarray:
    """nltk closest_ref_length: nearest reference length, the shorter one on a tie."""
    lens = np.unique(ref_lens)
    at = np.searchsorted(lens, hyp_len, side="left")
    below = lens[np.clip(at - 1, 0, lens.size - 1)]
    above = lens[np.clip(at, 0, lens.size - 1)]
    below = np.where(at > 0, below, above)
    above = np.where(at < lens.size, above, below)
    return np.where(hyp_len - below <= above - hyp_len, below, above)


def _closest_lengths_leave_one_out(lengths: np.ndarray) -> np.ndarray:
    """Closest length among all the other texts, for every text."""
    lens, counts = np.unique(lengths, return_counts=True)
    at = np.searchsorted(lens, lengths)  # lens[at] == own length
    shared = counts[at] >= 2
    has_below, has_above = at > 0, at < lens.size - 1
    below = lens[np.clip(at - 1, 0, lens.size - 1)]
    above = lens[np.clip(at + 1, 0, lens.size - 1)]
    below = np.where(has_below, below, above)
    above = np.where(has_above, above, below)
    nearest_other = np.where(lengths - below <= above - lengths, below, above)
    return np.where(shared, lengths, nearest_other)


def _bleu_from_counts(
    numerators: np.ndarray,
    denominators: np.ndarray,
    hyp_len: np.ndarray,
    ref_len: np.ndarray,
    orders: Sequence[int],
    zero_count: float | None = None,
) -> dict[int, np.ndarray]:
    """nltk corpus_bleu arithmetic for one hypothesis each, uniform weights: method1 smoothing, or
    with ``zero_count`` a zero match count replaced by it (no zero-unigram rule)."""
    numerators = numerators.astype(np.float64)
    denominators = denominators.astype(np.float64)
    zero = METHOD1_EPSILON if zero_count is None else zero_count
    precision = np.where(numerators > 0, numerators, zero) / denominators
    log_p = np.log(precision)
    with np.errstate(divide="ignore", over="ignore"):
        bp = np.where(
            hyp_len > ref_len, 1.0, np.where(hyp_len == 0, 0.0, np.exp(1.0 - ref_len / np.maximum(hyp_len, 1)))
        )
    out = {}
    for n in orders:
        s = np.sum(log_p[:, :n] * (1.0 / n), axis=1)
        out[n] = bp * np.exp(s) if zero_count is not None else np.where(numerators[:, 0] == 0, 0.0, bp * np.exp(s))
    return out


def _ngram_stats(index: _NgramIndex, hyps: np.ndarray, max_n: int, other_max) -> tuple[np.ndarray, np.ndarray]:
    n_h = hyps.size
    numerators = np.zeros((n_h, max_n), dtype=np.int64)
    denominators = np.zeros((n_h, max_n), dtype=np.int64)
    slot = np.full(index.n_texts, -1, dtype=np.int64)
    slot[hyps] = np.arange(n_h)
    for n in range(1, max_n + 1):
        text, gram, count = index.per_order[n - 1]
        mine = slot[text] >= 0
        clipped = np.minimum(count[mine], other_max(n, text[mine], gram[mine], count[mine]))
        numerators[:, n - 1] = np.bincount(slot[text[mine]], weights=clipped, minlength=n_h).astype(np.int64)
        denominators[:, n - 1] = np.maximum(1, index.lengths[hyps] - n + 1)
    return numerators, denominators


def pool_bleu(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], orders: Sequence[int] = (2, 3, 4, 5)
) -> dict[int, np.ndarray]:
    """BLEU-n of every hypothesis against all ``references`` together, for each n in ``orders``.

    Equals ``sentence_bleu(references, h, weights=(1/n,)*n,
    smoothing_function=SmoothingFunction().method1)`` for every hypothesis ``h``.
    """
    if not references:
        raise ValueError("pool_bleu needs at least one reference")
    max_n = max(orders)
    index = _NgramIndex(list(hypotheses) + list(references), max_n)
    n_h = len(hypotheses)
    pool = np.arange(n_h, n_h + len(references))
    is_pool = np.zeros(index.n_texts, dtype=bool)
    is_pool[pool] = True
    pool_max = []
    for n in range(1, max_n + 1):
        text, gram, count = index.per_order[n - 1]
        m = np.zeros(index.n_types[n - 1], dtype=np.int64)
        np.maximum.at(m, gram[is_pool[text]], count[is_pool[text]])
        pool_max.append(m)
    hyps = np.arange(n_h)
    num, den = _ngram_stats(index, hyps, max_n, lambda n, t, g, c: pool_max[n - 1][g])
    hyp_len = index.lengths[hyps]
    ref_len = _closest_lengths(hyp_len, index.lengths[pool])
    return _bleu_from_counts(num, den, hyp_len, ref_len, orders)


def self_bleu(
    texts: Sequence[Sequence[str]], orders: Sequence[int] = (4,), zero_count: float | None = None
) -> dict[int, np.ndarray]:
    """Leave-one-out Self-BLEU-n of every text against all the other texts, for each n in ``orders``.

    Equals ``sentence_bleu(texts[:i] + texts[i+1:], texts[i], weights=(1/n,)*n,
    smoothing_function=SmoothingFunction().method1)`` for every i (with ``zero_count``: the POSG
    authors' ``selfbleu`` instead). Needs at least two texts.
    """
    if len(texts) < 2:
        raise ValueError("self_bleu needs at least two texts")
    max_n = max(orders)
    index = _NgramIndex(texts, max_n)
    tops = [_top_two(g, c, index.n_types[n]) for n, (_, g, c) in enumerate(index.per_order)]

    def other_max(n, text, gram, count):
        first, second = tops[n - 1]
        return np.where(count == first[gram], second[gram], first[gram])

    every = np.arange(index.n_texts)
    num, den = _ngram_stats(index, every, max_n, other_max)
    return _bleu_from_counts(num, den, index.lengths, _closest_lengths_leave_one_out(index.lengths), orders, zero_count)


def paired_bleu(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], orders: Sequence[int] = (4,)
) -> dict[int, np.ndarray]:
    """BLEU-n of every hypothesis against its own reference only, for each n in ``orders``.

    Equals ``sentence_bleu([references[i]], hypotheses[i], weights=(1/n,)*n,
    smoothing_function=SmoothingFunction().method1)`` for every i.
    """
    if len(hypotheses) != len(references):
        raise ValueError("paired_bleu needs one reference per hypothesis")
    max_n = max(orders)
    n_h = len(hypotheses)
    index = _NgramIndex(list(hypotheses) + list(references), max_n)

    def own_reference_count(n, text, gram, count):
        ref_text, ref_gram, ref_count = index.per_order[n - 1]
        is_ref = ref_text >= n_h
        if not is_ref.any():
            return np.zeros_like(count)
        width = max(index.n_types[n - 1], 1)
        # rows are sorted by (text, n-gram id), so the reference rows' keys are sorted too
        ref_keys = (ref_text[is_ref] - n_h) * width + ref_gram[is_ref]
        keys = text * width + gram
        at = np.minimum(np.searchsorted(ref_keys, keys), ref_keys.size - 1)
        return np.where(ref_keys[at] == keys, ref_count[is_ref][at], 0)

    hyps = np.arange(n_h)
    num, den = _ngram_stats(index, hyps, max_n, own_reference_count)
    return _bleu_from_counts(num, den, index.lengths[hyps], index.lengths[n_h:], orders)
