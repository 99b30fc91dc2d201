"""Temporaries reused across a loop over chunks of positions, and torch's log-sum-exp of rows
written into them, bit for bit.

The head fits (systems/layers/posg/fit.py, systems/layers/kerbs/fit.py) reduce (chunk, V) logits
for every cached position. A fresh tensor of that size per chunk is a fresh mapping of the
process's memory (the allocator hands large blocks back to the kernel when they are freed), whose
pages the kernel faults in and zeroes on every use; a :class:`Workspace` keeps one buffer per
temporary instead. The values are those of the allocating code: :func:`logsumexp_rows` performs
torch's own operations for ``torch.logsumexp`` in torch's order, only writing the (B, n) difference
into a reused buffer (tests/systems/layers/test_workspace.py compares them bit for bit).
"""

from __future__ import annotations

import math

import torch


class Workspace:
    """Flat buffers that a loop over chunks of positions reuses for its temporaries: a fresh
    (B, V) tensor per chunk is a fresh mapping of the process's memory, whose pages the kernel
    faults in and zeroes every time. A buffer grows when a larger one is asked for."""

    def __init__(self):
        self._buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor of ``shape`` with ``like``'s dtype and device, its values undefined;
        the same memory as the last one taken under ``name``, which it overwrites."""
        size = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < size or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._buffers[name] = torch.empty(size, dtype=like.dtype, device=like.device)
        return buf[:size].view(shape)


def logsumexp_rows(x: torch.Tensor, out: torch.Tensor, work: Workspace) -> torch.Tensor:
    """``torch.logsumexp(x, -1)`` of a (B, n) tensor written into ``out`` (B,), bit for bit: the
    same operations in torch's order (the row maxima, infinite ones replaced by 0; exp of the
    difference; its sum; log; plus the maxima), with the (B, n) difference written into ``work``
    instead of a new tensor."""
    peak = torch.amax(x, -1, keepdim=True)
    peak.masked_fill_(peak.abs() == math.inf, 0)
    diff = torch.sub(x, peak, out=work.take("diff", tuple(x.shape), x))
    torch.sum(diff.exp_(), -1, out=out)
    return out.log_().add_(peak[:, 0])


__all__ = ["Workspace", "logsumexp_rows"]
