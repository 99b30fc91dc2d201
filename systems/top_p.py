"""Nucleus (top-p) truncation with transformers' exact result, faster on the CPU.

transformers' ``TopPLogitsWarper`` sorts every row with its indices, takes the softmax of the
sorted scores, their cumulative sum, removes the sorted positions whose cumulative mass is at
most ``1 - top_p`` (keeping ``min_tokens_to_keep``) and scatters the mask back. On the CPU the
float sort with indices dominates the truncation of a decoding step at the default lineup's batch
(48 x 49,152 scores).

Which tokens go depends on the cumulative sums, and their bits depend on the sorted order (the
softmax sums the sorted row), so the sorted values cannot be avoided. The indices can: the
cumulative mass is nondecreasing, so the removed sorted positions are a prefix of length J, and
the removed tokens are exactly those scoring below the J-th smallest score, unless that score
ties with the one before it (then a tie group straddles the cut and torch's unstable order
within it decides which of its members go). So :class:`TopPLogitsWarper` sorts the scores'
order-preserving int32 keys (torch's integer sort is much faster than its float sort with
indices), rebuilds the sorted scores from them, runs transformers' own arithmetic on them,
finds J and masks the scores below the cut. A row with a straddling tie group goes through
transformers' warper itself. The result is transformers' bit for bit (tests/systems/test_top_p.py, on
real logits, ties and -inf), in a fraction of the time (``python benchmarks/top_p.py`` measures it;
docs/performance-log.md holds the figures).

Scores that are not float32 on the CPU, or that hold NaN or +inf, go to transformers' code.
"""

from __future__ import annotations

import torch
from transformers import TopPLogitsWarper as _TransformersTopP

__all__ = ["TopPLogitsWarper", "sorted_scores"]


def _keys(scores: torch.Tensor) -> torch.Tensor:
    """int32 keys in the order of the float32 scores (-0.0 and 0.0 share a key, as they compare
    equal): the magnitude bits of negative floats are flipped. The inverse is the same map."""
    bits = (scores + 0.0).view(torch.int32)  # + 0.0 turns -0.0 into 0.0 and leaves the rest
    return _flip_negative(bits, bits.clone())


def _flip_negative(bits: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``bits ^ 0x7FFFFFFF`` where bits < 0, else bits, into ``out`` (3.7 times as fast as
    ``torch.where``)."""
    torch.bitwise_right_shift(bits, 31, out=out)
    out &= 0x7FFFFFFF
    out ^= bits
    return out


_NEG_INF_KEY = int(_keys(torch.tensor([float("-inf")]))[0])


def sorted_scores(scores: torch.Tensor) -> torch.Tensor:
    """Each row of the float32 (B, V) block sorted ascending: the values ``torch.sort`` gives
    (with 0.0 for -0.0), from one integer sort per row (no indices kept)."""
    keys = _keys(scores)
    # -inf (a token the layer gives probability 0) sorts first; sparse rows sort only the rest
    n_zero = (keys == _NEG_INF_KEY).sum(-1).tolist()
    out = torch.empty_like(keys)
    for row, k, n in zip(out, keys, n_zero):  # one 1-D sort per row: torch's fastest path
        rest = torch.sort(k[k != _NEG_INF_KEY]).values if n * 4 > k.numel() else None
        if rest is not None and (rest.numel() == 0 or rest[0] > _NEG_INF_KEY):
            row[:n] = _NEG_INF_KEY
            row[n:] = rest
        else:  # dense, or a NaN with its sign bit set (below -inf): sort it all
            row[:] = torch.sort(k).values
    return _flip_negative(out, keys).view(torch.float32)


class TopPLogitsWarper(_TransformersTopP):
    """``transformers.TopPLogitsWarper`` with the same output, computed without the indexed
    float sort on the CPU (module docstring). Same arguments: ``top_p``, ``filter_value``,
    ``min_tokens_to_keep``."""

    def __call__(self, input_ids, scores: torch.Tensor) -> torch.Tensor:
        if scores.device.type != "cpu" or scores.dtype != torch.float32 or scores.dim() != 2 or scores.shape[-1] == 0:
            return super().__call__(input_ids, scores)
        values = sorted_scores(scores)
        # NaN sorts beyond +inf (or, with its sign bit set, below -inf)
        if not bool(((values[:, -1] < float("inf")) & (values[:, 0] >= float("-inf"))).all()):
            return super().__call__(input_ids, scores)
        # transformers' own arithmetic on the same sorted values: the same cumulative sums
        cumulative_probs = values.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative_probs <= (1 - self.top_p)
        remove[..., -self.min_tokens_to_keep :] = 0
        cut = remove.sum(-1, keepdim=True)  # a prefix: the cumulative sums never decrease
        first_kept = values.gather(-1, cut)
        last_removed = values.gather(-1, (cut - 1).clamp_min(0))
        out = scores.masked_fill(scores < first_kept, self.filter_value)
        straddle = ((cut > 0) & (last_removed == first_kept))[:, 0]
        if bool(straddle.any()):
            rows = straddle.nonzero().flatten()
            out[rows] = super().__call__(input_ids, scores[rows])
        return out
