"""One evaluation of graphmax's exact solver at an iterate: what the next step needs.

The exact solver (``maxbench.systems.layers.graphmax.exact``) iterates in logit space, one
problem per column of an N x batch block (the layout scipy's CSR products want, so that no
iterate is transposed; sums over tokens are sums over dim 0). At an iterate y, with
``x = softmax(y)`` and the logit residual ``r = z - 2 lam M x - y``, an evaluation gives per
column the next step's direction ``(r - <x, r>) / (1 + 2 lam diag(M) x)`` (or r itself, for the
plain iteration), the duality gap of x, f(x), the log-sum-exp of y and the rounding error of f
(the safeguard's allowance). The gap is computed as ``log sum_i x_i e^{d_i} - sum_i x_i d_i``
with d the centred residual ``r - <x, r>`` (docs/graphmax-math.md), which keeps its accuracy far
below the rounding error of numbers of size 1.

Two implementations of the same arithmetic: torch's operations (:func:`evaluate`: float64,
CUDA, the torch backend) and the fused numba kernels of
``maxbench.systems.layers.graphmax.kernels.exact`` (:func:`evaluate_kernels`: float32 on the
CPU), which read the block three times besides the graph product where torch's operations
make many passes. They differ in rounding only.

With the light isolated tokens in closed form (``maxbench.systems.layers.graphmax.isolated``)
the block holds the other tokens only; the gap and f are still those of the full problem.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from maxbench.systems.layers.graphmax import isolated as graphmax_isolated
from maxbench.systems.layers.graphmax.kernels import loader as cpu_kernels

__all__ = ["Evaluation", "evaluate", "evaluate_kernels", "columns"]

# The kernels' graph product (paper_kernels.residual) from this many columns; scipy's or torch's
# below, where the kernel's cost per edge outweighs what it saves.
_KERNEL_PRODUCT_WIDTH = 32


@dataclass
class Evaluation:
    """The exact solver's quantities at one iterate y, one entry (or column) per problem."""

    y: torch.Tensor  # the iterate evaluated (N x batch)
    direction: torch.Tensor  # the next step's direction (N x batch)
    gap: torch.Tensor  # duality gap of x = softmax(y); a lower bound where ``exact`` is False
    exact: torch.Tensor  # whether ``gap`` is the exact gap
    f: torch.Tensor  # f(x) at the (max-shifted) scores
    lse: torch.Tensor  # log sum exp(y), the next evaluation's shift
    f_error: torch.Tensor  # a bound on the rounding error of f
    ok: torch.Tensor | None  # the light tokens' series still holds (None without light tokens)
    residual: torch.Tensor | None = None  # the logit residual r, where asked for (presolve)


