"""The CPU kernels of graphmax's exact solver (``maxbench.systems.layers.graphmax.exact``), in numba.

An evaluation of the exact solver (``maxbench.systems.layers.graphmax.evaluation.evaluate``) in torch is about 25 passes over the
tokens x batch block: the step, the softmax (its exponential, sums, normalisation), the logit
residual, its centre, the moments and the exponential of the duality gap, the next direction.
Here it is the graph product and three reads of the block: ``step_softmax`` (the step and the
exponential with each column's sum), ``residual`` (normalised x, the residual r and its centre
<x, r>) and ``direction`` (the centred residual's sums for the gap and f, and the next
direction). The set-up of the light isolated tokens (``graphmax.isolated``) is two reads of
the untouched tokens (``isolated_sums``, ``isolated_powers``) and their log-probabilities one
write (``light_log_probs``).

What makes the fusion pay is an exponential that vectorises: numba calls libm's ``expf`` once
per number, several times slower than torch's vectorised exponential.
``exp32`` is range reduction to ``|r| <= ln 2 / 2`` (Cody and Waite's two-part ln 2, exact in
float32) and a degree-7 Taylor polynomial, scaled by ``2^k`` through the float's bits: within 2
ulp of the exact value for every float32 whose e^x is finite and normal
(tests/systems/layers/test_graphmax_exact_kernels.py), and LLVM turns the loop into vector code. ``expm1_32`` is the
Taylor polynomial of ``e^x - 1`` itself near 0, so that it keeps its relative accuracy where the
duality gap needs it (centred residuals of 1e-8).

Sums run over fixed chunks of ``CHUNK`` rows in float64, each chunk in row order, and the
chunks' partials are added in chunk order by the caller (``total``): the result does not depend
on the number of threads. (Two rare fallbacks of the solver reduce with torch instead, whose
order may depend on it for 32k tokens and more: a column exponentiated again after a long step,
and the gap of a column whose centred residual exceeds ``CLAMP``.) No fastmath and no
contraction, so it does not depend on the vector width either. The kernels take float32 blocks;
float64 problems take the torch path.
"""

from __future__ import annotations

from functools import partial

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from maxbench.systems.layers.graphmax.kernels import paper as paper_kernels
from maxbench.systems.layers.graphmax.kernels.paper import total

__all__ = [
    "CLAMP",
    "chunks",
    "total",
    "exp32",
    "expm1_32",
    "step_softmax",
    "residual",
    "direction",
    "isolated_sums",
    "isolated_powers",
    "light_log_probs",
    "shifted_transpose",
    "scatter_transpose",
]

# Rows per chunk of every sum. This file's own constant, as paper_kernels' is: numba's cache
# keeps the value a kernel was compiled with and is renewed only when this file changes.
CHUNK = 1024
#: the number of chunks of n rows: the first dimension of the kernels' ``part``
chunks = partial(paper_kernels.chunks, size=CHUNK)


_LOG2E = np.float32(1.4426950408889634)
# ln 2 in two parts: the first has 9 significant bits, so k * _LN2_HI is exact for |k| <= 2^15
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.1219444005469057e-4)
_LOW = np.float32(-104.0)  # e^-104 is below float32's smallest subnormal: exp32 gives 0 (or 2^-149)
# ln of float32's largest value is 88.7228: above it 2^128 overflows to inf, as e^x should
_HIGH = np.float32(89.0)
#: ``direction`` takes e^min(d, CLAMP) - 1 in the duality gap's sum
CLAMP = np.float32(80.0)
_ONE = np.float32(1.0)
# 1/k! for k = 2..8
_C2, _C3, _C4, _C5, _C6, _C7, _C8 = (np.float32(1.0 / f) for f in (2.0, 6.0, 24.0, 120.0, 720.0, 5040.0, 40320.0))


