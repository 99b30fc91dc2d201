"""graphmax's paper solver: Algorithm 1 of graphmax-jair as printed (docs/graphmax-math.md says
what it computes and why it is not the minimiser of eq. 3; it is kept as a diagnostic only).

From ``x^1 = 0``, ``T - 1`` updates ``x <- proj_simplex(x - alpha grad f(x))`` with
``grad f(x) = -z + log(max(x, floor)) + 1 + 2 lam M x`` (eq. 8), stopping a row once
``||x^{t+1} - x^t||_2 < stop``. The iterates keep one problem per column (N x batch), the layout
the graph products want.

Two implementations of the same arithmetic:

- on the CPU, each update's elementwise work and sums run in the fused kernels of
  ``maxbench.systems.layers.graphmax.kernels.paper`` (numba): a logarithm and three reads of the block plus one
  per pass of Michelot's iteration, where torch's operations take about 30, and no torch
  thread runs meanwhile. The graph product runs on the tokens some edge touches only
  (``GraphOperator.touched_operator``, the same sums in the same order), and an untouched
  token's ``(M x)_i`` is its own ``x_i``. benchmarks/graphmax_kernels.py times it against the
  torch path (README for the figures);
- elsewhere (CUDA), torch operations (``sparsemax.project_to_simplex``), also used by the tests
  on the CPU to check that both give the same iterates to rounding.

Rounding differs between the two (the sums run in another order), and from the third update on
the iteration amplifies such differences by orders of magnitude per update
(tests/systems/layers/test_graphmax_paper.py), so the two paths' outputs differ by more than one rounding
(benchmarks/graphmax_kernels.py measures by how much on real decoding logits). Either is the
paper's algorithm.
"""

from __future__ import annotations

import numpy as np
import torch

from maxbench.systems.layers.graphmax.kernels import loader as cpu_kernels
from maxbench.systems.layers.sparsemax.operator import MAX_PASSES, project_to_simplex, threshold_by_sorting

__all__ = ["solve"]


def solve(Z: torch.Tensor, op, lam: float, alpha: float, T: int, stop: float, log_floor: float, kernels: bool = True):
    """Algorithm 1 on each row of Z (batch x N, max-shifted scores): (x with one row per
    problem, updates taken per row, whether the row met the stop rule, and where the kernels
    ran (log x, duality gap, f) of the full problem at x, else None for the caller to certify).
    The kernels run where the graph products do (the scipy backend, on the CPU);
    ``kernels=False`` or the torch backend take the torch path."""
    if kernels and op.backend == "scipy":
        return _solve_cpu(Z, op, lam, alpha, T, stop, log_floor)
    return (*_solve_torch(Z, op, lam, alpha, T, stop, log_floor), None)


def _solve_cpu(Z, op, lam, alpha, T, stop, log_floor):
    paper_kernels = cpu_kernels.load("paper")
    batch, n = Z.shape
    ZT = _transposed(paper_kernels, Z.numpy())
    dtype = ZT.dtype.type
    XT = np.zeros_like(ZT)
    product = _Product(op, Z.dtype)
    floor = dtype(log_floor)
    scalars = (dtype(alpha), dtype(2.0 * lam), dtype(1.0))
    iterations = np.zeros(batch, dtype=np.int64)
    done = np.zeros(batch, dtype=bool)
    # The blocks every update writes, allocated once: a fresh 9 MiB block pays a page fault per
    # 4 KiB page on its first write. The iterate and the next one alternate between two blocks.
    full = _Blocks(n, product.n_touched, batch, ZT.dtype)
    # the threshold two updates back starts the projection (the iterates settle into a period-2 cycle)
    taus: list[np.ndarray | None] = [None, None]
    t = 1
    while t < T:  # Algorithm 1, line 2, with x^1 = 0 (line 1)
        active = np.flatnonzero(~done)
        if active.size == 0:
            break
        everyone = active.size == batch
        blocks = full if everyone else _Blocks(n, product.n_touched, active.size, ZT.dtype)
        Xa = XT if everyone else np.ascontiguousarray(XT[:, active])
        Za = ZT if everyone else np.ascontiguousarray(ZT[:, active])
        MX = product(paper_kernels, Xa, blocks)
        start = taus[0] if taus[0] is None or everyone else taus[0][active]
        # NumPy's vectorised logarithm (one thread): faster than torch's on two threads
        np.log(np.maximum(Xa, floor, out=blocks.log_x), out=blocks.log_x)
        X_next, tau, step = _update(paper_kernels, Xa, Za, MX, product.mx_rows, scalars, start, blocks)
        if everyone:
            XT, full.x_next, taus = X_next, XT, [taus[1], tau]
        else:
            XT[:, active] = X_next
            nan = np.full(batch, np.nan, dtype=ZT.dtype)
            nan[active] = tau
            taus = [taus[1], nan]
        iterations[active] += 1
        done[active] = step < dtype(stop)  # line 8
        t += 1
    log_X, gap, f = _certify(paper_kernels, XT, ZT, lam, product, full)
    X, log_X = (torch.from_numpy(_transposed(paper_kernels, block)) for block in (XT, log_X))
    certified = (log_X, torch.from_numpy(gap), torch.from_numpy(f))
    return X, torch.from_numpy(iterations), torch.from_numpy(done), certified


