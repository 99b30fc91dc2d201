"""graphmax's exact solver with the tokens outside the graph taken in closed form.

A token k that no edge of the corpus graph touches (no successor, no predecessor) has
``(M x)_k = x_k``, and nothing else depends on it. At the fixed point
``x = softmax(z - 2 lam M x)`` with normaliser c it therefore satisfies, on its own,

    x_k = exp(z_k - 2 lam x_k - c),   i.e.   x_k = W(t_k) / (2 lam),   t_k = 2 lam exp(z_k - c),

W being Lambert's function. On a real corpus graph most of the vocabulary is such a token
(food reviews with SmolLM2: 33,783 of 49,152), and most of them are light: ``t_k`` is small.
For ``t <= 0.01`` the series ``W(t) = t - t^2 + 3/2 t^3 - 8/3 t^4`` is exact to 5e-8 relative,
so every sum the solver needs over the light tokens (their mass, the sum of their squares,
which enters ``||(I - A) x||^2``) is a polynomial in ``exp(-c)`` whose coefficients are the power
sums ``sum_k exp(j z_k)``, j = 1..4, computed once per call. The iteration then runs on the
touched tokens and the few heavy isolated ones only (16k of 49k tokens on the food graph), the
light tokens always sitting at their exact conditional optimum, where their logit residual is
0; the duality gap, f and the stopping rule are those of the full problem, with the light
tokens' terms added in closed form, and the returned log-probabilities cover all N tokens.

Which isolated tokens are light is decided before the first step. At the optimum the
isolated tokens' logits ``z_k - 2 lam x_k >= z_k - 2 lam`` bound the normaliser:
``c >= logsumexp_iso(z) - 2 lam``. Tokens are classified at ``c_lo``, that bound plus log 5:
light where ``t <= 0.01`` at ``c_lo``. Every evaluation checks that c has stayed above the bound
(``t <= 0.05`` for every light token, where the series is still exact to 3e-5 relative); a
problem where it has not is solved again on all tokens. When the graph touches more than 60%
of the vocabulary (movie reviews: 83%), or the heavy tokens would make the block more than
70% of it (large lam, where the bound is loose), the solver keeps all tokens: the set-up
passes would then cost more than they save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from maxbench.systems.layers.graphmax import presolve as graphmax_presolve

# a light isolated token has t = 2 lam exp(z - c) <= _T_CLASSIFY at c = c_lo ...
_T_CLASSIFY = 0.01
# ... and stays within the series' reach while c >= c_lo - log(_U_MAX)
_U_MAX = 5.0
# the solver works on the touched and heavy tokens when they are at most these shares of N
_TOUCHED_SHARE = 0.6
_BLOCK_SHARE = 0.7
# IsolatedBlock.touched_product: the kernel's product where the touched rows hold at most this many
# edges on average (as graphmax.paper's _Product.SHORT_ROWS, chosen there)
_SHORT_ROWS = 16
# W(t) = sum_j w_j t^j and W(t)^2 = sum_j q_j t^j, to the 4th power
_W = (1.0, -1.0, 1.5, -8.0 / 3.0)
_W_SQUARED = (0.0, 1.0, -2.0, 4.0)
_POWERS = torch.arange(1, 5, dtype=torch.float64)[:, None]


@dataclass
class LightTokens:
    """The light isolated tokens of each column (problem) as polynomials in ``u = e^{c_lo - c}``:
    their mass ``sum_j mass_coef[j] u^(j+1)`` and sum of squares ``sum_j square_coef[j] u^(j+1)``
    (float64, 4 x batch), from the power sums ``sum_k e^{j (z_k - c_lo)}``."""

    lam: float
    c_lo: torch.Tensor  # (batch,) float64
    mass_coef: torch.Tensor  # (4, batch) float64
    square_coef: torch.Tensor  # (4, batch) float64

    @classmethod
    def from_power_sums(cls, lam: float, c_lo: torch.Tensor, power: torch.Tensor) -> LightTokens:
        # with t_k = 2 lam e^{z_k - c_lo} u: mass = sum_k W(t_k) / (2 lam), squares = sum_k W(t_k)^2 / (4 lam^2)
        scale = (2.0 * lam) ** torch.arange(4, dtype=power.dtype, device=power.device)[:, None]
        w = power.new_tensor(_W)[:, None]
        q = power.new_tensor(_W_SQUARED)[:, None]
        return cls(lam, c_lo, w * scale * power, q * scale / (2.0 * lam) * power)

    def columns(self, cols: torch.Tensor) -> LightTokens:
        return LightTokens(self.lam, self.c_lo[cols], self.mass_coef[:, cols], self.square_coef[:, cols])

    def normalise(self, S: torch.Tensor, shift: torch.Tensor):
        """The normaliser c with ``S e^{shift - c} + mass(c) = 1`` (S: sum over the block of
        ``e^{y - shift}``), by Newton's method on ``v = e^{shift - c}`` from the value that
        ignores the series' corrections (together <= 5% of the mass, so 3 steps reach float64
        rounding). Returns (v, c, light mass, light sum of squares, c within reach)."""
        S, shift = S.double(), shift.double()
        powers = _POWERS.to(S.device)
        kappa = torch.exp(self.c_lo - shift)  # u = kappa v
        a = self.mass_coef * kappa**powers  # mass = sum_j a_j v^(j+1)
        v = 1.0 / (S + a[0])
        for _ in range(3):
            av = a * v**powers
            v = v - (S * v + av.sum(0) - 1.0) / (S + (av * powers).sum(0) / v)
        u = (kappa * v) ** powers
        mass, squares = (self.mass_coef * u).sum(0), (self.square_coef * u).sum(0)
        return v, shift - v.log(), mass, squares, u[0] <= _U_MAX

    def log_probs(self, Z: torch.Tensor, c: torch.Tensor, kernels=None) -> torch.Tensor:
        """log x of every token as if light, at normaliser c per problem, for the scores Z with
        one row per problem (batch x N; the caller overwrites the block's tokens):
        ``x = W(t) / (2 lam)`` with the same series as the sums, written
        ``log x = z - c + log1p(W(t) / t - 1)``, ``t = 2 lam e^{z - c}``, which stays finite
        where t underflows. With ``kernels`` (maxbench.systems.layers.graphmax.kernels.exact, float32) in one pass,
        as ``log x = z - c - W(t)`` (``W(t) / t = e^{-W(t)}``)."""
        if kernels is not None:
            out = torch.empty_like(Z)
            kernels.light_log_probs(Z.numpy(), c.float().numpy(), np.float32(2.0 * self.lam), out.numpy())
            return out
        out = torch.sub(Z, c.to(Z.dtype)[:, None])
        e = torch.exp(out)
        lam2 = 2.0 * self.lam
        # W(t) / t - 1 = t (-1 + t (3/2 - 8/3 t)) by Horner, as e (-2 lam + (2 lam)^2 e (3/2 - 16/3 lam e))
        h = torch.add(Z.new_tensor(_W[2]), e, alpha=_W[3] * lam2)
        torch.addcmul(Z.new_tensor(_W[1] * lam2), e, h, value=lam2 * lam2, out=h)
        return out.add_(e.mul_(h).log1p_())


class IsolatedBlock:
    """``M`` on the block of tokens ``[touched; heavy isolated]``: the graph's operator on the
    touched tokens (every edge lies among them) and the identity on the heavy isolated ones."""

    def __init__(self, touched_op, n_touched: int, n_heavy: int, dtype: torch.dtype):
        self.touched_op = touched_op
        self.n_touched = n_touched
        self.n = n_touched + n_heavy
        self._diag = torch.cat([touched_op.diag_m(dtype), torch.ones(n_heavy, dtype=dtype, device=touched_op.device)])

    def diag_m(self, dtype: torch.dtype) -> torch.Tensor:
        return self._diag.to(dtype)

    def hub_block(self, H: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``GraphOperator.hub_block`` on the block: the touched tokens' hubs, and the heavy
        isolated tokens with M = 1 on the diagonal and nothing else."""
        pos, M_SS = self.touched_op.hubs(dtype)
        hub_pos = torch.where(H < self.n_touched, pos[H.clamp_max(self.n_touched - 1)], -1)
        return graphmax_presolve.hub_block(hub_pos, M_SS, self.diag_m(dtype)[H])

    def touched_product(self, XT: torch.Tensor, kernels, short_product: bool = True):
        """``M X`` on the touched tokens only (the block's first rows; M is the identity on the
        rest) and ``||(I - A) x||^2`` of each column in float64, as fixed chunks' sums of
        ``kernels`` (``paper_kernels``) whichever product ran. The product is the kernels'
        ``residual`` with ``short_product`` where the touched rows hold few edges (at most
        ``_SHORT_ROWS`` on average: the food-reviews graph, 9), else ``GraphOperator``'s (scipy's
        kernel, or numba's ``product`` with more threads): the same bits."""
        nt = self.n_touched
        X = XT.numpy()
        A, AT = self.touched_op.matrices(XT.dtype)
        if short_product and A.nnz <= _SHORT_ROWS * nt:
            rows = np.arange(nt)
            BX, MX = (np.empty((nt, X.shape[1]), dtype=X.dtype) for _ in range(2))
            kernels.residual(A.indptr, A.indices, A.data, X, rows, BX)
            kernels.residual(AT.indptr, AT.indices, AT.data, BX, rows, MX)
        else:
            BX, MX = (t.numpy() for t in self.touched_op.products_columns(XT[:nt]))
        return torch.from_numpy(MX), torch.from_numpy(squares(kernels, BX) + squares(kernels, X[nt:]))

    def m_product_columns(self, XT: torch.Tensor):
        nt = self.n_touched
        MXT, bx_sq = self.touched_op.m_product_columns(XT[:nt])
        XH = XT[nt:]
        return torch.cat([MXT, XH]), bx_sq + torch.linalg.vecdot(XH, XH, dim=0)


def squares(kernels, X: np.ndarray) -> np.ndarray:
    """Each column's sum of squares of X in float64, over fixed chunks of rows added in chunk
    order (``kernels``: ``paper_kernels``): the same bits for any thread count or batch width."""
    part = np.empty((kernels.chunks(X.shape[0]), X.shape[1]), dtype=np.float64)
    kernels.column_sums(X, True, part)
    return kernels.total(part)


def split(ZT: torch.Tensor, op, lam: float, kernels=None):
    """Decide whether the solve runs on the touched and heavy tokens only and prepare it:
    (block token ids, block operator, LightTokens), or None to solve on all tokens. ZT is
    N x batch, max-shifted (every column's maximum is 0). With ``kernels``
    (maxbench.systems.layers.graphmax.kernels.exact, float32) in two reads of the untouched tokens."""
    touched = op.touched()
    n = op.n
    if lam <= 0 or touched.numel() > _TOUCHED_SHARE * n or touched.numel() == n:
        return None
    untouched = op.untouched()
    if kernels is not None:
        rows, Zn = untouched.numpy(), ZT.numpy()
        part = np.empty((kernels.chunks(rows.size), ZT.shape[1]), dtype=np.float64)
        kernels.isolated_sums(Zn, rows, part)
        iso_sum = torch.from_numpy(kernels.total(part))
    else:
        E = torch.index_select(ZT, 0, untouched).exp_()
        iso_sum = E.sum(0).double()
    if not bool((iso_sum > 0).all()):
        return None
    # c >= logsumexp_iso(z) - 2 lam; the tokens are classified at c_lo = that bound + log(_U_MAX),
    # so that the series holds (u <= _U_MAX) wherever the bound does
    c_lo = iso_sum.log() - 2.0 * lam + math.log(_U_MAX)
    if float(c_lo.min()) < -60.0:  # the isolated tokens carry nothing: not worth it (and e^{-4 c_lo} overflows)
        return None
    # heavy: t = 2 lam e^{z - c_lo} > _T_CLASSIFY in some column
    scale = (torch.exp(-c_lo) * (2.0 * lam / _T_CLASSIFY)).to(ZT.dtype)
    if kernels is not None:
        flags = np.empty(rows.size, dtype=np.bool_)
        powers = np.empty((part.shape[0], 4, ZT.shape[1]), dtype=np.float64)
        kernels.isolated_powers(Zn, rows, scale.numpy(), flags, powers)
        heavy = untouched[torch.from_numpy(flags)]
        if touched.numel() + heavy.numel() > _BLOCK_SHARE * n:
            return None
        sums = torch.from_numpy(kernels.total(powers))
    else:
        heavy_rows = (torch.mul(E, scale).amax(1) > 1.0).nonzero().flatten()
        heavy = untouched[heavy_rows]
        if touched.numel() + heavy.numel() > _BLOCK_SHARE * n:
            return None
        E.index_fill_(0, heavy_rows, 0.0)
        # float32 sums over dim 0 (within 1e-6 relative, as the solver's own softmax sums; a
        # float64 accumulation would cost as much as the rest of the set-up)
        E2 = E * E
        dot = torch.linalg.vecdot
        sums = torch.stack([E.sum(0), E2.sum(0), dot(E2, E, dim=0), dot(E2, E2, dim=0)])
    power = sums.double() * torch.exp(-_POWERS.to(c_lo.device) * c_lo)
    block = torch.cat([touched, heavy])
    return (
        block,
        IsolatedBlock(op.touched_operator(), touched.numel(), heavy.numel(), ZT.dtype),
        LightTokens.from_power_sums(float(lam), c_lo, power),
    )
