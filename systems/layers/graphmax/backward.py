"""The backward pass of graphmax's exact solution: implicit differentiation of the fixed point.

The solution satisfies ``x = softmax(z - 2 lam M x)``. Differentiating it,
``dx = S (dz - 2 lam M dx)`` with ``S = diag(x) - x x^T`` (softmax's Jacobian), so

    dL/dz = S (I + 2 lam M S)^{-1} g,   g = dL/dx,

whatever path the solver took to x (nothing is unrolled). The system is not symmetric; with
``s = sqrt(x)`` and ``R = (I - s s^T) diag(s)`` one has ``S = R^T R`` (s has unit norm), and the
same vector is ``R^T (I + 2 lam R M R^T)^{-1} R g``, whose matrix is symmetric positive definite
(M is positive semidefinite): it is solved by conjugate gradients, one system per row, with M
applied through the graph's products (docs/graphmax-math.md).
"""

from __future__ import annotations

import torch

__all__ = ["ImplicitGraphmax", "implicit_vjp"]


def _vecdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vecdot(a, b, dim=-1)


def _batched_cg(apply_K, rhs, tol=1e-12, max_iter=1000):
    """Conjugate gradients for K w = rhs, one independent SPD system per row."""
    W = torch.zeros_like(rhs)
    R = rhs.clone()
    P = R.clone()
    rs = _vecdot(R, R)
    target = (tol**2) * rs
    for _ in range(max_iter):
        if bool((rs <= target).all()):
            break
        KP = apply_K(P)
        pKp = _vecdot(P, KP)
        step = torch.where(pKp > 0, rs / torch.where(pKp > 0, pKp, torch.ones_like(pKp)), torch.zeros_like(rs))
        W += step[:, None] * P
        R -= step[:, None] * KP
        rs_next = _vecdot(R, R)
        beta = torch.where(rs > 0, rs_next / torch.where(rs > 0, rs, torch.ones_like(rs)), torch.zeros_like(rs))
        P = R + beta[:, None] * P
        rs = rs_next
    return W


def implicit_vjp(X, G, op, lam):
    """The vector-Jacobian product of the graphmax solution, ``S (I + 2 lam M S)^{-1} g``.

    Parameters
    ----------
    X : torch.Tensor
        The solution, batch x n (one problem per row), each row summing to 1.
    G : torch.Tensor
        ``dL/dx``, X's shape and dtype.
    op : GraphOperator
        M on the n tokens of X's rows (``m_product``).
    lam : float
        The graph term's weight.

    Returns
    -------
    torch.Tensor
        ``dL/dz``, X's shape and dtype.
    """
    s = X.sqrt()

    def proj(V):  # I - s s^T (s has unit norm because x sums to 1)
        return V - s * _vecdot(s, V)[:, None]

    def apply_K(V):
        return V + (2.0 * lam) * proj(s * op.m_product(s * proj(V))[0])

    return s * proj(_batched_cg(apply_K, proj(s * G)))


class ImplicitGraphmax(torch.autograd.Function):
    """Identity on the (already solved) probabilities; the backward differentiates the fixed
    point ``x = softmax(z - 2 lam M x)`` implicitly (:func:`implicit_vjp`).

    ``ImplicitGraphmax.apply(z, x, op, lam)`` with z, x batch x n (one problem per row): x
    (a copy) attached to z's graph; z gets ``implicit_vjp(x, dL/dx, op, lam)``.
    """

    @staticmethod
    def forward(ctx, z, x, op, lam):  # z, x: batch x n, one problem per row
        ctx.save_for_backward(x)
        ctx.op, ctx.lam = op, lam
        return x.clone()

    @staticmethod
    def backward(ctx, grad_x):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            grad_z = implicit_vjp(x, grad_x.to(x.dtype), ctx.op, ctx.lam)
        return grad_z, None, None, None
