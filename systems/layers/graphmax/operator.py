"""graphmax (graph-regularised softmax, graphmax-jair section 2.4) as a plain operator.

For scores ``z`` over N tokens and a row-normalised corpus graph ``A`` (A~ in the paper),
graphmax is the minimiser over the probability simplex of

    f(x) = -<x, z> + <x, log x> + lam * ||x - A x||^2                      (paper eq. 3)

:func:`graphmax` checks its arguments, prepares the graph and the scores, and hands them to a
solver: ``solver="exact"`` (default), the certified fixed point ``x = softmax(z - 2 lam M x)``
with ``M = (I - A)^T (I - A)`` (``maxbench.systems.layers.graphmax.exact``), differentiable by
implicit differentiation (``maxbench.systems.layers.graphmax.backward``); or ``solver="paper"``,
the paper's Algorithm 1 as printed (``maxbench.systems.layers.graphmax.paper``), which does not
reach the minimiser and is kept as a diagnostic only. The graph's products are
``maxbench.systems.layers.graphmax.graph_operator``'s. docs/graphmax-math.md gives the math: the
optimality condition, the solver's step, the duality-gap certificate every result carries, the
backward pass, and why Algorithm 1 fails.

Probabilities come back on z's device and dtype; float64 scores are solved in float64, all
others in float32 (half the memory traffic; the safeguard allows for f's rounding error, and
the float32 gaps agree with float64 certificates of the same x). A float32 problem that has not
converged after ``max_iter`` steps is solved again in float64, where the safeguard sees changes
of f that float32 rounds away; its iterations are the sum of both.

``topk=k`` restricts the support to the union over the batch of each row's k largest scores S:
x is zero outside S, and the restricted problem keeps every row of the graph, i.e. uses
``A[:, S]`` (N x |S|), because ``||(I - A) x||^2`` sums over all N rows even when x lives on S.
The reported gap is then the certificate for the full, unrestricted problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.layers.base import all_finite
from maxbench.systems.layers.graphmax import exact as graphmax_exact
from maxbench.systems.layers.graphmax import paper as graphmax_paper
from maxbench.systems.layers.graphmax.backward import ImplicitGraphmax
from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
from maxbench.systems.layers.graphmax.kernels import loader as cpu_kernels

__all__ = ["graphmax", "check_graphmax_args", "GraphmaxInfo", "SOLVERS"]

SOLVERS = ("exact", "paper")


@dataclass
class GraphmaxInfo:
    """What a graphmax call computed, one entry per row of z (0-d tensors for 1-d z)."""

    solver: str
    iterations: torch.Tensor  # fixed-point (exact) or projected-gradient (paper) steps taken
    gap: torch.Tensor  # certified duality gap f(x) + g(u) of the returned x (>= f(x) - f*)
    relative_gap: torch.Tensor  # gap / max(1, |f(x)|) with f taken at the max-shifted scores
    objective: torch.Tensor  # f(x) at the scores as given
    converged: torch.Tensor  # exact: relative gap <= tol; paper: the step-size stop rule met
    log_probs: torch.Tensor  # log x in z's shape and compute dtype (-inf where x is exactly 0)
    support: torch.Tensor | None = None  # token ids the top-k restriction kept (None: all)


def check_graphmax_args(
    lam: float = 1.0,
    solver: str = "exact",
    tol: float = 1e-6,
    max_iter: int = 100,
    topk: int | None = None,
    theta0: float = 0.7,
    alpha: float = 1e-4,
    T: int = 20,
) -> None:
    """Check the options of :func:`graphmax` (same names and defaults) before any scores exist.

    The output layer calls it when it is built, so a bad system string fails before a model
    loads; :func:`graphmax` calls it on every call.

    Raises
    ------
    MaxbenchError
        One line naming the first bad option and what it accepts.
    """
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


def _check_scores(z: torch.Tensor) -> None:
    if z.dim() not in (1, 2) or z.shape[-1] == 0:
        raise MaxbenchError(f"graphmax: z must have shape (N,) or (B, N), got {tuple(z.shape)}")
    if not all_finite(z):
        bad = (~torch.isfinite(z.reshape(-1, z.shape[-1]))).any(-1).nonzero().flatten().tolist()
        raise MaxbenchError(
            f"graphmax: the scores contain NaN or infinite values (rows {bad[:8]}); graphmax needs finite scores"
        )


def graphmax(
    z,
    A,
    lam: float = 1.0,
    solver: str = "exact",
    *,
    tol: float = 1e-6,
    max_iter: int = 100,
    topk: int | None = None,
    theta0: float = 0.7,
    safeguard: bool = True,
    presolve: bool = True,
    alpha: float = 1e-4,
    T: int = 20,
    paper_stop: float = 1e-4,
    log_floor: float = 1e-10,
    backend: str | None = None,
    return_info: bool = False,
    probs: bool = True,
):
    """Graph-regularised softmax: argmin over the simplex of -<x, z> + <x, log x> + lam ||x - A x||^2.

    Parameters
    ----------
    z : torch.Tensor or array-like
        Scores, shape (N,) or (B, N), finite. Integer scores are taken as the default float
        dtype. Differentiable with ``solver="exact"`` (implicit backward, ``maxbench.systems.layers.graphmax.backward``).
    A : graph
        The row-normalised N x N graph: a scipy sparse matrix, a torch (sparse) tensor, a
        :class:`maxbench.systems.graph.CorpusGraph` or a
        :class:`maxbench.systems.layers.graphmax.graph_operator.GraphOperator` (prepare one with
        ``GraphOperator.prepare(A, device)`` to reuse it across calls).
    lam : float
        Weight of the graph total variation, finite and >= 0; 0 gives softmax.
    solver : {"exact", "paper"}
        "exact": the certified fixed point; "paper": the paper's Algorithm 1 as printed, which
        does not reach the optimum (docs/graphmax-math.md).
    tol : float
        exact: a row stops when its relative duality gap is <= tol (>= 0).
    max_iter : int
        exact: at most this many steps per row, rejected steps included (>= 0).
    topk : int, optional
        exact: restrict the support to the union over the batch of each row's ``topk`` largest
        scores (>= 1); the reported gap stays that of the full problem.
    theta0 : float
        exact: the first step size of each row, in (0, 1].
    safeguard : bool
        exact: take back steps that increase the objective and halve that row's step; False
        runs the plain damped iteration with step ``theta0``.
    presolve : bool
        exact, with ``safeguard``: take the first step by Newton's method on each row's
        likeliest tokens (``maxbench.systems.layers.graphmax.presolve``); False starts with the plain
        step, for comparison.
    alpha : float
        paper: the gradient step size (> 0).
    T : int
        paper: the iteration bound of Algorithm 1 (T - 1 updates; an integer >= 1).
    paper_stop : float
        paper: stop when ||x^{t+1} - x^t||_2 falls below this.
    log_floor : float
        paper: log x is taken as log(max(x, log_floor)).
    backend : {"scipy", "torch"}, optional
        How graph products run (default: scipy on the CPU, torch on CUDA).
    return_info : bool
        Also return a :class:`GraphmaxInfo`.
    probs : bool
        False: return None in place of the probabilities when they would only be
        ``info.log_probs.exp()`` (the exact solver on all tokens, no gradient), which saves an
        exponential over the whole block for callers that need only the log-probabilities.

    Returns
    -------
    torch.Tensor
        Probabilities of z's shape on z's device and dtype (each row sums to 1). Float64 scores
        are solved in float64, all others in float32.
    GraphmaxInfo
        Only with ``return_info=True``: iterations, certified gap, objective, convergence and
        log-probabilities per row.

    Raises
    ------
    MaxbenchError
        For a bad option (:func:`check_graphmax_args`), non-finite scores, scores whose length
        is not the graph's size, or gradients asked of the paper solver.
    """
    z = z if torch.is_tensor(z) else torch.as_tensor(z)
    check_graphmax_args(lam, solver, tol, max_iter, topk, theta0, alpha, T)
    _check_scores(z)
    lam = float(lam)
    op = GraphOperator.prepare(A, z.device, backend=backend)
    if op.n != z.shape[-1]:
        raise MaxbenchError(
            f"graphmax: the scores have {z.shape[-1]} entries but the graph has {op.n} nodes; "
            f"use the graph built with this model's tokenizer"
        )
    if solver == "paper" and z.requires_grad:
        raise MaxbenchError("graphmax: solver='paper' is not differentiable; use solver='exact' for gradients")
    out_dtype = z.dtype if z.is_floating_point() else torch.get_default_dtype()
    # float64 scores are solved in float64 (certificates far below 1e-10), all others in
    # float32: half the memory traffic, and its rounding still leaves the gap accurate far
    # below the default tolerance (checked against float64 certificates of the same x).
    compute = torch.float64 if out_dtype == torch.float64 else torch.float32
    rows = z.reshape(-1, z.shape[-1])
    Z = rows.detach().to(compute)
    # x is shift-invariant, f(x) shifts with z: solving at max-shifted scores keeps the logit
    # iterates O(1) and makes the relative stopping rule independent of the shift.
    shift = Z.amax(-1, keepdim=True)
    n = Z.shape[-1]
    full_exact = solver == "exact" and (topk is None or topk >= n)
    # the exact solver's CPU kernels (maxbench.systems.layers.graphmax.kernels.exact): float32 with scipy's products
    K = None
    if full_exact and safeguard and op.backend == "scipy" and compute == torch.float32:
        K = cpu_kernels.load("exact")
    if K is not None:
        Z = Z.contiguous()
        ZT = Z.new_empty(n, Z.shape[0])
        K.shifted_transpose(Z.numpy(), shift.squeeze(-1).contiguous().numpy(), ZT.numpy())
    elif full_exact:
        # the solver wants one problem per column: shift and transpose in one pass
        ZT = torch.sub(Z.T, shift.T, out=Z.new_empty(n, Z.shape[0]))
    else:
        Z = Z - shift
    shift = shift.squeeze(-1)
    support = None
    with torch.no_grad():
        if solver == "paper":
            X, iterations, converged, certified = graphmax_paper.solve(
                Z, op, lam, float(alpha), T, float(paper_stop), float(log_floor)
            )
            logX, gap, f = (
                certified if certified is not None else (torch.log(X), *graphmax_exact.certify(X, Z, op, lam))
            )
            solve_op = op
        elif topk is not None and topk < n:
            support = torch.unique(torch.topk(Z, topk, dim=-1).indices)
            solve_op = op.restrict(support, compute)
            logXS, _, _, iterations, converged = graphmax_exact.solve(
                Z[:, support].T.contiguous(), solve_op, lam, float(tol), max_iter, float(theta0), safeguard, presolve
            )
            XS = logXS.exp()
            X = torch.zeros_like(Z)
            X[:, support] = XS
            logX = torch.full_like(Z, float("-inf"))
            logX[:, support] = logXS
            gap, f = graphmax_exact.certify(X, Z, op, lam)
        else:
            solve_op = op
            logX, gap, f, iterations, converged = graphmax_exact.solve(
                ZT, op, lam, float(tol), max_iter, float(theta0), safeguard, presolve, (Z, shift), K
            )
            stuck = (~converged).nonzero().flatten()
            if compute == torch.float32 and safeguard and max_iter > 0 and stuck.numel():
                # float32 rounding can hide f's changes from the safeguard, and a hard problem
                # then crawls: solve it again in float64
                Zs, shift_s = Z[stuck].double(), shift[stuck].double()
                logXs, gap_s, f_s, steps_s, conv_s = graphmax_exact.solve(
                    (Zs - shift_s[:, None]).T.contiguous(), op, lam, float(tol), max_iter, float(theta0), True, presolve
                )
                logX[stuck], gap[stuck], f[stuck] = logXs.to(compute), gap_s.to(compute), f_s.to(compute)
                iterations[stuck] += steps_s
                converged[stuck] = conv_s
            X = logX.exp() if probs or z.requires_grad else None
    if solver == "exact" and z.requires_grad:
        z_rows = rows.to(compute)
        if support is None:
            X = ImplicitGraphmax.apply(z_rows, X, solve_op, lam)
        else:
            XS = ImplicitGraphmax.apply(z_rows[:, support], X[:, support], solve_op, lam)
            X = torch.zeros_like(z_rows).index_copy(1, support, XS)
    out = X.reshape(z.shape).to(out_dtype) if X is not None else None
    if not return_info:
        return out
    squeeze = (lambda t: t[0]) if z.dim() == 1 else (lambda t: t)
    info = GraphmaxInfo(
        solver=solver,
        iterations=squeeze(iterations),
        gap=squeeze(gap),
        relative_gap=squeeze(gap / f.abs().clamp_min(1.0)),
        objective=squeeze(f - shift),
        converged=squeeze(converged),
        log_probs=logX.reshape(z.shape),
        support=support,
    )
    return out, info
