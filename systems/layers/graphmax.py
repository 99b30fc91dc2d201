"""graphmax (graph-regularised softmax, graphmax-jair section 2.4) as a plain operator.

For scores ``z`` over N tokens and a row-normalised corpus graph ``A`` (A~ in the paper),
graphmax is the minimiser over the probability simplex of

    f(x) = -<x, z> + <x, log x> + lam * ||x - A x||^2                      (paper eq. 3)

Writing ``B = I - A`` and ``M = B^T B``, the optimum is the fixed point
``x = softmax(z - 2 lam M x)``. ``M`` is never formed: every product goes through ``A`` and
``A^T`` stored as CSR, applied to an N x batch block (scipy on the CPU, torch sparse CSR on
CUDA).

Two solvers, chosen by name:

``solver="exact"`` (default) - damped fixed point in logit space
    ``y <- y + theta * (z - 2 lam M softmax(y) - y)``, ``y0 = z``, ``theta0 = 0.7`` per row.
    Plain ``theta = 1`` diverges once ``2 lam`` times the curvature of ``M`` on the support
    exceeds 1 (many contexts at lam = 1, all at lam >= 3 on real graphs), so each row has a
    safeguard: when a step makes the row's duality gap grow, the step is taken back and that
    row's theta is halved. Every iterate carries a certificate, the duality gap

        gap(x) = f(x) + g(u),  u = 2 lam B x,  g(u) = logsumexp(z - B^T u) + ||u||^2 / (4 lam)

    (``-g`` is the Lagrange dual of f, so ``f(x) - f(x*) <= gap``), which equals
    ``KL(x || softmax(z - 2 lam M x))``; it is computed in the form
    ``log sum_i x_i exp(d_i) - sum_i x_i d_i`` with d the logit residual, which keeps its
    accuracy down to ~1e-30 instead of cancelling at 1e-16. A row stops when its relative gap
    ``gap / max(1, |f(x)|)`` is <= ``tol`` (default 1e-6) or after ``max_iter`` steps. The
    returned x is the last accepted iterate, whose gap is the one reported.

    ``topk=k`` restricts the support to the union over the batch of each row's k largest
    scores S: x is zero outside S, and the restricted problem keeps every row of the graph,
    i.e. uses ``A[:, S]`` (N x |S|), because ``||(I - A) x||^2`` sums over all N rows even
    when x lives on S (the square block ``A[S, S]`` drops those rows and changes the result).
    The reported gap is then the certificate for the full, unrestricted problem.

``solver="paper"`` - Algorithm 1 of the paper exactly as printed: ``x^1 = 0``; ``while t < T``
    (t = 1, 2, ...: T - 1 updates, 19 for T = 20) take ``a = x - alpha grad f(x)`` with
    ``grad f(x) = -z + log x + 1 + 2 lam M x`` (eq. 8) and project ``a`` onto the simplex by
    sorting (steps 4-7); stop when ``||x^{t+1} - x^t||_2 < 1e-4``. ``alpha = 1e-4``, ``T = 20``.
    The paper does not say what ``log 0`` is; here ``log x`` is taken as
    ``log(max(x, log_floor))`` with ``log_floor = 1e-10`` (a parameter). Because the gradient's
    log term is then the same constant for every coordinate at ``x^1 = 0``, the first step is
    exactly ``sparsemax(alpha z)``. After that, the clamp rewards coordinates that are exactly
    zero, and the iteration falls into a period-2 cycle that never meets the stop rule: the
    output is close to uniform over thousands of tokens, depends on ``log_floor`` and on the
    parity of T, hardly depends on the graph, and is NOT the minimiser of eq. 3 (its reported
    gap shows how far it is). It is here to reproduce the paper, not as graphmax.

Probabilities come back on z's device and dtype (computation is float64). Only the exact
solver is differentiable; its backward is implicit (not unrolled):
``dL/dz = S (I + 2 lam M S)^{-1} g`` with ``S = diag(x) - x x^T``, solved by conjugate
gradients on the equivalent symmetric system
``R^T (I + 2 lam R M R^T)^{-1} R g``, ``R = (I - s s^T) diag(s)``, ``s = sqrt(x)``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from systems.errors import MaxbenchError

from .sparsemax import sparsemax

__all__ = ["graphmax", "GraphmaxInfo", "GraphOperator", "SOLVERS"]

SOLVERS = ("exact", "paper")
# exp(600) is far from overflow even summed over a 10^6-token vocabulary.
_EXP_SAFE = 600.0


# --------------------------------------------------------------------------------------
# The graph as an operator on N x batch blocks
# --------------------------------------------------------------------------------------

def _to_scipy_csr(A):
    import scipy.sparse as sp

    if sp.issparse(A):
        return sp.csr_matrix(A, dtype=np.float64)
    if torch.is_tensor(A):
        if A.layout == torch.strided:
            return sp.csr_matrix(A.detach().cpu().double().numpy())
        coo = A.detach().to_sparse_coo().coalesce().cpu()
        rows, cols = coo.indices().numpy()
        return sp.csr_matrix((coo.values().double().numpy(), (rows, cols)), shape=tuple(coo.shape))
    if isinstance(A, np.ndarray):
        return sp.csr_matrix(A.astype(np.float64))
    raise MaxbenchError(f"graphmax: the graph must be a scipy sparse matrix, a torch tensor or a CorpusGraph, "
                        f"got {type(A).__name__}")


def _torch_csr(csr, device) -> torch.Tensor:
    return _csr_tensor(torch.from_numpy(csr.indptr.astype(np.int64)), torch.from_numpy(csr.indices.astype(np.int64)),
                       torch.from_numpy(csr.data.astype(np.float64)), csr.shape, device)


def _csr_tensor(crow, col, val, shape, device=None) -> torch.Tensor:
    # The index arrays come from scipy or from slicing a valid CSR tensor, so torch's
    # invariant checks would only cost time; its "beta" notice is not for our users.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, val, size=tuple(shape), device=device, check_invariants=False)


class GraphOperator:
    """``B = I - A`` and ``B^T`` applied to N x b float64 blocks, on one device.

    ``backend`` is "scipy" (CPU: scipy's CSR times a dense block, measured much faster than
    torch's CPU sparse kernels) or "torch" (torch sparse CSR; the only choice on CUDA, and
    usable on the CPU so that tests cover the CUDA code path).
    """

    def __init__(self, A, AT=None, device="cpu", backend: str | None = None):
        A = _to_scipy_csr(A)
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise MaxbenchError(f"graphmax: the graph must be a square N x N matrix, got shape {A.shape}")
        if not np.isfinite(A.data).all():
            raise MaxbenchError("graphmax: the graph holds NaN or infinite weights; rebuild it")
        AT = A.T.tocsr() if AT is None else _to_scipy_csr(AT)
        self.n = A.shape[0]
        self.device = torch.device(device)
        self.backend = backend or ("scipy" if self.device.type == "cpu" else "torch")
        if self.backend == "scipy" and self.device.type != "cpu":
            raise MaxbenchError("graphmax: the scipy backend runs on the CPU only; use backend='torch' on CUDA")
        if self.backend == "scipy":
            self.A, self.AT = A, AT
        elif self.backend == "torch":
            self.A, self.AT = _torch_csr(A, self.device), _torch_csr(AT, self.device)
        else:
            raise MaxbenchError(f"graphmax: unknown backend '{backend}'; use 'scipy' or 'torch'")

    @classmethod
    def prepare(cls, graph, device, backend: str | None = None) -> "GraphOperator":
        """Accept a GraphOperator, a CorpusGraph (anything with ``.A`` and ``.AT``), a scipy
        sparse matrix or a torch (sparse) tensor; reuse a GraphOperator already on ``device``."""
        device = torch.device(device)
        if isinstance(graph, GraphOperator):
            if graph.device == device and (backend is None or backend == graph.backend):
                return graph
            graph = graph._scipy_pair()
            return cls(graph[0], graph[1], device=device, backend=backend)
        if hasattr(graph, "A") and hasattr(graph, "AT"):
            return cls(graph.A, graph.AT, device=device, backend=backend)
        return cls(graph, device=device, backend=backend)

    def _scipy_pair(self):
        if self.backend == "scipy":
            return self.A, self.AT
        return tuple(_to_scipy_csr(m) for m in (self.A, self.AT))

    def _mm(self, mat, X: torch.Tensor) -> torch.Tensor:
        if self.backend == "scipy":
            return torch.from_numpy(np.asarray(mat @ X.contiguous().numpy()))
        return mat @ X

    def b(self, X: torch.Tensor) -> torch.Tensor:
        """(I - A) X."""
        return X - self._mm(self.A, X)

    def bt(self, Y: torch.Tensor) -> torch.Tensor:
        """(I - A)^T Y."""
        return Y - self._mm(self.AT, Y)

    def restrict(self, support: torch.Tensor) -> "_RestrictedOperator":
        return _RestrictedOperator(self, support)


class _RestrictedOperator:
    """``B[:, S] = I[:, S] - A[:, S]`` (all N rows) and its transpose, for x living on S."""

    def __init__(self, full: GraphOperator, support: torch.Tensor):
        self.full = full
        self.support = support.to(full.device)
        self.n = int(support.numel())
        if full.backend == "scipy":
            rows = support.cpu().numpy()
            self.ATS = full.AT[rows, :]  # CSR row slice: |S| x N
            self.AS = self.ATS.T  # CSC view: N x |S|
        else:
            self.ATS = _torch_csr_rows(full.AT, self.support)
            self.AS = _torch_csr_transpose(self.ATS)

    def b(self, XS: torch.Tensor) -> torch.Tensor:
        out = -self.full._mm(self.AS, XS)
        out[self.support] += XS
        return out

    def bt(self, Y: torch.Tensor) -> torch.Tensor:
        return Y[self.support] - self.full._mm(self.ATS, Y)


def _torch_csr_rows(csr: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    crow, col, val = csr.crow_indices(), csr.col_indices(), csr.values()
    starts, counts = crow[rows], crow[rows + 1] - crow[rows]
    new_crow = torch.zeros(rows.numel() + 1, dtype=crow.dtype, device=crow.device)
    new_crow[1:] = counts.cumsum(0)
    total = int(new_crow[-1])
    offset_in_row = torch.arange(total, device=crow.device) - torch.repeat_interleave(new_crow[:-1], counts)
    take = torch.repeat_interleave(starts, counts) + offset_in_row
    return _csr_tensor(new_crow, col[take], val[take], (rows.numel(), csr.shape[1]))


def _torch_csr_transpose(csr: torch.Tensor) -> torch.Tensor:
    crow, col = csr.crow_indices(), csr.col_indices()
    row = torch.repeat_interleave(torch.arange(csr.shape[0], device=crow.device), crow[1:] - crow[:-1])
    coo = torch.sparse_coo_tensor(torch.stack([col, row]), csr.values(), size=(csr.shape[1], csr.shape[0]),
                                  check_invariants=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return coo.coalesce().to_sparse_csr()


# --------------------------------------------------------------------------------------
# Solvers on N x b blocks (one column per problem)
# --------------------------------------------------------------------------------------

@dataclass
class GraphmaxInfo:
    """What a graphmax call computed, one entry per row of z (0-d tensors for 1-d z)."""

    solver: str
    iterations: torch.Tensor  # fixed-point (exact) or projected-gradient (paper) steps taken
    gap: torch.Tensor  # certified duality gap f(x) + g(u) of the returned x (>= f(x) - f*)
    relative_gap: torch.Tensor  # gap / max(1, |f(x)|) with f taken at the max-shifted scores
    objective: torch.Tensor  # f(x) at the scores as given
    converged: torch.Tensor  # exact: relative gap <= tol; paper: the step-size stop rule met
    log_probs: torch.Tensor  # log x in z's shape, float64 (-inf where x is exactly 0)
    support: torch.Tensor | None = None  # token ids the top-k restriction kept (None: all)


def _log_softmax_cols(Y: torch.Tensor):
    logX = Y - torch.logsumexp(Y, dim=0, keepdim=True)
    return logX.exp(), logX


def _kl_gap(X: torch.Tensor, logX: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """``log sum_i x_i e^{d_i} - sum_i x_i d_i`` per column: the duality gap when D is the logit
    residual ``z - 2 lam M x - log x`` (up to a per-column constant, to which it is invariant).

    Centering D and using expm1 keeps the result accurate when the gap is far below float64
    epsilon relative to 1 (needed to tell a converging step from a diverging one there)."""
    D = D - (X * D).sum(0, keepdim=True)
    first = (X * D).sum(0)
    big = D.amax(0) > _EXP_SAFE
    gap = torch.log1p((X * torch.expm1(D.clamp(max=_EXP_SAFE))).sum(0)) - first
    if bool(big.any()):  # only far from the optimum: fall back to the plain log-sum-exp
        gap[big] = torch.logsumexp(logX[:, big] + D[:, big], dim=0) - first[big]
    return gap.clamp_min(0.0)


def _evaluate(Y, Z, op, lam):
    """At x = softmax(y): x, log x, the logit residual z - 2 lam M x - y, the gap, f(x)."""
    X, logX = _log_softmax_cols(Y)
    BX = op.b(X)
    W = (2.0 * lam) * op.bt(BX)
    R = Z - W - Y
    gap = _kl_gap(X, logX, R)
    f = (X * (logX - Z)).sum(0) + lam * (BX * BX).sum(0)
    return logX, R, gap, f


def _solve_exact(Z, op, lam, tol, max_iter, theta0, safeguard):
    n, batch = Z.shape
    Y = Z.clone()
    logX, R, gap, f = _evaluate(Y, Z, op, lam)
    theta = torch.full((batch,), float(theta0), dtype=Z.dtype, device=Z.device)
    iterations = torch.zeros(batch, dtype=torch.long, device=Z.device)
    done = gap <= tol * f.abs().clamp_min(1.0)
    for _ in range(max_iter):
        active = (~done).nonzero().flatten()
        if active.numel() == 0:
            break
        th = theta[active]
        Y_try = Y[:, active] + th * R[:, active]
        logX_try, R_try, gap_try, f_try = _evaluate(Y_try, Z[:, active], op, lam)
        iterations[active] += 1
        if safeguard:
            worse = gap_try > gap[active]
            theta[active[worse]] = th[worse] * 0.5
            keep = ~worse
        else:
            keep = torch.ones_like(gap_try, dtype=torch.bool)
        cols = active[keep]
        Y[:, cols] = Y_try[:, keep]
        R[:, cols] = R_try[:, keep]
        logX[:, cols] = logX_try[:, keep]
        gap[cols], f[cols] = gap_try[keep], f_try[keep]
        done[cols] = gap[cols] <= tol * f[cols].abs().clamp_min(1.0)
    return logX, gap, f, iterations, done


def _solve_paper(Z, op, lam, alpha, T, stop, log_floor):
    n, batch = Z.shape
    X = torch.zeros_like(Z)
    iterations = torch.zeros(batch, dtype=torch.long, device=Z.device)
    done = torch.zeros(batch, dtype=torch.bool, device=Z.device)
    t = 1
    while t < T:  # Algorithm 1, line 2, with x^1 = 0 (line 1)
        active = (~done).nonzero().flatten()
        if active.numel() == 0:
            break
        Xa = X[:, active]
        grad = -Z[:, active] + torch.log(Xa.clamp_min(log_floor)) + 1 + (2.0 * lam) * op.bt(op.b(Xa))
        X_next = sparsemax(Xa - alpha * grad, dim=0)  # lines 3-7: gradient step, sort-based projection
        step = torch.linalg.vector_norm(X_next - Xa, dim=0)
        X[:, active] = X_next
        iterations[active] += 1
        done[active] = step < stop  # line 8
        t += 1
    return X, iterations, done


def _certify(X, Z, op_full, BX, lam):
    """Duality gap and f(x) for a feasible x that may have exact zeros (x on the full vocabulary)."""
    W = (2.0 * lam) * op_full.bt(BX)
    V = Z - W
    x_log_x = torch.special.xlogy(X, X)
    f = (x_log_x - X * Z).sum(0) + lam * (BX * BX).sum(0)
    gap = (x_log_x - X * V).sum(0) + torch.logsumexp(V, dim=0)
    return gap.clamp_min(0.0), f


# --------------------------------------------------------------------------------------
# Implicit backward for the exact solution
# --------------------------------------------------------------------------------------

def _batched_cg(apply_K, rhs, tol=1e-12, max_iter=1000):
    """Conjugate gradients for K W = rhs, one independent SPD system per column."""
    W = torch.zeros_like(rhs)
    R = rhs.clone()
    P = R.clone()
    rs = (R * R).sum(0)
    target = (tol ** 2) * rs
    for _ in range(max_iter):
        if bool((rs <= target).all()):
            break
        KP = apply_K(P)
        pKp = (P * KP).sum(0)
        step = torch.where(pKp > 0, rs / torch.where(pKp > 0, pKp, torch.ones_like(pKp)), torch.zeros_like(rs))
        W += step * P
        R -= step * KP
        rs_next = (R * R).sum(0)
        P = R + torch.where(rs > 0, rs_next / torch.where(rs > 0, rs, torch.ones_like(rs)), torch.zeros_like(rs)) * P
        rs = rs_next
    return W


def _implicit_vjp(X, G, op, lam):
    s = X.sqrt()

    def proj(V):  # I - s s^T (s has unit norm because x sums to 1)
        return V - s * (s * V).sum(0, keepdim=True)

    def apply_K(V):
        return V + (2.0 * lam) * proj(s * op.bt(op.b(s * proj(V))))

    return s * proj(_batched_cg(apply_K, proj(s * G)))


class _ImplicitGraphmax(torch.autograd.Function):
    """Identity on the (already solved) probabilities; the backward differentiates the fixed
    point ``x = softmax(z - 2 lam M x)`` implicitly."""

    @staticmethod
    def forward(ctx, z, x, op, lam):  # z, x: (n, batch) float64, columns are problems
        ctx.save_for_backward(x)
        ctx.op, ctx.lam = op, lam
        return x.clone()

    @staticmethod
    def backward(ctx, grad_x):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            grad_z = _implicit_vjp(x, grad_x.to(x.dtype), ctx.op, ctx.lam)
        return grad_z, None, None, None


# --------------------------------------------------------------------------------------
# Public operator
# --------------------------------------------------------------------------------------

def _check_args(z, lam, solver, tol, max_iter, topk, theta0, alpha, T):
    if solver not in SOLVERS:
        raise MaxbenchError(f"graphmax: unknown solver '{solver}'; use one of {', '.join(SOLVERS)}")
    if not isinstance(lam, (int, float)) or isinstance(lam, bool) or not math.isfinite(lam) or lam < 0:
        raise MaxbenchError(f"graphmax: lam must be a finite number >= 0, got {lam!r}")
    if not (isinstance(tol, (int, float)) and tol >= 0):
        raise MaxbenchError(f"graphmax: tol must be >= 0, got {tol!r}")
    if not (isinstance(max_iter, int) and max_iter >= 0):
        raise MaxbenchError(f"graphmax: max_iter must be an integer >= 0, got {max_iter!r}")
    if topk is not None and not (isinstance(topk, int) and topk >= 1):
        raise MaxbenchError(f"graphmax: topk must be a positive integer or None, got {topk!r}")
    if topk is not None and solver == "paper":
        raise MaxbenchError("graphmax: topk applies to solver='exact' only (the paper's algorithm uses all tokens)")
    if not 0 < theta0 <= 1:
        raise MaxbenchError(f"graphmax: theta0 must be in (0, 1], got {theta0!r}")
    if not (alpha > 0 and isinstance(T, int) and T >= 1):
        raise MaxbenchError(f"graphmax: the paper solver needs alpha > 0 and an integer T >= 1, got {alpha!r}, {T!r}")
    if z.dim() not in (1, 2) or z.shape[-1] == 0:
        raise MaxbenchError(f"graphmax: z must have shape (N,) or (B, N), got {tuple(z.shape)}")
    if not torch.isfinite(z).all():
        bad = (~torch.isfinite(z.reshape(-1, z.shape[-1]))).any(-1).nonzero().flatten().tolist()
        raise MaxbenchError(f"graphmax: the scores contain NaN or infinite values (rows {bad[:8]}); "
                            f"graphmax needs finite scores")


def graphmax(z, A, lam: float = 1.0, solver: str = "exact", *, tol: float = 1e-6, max_iter: int = 100,
             topk: int | None = None, theta0: float = 0.7, safeguard: bool = True,
             alpha: float = 1e-4, T: int = 20, paper_stop: float = 1e-4, log_floor: float = 1e-10,
             backend: str | None = None, return_info: bool = False):
    """Graph-regularised softmax of scores ``z`` (shape (N,) or (B, N)) over graph ``A``.

    ``A`` is the row-normalised N x N graph: a scipy sparse matrix, a torch (sparse) tensor,
    a :class:`systems.graph.CorpusGraph` or a :class:`GraphOperator` (prepare one with
    ``GraphOperator.prepare(A, device)`` to reuse it across calls). ``lam`` >= 0 weighs the
    graph total variation (lam = 0 gives softmax). See the module docstring for the solvers;
    ``tol``, ``max_iter``, ``topk``, ``theta0``, ``safeguard`` belong to "exact", ``alpha``,
    ``T``, ``paper_stop``, ``log_floor`` to "paper".

    Returns probabilities of z's shape on z's device and dtype, and with ``return_info=True``
    also a :class:`GraphmaxInfo` (iterations, certified gap, objective per row).
    """
    z = z if torch.is_tensor(z) else torch.as_tensor(z)
    _check_args(z, lam, solver, tol, max_iter, topk, theta0, alpha, T)
    lam = float(lam)
    op = GraphOperator.prepare(A, z.device, backend=backend)
    if op.n != z.shape[-1]:
        raise MaxbenchError(f"graphmax: the scores have {z.shape[-1]} entries but the graph has {op.n} nodes; "
                            f"use the graph built with this model's tokenizer")
    if solver == "paper" and z.requires_grad:
        raise MaxbenchError("graphmax: solver='paper' is not differentiable; use solver='exact' for gradients")
    out_dtype = z.dtype if z.is_floating_point() else torch.get_default_dtype()
    rows = z.reshape(-1, z.shape[-1])
    Z = rows.detach().to(torch.float64).T.contiguous()  # N x batch block
    # x is shift-invariant, f(x) shifts with z: solving at max-shifted scores keeps the logit
    # iterates O(1) and makes the relative stopping rule independent of the shift.
    shift = Z.amax(0)
    Z = Z - shift
    n, batch = Z.shape
    support = None
    with torch.no_grad():
        if solver == "paper":
            X, iterations, converged = _solve_paper(Z, op, lam, float(alpha), T, float(paper_stop), float(log_floor))
            gap, f = _certify(X, Z, op, op.b(X), lam)
            logX = torch.log(X)
            solve_op = op
        elif topk is not None and topk < n:
            support = torch.unique(torch.topk(Z, topk, dim=0).indices)
            solve_op = op.restrict(support)
            logXS, _, _, iterations, converged = _solve_exact(Z[support], solve_op, lam, float(tol), max_iter,
                                                              float(theta0), safeguard)
            XS = logXS.exp()
            X = torch.zeros_like(Z)
            X[support] = XS
            logX = torch.full_like(Z, float("-inf"))
            logX[support] = logXS
            gap, f = _certify(X, Z, op, solve_op.b(XS), lam)
        else:
            solve_op = op
            logX, gap, f, iterations, converged = _solve_exact(Z, op, lam, float(tol), max_iter,
                                                               float(theta0), safeguard)
            X = logX.exp()
    if solver == "exact" and z.requires_grad:
        z_cols = rows.to(torch.float64).T
        if support is None:
            X = _ImplicitGraphmax.apply(z_cols, X, solve_op, lam)
        else:
            XS = _ImplicitGraphmax.apply(z_cols[support], X[support], solve_op, lam)
            X = torch.zeros_like(z_cols).index_put((support,), XS)
    probs = X.T.reshape(z.shape).to(out_dtype)
    if not return_info:
        return probs
    squeeze = (lambda t: t[0]) if z.dim() == 1 else (lambda t: t)
    info = GraphmaxInfo(solver=solver, iterations=squeeze(iterations), gap=squeeze(gap),
                        relative_gap=squeeze(gap / f.abs().clamp_min(1.0)), objective=squeeze(f - shift),
                        converged=squeeze(converged), log_probs=logX.T.reshape(z.shape), support=support)
    return probs, info
