"""KerBS (Miao et al., NeurIPS 2019): the kernel and the head of kernelized Bayesian softmax.

Each word owns one or more *senses* (embedding w, kernel parameter theta). A sense scores a
context h with the kernel of Eq. 9,

    K_theta(h, w) = |h| |w| (a exp(-theta cos(h, w)) - a),   a = -theta / (2 (exp(-theta) + theta - 1)),

a softmax runs over all senses (Eq. 5) and a word's probability is the sum over its senses
(Eq. 4). Rewriting with s = h.w and c = cos(h, w),

    K = s * phi(theta c) / (2 g(theta)),   phi(x) = (1 - e^-x) / x,   g(t) = (e^-t + t - 1) / t^2,

shows the theta -> 0 limit (phi(0) = 1, g(0) = 1/2, so K = s, the inner product) and is
how it is computed: both factors by their Taylor series near 0 and by ``expm1`` elsewhere,
so values and gradients stay finite for every theta, including the 1e-8 that Algorithm 1
resets a reallocated sense to and negative theta (g > 0 for all theta != 0).

On a frozen base model every word keeps an *anchor* sense started from its row of the base
output embedding with theta = 0, so the untrained head is exactly the base softmax; only the
anchors of the ``active`` words and the extra senses are parameters. How the head is trained
is in systems/layers/kerbs/fit.py, the output layer in systems/layers/kerbs/layer.py.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from maxbench.errors import MaxbenchError

DEFAULT_EXTRA_SENSES = 1024
MAX_SENSES_PER_WORD = 4  # the paper's limit

_PHI_SERIES_BELOW = 1e-2
_G_SERIES_BELOW = 1e-1


# --------------------------------------------------------------------------- the kernel
def _phi(x: torch.Tensor) -> torch.Tensor:
    """(1 - exp(-x)) / x with phi(0) = 1; Taylor series near 0 keeps value and gradient exact."""
    small = x.abs() < _PHI_SERIES_BELOW
    safe = torch.where(small, torch.ones_like(x), x)  # keeps the unused branch free of 0/0
    direct = -torch.expm1(-safe) / safe
    series = 1 + x * (-1 / 2 + x * (1 / 6 + x * (-1 / 24 + x * (1 / 120))))
    return torch.where(small, series, direct)


def _g(theta: torch.Tensor) -> torch.Tensor:
    """(exp(-t) + t - 1) / t^2 with g(0) = 1/2, in float64 (it is per sense, so cheap)."""
    t = theta.double()
    small = t.abs() < _G_SERIES_BELOW
    safe = torch.where(small, torch.ones_like(t), t)
    direct = (torch.expm1(-safe) + safe) / (safe * safe)
    series = 1 / 2 + t * (-1 / 6 + t * (1 / 24 + t * (-1 / 120 + t * (1 / 720 + t * (-1 / 5040 + t / 40320)))))
    return torch.where(small, series, direct)


def normalisation_a(theta: torch.Tensor) -> torch.Tensor:
    """The normalisation of Eq. 9, a(theta) = -theta / (2 (exp(-theta) + theta - 1)).

    Parameters
    ----------
    theta : torch.Tensor
        Kernel parameters, any shape. a diverges like -1/theta at 0, so theta = 0 gives -inf
        or NaN here; the kernel itself never uses ``a`` (see the module docstring).

    Returns
    -------
    torch.Tensor
        a(theta) of theta's shape and dtype, computed in float64.
    """
    t = theta.double()
    return (-t / (2 * (torch.expm1(-t) + t))).to(theta.dtype)


def kernel_from_dot(dot: torch.Tensor, h_norm: torch.Tensor, w_norm: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """The kernel of Eq. 9 from inner products that are already computed.

    Parameters
    ----------
    dot : torch.Tensor
        (B, S) inner products h . w of B contexts with S senses.
    h_norm : torch.Tensor
        (B,) norms of the contexts.
    w_norm : torch.Tensor
        (S,) norms of the senses.
    theta : torch.Tensor
        (S,) kernel parameter of each sense; any real value, 0 included.

    Returns
    -------
    torch.Tensor
        (B, S) K_theta(h, w) in dot's dtype; exactly ``dot`` where theta = 0.
    """
    cos = dot / (h_norm[:, None] * w_norm[None, :]).clamp_min(1e-12)
    scale = _phi(theta[None, :] * cos) / (2 * _g(theta)).to(dot.dtype)[None, :]
    return dot * scale


def kernel(h: torch.Tensor, w: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """The kernel of Eq. 9 between every context and every sense.

    Parameters
    ----------
    h : torch.Tensor
        (B, H) contexts (the base model's final hidden states).
    w : torch.Tensor
        (S, H) sense embeddings.
    theta : torch.Tensor
        (S,) kernel parameter of each sense; any real value, 0 included.

    Returns
    -------
    torch.Tensor
        (B, S) K_theta(h, w), differentiable in h, w and theta. At theta = 0 it is ``h @ w.T``
        exactly (the scale factor is exactly 1).
    """
    return kernel_from_dot(h @ w.T, h.norm(dim=-1), w.norm(dim=-1), theta)


def grouped_logsumexp(x: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Log-sum-exp of the columns of ``x`` within each group (Eq. 4 in log space).

    Parameters
    ----------
    x : torch.Tensor
        (B, S) scores, ``-inf`` allowed.
    group : torch.Tensor
        (S,) long, the group of each column, in [0, n_groups).
    n_groups : int
        Number of groups.

    Returns
    -------
    torch.Tensor
        (B, n_groups): log sum_{s in group g} exp(x[:, s]); ``-inf`` for a group with no
        column or only ``-inf`` columns.
    """
    idx = group[None, :].expand_as(x)
    mx = torch.full((x.shape[0], n_groups), -math.inf, dtype=x.dtype, device=x.device)
    mx = mx.scatter_reduce(1, idx, x, reduce="amax", include_self=True)
    mx_safe = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    total = torch.zeros_like(mx).scatter_add(1, idx, torch.exp(x - mx_safe.gather(1, idx)))
    return mx_safe + torch.log(total)


# --------------------------------------------------------------------------- the head
class KerBSHead(nn.Module):
    """Senses of a KerBS output layer over a vocabulary of ``vocab_size`` words.

    ``active`` (A,) are the words whose anchor senses are trained (the others are the base
    embedding rows with theta = 0, scored by the base logits); ``extra_owner`` (M,) gives
    the word of each extra sense."""

    def __init__(
        self,
        vocab_size: int,
        active: torch.Tensor,
        anchor_w: torch.Tensor,
        extra_owner: torch.Tensor,
        extra_w: torch.Tensor,
        anchor_theta: torch.Tensor | None = None,
        extra_theta: torch.Tensor | None = None,
    ):
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.register_buffer("active", active.long().clone())
        self.register_buffer("extra_owner", extra_owner.long().clone())
        self.anchor_w = nn.Parameter(anchor_w.float().clone())
        self.extra_w = nn.Parameter(extra_w.float().clone())
        self.anchor_theta = nn.Parameter(
            torch.zeros(len(active)) if anchor_theta is None else anchor_theta.float().clone()
        )
        self.extra_theta = nn.Parameter(
            torch.zeros(len(extra_owner)) if extra_theta is None else extra_theta.float().clone()
        )
        self._refresh_index()

    def _refresh_index(self) -> None:
        """Word -> active index lookup, and each extra's owner as an active index."""
        lookup = torch.full((self.vocab_size,), -1, dtype=torch.long, device=self.active.device)
        lookup[self.active] = torch.arange(len(self.active), device=self.active.device)
        self.word_to_active = lookup
        self.extra_owner_active = lookup[self.extra_owner]
        if len(self.extra_owner) and bool((self.extra_owner_active < 0).any()):
            raise MaxbenchError("KerBS head is inconsistent: an extra sense belongs to an untrained word")

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._refresh_index()  # the lookups follow the buffers to their device
        return out

    @classmethod
    def initial(
        cls,
        base_weight: torch.Tensor,
        active: torch.Tensor,
        extra_owner: torch.Tensor,
        noise: float = 0.01,
        scale: float = 1.0,
        seed: int = 0,
    ) -> KerBSHead:
        """Anchors = base embedding rows; extras = ``scale`` x (their owner's row plus a little noise)."""
        gen = torch.Generator().manual_seed(seed)
        base = base_weight.detach().float().cpu()
        extra = base[extra_owner]
        if len(extra_owner):
            jitter = torch.randn(extra.shape, generator=gen) * (
                noise * extra.norm(dim=1, keepdim=True) / math.sqrt(extra.shape[1])
            )
            extra = scale * (extra + jitter)
        return cls(base.shape[0], active, base[active], extra_owner, extra)

    @property
    def n_senses(self) -> int:
        return self.vocab_size + len(self.extra_owner)

    def senses_per_word(self) -> torch.Tensor:
        counts = torch.ones(self.vocab_size, dtype=torch.long, device=self.active.device)
        return counts.index_add_(0, self.extra_owner, torch.ones_like(self.extra_owner))

    def word_scores(self, hidden: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Eq. 4-5 over all senses: each word's log-probability up to a per-row constant.

        Parameters
        ----------
        hidden : torch.Tensor
            (B, H) the base model's final hidden states.
        logits : torch.Tensor
            (B, V) the base model's logits h @ W^T, which are the frozen anchors' kernel at
            theta = 0 (so only the active words and the extra senses are recomputed).

        Returns
        -------
        torch.Tensor
            (B, V) float32 scores; their softmax is the head's distribution.
        """
        hidden = hidden.float()
        scores = logits.float().clone()
        h_norm = hidden.norm(dim=-1)
        scores[:, self.active] = kernel_from_dot(
            hidden @ self.anchor_w.T, h_norm, self.anchor_w.norm(dim=-1), self.anchor_theta
        )
        if len(self.extra_owner):
            k_extra = kernel_from_dot(hidden @ self.extra_w.T, h_norm, self.extra_w.norm(dim=-1), self.extra_theta)
            words, group = torch.unique(self.extra_owner, return_inverse=True)
            scores[:, words] = torch.logaddexp(scores[:, words], grouped_logsumexp(k_extra, group, len(words)))
        return scores

    def train_terms(
        self, h: torch.Tensor, target_active: torch.Tensor, target_base_logit: torch.Tensor, tail_lse: torch.Tensor
    ):
        """log P(target) for a batch, from the active senses plus the frozen tail's log-sum-exp.

        ``target_active`` is the target's active index or -1 (then its frozen anchor's score is
        ``target_base_logit``). Returns (log P (B,), anchor sense log-probs of the target (B,),
        extra sense log-probs (B, M) with -inf where the sense is not the target's)."""
        h_norm = h.norm(dim=-1)
        k_anchor = kernel_from_dot(h @ self.anchor_w.T, h_norm, self.anchor_w.norm(dim=-1), self.anchor_theta)
        k_extra = kernel_from_dot(h @ self.extra_w.T, h_norm, self.extra_w.norm(dim=-1), self.extra_theta)
        lse = torch.logsumexp(torch.cat([k_anchor, k_extra, tail_lse[:, None]], dim=1), dim=1)
        is_active = target_active >= 0
        anchor_t = torch.where(
            is_active, k_anchor.gather(1, target_active.clamp_min(0)[:, None])[:, 0], target_base_logit
        )
        own = (self.extra_owner_active[None, :] == target_active[:, None]) & is_active[:, None]
        extra_t = k_extra.masked_fill(~own, -math.inf)
        numerator = torch.logsumexp(torch.cat([anchor_t[:, None], extra_t], dim=1), dim=1)
        return numerator - lse, anchor_t - lse, extra_t - lse[:, None]

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {
            "active": self.active.cpu(),
            "anchor_w": self.anchor_w.detach().cpu(),
            "anchor_theta": self.anchor_theta.detach().cpu(),
            "extra_owner": self.extra_owner.cpu(),
            "extra_w": self.extra_w.detach().cpu(),
            "extra_theta": self.extra_theta.detach().cpu(),
        }

    @classmethod
    def from_tensors(cls, vocab_size: int, t: dict[str, torch.Tensor]) -> KerBSHead:
        return cls(
            vocab_size, t["active"], t["anchor_w"], t["extra_owner"], t["extra_w"], t["anchor_theta"], t["extra_theta"]
        )


__all__ = ["KerBSHead", "kernel", "kernel_from_dot", "normalisation_a", "grouped_logsumexp"]
