"""sparsemax (Martins & Astudillo, 2016): the Euclidean projection of scores onto the simplex.

``sparsemax(z) = argmin_{p in simplex} ||p - z||^2 = max(z - tau(z), 0)`` with the threshold
``tau`` found by Michelot's iteration (a few masked sums, no sort; see ``threshold``). It can
give tokens exactly zero probability.

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

__all__ = [
    "sparsemax",
    "SparsemaxFunction",
    "project_to_simplex",
    "threshold",
    "threshold_by_sorting",
    "amax",
    "MAX_PASSES",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


#: Michelot's iteration ends in a handful of passes on real scores (LM logits and the graphmax
#: paper solver's near-uniform inputs); rows still moving after this many passes (rounding can
#: make a set flip back and forth) are finished by sorting.
MAX_PASSES = 50


def threshold_by_sorting(z: torch.Tensor) -> torch.Tensor:
    """sparsemax's threshold by sorting: the largest k with ``1 + k z_(k) > sum_{j<=k} z_(j)``,
    which holds exactly for a prefix of the sorted order, gives ``tau = (sum_{j<=k} z_(j) - 1) / k``.

    Parameters
    ----------
    z : torch.Tensor
        Finite float scores, max-shifted (each row's maximum 0), rows along the last dim.

    Returns
    -------
    torch.Tensor
        tau of each row, z's shape with the last dim of size 1.
    """
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    cumsum = z_sorted.cumsum(-1)
    ks = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    support_size = ((1 + ks * z_sorted) > cumsum).sum(dim=-1, keepdim=True)
    return (cumsum.gather(-1, support_size - 1) - 1) / support_size.to(z.dtype)


def threshold(z: torch.Tensor, start: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """sparsemax's threshold tau of each slice of z along ``dim``, by Michelot's iteration.

    Michelot's algorithm (1986; Condat 2016, "Fast projection onto the simplex"): from any
    tau <= tau*, the update tau <- (sum_{z_i > tau} z_i - 1) / |{z_i > tau}| stays <= tau* and
    never decreases, and once the set {z_i > tau} stops changing tau is tau* exactly. Start at
    max - 1 = -1, a lower bound (the support always holds the maximum). Each pass is one
    masked sum over the row, so a typical call costs a few passes instead of an O(n log n)
    sort (benchmarks/sparsemax_threshold.py compares the two), with the same support and values
    equal to rounding. Slices still moving after ``MAX_PASSES`` passes are finished by
    :func:`threshold_by_sorting`.

    ``start`` (one per row, in z's coordinates) replaces -1 where it is below the maximum: the
    first update from any such start is a lower bound of tau* whichever side of tau* the start
    lies (the set {z_i > start} is then a superset or a nonempty subset of the support, and
    either way (sum_S z_i - 1) / |S| <= tau*), so the iteration stays exact; a start close to
    tau* ends it in two or three passes.

    Parameters
    ----------
    z : torch.Tensor
        Finite float scores, max-shifted along ``dim`` (each slice's maximum 0).
    start : torch.Tensor, optional
        A guess of each slice's threshold (``dim`` kept with size 1); one at or above 0 (the
        maximum), or NaN, is ignored.
    dim : int
        The dimension whose slices are thresholded (default the last).

    Returns
    -------
    torch.Tensor
        tau of each slice, z's shape with ``dim`` of size 1.
    """
    shape = list(z.shape)
    shape[dim] = 1
    tau = torch.full(shape, -1.0, dtype=z.dtype, device=z.device)
    if start is not None:
        tau = torch.where(start < 0, start, tau)
    count = torch.zeros(tau.shape, dtype=z.dtype, device=z.device)
    excess = torch.empty_like(z)  # one buffer for every pass
    for _ in range(MAX_PASSES):
        # sum_{z_i > tau} z_i = sum_i max(z_i - tau, 0) + k tau: cheaper than a masked sum, and
        # k = |{z_i > tau}| counts the positive entries of the same block (z - tau > 0 exactly
        # when z > tau in IEEE arithmetic), a float sum of ones (exact below 2^24 entries;
        # three times faster than summing a boolean mask)
        excess = torch.sub(z, tau, out=excess).relu_()
        total = excess.sum(dim=dim, keepdim=True)
        k = excess.sign_().sum(dim=dim, keepdim=True)
        tau = tau + (total - 1) / k.clamp_min(1)
        if torch.equal(k, count):
            return tau
        count = k
    # rare: rows whose set would still change are finished exactly by sorting
    moving = ((z > tau).sum(dim=dim, keepdim=True) != count).movedim(dim, -1).squeeze(-1)
    tau.movedim(dim, -1)[moving] = threshold_by_sorting(z.movedim(dim, -1)[moving])
    return tau


def _sparsemax_forward(z: torch.Tensor, dim: int) -> torch.Tensor:
    compute_dtype = torch.float32 if z.dtype in _LOW_PRECISION else z.dtype
    z = z.to(compute_dtype).movedim(dim, -1)
    row_max = z.amax(dim=-1, keepdim=True)
    all_neg_inf = row_max == float("-inf")
    # A row of all -inf would become NaN after the shift; give it zeros so that it is uniform.
    z = torch.where(all_neg_inf, torch.zeros_like(z), z - torch.where(all_neg_inf, torch.zeros_like(row_max), row_max))
    if z.shape[-1] == 0:
        return z.movedim(-1, dim)
    return torch.clamp(z - threshold(z), min=0).movedim(-1, dim)


def amax(a: torch.Tensor, dim: int) -> torch.Tensor:
    """``a.amax(dim, keepdim=True)``, the same values (a maximum is exact in any order).

    Over a dimension that is not the innermost one, torch's CPU amax is slower than taking the
    elementwise maximum of the two halves until one slice is left, which this does there (the
    graphmax paper solver's N x batch blocks reduce over dim 0).

    Parameters
    ----------
    a : torch.Tensor
        Any tensor with at least one dimension.
    dim : int
        The dimension to reduce.

    Returns
    -------
    torch.Tensor
        The maximum of each slice along ``dim``, kept with size 1.
    """
    n = a.shape[dim]
    if a.device.type != "cpu" or dim % a.dim() == a.dim() - 1 or n < 2:
        return a.amax(dim=dim, keepdim=True)
    m = a
    while n > 1:
        half = n // 2
        top = torch.maximum(m.narrow(dim, 0, half), m.narrow(dim, half, half))
        if n % 2:
            first = top.narrow(dim, 0, 1)
            torch.maximum(first, m.narrow(dim, n - 1, 1), out=first)
        m, n = top, half
    return m


def project_to_simplex(
    a: torch.Tensor, start: torch.Tensor | None = None, dim: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """sparsemax with its threshold, for solvers that project repeatedly (graphmax's paper solver).

    Parameters
    ----------
    a : torch.Tensor
        Finite float scores of any shape, projected in their own dtype.
    start : torch.Tensor, optional
        A guess of each slice's threshold (``dim`` kept with size 1, in a's coordinates), such
        as the threshold of a nearby earlier input. It only saves passes (see ``threshold``);
        the result does not depend on it beyond rounding. A guess at or above the slice's
        maximum, or NaN, is ignored.
    dim : int
        The dimension whose slices are projected (default the last).

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        The projection p = max(a - tau, 0) in a's shape and dtype, and the threshold tau
        of each slice (``dim`` kept with size 1) in a's own coordinates.
    """
    row_max = amax(a, dim)
    z = a - row_max
    tau = threshold(z, None if start is None else start - row_max, dim)
    return z.sub_(tau).clamp_(min=0), tau + row_max  # z is this call's own block


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
    """sparsemax: the Euclidean projection of ``z`` onto the probability simplex along ``dim``.

    Parameters
    ----------
    z : torch.Tensor or array-like
        Scores of any shape. Integer scores are taken as the default float dtype; float16 and
        bfloat16 are computed in float32. ``-inf`` entries get probability 0, a slice of only
        ``-inf`` becomes uniform, a slice holding NaN or ``+inf`` gives NaN.
    dim : int
        The dimension whose slices are projected (default the last).

    Returns
    -------
    torch.Tensor
        z's shape and (floating) dtype; every slice along ``dim`` is a probability vector,
        possibly with exact zeros. Differentiable: the backward pass is the sparse
        Jacobian-vector product (module docstring).
    """
    if not torch.is_tensor(z):
        z = torch.as_tensor(z)
    if not z.is_floating_point():
        z = z.to(torch.get_default_dtype())
    return SparsemaxFunction.apply(z, dim)
