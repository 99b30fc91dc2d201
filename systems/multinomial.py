"""One draw per row with torch.multinomial's exact result and generator use, faster after top-p.

For one sample, ``torch.multinomial(p, 1, generator=g)`` on the CPU draws ``q ~ Exp(1)`` for every
entry of the row (``exponential_``: one 64-bit draw of g's Mersenne twister per entry, ``u`` its low
53 bits over 2^53, ``q = -log1p(-u)`` in double, rounded to p's dtype) and returns
``argmax(p / q)``, the first index of the largest ratio. The logarithms dominate, not the draws
themselves, and after top-p truncation all but a few hundred entries have ``p = 0`` and cannot win.

:func:`multinomial_rows` takes the same draws (``random_`` on int64 consumes exactly what
``exponential_`` does and keeps the low 53 bits; tests/systems/test_multinomial.py checks the generator
states match), computes ``q`` only where ``p > 0``, finds the entries whose ratio is within
rounding of the row's largest, and settles those with the exact double ``log1p`` of the C
library, the one torch's kernel calls. The result is torch's index for every row, and each
generator ends in torch's state (``python benchmarks/multinomial.py``: the times side by side).
A row with a wide support (over an eighth of its entries nonzero: no truncation, nothing to
gain), a row torch would refuse (negative, non-finite or all-zero probabilities), or one whose
draws include ``u = 0`` (``q = 0``, chance 2^-53 per entry) goes through ``torch.multinomial``
itself, from the generator state before any draw.
"""

from __future__ import annotations

import math

import torch

__all__ = ["multinomial_rows"]

_LOW_53 = (1 << 53) - 1
_SCALE = 2.0**-53
#: ratios this close (relative) to a row's largest are settled exactly; the approximate
#: logarithms are within a few units of the double's last place, far inside it
_CANDIDATE = 2.0**-16


def _torch_rows(probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    return torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g)[0] for i, g in enumerate(generators)])


def multinomial_rows(probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """``torch.multinomial(probs[i:i+1], 1, generator=generators[i])`` for every row i, as a
    (B,) tensor of token ids, the generators left as torch leaves them.

    The generators are CPU generators (``systems.decoding``), so the draws are the CPU's on any
    device: probabilities computed on a GPU come to the CPU (float32) first, and a seed draws
    the same token from the same probabilities wherever they were computed. The ids are returned
    on the CPU."""
    if probs.device.type != "cpu" and generators and generators[0].device.type == "cpu":
        probs = probs.float().cpu()
    if probs.device.type != "cpu" or probs.dtype != torch.float32 or probs.dim() != 2 or probs.shape[1] < 2:
        return _torch_rows(probs, generators)
    # torch draws the rows with a wide support itself (no truncation: nothing to gain here),
    # and rows torch refuses: NaN, +inf or a negative entry (a NaN or negative minimum, a sum
    # that is not finite) or nothing to draw (a zero sum)
    narrow = (probs != 0).sum(1) * 8 <= probs.shape[1]
    if not bool(narrow.any()):
        return _torch_rows(probs, generators)
    total = probs.sum(1)
    ok = narrow & (probs.amin(1) >= 0) & torch.isfinite(total) & (total > 0)
    mine = ok.nonzero()[:, 0].tolist()
    states = {i: generators[i].get_state() for i in mine}
    bits = torch.empty((len(mine), probs.shape[1]), dtype=torch.long)
    for row, i in zip(bits, mine):  # the draws exponential_ would take, in place
        row.random_(generator=generators[i])
    bits &= _LOW_53
    redo = set(torch.tensor(mine, dtype=torch.long)[bits.amin(1) == 0].tolist()) if mine else set()
    part = probs[mine]
    rows, cols = part.nonzero().unbind(1)
    u = bits[rows, cols]
    ratio = part[rows, cols] / torch.log1p(u.double().mul_(-_SCALE)).neg_().float()
    top = torch.full((len(mine),), -math.inf).scatter_reduce_(0, rows, ratio, "amax")
    best: dict[int, tuple[float, int]] = {}
    for k in (ratio >= top[rows] * (1.0 - _CANDIDATE)).nonzero()[:, 0].tolist():
        # exact: the C library's log1p in double, rounded to float32, as torch's kernel does
        i, c = mine[int(rows[k])], int(cols[k])
        q = torch.tensor(-math.log1p(-int(u[k]) * _SCALE), dtype=torch.float32)
        r = float(probs[i, c] / q)
        if i not in best or r > best[i][0]:  # the first index of the largest ratio
            best[i] = (r, c)
    out = torch.empty(probs.shape[0], dtype=torch.long)
    for i, g in enumerate(generators):
        if i in best and i not in redo:
            out[i] = best[i][1]
        else:  # a wide support, torch's own check and message, or a draw of q = 0: torch decides
            if i in states:
                g.set_state(states[i])  # from the state before the draws
            out[i] = torch.multinomial(probs[i : i + 1], 1, generator=g)[0]
    return out
