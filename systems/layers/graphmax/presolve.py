"""The first step of graphmax's exact solver: Newton's method on each problem's likeliest tokens.

From ``y = z``, the fixed-point iteration of ``maxbench.systems.layers.graphmax.exact`` spends most of its
steps on the few tokens that carry the mass: there ``x`` is large, the graph couples them
(through ``2 lam M x``) and a diagonal step can only approach them slowly. This module takes
the first step instead by solving, for each problem, the fixed point on its K likeliest tokens
H with everything else held where the first evaluation found it:

    y_H = z_H + r_H - 2 lam M_HH (x_H - x0_H),   x_H = e^{y_H} / (e^{y_H} summed + rest),

where ``r = z - 2 lam M x0 - z`` is the first evaluation's residual, ``x0 = softmax(z)``, and
``rest`` the mass outside H at ``x0``. A few damped Newton steps on this K-dimensional system
(``J = I + 2 lam M_HH (diag x_H - x_H x_H^T)``, batched K x K solves) place H close to the
optimum; every other token takes the plain step ``y = z + r``. On 384 real problems each
(SmolLM2, top-p decoding, lam 1) the solver then takes 3.3 steps in place of 5.5 on the
food-review graph and 4.2 in place of 6.0 on the movie-review graph. Newton steps at every
iterate instead of the first only do not converge (the other tokens' undamped steps then
oscillate): they were tried and left out.

``M_HH`` comes from a table computed once per graph: M among the graph's 2,048 tokens with the
most predecessors (its hubs), where the coupling is; entries that involve a non-hub keep only
M's diagonal. Only the first step's quality depends on this: the solver certifies its
result as before, and it takes the step back (and a plain one) for a problem where the step
increases f.
"""

from __future__ import annotations

import torch

# M among this many hubs is kept (a 2,048 x 2,048 table, 32 MB in float64); 4,096 gave no
# fewer steps on the food- and movie-review graphs
HUB_TOKENS = 2048
# Newton's method runs on each problem's K likeliest tokens: on the food-review problems 64
# gives 3.1 steps, 32 3.3 and 16 3.8; 32 was the fastest (the K x K solves grow as K^3)
TOKENS = 32
# damped Newton steps on the K tokens
STEPS = 4


def hub_block(hub_pos: torch.Tensor, M_SS: torch.Tensor, diag: torch.Tensor) -> torch.Tensor:
    """batch x K x K: ``M_SS[hub_pos_i, hub_pos_j]`` where both tokens are hubs (``hub_pos``
    >= 0, K x batch), 0 where one is not, and ``diag`` (K x batch) on the diagonal."""
    p = hub_pos.T  # batch x K
    q = p.clamp_min(0)
    # one flat gather (advanced indexing with two broadcast index tensors is several times slower)
    block = torch.take(M_SS, q[:, :, None] * M_SS.shape[1] + q[:, None, :])
    hub = (p >= 0).to(block.dtype)
    block.mul_(hub[:, :, None]).mul_(hub[:, None, :])
    block.diagonal(dim1=1, dim2=2).copy_(diag.T)
    return block


def first_step(ZT: torch.Tensor, R: torch.Tensor, lse: torch.Tensor, op, lam: float) -> torch.Tensor:
    """The first step ``y - z`` (N x batch, one problem per column) for the solver's iterates
    ``y = z`` with residual ``R = -2 lam M softmax(z)`` and log-sum-exp ``lse`` (the full
    normaliser: with light isolated tokens, theirs included). ``op`` provides ``hub_block``."""
    k = min(TOKENS, ZT.shape[0])
    H = torch.topk(ZT, k, dim=0).indices  # the likeliest tokens of softmax(z), K x batch
    step = R.clone()
    dtype = torch.float64  # K x K systems: float64 costs nothing here
    M = op.hub_block(H, dtype).mul_(2.0 * lam)  # 2 lam M_HH
    zH = torch.gather(ZT, 0, H).T.to(dtype)
    rH = torch.gather(R, 0, H).T.to(dtype)
    lse = lse.to(dtype)[:, None]
    x0H = torch.exp(zH - lse)
    # log of sum_{outside H} e^{z}: the mass outside H at x0, times e^{lse}
    log_rest = (1.0 - x0H.sum(1)).clamp_min(0.0).log() + lse[:, 0]
    target = zH + rH + torch.bmm(M, x0H[:, :, None])[:, :, 0]  # y_H = target - 2 lam M_HH x_H

    def residual(yH):
        xH = torch.exp(yH - torch.logaddexp(torch.logsumexp(yH, 1), log_rest)[:, None])
        MxH = torch.bmm(M, xH[:, :, None])[:, :, 0]
        return xH, MxH, yH - target + MxH

    yH = zH
    xH, MxH, F = residual(yH)
    size = F.abs().amax(1)
    length = torch.ones_like(size)  # each problem's Newton step is halved while it fails
    eye = torch.eye(k, dtype=dtype, device=ZT.device)
    for _ in range(STEPS):
        # J = I + 2 lam M_HH (diag x - x x^T)
        J = (M * xH[:, None, :]).sub_(MxH[:, :, None] * xH[:, None, :]).add_(eye)
        y_try = yH - length[:, None] * torch.linalg.solve(J, F)
        x_try, Mx_try, F_try = residual(y_try)
        size_try = F_try.abs().amax(1)
        better = (size_try < size)[:, None]  # a step that does not shrink the residual is not taken
        yH, xH, MxH, F = (
            torch.where(better, new, old) for new, old in ((y_try, yH), (x_try, xH), (Mx_try, MxH), (F_try, F))
        )
        size = torch.where(better[:, 0], size_try, size)
        length = torch.where(better[:, 0], (2.0 * length).clamp_max(1.0), 0.5 * length)
    step.scatter_(0, H, (yH - zH).T.to(step.dtype))
    return step