def _vecdot(a: torch.Tensor, b: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.linalg.vecdot(a, b, dim=dim)


def columns(T: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The columns ``cols`` of an N x batch block as a contiguous block.

    Parameters
    ----------
    T : torch.Tensor
        An N x batch block.
    cols : torch.Tensor
        Column indices (int64, on T's device).

    Returns
    -------
    torch.Tensor
        The same values as ``T[:, cols]``, which torch's advanced indexing gathers more slowly.
    """
    return torch.index_select(T, 1, cols)


def _kl_gap(X: torch.Tensor, D: torch.Tensor, first: torch.Tensor, logX_of, light=None) -> torch.Tensor:
    """``log sum_i x_i e^{d_i} - sum_i x_i d_i`` per column, with d the centred logit residual
    ``r - <x, r>`` and ``first = <x, d>``: the duality gap (r is ``z - 2 lam M x - log x`` up to
    a per-column constant, to which it is invariant).

    Centring r and using expm1 keeps the result accurate when the gap is far below the
    rounding error of numbers of size 1 (needed to certify and to compare iterates there):
    the two sums then cancel only the rounding error of the centre.

    ``light``: (mass, centre) of the tokens outside the block, whose residual is 0 (d = -centre)."""
    terms = _vecdot(X, torch.expm1(D), dim=0)
    if light is not None:
        terms = terms + light[0] * torch.expm1(-light[1])
    gap = torch.log1p(terms) - first
    overflow = ~torch.isfinite(gap)
    if bool(overflow.any()):  # only far from the optimum: take the plain log-sum-exp there
        cols = overflow.nonzero().flatten()
        lse = torch.logsumexp(logX_of(cols) + columns(D, cols), dim=0)
        if light is not None:
            lse = torch.logaddexp(lse, light[0][cols].log() - light[1][cols])
        gap[cols] = lse - first[cols]
    return gap.clamp_min(0.0)


def _redo_off_range(YT: torch.Tensor, X: torch.Tensor, s: torch.Tensor, shift: torch.Tensor):
    """A column whose sum s of ``exp(y - shift)`` left [1e-10, 1e10] (a long step, or the
    first one) is exponentiated again at its maximum: X and s are updated in place; returns
    (s, the shifts used)."""
    off = ~((s >= 1e-10) & (s <= 1e10))
    if bool(off.any()):
        cols = off.nonzero().flatten()
        Yc = columns(YT, cols)
        m = Yc.amax(0)
        Xc = torch.sub(Yc, m).exp_()
        X.index_copy_(1, cols, Xc)
        shift = shift.clone()
        shift[cols] = m
        s[cols] = Xc.sum(0).to(s.dtype)
    return s, shift


def _softmax_columns(YT: torch.Tensor, shift: torch.Tensor, light=None):
    """softmax of each column of YT and its log-sum-exp, exponentiating ``y - shift``; with
    ``light`` (graphmax_isolated.LightTokens) the block's share of the softmax over all tokens,
    its normaliser, and the light tokens' mass, sum of squares and whether the normaliser is
    within the series' reach (else None, None, None).

    ``shift`` is the log-sum-exp of the previous iterate (a step moves y little), which saves
    the pass that finds each column's maximum; a column whose sum leaves [1e-10, 1e10] (a
    long step, or the first one) is redone with its maximum."""
    X = torch.sub(YT, shift).exp_()
    s, shift = _redo_off_range(YT, X, X.sum(0), shift)
    if light is None:
        X.div_(s)
        return X, shift + s.log(), None, None, None
    v, c, mass, squares, ok = light.normalise(s, shift)
    X.mul_(v.to(X.dtype))
    return X, c.to(X.dtype), mass.to(X.dtype), squares.to(X.dtype), ok


def evaluate(YT, ZT, op, lam, curvature, shift, tol=None, light=None, residual=False) -> Evaluation:
    """The solver's quantities at x = softmax(y), per column, in torch's operations.

    The rounding error of f is counted in units of the dtype's epsilon: f is a sum of terms
    that can be much larger than f itself, lam ||Bx||^2 in particular. With ``light`` the
    light isolated tokens sit at their conditional optimum (residual 0, mass and sum of
    squares in closed form); the gap and f are still those of the full problem.

    With ``tol`` the exact gap (an expm1 over the block, the costliest pass) is computed only
    for the columns that could be within ``tol``; the others get a lower bound on it, from
    ``e^d >= 1 + d + d^2/2 + d^3/6`` (true for every real d):
    ``gap >= log(1 + <x, d> + <x, d^2>/2 + <x, d^3>/6) - <x, d>``. A column whose bound
    exceeds ``tol`` (relative, with a factor 2 for rounding) cannot have converged, so the
    stopping decisions are the ones the exact gaps would give.

    Parameters
    ----------
    YT, ZT : torch.Tensor
        The iterate y and the max-shifted scores z, N x batch (the block's tokens only with
        ``light``). YT is not written.
    op : GraphOperator or IsolatedBlock
        M on the block's tokens (``m_product_columns``).
    lam : float
        The graph term's weight.
    curvature : torch.Tensor or None
        ``2 lam diag(M)`` as an N x 1 column: the direction is ``(r - <x, r>) / (1 + curvature
        * x)`` with ``r = z - 2 lam M x - y``; None gives r itself (the plain iteration).
    shift : torch.Tensor
        Per column, the value subtracted from y before the exponential (the previous
        log-sum-exp; a column whose sum falls out of range is redone at its maximum).
    tol : float, optional
        The stopping tolerance: without it every column's gap is the exact one.
    light : graphmax_isolated.LightTokens, optional
        The light isolated tokens of each column, outside the block.
    residual : bool
        Also return the logit residual r (for graphmax_presolve's first step).

    Returns
    -------
    Evaluation
        With ``y`` YT itself.
    """
    X, lse, mass, squares, ok = _softmax_columns(YT, shift, light)
    MX, bx_sq = op.m_product_columns(X)
    if light is not None:
        bx_sq = bx_sq + squares
    R = torch.sub(ZT, YT).add_(MX, alpha=-2.0 * lam)
    del MX
    plain = R.clone() if curvature is None or residual else None
    centre = _vecdot(X, R, dim=0)
    D = R.sub_(centre)
    XD = torch.mul(X, D)
    first = XD.sum(0)
    outside = None if light is None else (mass, centre)
    if light is not None:
        first = first - mass * centre
    # f = <x, y - lse - z> + lam ||Bx||^2 and <x, r> = <x, z - y> - 2 lam ||Bx||^2 (as <x, Mx>
    # = ||Bx||^2), so f = -<x, r> - lam ||Bx||^2 - lse without another pass over x.
    f = -(centre + first) - lam * bx_sq - lse
    f_error = (centre.abs() + first.abs() + lam * bx_sq + lse.abs() + 1.0) * (64 * torch.finfo(YT.dtype).eps)
    exact = torch.ones_like(first, dtype=torch.bool)
    gap = None
    if tol is not None:
        m2 = XD.mul_(D).sum(0)
        m3 = XD.mul_(D).sum(0)
        if light is not None:
            m2, m3 = m2 + mass * centre**2, m3 - mass * centre**3
        moments = first + 0.5 * m2 + m3 / 6.0
        lower = torch.where(moments > -1.0, torch.log1p(moments.clamp_min(-0.5)) - first, 0.0).clamp_min(0.0)
        exact = lower <= (2.0 * tol) * f.abs().clamp_min(1.0)
        if not bool(exact.all()):
            gap = lower
            cols = exact.nonzero().flatten()
            if cols.numel():
                Xc, Dc, lse_c = columns(X, cols), columns(D, cols), lse[cols]
                part = None if light is None else (mass[cols], centre[cols])
                gap[cols] = _kl_gap(Xc, Dc, first[cols], lambda c: columns(YT, cols[c]) - lse_c[c], part)
    del XD
    if gap is None:
        gap = _kl_gap(X, D, first, lambda cols: columns(YT, cols) - lse[cols], outside)
    direction = plain if curvature is None else D.div_(X.mul_(curvature).add_(1.0))
    if light is not None and curvature is not None:
        # The full step would move the light tokens by -theta <x, r> / (1 + 2 lam x_k), about
        # -theta <x, r>; they re-solve in closed form instead, so the block takes that shift
        # with the opposite sign (x is invariant to a common shift of y). Without it the
        # block's level relative to the light tokens would never settle: r = <x, r> != 0 on
        # the block would be a fixed point.
        direction.add_(centre)
    return Evaluation(YT, direction, gap, exact, f, lse, f_error, ok, plain if residual else None)


def evaluate_kernels(K, YT, step, ZT, op, lam, curvature, shift, tol, light=None, residual=False) -> Evaluation:
    """:func:`evaluate` in the CPU kernels (float32), after taking the step.

    The kernels' e^d - 1 costs no extra pass, so every column's gap is the exact one but where
    some d is too large for float32's exponential (``K.CLAMP``); there the gap is a lower bound,
    made exact by a plain log-sum-exp where it could be within ``tol``.

    Parameters
    ----------
    K : module
        ``maxbench.systems.layers.graphmax.kernels.exact``, loaded (``kernels.loader``).
    YT : torch.Tensor
        The current iterate, N x batch, float32; not written.
    step : (torch.Tensor, torch.Tensor) or None
        (direction, theta): evaluate at ``y = YT + direction * theta`` (theta per column);
        None evaluates at YT.
    ZT, op, lam, curvature, shift, light, residual
        As for :func:`evaluate`; curvature must be given.
    tol : float
        The stopping tolerance.

    Returns
    -------
    Evaluation
        With ``y`` the iterate evaluated (YT itself without ``step``).
    """
    n, b = YT.shape
    nch = K.chunks(n)
    part = np.empty((nch, b), dtype=np.float64)
    X = torch.empty_like(YT)
    if step is None:
        Y, D, theta = YT, np.empty((0, b), dtype=np.float32), np.empty(b, dtype=np.float32)
    else:
        Y, D, theta = torch.empty_like(YT), step[0].numpy(), step[1].numpy()
    K.step_softmax(YT.numpy(), D, theta, shift.numpy(), Y.numpy(), X.numpy(), part)
    s, shift = _redo_off_range(Y, X, torch.from_numpy(K.total(part)), shift)
    if light is None:
        v, lse, mass, squares, ok = 1.0 / s, shift.double() + s.log(), None, None, None
    else:
        v, lse, mass, squares, ok = light.normalise(s, shift)
    # the product of the unnormalised x, scaled by v in the residual's pass
    # and ||(I - A) x||^2 as chunk sums in float64 whichever product ran
    PK = cpu_kernels.load("paper")
    if isinstance(op, graphmax_isolated.IsolatedBlock):
        # the kernels' product where the block is wide (the same bits either way)
        MX, bx_sq = op.touched_product(X, PK, b >= _KERNEL_PRODUCT_WIDTH)
    else:
        BX, MX = op.products_columns(X)
        bx_sq = torch.from_numpy(graphmax_isolated.squares(PK, BX.numpy()))
        del BX
    bx_sq = bx_sq * v**2
    if squares is not None:
        bx_sq = bx_sq + squares
    R = torch.empty_like(YT)
    K.residual(
        X.numpy(),
        v.float().numpy(),
        ZT.numpy(),
        Y.numpy(),
        MX.numpy(),
        (2.0 * lam * v).float().numpy(),
        R.numpy(),
        part,
    )
    centre = torch.from_numpy(K.total(part))
    del MX
    sums = np.empty((nch, 3, b), dtype=np.float64)
    direction = torch.empty_like(YT)
    # with light tokens the block takes the light tokens' shift of the full step (see evaluate)
    level = centre if light is not None else torch.zeros_like(centre)
    K.direction(
        X.numpy(),
        R.numpy(),
        centre.float().numpy(),
        curvature[:, 0].contiguous().numpy(),
        level.float().numpy(),
        direction.numpy(),
        sums,
    )
    first, terms = (torch.from_numpy(t) for t in K.total(sums[:, :2]))
    top = torch.from_numpy(sums[:, 2].max(0))
    if light is not None:
        first = first - mass * centre
        terms = terms + mass * torch.expm1(-centre)
    gap = (torch.log1p(terms) - first).clamp_min(0.0)
    f = -(centre + first) - lam * bx_sq - lse
    eps = torch.finfo(YT.dtype).eps
    f_error = (centre.abs() + first.abs() + lam * bx_sq + lse.abs() + 1.0) * (64 * eps)
    # The kernel takes e^min(d, CLAMP) - 1 (e^d overflows float32 above 88.7): where some d
    # exceeds CLAMP (far from the optimum: a first step) the gap is a lower bound, exact only
    # where it could be within tol, by the plain log-sum-exp.
    exact = top <= K.CLAMP
    if not bool(exact.all()):
        cols = (~exact & (gap <= (2.0 * tol) * f.abs().clamp_min(1.0))).nonzero().flatten()
        if cols.numel():
            D = columns(R, cols).sub_(centre[cols].float())
            lse_c = torch.logsumexp((columns(Y, cols) - lse[cols].float() + D).double(), dim=0)
            if light is not None:
                lse_c = torch.logaddexp(lse_c, mass[cols].log() - centre[cols])
            gap[cols] = (lse_c - first[cols]).clamp_min(0.0)
            exact[cols] = True
    dt = YT.dtype
    return Evaluation(
        Y, direction, gap.to(dt), exact, f.to(dt), lse.to(dt), f_error.to(dt), ok, R if residual else None
    )
