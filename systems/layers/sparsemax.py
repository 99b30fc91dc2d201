"""sparsemax (Martins & Astudillo, 2016): the Euclidean projection of scores onto the simplex.

``sparsemax(z) = argmin_{p in simplex} ||p - z||^2 = max(z - tau(z), 0)`` with the threshold
``tau`` found by sorting. It can give tokens exactly zero probability.

Numerics:
- each row is shifted by its maximum first (the projection is shift-invariant); without the
  shift, float32 cumulative sums of large logits lose the small differences that decide the
  support and the output can sum to far from 1;
- float16/bfloat16 inputs are computed in float32 and returned in the input dtype;
- a row whose entries are all ``-inf`` has no finite score to shift by. It is mapped to the
  uniform distribution: sparsemax is shift-invariant, so ``sparsemax(c * 1)`` is uniform for
  every finite ``c`` and uniform is the limit as ``c -> -inf``. Rows holding NaN or ``+inf``
  give NaN (callers that decode reject non-finite logits before this point). ``-inf`` entries
  in a row with a finite entry get probability 0.

The backward pass is the sparse Jacobian-vector product of Martins & Astudillo (as in
deep-spin/entmax): on the support S, ``grad_z = g - mean_S(g)``, zero elsewhere.
"""
from __future__ import annotations

import torch

__all__ = ["sparsemax", "SparsemaxFunction"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _sparsemax_forward(z: torch.Tensor, dim: int) -> torch.Tensor:
    compute_dtype = torch.float32 if z.dtype in _LOW_PRECISION else z.dtype
    z = z.to(compute_dtype)
    row_max = z.amax(dim=dim, keepdim=True)
    all_neg_inf = row_max == float("-inf")
    # A row of all -inf would become NaN after the shift; give it zeros so that it is uniform.
    z = torch.where(all_neg_inf, torch.zeros_like(z), z - torch.where(all_neg_inf, torch.zeros_like(row_max), row_max))
    z_sorted, _ = torch.sort(z, dim=dim, descending=True)
    cumsum = z_sorted.cumsum(dim)
    shape = [1] * z.dim()
    shape[dim] = z.shape[dim]
    ks = torch.arange(1, z.shape[dim] + 1, device=z.device, dtype=compute_dtype).view(shape)
    # The support is the largest k with 1 + k z_(k) > sum_{j<=k} z_(j); the condition holds
    # exactly for a prefix of the sorted order, so counting it gives k.
    in_support = (1 + ks * z_sorted) > cumsum
    support_size = in_support.sum(dim=dim, keepdim=True)
    tau = (cumsum.gather(dim, support_size - 1) - 1) / support_size.to(compute_dtype)
    return torch.clamp(z - tau, min=0)


class SparsemaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, dim: int = -1) -> torch.Tensor:
        p = _sparsemax_forward(z, dim)
        ctx.dim = dim
        ctx.save_for_backward(p)
        return p.to(z.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (p,) = ctx.saved_tensors
        dim = ctx.dim
        g = grad_output.to(p.dtype)
        on_support = p > 0
        g = torch.where(on_support, g, torch.zeros_like(g))
        mean_on_support = g.sum(dim=dim, keepdim=True) / on_support.sum(dim=dim, keepdim=True).to(p.dtype)
        grad_z = torch.where(on_support, g - mean_on_support, torch.zeros_like(g))
        return grad_z.to(grad_output.dtype), None


def sparsemax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Project ``z`` onto the probability simplex along ``dim`` (differentiable).

    Returns a tensor of z's shape and dtype whose slices along ``dim`` are probability
    vectors, possibly with exact zeros. See the module docstring for the handling of
    half precision and of rows that are entirely ``-inf``.
    """
    if not torch.is_tensor(z):
        z = torch.as_tensor(z)
    if not z.is_floating_point():
        z = z.to(torch.get_default_dtype())
    return SparsemaxFunction.apply(z, dim)