def _transposed(kernels, X):
    out = np.empty(X.shape[::-1], dtype=X.dtype)
    kernels.transpose(X, out)
    return out


class _Product:
    """``M X`` on the tokens some edge touches (all tokens where every one is), and
    ``||(I - A) x||^2`` of each column on request. An untouched token's ``(B x)_i = x_i`` and
    ``(M x)_i = x_i``: ``mx_rows`` gives each token's row of the product's block, -1 for an
    untouched one. Both kernels below add each row's terms in stored order, scipy's bits.

    Where the touched tokens' rows hold few edges on average (at most ``SHORT_ROWS``: the
    food-reviews graph, 9), ``paper_kernels.residual`` (the rows of A at the touched tokens
    with X's row numbers as column indices, so that it reads X where it lies, then A^T among
    them); where they hold many (movie reviews, 48), ``GraphOperator``'s products on the touched
    tokens (scipy's kernel on one thread, ``paper_kernels.product`` on more), chosen when torch's
    CSR kernel ran there and was the faster (benchmarks/graphmax_kernels.py times whole solver
    calls with one and the other)."""

    SHORT_ROWS = 16

    def __init__(self, op, dtype: torch.dtype):
        touched = op.touched().numpy()
        n = op.n
        t_op = op.touched_operator() if touched.size < n else op
        A, self.AT = t_op.matrices(dtype)
        self.n_touched = touched.size
        self.kernel = A.nnz <= self.SHORT_ROWS * max(1, touched.size)
        if touched.size < n:
            self.rows = touched
            self.A = (A.indptr, touched[A.indices], A.data)
            self.mx_rows = np.full(n, -1, dtype=np.int64)
            self.mx_rows[touched] = np.arange(touched.size)
        else:
            self.rows = self.mx_rows = np.arange(n)
            self.A = (A.indptr, A.indices, A.data)
        self.local = np.arange(touched.size)
        self.t_op = t_op

    def __call__(self, kernels, X, blocks, norm=False):
        """M X on the touched tokens (blocks.mx), with ``norm`` also ``||(I - A) x||^2`` over them."""
        if not self.kernel:
            XT = X if self.n_touched == X.shape[0] else np.take(X, self.rows, 0, blocks.bx)
            MX, bx_sq = self.t_op.m_product_columns(torch.from_numpy(XT))
            blocks.mx[...] = MX.numpy()
            return (blocks.mx, bx_sq.numpy()) if norm else blocks.mx
        kernels.residual(*self.A, X, self.rows, blocks.bx)
        kernels.residual(self.AT.indptr, self.AT.indices, self.AT.data, blocks.bx, self.local, blocks.mx)
        if not norm:
            return blocks.mx
        squares = np.empty((kernels.chunks(self.n_touched), X.shape[1]), dtype=X.dtype)
        kernels.column_sums(blocks.bx, True, squares)
        return blocks.mx, squares.sum(0)


class _Blocks:
    """The work blocks of an update on ``batch`` columns: N x batch (the gradient step, log x,
    the next iterate) and touched x batch ((I - A) x and M x on the touched tokens)."""

    def __init__(self, n: int, n_touched: int, batch: int, dtype):
        self.step, self.log_x, self.x_next = (np.empty((n, batch), dtype=dtype) for _ in range(3))
        self.bx, self.mx = (np.empty((n_touched, batch), dtype=dtype) for _ in range(2))


