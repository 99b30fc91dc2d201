"""The CPU kernels of graphmax's paper solver (``maxbench.systems.layers.graphmax.paper``), in numba.

One update of Algorithm 1 is a gradient step and a projection onto the simplex. In torch each
of its elementwise operations is a pass over the N x batch block (about 30 passes per update:
the log, the gradient's terms, the projection's maximum, 2-3 passes of Michelot's iteration of
5 operations each, the step's norm). Here an update is NumPy's vectorised logarithm (numba's
is a call per number) and three reads of the block plus one per pass of Michelot's iteration:
``ascent`` (the gradient step and each column's maximum), ``michelot`` (each column's sum and
count above tau), ``finish`` (the new iterate and the squared length of the step). ``residual``
is the graph product ``(I - A) X`` on chosen rows, with scipy's bits (the exact solver's
kernels use it too: ``graphmax_isolated.IsolatedBlock.touched_product``), ``product`` the plain
``A X`` (``GraphOperator``'s products with more than one thread, in place of MKL's); ``certificate`` and
``column_sums`` give the duality gap and f at the result; ``transpose`` turns the blocks
between the rows' and the columns' layout. benchmarks/graphmax_decode.py measures the whole.

Sums run over fixed chunks of ``CHUNK`` rows, each chunk's partial sum in row order, and the
chunks' partials are added in chunk order afterwards: the result does not depend on the number
of threads (tests/systems/layers/test_graphmax_paper.py). The arithmetic is IEEE without contraction or
reordering (numba's default, no fastmath; the compiled kernels hold no fused multiply-add), so
it does not depend on the vector width either.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "CHUNK",
    "chunks",
    "total",
    "ascent",
    "michelot",
    "finish",
    "residual",
    "product",
    "row_blocks",
    "transpose",
    "certificate",
    "column_sums",
]

#: rows per chunk of every sum (a 1,024 x 48 float32 chunk is 192 KiB: it stays in L2)
CHUNK = 1024


def chunks(n: int, size: int = CHUNK) -> int:
    """The number of chunks of ``size`` rows in ``n`` rows."""
    return (n + size - 1) // size


def total(part: np.ndarray) -> np.ndarray:
    """The chunks' partial sums (``part``: chunks first) added one after the other, in chunk
    order, whatever the other dimensions (NumPy's ``sum(0)`` adds pairwise where the chunks lie
    contiguous, in a batch of one: another order)."""
    if part.shape[0] == 0:
        return np.zeros(part.shape[1:], dtype=part.dtype)
    return np.cumsum(part, axis=0)[-1]


@numba.njit(parallel=True, cache=True, error_model="numpy")
def ascent(X, log_X, Z, MX, MX_rows, alpha, two_lam, one, A, part_max):  # pragma: no cover - compiled
    """``A = X - alpha * (log_X - Z + 1 + two_lam * (M X))`` and each chunk's column maxima of
    A (``log_X``: ``log(max(X, floor))``, from NumPy's vectorised logarithm; numba's is a call per number).
    ``MX_rows[i]`` is the row of MX holding token i's ``(M x)_i``, or -1 for a token that no
    edge touches, whose ``(M x)_i = x_i``. The scalars come in X's dtype (``one`` is 1), so
    that float32 stays float32."""
    n, b = X.shape
    for ch in numba.prange(part_max.shape[0]):
        top = part_max[ch]
        top[:] = -np.inf
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            x = X[i]
            lx = log_X[i]
            z = Z[i]
            a = A[i]
            r = MX_rows[i]
            mx = MX[r] if r >= 0 else x
            for c in range(b):
                a[c] = x[c] - alpha * (((lx[c] - z[c]) + one) + two_lam * mx[c])
            for c in range(b):
                top[c] = max(top[c], a[c])


@numba.njit(parallel=True, cache=True, error_model="numpy")
def michelot(A, top, tau, part_total, part_count):  # pragma: no cover - compiled
    """One pass of Michelot's iteration on each column of ``A - top`` (top: the column's
    maximum): each chunk's sum of ``max(a - top - tau, 0)`` and count of its positive terms."""
    n, b = A.shape
    for ch in numba.prange(part_total.shape[0]):
        total = part_total[ch]
        count = part_count[ch]
        total[:] = 0.0
        count[:] = 0.0
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            for c in range(b):
                e = (A[i, c] - top[c]) - tau[c]
                if e > 0.0:
                    total[c] += e
                    count[c] += 1.0


@numba.njit(parallel=True, cache=True, error_model="numpy")
def finish(A, top, tau, X, X_next, part_sq):  # pragma: no cover - compiled
    """The projection ``X_next = max(A - top - tau, 0)`` and each chunk's column sums of
    ``(X_next - X)^2``."""
    n, b = A.shape
    for ch in numba.prange(part_sq.shape[0]):
        sq = part_sq[ch]
        sq[:] = 0.0
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            a = A[i]
            x_next = X_next[i]
            for c in range(b):
                x_next[c] = max((a[c] - top[c]) - tau[c], 0.0)
            x = X[i]
            for c in range(b):
                d = x_next[c] - x[c]
                sq[c] += d * d


