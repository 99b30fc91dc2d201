"""graphmax's exact solver: the certified fixed point ``x = softmax(z - 2 lam M x)``.

The iteration runs in logit space from ``y = z``, one problem per column of an N x batch block.
Each column takes the safeguarded step

    y <- y + theta * (r - <x, r>) / (1 + 2 lam diag(M) x),   r = z - 2 lam M x - y,

entropic mirror descent on f scaled per token by the diagonal of the fixed point's Jacobian
``I + 2 lam M diag(x)``: the plain damped step ``y <- y + theta r`` diverges once ``2 lam`` times
M's curvature on the support exceeds about 1, and frequent tokens (large ``M_ii``) would
overshoot. theta starts at ``theta0`` per column; a step that increases f beyond f's rounding
error is taken back and the column's theta halved, an accepted one lets it grow by 1.5 up to
``_THETA_MAX``. The merit is f because the step is a descent direction for f; it is not one for
the duality gap, and a gap-based safeguard stalls. A column stops when its relative duality gap
``gap / max(1, |f|)`` is within ``tol`` or after ``max_iter`` steps (rejected ones included).
docs/graphmax-math.md derives the step and the gap.

The first step is Newton's method on each column's likeliest tokens
(``maxbench.systems.layers.graphmax.presolve``); a column where it increases f takes it back and
the plain step instead. Tokens that no edge of the graph touches are solved in closed form
(``maxbench.systems.layers.graphmax.isolated``) where the graph leaves most tokens untouched.
Each evaluation is ``maxbench.systems.layers.graphmax.evaluation``'s: torch's operations, or
the numba kernels for float32 on the CPU.

Finished problems leave the working block in groups (``COMPACT``): dropping columns copies the
blocks, which pays only once a fair share of them is done. Their results do not depend on when
they leave (the problems are independent).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from maxbench.systems.layers.graphmax import evaluation as graphmax_evaluation
from maxbench.systems.layers.graphmax import isolated as graphmax_isolated
from maxbench.systems.layers.graphmax import presolve as graphmax_presolve
from maxbench.systems.layers.graphmax.evaluation import Evaluation, columns
from maxbench.systems.layers.graphmax.graph_operator import GraphOperator

__all__ = ["solve", "certify", "COMPACT"]

# The largest step of the safeguarded solver: on real decoding logits and corpus graphs it needed
# fewer steps (fewer rejected ones) than 1 or 0.7.
_THETA_MAX = 0.85
# Done problems leave the solver's block once they are 1/COMPACT of it: dropping columns copies
# three blocks, about what a step on that share of the columns costs.
COMPACT = 8


@dataclass
class _Block:
    """The problems in the solver's working block: one column of each N x batch block and one
    entry of each vector per problem, in the same order. The iterate, its evaluation (gap,
    exactness, f, log-sum-exp, f's rounding error) and the step's state travel together, and
    :meth:`keep` drops finished problems from all of them at once."""

    Y: torch.Tensor  # the iterate y (never written in place)
    Z: torch.Tensor  # the max-shifted scores
    direction: torch.Tensor  # the next step's direction
    regular: torch.Tensor | None  # the plain direction, while the first step is the presolve's
    light: graphmax_isolated.LightTokens | None  # the light isolated tokens, outside the block
    idx: torch.Tensor  # each column's problem: its position in the batch
    gap: torch.Tensor
    exact: torch.Tensor
    f: torch.Tensor
    lse: torch.Tensor
    f_error: torch.Tensor
    theta: torch.Tensor  # the step size
    steps: torch.Tensor  # steps taken, rejected ones included
    ok: torch.Tensor  # the light tokens' series held at every evaluation
    stored: torch.Tensor  # finished, results stored

    _BLOCKS = ("Y", "Z", "direction")
    # what a step replaces, or keeps where the step is taken back
    EVALUATED = ("gap", "exact", "f", "lse", "f_error")

    def keep(self, cols: torch.Tensor) -> _Block:
        """The block of the problems at the columns ``cols`` only."""
        kept = {}
        for field in fields(self):
            t = getattr(self, field.name)
            if field.name in self._BLOCKS or (field.name == "regular" and t is not None):
                kept[field.name] = torch.index_select(t, 1, cols)
            elif field.name == "light":
                kept[field.name] = None if t is None else t.columns(cols)
            else:
                kept[field.name] = t if t is None else t[cols]
        return _Block(**kept)


@dataclass
class _Solution:
    """The results of the problems, one entry (or column) per problem in the batch's order,
    filled in as problems finish."""

    log_xt: torch.Tensor  # log x, one problem per column
    gap: torch.Tensor
    f: torch.Tensor
    steps: torch.Tensor
    converged: torch.Tensor
    lse: torch.Tensor  # log sum exp(y) of the returned iterate
    ok: torch.Tensor  # the light tokens' series held at every evaluation

    @classmethod
    def empty(cls, ZT: torch.Tensor) -> _Solution:
        n, batch = ZT.shape
        device = ZT.device
        gap, f, lse = ZT.new_empty(batch), ZT.new_empty(batch), ZT.new_empty(batch)
        steps = torch.zeros(batch, dtype=torch.long, device=device)
        converged = torch.zeros(batch, dtype=torch.bool, device=device)
        ok = torch.ones(batch, dtype=torch.bool, device=device)
        return cls(ZT.new_empty(n, batch), gap, f, steps, converged, lse, ok)

    def store(self, block: _Block, cols: torch.Tensor, converged: torch.Tensor) -> None:
        """Store the results of the block's columns ``cols``."""
        rows = block.idx[cols]
        if rows.numel() == self.gap.numel():  # all at once: no gather, no scatter
            torch.sub(block.Y, block.lse, out=self.log_xt)
        else:
            self.log_xt.index_copy_(1, rows, columns(block.Y, cols).sub_(block.lse[cols]))
        self.gap[rows], self.f[rows], self.lse[rows] = block.gap[cols], block.f[cols], block.lse[cols]
        self.steps[rows], self.converged[rows], self.ok[rows] = block.steps[cols], converged[cols], block.ok[cols]


def solve(ZT, op, lam, tol, max_iter, theta0, safeguard, presolve=True, rows=None, K=None):
    """Fixed point of ``y = z - 2 lam M softmax(y)`` on each column of ZT, from ``y = z``.

    On a graph that leaves most tokens untouched, the iteration runs on the touched and the
    heavy isolated tokens only, with the light ones in closed form
    (``maxbench.systems.layers.graphmax.isolated``); a problem whose normaliser leaves the
    closed form's reach is solved again on all tokens.

    Parameters
    ----------
    ZT : torch.Tensor
        The max-shifted scores, N x batch (one problem per column), float32 or float64.
    op : GraphOperator or restricted operator
        M on the tokens of ZT's rows (a top-k restriction takes all tokens of its support).
    lam : float
        The graph term's weight.
    tol : float
        A problem stops when its relative duality gap is <= tol ...
    max_iter : int
        ... or after this many steps, rejected ones included.
    theta0 : float
        The first step size (after the presolve's step); the only one without ``safeguard``.
    safeguard : bool
        Take back steps that increase f; False runs the plain damped iteration.
    presolve : bool
        With ``safeguard``: take the first step by graphmax_presolve's Newton method.
    rows : (torch.Tensor, torch.Tensor), optional
        (Z, shift): the same scores with one problem per row before the max-shift
        (``ZT = (Z - shift)^T``), where the caller has them.
    K : module, optional
        ``maxbench.systems.layers.graphmax.kernels.exact`` (float32 on the CPU); None takes
        torch's operations.

    Returns
    -------
    (torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor)
        log x with one row per problem (batch x N), the duality gap and f of the returned x,
        the steps taken and whether the gap met ``tol``, one entry per problem.
    """
    split = graphmax_isolated.split(ZT, op, lam, K) if isinstance(op, GraphOperator) else None
    if split is None:
        out = _iterate(ZT, op, lam, tol, max_iter, theta0, safeguard, presolve, None, K)
        return out.log_xt.T.contiguous(), out.gap, out.f, out.steps, out.converged
    block, block_op, light = split
    out = _iterate(
        torch.index_select(ZT, 0, block), block_op, lam, tol, max_iter, theta0, safeguard, presolve, light, K
    )
    gap, f, steps, conv = out.gap, out.f, out.steps, out.converged
    # the light tokens' log x straight in the rows' layout (one transpose of the block only)
    Z, shift = rows if rows is not None else (ZT.T, ZT.new_zeros(ZT.shape[1]))
    logX = light.log_probs(Z, out.lse + shift, K)
    if K is not None:
        K.scatter_transpose(out.log_xt.numpy(), block.numpy(), logX.numpy())
    else:
        logX.index_copy_(1, block, out.log_xt.T.contiguous())
    redo = (~out.ok).nonzero().flatten()
    if redo.numel():
        again = _iterate(columns(ZT, redo), op, lam, tol, max_iter, theta0, safeguard, presolve, None, K)
        logX.index_copy_(0, redo, again.log_xt.T)
        gap[redo], f[redo], steps[redo], conv[redo] = again.gap, again.f, again.steps, again.converged
    return logX, gap, f, steps, conv


def _evaluate_at(kernels, YT, step, ZT, op, lam, curvature, shift, tol, light, residual=False) -> Evaluation:
    """One evaluation after the step ``(direction, theta)`` (or at YT), in the kernels where given."""
    if kernels is not None:
        return graphmax_evaluation.evaluate_kernels(
            kernels, YT, step, ZT, op, lam, curvature, shift, tol, light, residual
        )
    Y = YT if step is None else torch.addcmul(YT, *step)
    return graphmax_evaluation.evaluate(Y, ZT, op, lam, curvature, shift, tol, light, residual)


def _iterate(ZT, op, lam, tol, max_iter, theta0, safeguard, presolve=True, light=None, kernels=None) -> _Solution:
    """The iteration of :func:`solve` on the rows of ZT (all tokens, or with ``light`` the
    block's tokens), with its arguments; the log x returned are ZT's rows x batch.

    With ``safeguard`` (the default) each step is
    ``y += theta * (r - <x, r>) / (1 + 2 lam diag(M) x)`` with r the logit residual (module
    docstring). Centring r matters once the scaling differs between tokens: a constant in r
    would no longer cancel. Without ``safeguard``: the plain damped iteration ``y += theta0 * r``.

    A problem's results are stored when it is done, and done problems leave the working block
    in groups (``COMPACT``), so the block shrinks and the batch does not wait for its slowest
    problem at full width."""
    batch = ZT.shape[1]
    device = ZT.device
    out = _Solution.empty(ZT)
    curvature = ((2.0 * lam) * op.diag_m(ZT.dtype))[:, None] if safeguard else None
    # graphmax() max-shifts the scores, so 0 is the right shift (any other is corrected)
    shift = ZT.new_zeros(batch)
    # The first step is graphmax_presolve's (Newton's method on each problem's likeliest
    # tokens), with theta 1; a problem where it increases f takes the plain first step instead.
    first = safeguard and presolve and hasattr(op, "hub_block")
    at = _evaluate_at(kernels, ZT, None, ZT, op, lam, curvature, shift, tol, light, residual=first)
    s = _Block(
        Y=ZT,
        Z=ZT,
        direction=at.direction,
        regular=None,
        light=light,
        idx=torch.arange(batch, device=device),
        gap=at.gap,
        exact=at.exact,
        f=at.f,
        lse=at.lse,
        f_error=at.f_error,
        theta=ZT.new_full((batch,), float(theta0)),
        steps=torch.zeros(batch, dtype=torch.long, device=device),
        ok=torch.ones_like(at.exact) if at.ok is None else at.ok,
        stored=torch.zeros(batch, dtype=torch.bool, device=device),
    )
    if first:
        s.regular = s.direction
        s.direction = graphmax_presolve.first_step(ZT, at.residual, s.lse, op, lam)
        s.theta.fill_(1.0)
    del at
    while True:
        conv = s.exact & (s.gap <= tol * s.f.abs().clamp_min(1.0))
        done = (conv | (s.steps >= max_iter)) & ~s.stored
        if bool(done.any()):
            cols = done.nonzero().flatten()
            bound_only = cols[~s.exact[cols]]
            if bound_only.numel():  # out of steps with only a bound: certify what is returned
                part = None if s.light is None else s.light.columns(bound_only)
                at = graphmax_evaluation.evaluate(
                    columns(s.Y, bound_only),
                    columns(s.Z, bound_only),
                    op,
                    lam,
                    curvature,
                    s.lse[bound_only],
                    None,
                    part,
                )
                s.gap[bound_only], s.f[bound_only] = at.gap, at.f
                conv[bound_only] = at.gap <= tol * at.f.abs().clamp_min(1.0)
            out.store(s, cols, conv)
            s.stored |= done
        if bool(s.stored.all()):
            break
        # Done problems leave the block once they are an eighth of it (COMPACT); until then they
        # take steps whose results are not used (the problems are independent).
        if COMPACT * int(s.stored.sum()) >= s.stored.numel():
            s = s.keep((~s.stored).nonzero().flatten())
        trial = _evaluate_at(kernels, s.Y, (s.direction, s.theta), s.Z, op, lam, curvature, s.lse, tol, s.light)
        if trial.ok is not None:
            s.ok = s.ok & trial.ok
        s.steps += 1
        if safeguard:
            # Only an increase of f beyond rounding counts: near the optimum the changes of f
            # fall below its rounding error, and rejecting steps there on noise would stall.
            worse = trial.f > s.f + torch.maximum(s.f_error, trial.f_error)
            if bool(worse.any()):  # take the step back for those columns (both blocks are new: copy in place)
                back = worse.nonzero().flatten()
                trial.y.index_copy_(1, back, columns(s.Y, back))
                trial.direction.index_copy_(1, back, columns(s.regular if first else s.direction, back))
                for name in _Block.EVALUATED:
                    setattr(trial, name, torch.where(worse, getattr(s, name), getattr(trial, name)))
            s.theta = torch.where(worse, theta0 if first else s.theta * 0.5, (s.theta * 1.5).clamp_max(_THETA_MAX))
        if first:
            first, s.regular = False, None
        s.Y, s.direction = trial.y, trial.direction
        for name in _Block.EVALUATED:
            setattr(s, name, getattr(trial, name))
    return out


def certify(X, Z, op, lam):
    """The duality gap and f of the full problem at a feasible x that may have exact zeros.

    Parameters
    ----------
    X : torch.Tensor
        Probabilities on all N tokens, batch x N (one problem per row); ``0 log 0 = 0``.
    Z : torch.Tensor
        The scores, batch x N.
    op : GraphOperator
        M of the full graph.
    lam : float
        The graph term's weight.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        Per row: the duality gap ``f(x) + g(2 lam (I - A) x)`` (>= f(x) - f*, clamped at 0)
        and f(x) at Z.
    """
    MX, bx_sq = op.m_product(X)
    V = Z - (2.0 * lam) * MX
    x_log_x = torch.special.xlogy(X, X)
    f = (x_log_x - X * Z).sum(-1) + lam * bx_sq
    gap = (x_log_x - X * V).sum(-1) + torch.logsumexp(V, dim=-1)
    return gap.clamp_min(0.0), f