@intrinsic
def _float32_from_bits(typingctx, bits):  # pragma: no cover - compiled
    """The float32 whose bits are the int32 ``bits``."""
    signature = types.float32(types.int32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return signature, codegen


@numba.njit(inline="always", cache=True)
def _reduce(x):  # pragma: no cover - compiled
    """x = k ln 2 + r with |r| <= ln 2 / 2 (x clamped to [-104, 89]): (k as an integer, r)."""
    x = min(max(x, _LOW), _HIGH)
    k = np.float32(np.floor(x * _LOG2E + np.float32(0.5)))
    return np.int32(k), (x - k * _LN2_HI) - k * _LN2_LO


@numba.njit(inline="always", cache=True)
def _power_of_two(k):  # pragma: no cover - compiled
    """2^k as two float32 factors, so that k from -150 (subnormal results) to 128 stays exact."""
    half = k >> 1
    return _float32_from_bits((half + 127) << 23), _float32_from_bits((k - half + 127) << 23)


@numba.njit(inline="always", cache=True)
def exp32(x):  # pragma: no cover - compiled
    """e^x for a float32 x, to 2 ulp; 0 below -104 (2^-149 at most), inf above 88.7228 (and
    for +inf). Not for NaN (the scores are checked finite before the solver runs)."""
    k, r = _reduce(x)
    p = _C7 * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _ONE
    p = p * r + _ONE
    s1, s2 = _power_of_two(k)
    return (p * s1) * s2


@numba.njit(inline="always", cache=True)
def expm1_32(x):  # pragma: no cover - compiled
    """e^x - 1 for a float32 x with its relative accuracy near 0: ``2^k (e^r - 1) + (2^k - 1)``
    with ``e^r - 1`` as its own Taylor polynomial (degree 8), which is e^x - 1 itself for
    |x| <= ln 2 / 2 (k = 0). x up to 80 (2^k must stay finite)."""
    k, r = _reduce(x)
    q = _C8 * r + _C7
    q = q * r + _C6
    q = q * r + _C5
    q = q * r + _C4
    q = q * r + _C3
    q = q * r + _C2
    q = (q * r) * r + r
    s1, s2 = _power_of_two(k)
    return (q * s1) * s2 + (s1 * s2 - _ONE)


@numba.njit(parallel=True, cache=True, error_model="numpy")
def step_softmax(Y, D, theta, shift, Y_next, X, part):  # pragma: no cover - compiled
    """The step ``Y_next = Y + D * theta`` (theta per column; with ``D`` of no rows, no step:
    ``Y_next`` is not written and Y is used) and ``X = exp(Y_next - shift)``, with each chunk's
    column sums of X in ``part`` (float64)."""
    n, b = Y.shape
    step = D.shape[0] > 0
    for ch in numba.prange(part.shape[0]):
        s = part[ch]
        s[:] = 0.0
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            if step:
                for c in range(b):
                    y = Y[i, c] + D[i, c] * theta[c]
                    Y_next[i, c] = y
                    e = exp32(y - shift[c])
                    X[i, c] = e
                    s[c] += e
            else:
                for c in range(b):
                    e = exp32(Y[i, c] - shift[c])
                    X[i, c] = e
                    s[c] += e


@numba.njit(parallel=True, cache=True, error_model="numpy")
def residual(X, v, Z, Y, MX, coef, R, part):  # pragma: no cover - compiled
    """x = X * v (X normalised in place, v per column), the logit residual
    ``R = Z - Y - coef * (M X)`` (coef per column: 2 lam v, as M X is the product of the
    unnormalised X) and each chunk's column sums of ``x * r``. MX holds the first rows of
    ``M X``; the rows below it are tokens that no edge touches, whose ``(M x)_i = x_i``."""
    n, b = X.shape
    m = MX.shape[0]
    for ch in numba.prange(part.shape[0]):
        s = part[ch]
        s[:] = 0.0
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            if i < m:
                for c in range(b):
                    rc = (Z[i, c] - Y[i, c]) - coef[c] * MX[i, c]
                    R[i, c] = rc
                    xc = X[i, c] * v[c]
                    X[i, c] = xc
                    s[c] += xc * rc
            else:
                for c in range(b):
                    rc = (Z[i, c] - Y[i, c]) - coef[c] * X[i, c]
                    R[i, c] = rc
                    xc = X[i, c] * v[c]
                    X[i, c] = xc
                    s[c] += xc * rc


@numba.njit(parallel=True, cache=True, error_model="numpy")
def direction(X, R, centre, curvature, shift, D, part):  # pragma: no cover - compiled
    """With d = r - centre (the centred residual): the next direction
    ``D = d / (1 + curvature * x) + shift`` (curvature per token) and each chunk's column sums
    ``part[ch, 0] = <x, d>``, ``part[ch, 1] = <x, e^min(d, CLAMP) - 1>`` and maxima
    ``part[ch, 2]`` of d."""
    n, b = X.shape
    one = X.dtype.type(1.0)
    for ch in numba.prange(part.shape[0]):
        first = part[ch, 0]
        terms = part[ch, 1]
        top = part[ch, 2]
        first[:] = 0.0
        terms[:] = 0.0
        top[:] = -np.inf
        for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            k = curvature[i]
            for c in range(b):
                d = R[i, c] - centre[c]
                first[c] += X[i, c] * d
                terms[c] += X[i, c] * expm1_32(min(d, CLAMP))
                top[c] = max(top[c], d)
                D[i, c] = d / (one + k * X[i, c]) + shift[c]


@numba.njit(parallel=True, cache=True, error_model="numpy")
def isolated_sums(Z, rows, part):  # pragma: no cover - compiled
    """Each chunk's column sums of ``e^z`` over the rows ``rows`` of Z (max-shifted scores)."""
    b = Z.shape[1]
    n = rows.shape[0]
    for ch in numba.prange(part.shape[0]):
        s = part[ch]
        s[:] = 0.0
        for k in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            i = rows[k]
            for c in range(b):
                s[c] += exp32(Z[i, c])


@numba.njit(parallel=True, cache=True, error_model="numpy")
def isolated_powers(Z, rows, scale, heavy, part):  # pragma: no cover - compiled
    """For the rows ``rows`` of Z: ``heavy[k]`` where ``e^z * scale`` exceeds 1 in some column,
    and over the other rows each chunk's column sums of ``e^(j z)``, j = 1..4 (``part[ch, j-1]``)."""
    b = Z.shape[1]
    n = rows.shape[0]
    for ch in numba.prange(part.shape[0]):
        p1 = part[ch, 0]
        p2 = part[ch, 1]
        p3 = part[ch, 2]
        p4 = part[ch, 3]
        p1[:] = 0.0
        p2[:] = 0.0
        p3[:] = 0.0
        p4[:] = 0.0
        e = np.empty(b, dtype=Z.dtype)
        for k in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
            i = rows[k]
            above = 0
            for c in range(b):
                e[c] = exp32(Z[i, c])
                above += e[c] * scale[c] > 1.0
            heavy[k] = above > 0
            if above == 0:
                for c in range(b):
                    e2 = e[c] * e[c]
                    p1[c] += e[c]
                    p2[c] += e2
                    p3[c] += e2 * e[c]
                    p4[c] += e2 * e2


@numba.njit(parallel=True, cache=True, error_model="numpy")
def light_log_probs(Z, c, two_lam, out):  # pragma: no cover - compiled
    """log x of every token as a light isolated one, for the scores Z with one row per problem
    (batch x N) at normaliser c per problem: ``log x = z - c - W(t)``, ``t = 2 lam e^{z - c}``,
    with W the series of ``graphmax_isolated`` (``W(t) / t = e^{-W(t)}``)."""
    b, n = Z.shape
    w2 = np.float32(-1.0)
    w3 = np.float32(1.5)
    w4 = np.float32(-8.0 / 3.0)
    for row in numba.prange(b):
        z = Z[row]
        o = out[row]
        cr = c[row]
        for i in range(n):
            u = z[i] - cr
            t = two_lam * exp32(u)
            o[i] = u - t * (_ONE + t * (w2 + t * (w3 + t * w4)))


@numba.njit(parallel=True, cache=True, error_model="numpy")
def shifted_transpose(Z, shift, out):  # pragma: no cover - compiled
    """``out = (Z - shift).T`` for Z with one problem per row (b x N, shift per row), by
    chunks of N: the scores in the solver's layout (one problem per column), the same bits
    as torch's ``Z.T - shift``, and faster (as ``paper_kernels.transpose``)."""
    b, n = Z.shape
    for ch in numba.prange((n + CHUNK - 1) // CHUNK):
        for c in range(b):
            s = shift[c]
            for i in range(ch * CHUNK, min(n, (ch + 1) * CHUNK)):
                out[i, c] = Z[c, i] - s


@numba.njit(parallel=True, cache=True, error_model="numpy")
def scatter_transpose(src, cols, out):  # pragma: no cover - compiled
    """``out[:, cols] = src.T``: the block's log x (one problem per column) into the rows'
    layout (b x N), in one pass instead of a transpose and a scatter."""
    k, b = src.shape
    for ch in numba.prange((k + CHUNK - 1) // CHUNK):
        for c in range(b):
            o = out[c]
            for j in range(ch * CHUNK, min(k, (ch + 1) * CHUNK)):
                o[cols[j]] = src[j, c]