@numba.njit(parallel=True, cache=True, error_model="numpy")
def residual(indptr, indices, data, X, rows, out):  # pragma: no cover - compiled
    """``out[k] = X[rows[k]] - (A X)[k]`` for the rows of A in CSR (indptr, indices, data),
    in parallel: ``(I - A) X`` on the tokens ``rows`` (A's rows, with X's row numbers as
    column indices). Each row's terms are added in stored order, as scipy's and torch's CSR
    kernels do: the same bits (tests/systems/layers/test_graphmax_paper.py)."""
    b = out.shape[1]
    for k in numba.prange(out.shape[0]):
        for c in range(b):
            out[k, c] = 0.0
        for e in range(indptr[k], indptr[k + 1]):
            a = data[e]
            j = indices[e]
            for c in range(b):
                out[k, c] += a * X[j, c]
        i = rows[k]
        for c in range(b):
            out[k, c] = X[i, c] - out[k, c]


#: the blocks of rows ``product`` spreads over the threads (a static split of this many blocks
#: of equal work; the bits do not depend on it)
PRODUCT_BLOCKS = 256


def row_blocks(indptr: np.ndarray, blocks: int = PRODUCT_BLOCKS) -> np.ndarray:
    """The bounds of ``blocks`` runs of rows of about equal work for ``product`` (a row costs its
    terms and one): a corpus graph's rows are very unequal (a frequent token has thousands of
    successors), so equal runs of rows left most threads idle."""
    n = indptr.shape[0] - 1
    cost = indptr.astype(np.int64) + np.arange(n + 1)
    return np.searchsorted(cost, np.linspace(0, cost[-1], blocks + 1)).astype(np.int64)


@numba.njit(parallel=True, cache=True, error_model="numpy")
def product(indptr, indices, data, X, bounds, out):  # pragma: no cover - compiled
    """``out = A X`` for A in CSR (indptr, indices, data) and a dense X, the runs of rows
    ``bounds`` (``row_blocks``) in parallel, each row's terms added from 0 in stored order:
    scipy's bits on any CPU and thread count (the CPU's graph products with more than one
    thread, ``GraphOperator``; MKL's CSR kernel, which torch calls, adds in another order on an
    Intel CPU)."""
    b = out.shape[1]
    for t in numba.prange(bounds.shape[0] - 1):
        for k in range(bounds[t], bounds[t + 1]):
            for c in range(b):
                out[k, c] = 0.0
            for e in range(indptr[k], indptr[k + 1]):
                a = data[e]
                j = indices[e]
                for c in range(b):
                    out[k, c] += a * X[j, c]


@numba.njit(parallel=True, cache=True, error_model="numpy")
def transpose(X, out):  # pragma: no cover - compiled
    """``out = X.T`` for X of N x b or b x N (N the longer side), by chunks of N: faster than
    NumPy's or torch's copy of a transposed block, whose reads stride across the rows."""
    if X.shape[0] >= X.shape[1]:
        n, b = X.shape
        for ch in numba.prange((n + CHUNK - 1) // CHUNK):
            for c in range(b):
                o = out[c]
                for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
                    o[i] = X[i, c]
    else:
        b, n = X.shape
        for ch in numba.prange((n + CHUNK - 1) // CHUNK):
            for c in range(b):
                x = X[c]
                for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
                    out[i, c] = x[i]


@numba.njit(parallel=True, cache=True, error_model="numpy")
def certificate(X, log_X, Z, MX, MX_rows, two_lam, V, part):  # pragma: no cover - compiled
    """The sums of the duality gap and f at a feasible X with exact zeros (``0 log 0 = 0``):
    ``V = Z - two_lam * (M X)`` and each chunk's column sums ``part[ch, 0] = sum x log x - x z``,
    ``part[ch, 1] = sum x log x - x v``, ``part[ch, 2]`` = the untouched tokens' ``sum x^2``
    (their ``(B x)_i = x_i``) and ``part[ch, 3]`` = the maximum of V."""
    n, b = X.shape
    for ch in numba.prange(part.shape[0]):
        fz = part[ch, 0]
        fv = part[ch, 1]
        sq = part[ch, 2]
        top = part[ch, 3]
        fz[:] = 0.0
        fv[:] = 0.0
        sq[:] = 0.0
        top[:] = -np.inf
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            x = X[i]
            lx = log_X[i]
            z = Z[i]
            v = V[i]
            r = MX_rows[i]
            if r >= 0:
                mx = MX[r]
                for c in range(b):
                    v[c] = z[c] - two_lam * mx[c]
            else:
                for c in range(b):
                    v[c] = z[c] - two_lam * x[c]
                    sq[c] += x[c] * x[c]
            for c in range(b):
                xlx = x[c] * lx[c] if x[c] > 0.0 else 0.0
                fz[c] += xlx - x[c] * z[c]
                fv[c] += xlx - x[c] * v[c]
                top[c] = max(top[c], v[c])


@numba.njit(parallel=True, cache=True, error_model="numpy")
def column_sums(X, squares, part):  # pragma: no cover - compiled
    """Each chunk's column sums of X (of X^2 with ``squares``)."""
    n, b = X.shape
    for ch in numba.prange(part.shape[0]):
        s = part[ch]
        s[:] = 0.0
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            x = X[i]
            if squares:
                for c in range(b):
                    s[c] += x[c] * x[c]
            else:
                for c in range(b):
                    s[c] += x[c]