def _certify(kernels, XT, ZT, lam, product, blocks):
    """log x (-inf at exact zeros), the duality gap and f of the full problem at x, one
    problem per column: ``graphmax_exact.certify`` in the kernels' passes."""
    n, b = XT.shape
    MX, touched_sq = product(kernels, XT, blocks, norm=True)
    with np.errstate(divide="ignore"):
        log_X = np.log(XT)
    V = blocks.step
    part = np.empty((kernels.chunks(n), 4, b), dtype=XT.dtype)
    kernels.certificate(XT, log_X, ZT, MX, product.mx_rows, XT.dtype.type(2.0 * lam), V, part)
    f_z, f_v, untouched_sq = part[:, :3].sum(0)
    top = part[:, 3].max(0)
    np.exp(np.subtract(V, top, out=V), out=V)
    sums = np.empty((kernels.chunks(n), b), dtype=XT.dtype)
    kernels.column_sums(V, False, sums)
    gap = np.maximum(f_v + (top + np.log(sums.sum(0))), 0)
    return log_X, gap, f_z + lam * (touched_sq + untouched_sq)


def _update(kernels, X, Z, MX, mx_rows, scalars, start, blocks):
    """Lines 3-7 on the columns of X: (x^{t+1}, the projection's threshold in the gradient
    step's coordinates, ||x^{t+1} - x^t||_2). The threshold is ``sparsemax.threshold``'s
    Michelot iteration, from ``start`` where it lies below the column's maximum."""
    n, b = X.shape
    one = scalars[2]
    A = blocks.step
    part = np.empty((kernels.chunks(n), b), dtype=X.dtype)
    kernels.ascent(X, blocks.log_x, Z, MX, mx_rows, *scalars, A, part)
    top = part.max(0)
    tau = np.full(b, -one, dtype=X.dtype)
    if start is not None:
        shifted = start - top
        tau = np.where(shifted < 0, shifted, tau)  # NaN (no start) keeps -1
    counts = np.empty_like(part)
    count = np.zeros(b, dtype=X.dtype)
    for _ in range(MAX_PASSES):
        kernels.michelot(A, top, tau, part, counts)
        k = counts.sum(0)
        tau = tau + (part.sum(0) - one) / np.maximum(k, one)
        if np.array_equal(k, count):
            break
        count = k
    else:  # rare: columns whose set would still change are finished exactly by sorting
        moving = np.flatnonzero((A - top > tau).sum(0) != count)
        rows = torch.from_numpy(np.ascontiguousarray((A[:, moving] - top[moving]).T))
        tau[moving] = threshold_by_sorting(rows).squeeze(-1).numpy()
    X_next = blocks.x_next
    kernels.finish(A, top, tau, X, X_next, part)
    return X_next, tau + top, np.sqrt(part.sum(0))


def _solve_torch(Z, op, lam, alpha, T, stop, log_floor):
    batch = Z.shape[0]
    # One problem per column: the graph products want the N x batch layout, so the iterates
    # stay in it and only the result is transposed back.
    ZT = Z.T.contiguous()
    XT = torch.zeros_like(ZT)
    iterations = torch.zeros(batch, dtype=torch.long, device=Z.device)
    done = torch.zeros(batch, dtype=torch.bool, device=Z.device)
    # The iterates settle into a period-2 cycle, so the projection's threshold two steps back is
    # a close guess that saves most of its passes (it does not change the result).
    taus: list[torch.Tensor | None] = [None, None]
    t = 1
    while t < T:  # Algorithm 1, line 2, with x^1 = 0 (line 1)
        active = (~done).nonzero().flatten()
        if active.numel() == 0:
            break
        everyone = active.numel() == batch
        Xa = XT if everyone else torch.index_select(XT, 1, active)
        # every block below is new and used once, so the steps run in place on it
        grad = Xa.clamp_min(log_floor).log_().sub_(ZT if everyone else torch.index_select(ZT, 1, active)).add_(1)
        grad.add_(op.m_product_columns(Xa)[0], alpha=2.0 * lam)
        start = taus[0] if taus[0] is None or everyone else taus[0][:, active]
        # lines 3-7: gradient step and projection onto the simplex (exact; Michelot's iteration)
        X_next, tau = project_to_simplex(torch.sub(Xa, grad.mul_(alpha), out=grad), start, dim=0)
        # ||x^{t+1} - x^t||_2 as the root of a dot product: torch's vector_norm over dim 0 takes
        # several times as long; the two differ in the last bits only, which matter only for a step
        # within rounding of the stop threshold (the iterates are the same either way)
        delta = torch.sub(X_next, Xa, out=grad)
        step = torch.linalg.vecdot(delta, delta, dim=0).sqrt_()
        if everyone:
            XT, taus = X_next, [taus[1], tau]
        else:
            XT.index_copy_(1, active, X_next)
            full = torch.full((1, batch), float("nan"), dtype=Z.dtype, device=Z.device)
            full[:, active] = tau
            taus = [taus[1], full]
        iterations[active] += 1
        done[active] = step < stop  # line 8
        t += 1
    return XT.T.contiguous(), iterations, done
