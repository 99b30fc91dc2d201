"""KerBS (Miao et al., NeurIPS 2019): kernelized Bayesian softmax, as a head on a frozen base model.

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

On a frozen base model (not from scratch, as in the paper):
- Every word keeps an *anchor* sense initialised from its row of the base output
  embedding with theta = 0, so the untrained head is exactly the base softmax. The anchors
  of the ``active_vocab`` words that matter on the fitting data (observed targets first,
  then the words the base model gives most mass) are trained; the other anchors stay
  frozen at the base embedding and theta = 0, and their log-sum-exp per training position
  is computed once, so each step costs O(active + extra senses) instead of O(V) while the
  normaliser stays exact.
- ``senses`` extra senses (the paper's M_sum minus V) start on the most frequent target
  words, dormant: ``extra_init_scale`` (0.01) times the owner's row plus small noise, theta
  = 0, so they hold almost no mass (on food-reviews the untrained head's validation
  perplexity is 55.82 against softmax's 55.73) and the least-used senses that Algorithm 1
  takes first cost their word nothing. (Full-size copies of the anchors, which
  double their word's probability, made training and every reallocation worse.)
- Algorithm 1's allocation phase runs every ``realloc_every`` Adam steps: the moving
  averages of Eq. 12 (log P per word, summed over its occurrences and decayed by beta per
  step) and Eq. 13 (usage per sense) pick words whose moving log-loss is below epsilon and
  move the least-used extra sense to them (theta <- 1e-8, U <- mean U). Epsilon is set
  relative to the total moving log-loss (``realloc_share``), since the scale of Eq. 12
  grows with batch size and 1/beta. Anchors are never moved, so no word loses all of its
  mass, and a word holds at most 4 senses (the paper's limit). The paper does not say
  where a moved sense's embedding starts; here it starts from the word's anchor, scoring
  ``realloc_start`` nats below it at the mean context and rising by ``realloc_gain`` nats
  per standard deviation of the contexts in the direction (orthogonal to the mean context)
  of the word's recently poorly predicted contexts (their mean weighted by 1 - P): the
  region the new sense is meant to cover. (Hidden states share a large common direction;
  a shift along it would make the sense fire everywhere.)
- Training is Adam on the cached hidden states (systems.hidden_cache) with early stopping
  on the validation part's perplexity (the best epoch is kept) and learning-rate decay
  when it stops improving, as in the paper's section 5.1.

Measured on smollm2-135m + food-reviews (60k training positions, validation perplexity
after one epoch; softmax 55.73): lr 5e-5 gives 49.67, 1e-4 gives 50.02, while 2e-4 and
above (or theta at lr 1e-2) end above where they started, so the default is 5e-5. With
1024 extra senses and reallocation 49.64, without reallocation 49.71: at this budget the
multi-sense part changes little; the kernel and the trained anchors give the gain. Epochs
(same data, the default run of `maxbench run`): validation perplexity 49.64 after 1, 48.32 after
2, 47.74 after 3 and 47.46 after 4, about 23 s each on 2 cores; the default is 2, which keeps
the main command's cold run near its 15-minute budget (`maxbench fit --layer kerbs --epochs 4`
trains longer).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from core.errors import MaxbenchError

from .base import FitContext, OutputLayer

KERBS_VERSION = "1"
DEFAULT_EXTRA_SENSES = 1024
DEFAULT_ACTIVE_VOCAB = 8192
MAX_SENSES_PER_WORD = 4
THETA_RESET = 1e-8

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
    """The paper's a(theta) = -theta / (2 (exp(-theta) + theta - 1)) (diverges like -1/theta at 0)."""
    t = theta.double()
    return (-t / (2 * (torch.expm1(-t) + t))).to(theta.dtype)


def kernel_from_dot(dot: torch.Tensor, h_norm: torch.Tensor, w_norm: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """K_theta for precomputed inner products ``dot`` (B, S), norms (B,), (S,), theta (S,)."""
    cos = dot / (h_norm[:, None] * w_norm[None, :]).clamp_min(1e-12)
    scale = _phi(theta[None, :] * cos) / (2 * _g(theta)).to(dot.dtype)[None, :]
    return dot * scale


def kernel(h: torch.Tensor, w: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """K_theta(h, w) for every row of h (B, H) and every sense w (S, H) with theta (S,): (B, S).

    At theta = 0 this is ``h @ w.T`` exactly (the scale factor is exactly 1)."""
    return kernel_from_dot(h @ w.T, h.norm(dim=-1), w.norm(dim=-1), theta)


def grouped_logsumexp(x: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """log sum exp of the columns of x (B, S) within each group (S,) -> (B, n_groups)."""
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
        """Log-probabilities up to a per-row constant (B, V): Eq. 4-5 over all senses.

        ``logits`` are the base model's (h @ W^T): the frozen anchors' kernel at theta = 0."""
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


# --------------------------------------------------------------------------- training
@dataclass
class KerBSConfig:
    senses: int = DEFAULT_EXTRA_SENSES  # extra senses beyond one per word
    active_vocab: int = DEFAULT_ACTIVE_VOCAB
    epochs: int = 2  # 4 measured 47.46 validation perplexity against 48.32 for 2, at twice the time
    batch_size: int = 256
    lr: float = 5e-5
    lr_theta: float = 1e-3
    adam_eps: float = 1e-8
    lr_decay: float = 0.5
    beta: float = 0.01  # moving-average rate of Eq. 12-13
    realloc_every: int = 50  # Q of Algorithm 1, in Adam steps
    realloc_share: float = 0.002  # epsilon: a word's share of the total moving log-loss
    realloc_max: int = 0  # senses moved per allocation phase; 0 = senses // 32 (at least 1)
    extra_init_scale: float = 0.01  # extras start dormant: this times their owner's row
    realloc_gain: float = 1.0  # a moved sense starts rising this many nats per standard deviation
    #                            of the contexts towards those where its word was poorly predicted ...
    realloc_start: float = 4.6  # ... from this many nats below the word's anchor (1% of its mass)
    seed: int = 0

    def __post_init__(self):
        for name in ("senses", "active_vocab", "epochs", "batch_size", "realloc_every"):
            if getattr(self, name) < (0 if name == "senses" else 1):
                raise MaxbenchError(
                    f"KerBS option {name} must be >= {0 if name == 'senses' else 1}, got {getattr(self, name)}"
                )


@dataclass
class TrainData:
    """Training positions in the active-vocabulary form that ``KerBSHead.train_terms`` takes."""

    hidden: torch.Tensor  # (N, H) float16 or float32
    target_active: torch.Tensor  # (N,) long, -1 for frozen words
    target_base_logit: torch.Tensor  # (N,) float32
    tail_lse: torch.Tensor  # (N,) float32


class Reallocator:
    """The allocation phase of Algorithm 1 with the moving averages of Eq. 12-13."""

    def __init__(self, head: KerBSHead, cfg: KerBSConfig, reference: torch.Tensor | None = None):
        dev = head.anchor_w.device
        self.head, self.cfg = head, cfg
        self.reference = reference  # a sample of contexts, to scale a moved sense's start
        n_active, n_extra = len(head.active), len(head.extra_owner)
        self.log_p = torch.zeros(n_active, dtype=torch.float64, device=dev)
        self.usage_anchor = torch.zeros(n_active, dtype=torch.float64, device=dev)
        self.usage_extra = torch.zeros(n_extra, dtype=torch.float64, device=dev)
        self.poor_context = torch.zeros((n_active, head.anchor_w.shape[1]), dtype=torch.float32, device=dev)
        self.poor_weight = torch.zeros(n_active, dtype=torch.float32, device=dev)
        self.moves: list[tuple[int, int, int]] = []  # (sense, from word, to word)

    @torch.no_grad()
    def observe(self, h, target_active, logp, anchor_logp, extra_logp) -> None:
        b = self.cfg.beta
        act = target_active >= 0
        t = target_active[act]
        self.log_p.mul_(1 - b).index_add_(0, t, logp[act].double())  # Eq. 12
        self.usage_anchor.mul_(1 - b).index_add_(0, t, b * anchor_logp[act].exp().double())  # Eq. 13
        if extra_logp.shape[1]:
            self.usage_extra.mul_(1 - b).add_(b * extra_logp.exp().sum(0).double())
        miss = (1 - logp[act].exp()).float()
        self.poor_context.mul_(1 - b).index_add_(0, t, h[act].float() * miss[:, None])
        self.poor_weight.mul_(1 - b).index_add_(0, t, miss)

    def _offset(self, poor_mean: torch.Tensor) -> torch.Tensor:
        """What a moved sense adds to its word's anchor: about -start nats on typical contexts,
        rising by gain nats per standard deviation of the contexts towards ``poor_mean``."""
        cfg, ref = self.cfg, self.reference.float()
        mean = ref.mean(0)
        m_unit = mean / mean.norm().clamp_min(1e-12)
        # Along the mean context: -start at the mean (per its norm, or per the spread of the
        # contexts along it when that is larger, so nearly centred data cannot blow it up).
        along_mean = -cfg.realloc_start * m_unit / max(float(mean.norm()), float((ref @ m_unit).std()), 1e-12)
        shift = poor_mean - mean
        shift = shift - (shift @ m_unit) * m_unit
        if float(shift.norm()) == 0:
            return along_mean
        unit = shift / shift.norm()
        spread = max(float((ref @ unit).std()), 1e-12)
        return along_mean + cfg.realloc_gain * unit / spread

    @torch.no_grad()
    def reallocate(self, optimizer) -> int:
        head, cfg = self.head, self.cfg
        n_extra = len(head.extra_owner)
        if n_extra == 0:
            return 0
        total = self.log_p.sum()
        if total >= 0:
            return 0
        counts = head.senses_per_word()[head.active]
        needy = torch.nonzero((self.log_p < cfg.realloc_share * total) & (counts < MAX_SENSES_PER_WORD)).flatten()
        if len(needy) == 0:
            return 0
        needy = needy[torch.argsort(self.log_p[needy])][: cfg.realloc_max or max(1, n_extra // 32)]
        usage_all = torch.cat([self.usage_anchor, self.usage_extra])
        taken = torch.zeros(n_extra, dtype=torch.bool, device=usage_all.device)
        moved = 0
        for word_a in needy.tolist():
            # Words with one extra sense left to give still have their anchor, so taking is safe.
            candidates = (~taken) & (head.extra_owner_active != word_a)
            if not bool(candidates.any()):
                break
            usage = self.usage_extra.masked_fill(~candidates, math.inf)
            j = int(torch.argmin(usage))
            if self.usage_extra[j] >= self.usage_anchor[word_a]:
                continue  # nothing less used than what the word already has: not redundant
            old_word = int(head.extra_owner[j])
            new_word = int(head.active[word_a])
            # Start next to the anchor, shifted towards where the word was poorly predicted:
            # the mean of those contexts minus the mean of all contexts (hidden states share a
            # large common direction, which alone would make the sense fire everywhere).
            init = head.anchor_w[word_a].clone()
            if self.reference is not None and float(self.poor_weight[word_a]) > 0:
                init += self._offset(self.poor_context[word_a] / self.poor_weight[word_a])
            head.extra_w[j] = init
            head.extra_theta[j] = THETA_RESET
            head.extra_owner[j] = new_word
            self.usage_extra[j] = usage_all.mean()
            self.log_p[word_a] = 0.0  # the word must prove poor again before it gets another sense
            for p in (head.extra_w, head.extra_theta):
                st = optimizer.state.get(p)
                if st:
                    st["exp_avg"][j] = 0
                    st["exp_avg_sq"][j] = 0
            taken[j] = True
            self.moves.append((j, old_word, new_word))
            moved += 1
        if moved:
            head._refresh_index()
        return moved


def _batches(n: int, size: int, gen: torch.Generator | None):
    order = torch.randperm(n, generator=gen) if gen is not None else torch.arange(n)
    for s in range(0, n, size):
        yield order[s : s + size]


@torch.no_grad()
def evaluate_nll(head: KerBSHead, data: TrainData, batch_size: int = 1024) -> float:
    """Mean negative log-likelihood (nats) of the data's targets under the head."""
    dev = head.anchor_w.device
    total, n = 0.0, len(data.target_active)
    for idx in _batches(n, batch_size, None):
        logp, _, _ = head.train_terms(
            data.hidden[idx].to(dev).float(),
            data.target_active[idx].to(dev),
            data.target_base_logit[idx].to(dev),
            data.tail_lse[idx].to(dev),
        )
        total -= float(logp.double().sum())
    return total / max(n, 1)


def train_head(
    head: KerBSHead, train: TrainData, valid: TrainData, cfg: KerBSConfig, progress: bool = True, log=None
) -> dict:
    """Adam with Algorithm 1's reallocation; keeps the epoch with the best validation perplexity."""
    from tqdm import tqdm

    dev = head.anchor_w.device
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(
        [
            {"params": [head.anchor_w, head.extra_w], "lr": cfg.lr},
            {"params": [head.anchor_theta, head.extra_theta], "lr": cfg.lr_theta},
        ],
        eps=cfg.adam_eps,
    )
    n = len(train.target_active)
    reference = train.hidden[torch.randperm(n, generator=gen)[:2048]].to(dev).float()
    realloc = Reallocator(head, cfg, reference)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    history = [{"epoch": 0, "valid_ppl": math.exp(evaluate_nll(head, valid)), "moved": 0}]
    best = (history[0]["valid_ppl"], {k: v.clone() for k, v in head.state_tensors().items()})
    step, t0 = 0, time.time()
    bar = tqdm(
        total=cfg.epochs * steps_per_epoch,
        desc="kerbs",
        unit="step",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    try:
        for epoch in range(1, cfg.epochs + 1):
            moved, running = 0, 0.0
            for idx in _batches(n, cfg.batch_size, gen):
                h = train.hidden[idx].to(dev).float()
                tgt = train.target_active[idx].to(dev)
                logp, anchor_logp, extra_logp = head.train_terms(
                    h, tgt, train.target_base_logit[idx].to(dev), train.tail_lse[idx].to(dev)
                )
                loss = -logp.mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                realloc.observe(h, tgt, logp.detach(), anchor_logp.detach(), extra_logp.detach())
                step += 1
                if step % cfg.realloc_every == 0:
                    moved += realloc.reallocate(opt)
                running = 0.98 * running + 0.02 * float(loss.detach()) if running else float(loss.detach())
                bar.set_postfix(train_ppl=f"{math.exp(running):.2f}")
                bar.update(1)
            vppl = math.exp(evaluate_nll(head, valid))
            history.append({"epoch": epoch, "valid_ppl": vppl, "moved": moved, "seconds": round(time.time() - t0, 1)})
            if log:
                log(f"epoch {epoch}: validation perplexity {vppl:.3f}, senses moved {moved}")
            if vppl < best[0]:
                best = (vppl, {k: v.clone() for k, v in head.state_tensors().items()})
            else:
                # Early stopping: the second epoch without improvement ends training.
                if len(history) >= 3 and history[-2]["valid_ppl"] >= best[0]:
                    break
                for group in opt.param_groups:
                    group["lr"] *= cfg.lr_decay
    finally:
        bar.close()
    restored = KerBSHead.from_tensors(head.vocab_size, best[1]).to(dev)
    head.load_state_dict(restored.state_dict())
    head.extra_owner.copy_(restored.extra_owner)
    head._refresh_index()
    return {
        "history": history,
        "best_valid_ppl": best[0],
        "steps": step,
        "moves": len(realloc.moves),
        "train_seconds": round(time.time() - t0, 1),
    }


# --------------------------------------------------------------------------- from the cache
def choose_active(part_target: np.ndarray, expected_mass: np.ndarray, vocab_size: int, k: int) -> torch.Tensor:
    """The k words that matter most on the fitting data: target counts plus the base model's
    expected counts (so words it over-predicts, e.g. capitals in a lower-cased corpus, can be
    pushed down), ties broken by word id. Returned sorted by id."""
    counts = np.bincount(part_target, minlength=vocab_size).astype(np.float64)
    score = counts + expected_mass
    k = min(k, vocab_size)
    order = np.lexsort((np.arange(vocab_size), -score))[:k]
    return torch.from_numpy(np.sort(order)).long()


@torch.no_grad()
def base_statistics(hidden: np.ndarray, weight: torch.Tensor, sample: int, seed: int, chunk: int = 2048):
    """Expected count of each word under the base model, estimated from ``sample`` positions."""
    rng = np.random.default_rng(seed)
    n = hidden.shape[0]
    idx = np.sort(rng.choice(n, size=min(sample, n), replace=False))
    mass = torch.zeros(weight.shape[0], dtype=torch.float64, device=weight.device)
    for s in range(0, len(idx), chunk):
        h = torch.from_numpy(np.asarray(hidden[idx[s : s + chunk]])).to(weight.device).float()
        mass += torch.softmax(h @ weight.T, dim=-1).sum(0).double()
    return (mass * (n / len(idx))).cpu().numpy()


@torch.no_grad()
def to_train_data(part, weight: torch.Tensor, active: torch.Tensor, chunk: int = 2048, progress=None) -> TrainData:
    """Cached positions -> active-index targets, frozen-target logits and the frozen tail's lse."""
    dev = weight.device
    lookup = torch.full((weight.shape[0],), -1, dtype=torch.long)
    lookup[active] = torch.arange(len(active))
    tail = torch.ones(weight.shape[0], dtype=torch.bool)
    tail[active] = False
    w_tail = weight[tail.to(dev)]
    hidden = torch.from_numpy(np.array(part.hidden))  # a private, writable copy in memory
    target = torch.from_numpy(np.array(part.target)).long()
    n = len(target)
    tail_lse = torch.empty(n)
    tgt_logit = torch.empty(n)
    for s in range(0, n, chunk):
        h = hidden[s : s + chunk].to(dev).float()
        tail_lse[s : s + chunk] = torch.logsumexp(h @ w_tail.T, dim=-1).cpu() if len(w_tail) else -math.inf
        tgt_logit[s : s + chunk] = (h * weight[target[s : s + chunk].to(dev)]).sum(-1).cpu()
        if progress:
            progress(min(chunk, n - s))
    return TrainData(hidden=hidden, target_active=lookup[target], target_base_logit=tgt_logit, tail_lse=tail_lse)


@torch.no_grad()
def test_logprobs(part, weight: torch.Tensor, head: KerBSHead | None, chunk: int = 1024) -> np.ndarray:
    """log P(target) of every position of a cached part under the head (softmax when None)."""
    dev = weight.device
    hidden = np.asarray(part.hidden)
    target = torch.from_numpy(np.array(part.target)).long()
    out = np.empty(len(target), dtype=np.float64)
    for s in range(0, len(target), chunk):
        h = torch.from_numpy(np.array(hidden[s : s + chunk])).to(dev).float()
        logits = h @ weight.T
        scores = logits if head is None else head.word_scores(h, logits)
        lp = torch.log_softmax(scores, dim=-1).gather(1, target[s : s + chunk, None].to(dev))[:, 0]
        out[s : s + len(lp)] = lp.double().cpu().numpy()
    return out


def head_identity(lm, corpus, budget_tokens: int, cfg: KerBSConfig) -> dict:
    from .. import hidden_cache as hc

    return {
        "layer": "kerbs",
        "version": KERBS_VERSION,
        "hidden_cache": hc.CACHE_VERSION,
        "model_hash": lm.hash,
        "tokenizer_hash": lm.tokenizer_hash,
        "corpus": corpus.name,
        "corpus_sha256": corpus.sha256,
        "budget_tokens": int(budget_tokens),
        "config": asdict(cfg),
    }


def fit_kerbs(
    lm,
    corpus,
    budget_tokens: int | None = None,
    cfg: KerBSConfig | None = None,
    progress: bool = True,
    retrain: bool = False,
    log=None,
    head_path=None,
):
    """Load the cached KerBS head for (model, corpus, options) or train and cache it.

    ``head_path`` names a head directory to use instead (it must be complete and trained for
    this model). Returns (head on lm.device, meta dict with the head's ``path``)."""
    from .. import hidden_cache as hc

    if head_path is not None:
        tensors, meta = hc.load_head_from(head_path, lm)
        if meta.get("layer") != "kerbs":
            raise MaxbenchError(f"{head_path} holds a {meta.get('layer')} head, not a kerbs head")
        return KerBSHead.from_tensors(lm.vocab_size, tensors).to(lm.device), meta
    cfg = cfg or KerBSConfig()
    budget_tokens = budget_tokens or hc.DEFAULT_BUDGET_TOKENS
    ident = head_identity(lm, corpus, budget_tokens, cfg)
    directory = hc.head_directory("kerbs", ident)
    if not retrain:
        loaded = hc.load_head(directory, lm)
        if loaded is not None:
            tensors, meta = loaded
            return KerBSHead.from_tensors(lm.vocab_size, tensors).to(lm.device), meta
    if log is None:
        from tqdm import tqdm as _tqdm

        def log(msg: str) -> None:  # above the progress bar, not through it
            _tqdm.write(f"maxbench: {msg}", file=sys.stderr)

    t_start = time.time()
    cache = hc.load_or_build(lm, corpus, budget_tokens, progress=progress)
    t_cache = time.time() - t_start
    torch.manual_seed(cfg.seed)
    weight = lm.model.get_output_embeddings().weight.detach().float()
    train_part = cache["train"]
    t0 = time.time()
    expected = base_statistics(train_part.hidden, weight, sample=4096, seed=cfg.seed)
    active = choose_active(np.asarray(train_part.target), expected, lm.vocab_size, cfg.active_vocab)
    counts = np.bincount(np.asarray(train_part.target), minlength=lm.vocab_size)
    frequent = [int(w) for w in active[np.argsort(-counts[active.numpy()], kind="stable")]]
    if cfg.senses > len(active) * (MAX_SENSES_PER_WORD - 1):
        raise MaxbenchError(
            f"kerbs senses={cfg.senses} exceeds what {len(active)} trained words can hold "
            f"({MAX_SENSES_PER_WORD} senses each); lower senses or raise active_vocab"
        )
    owners = [frequent[i % len(frequent)] for i in range(cfg.senses)]
    head = KerBSHead.initial(
        weight.cpu(), active, torch.tensor(owners, dtype=torch.long), scale=cfg.extra_init_scale, seed=cfg.seed
    ).to(lm.device)
    from tqdm import tqdm

    n_prep = len(train_part) + len(cache["valid"])
    with tqdm(
        total=n_prep,
        desc="frozen-tail normaliser",
        unit="pos",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
        train = to_train_data(train_part, weight, active, progress=bar.update)
        valid = to_train_data(cache["valid"], weight, active, progress=bar.update)
    t_prep = time.time() - t0
    result = train_head(head, train, valid, cfg, progress=progress, log=log)
    test = cache["test"]
    t1 = time.time()
    lp_head = test_logprobs(test, weight, head)
    lp_soft = test_logprobs(test, weight, None)
    t_eval = time.time() - t1
    meta = dict(
        ident,
        cache_key=cache.key,
        cache_sha256=cache.sha256,
        vocab_size=lm.vocab_size,
        active_words=len(active),
        extra_senses=cfg.senses,
        senses_per_word_max=int(head.senses_per_word().max()),
        test_positions=len(test),
        test_ppl_softmax=float(np.exp(-lp_soft.mean())),
        test_ppl_softmax_fp32=float(np.exp(-np.asarray(test.base_logprob, dtype=np.float64).mean())),
        test_ppl_kerbs=float(np.exp(-lp_head.mean())),
        theta_mean=float(torch.cat([head.anchor_theta, head.extra_theta]).detach().mean()),
        training=result,
        seconds={
            "hidden_cache": round(t_cache, 1),
            "prepare": round(t_prep, 1),
            "train": result["train_seconds"],
            "evaluate": round(t_eval, 1),
        },
        torch_threads=torch.get_num_threads(),
        device=str(lm.device),
    )
    meta = hc.save_head(directory, head.state_tensors(), meta)
    return head, meta


# --------------------------------------------------------------------------- the layer
class KerBSLayer(OutputLayer):
    """``kerbs(senses=N)``: N extra senses beyond one per word (default 1024)."""

    name = "kerbs"
    needs_hidden = True
    needs_fit = True

    def __init__(self, senses: int = DEFAULT_EXTRA_SENSES):
        self.senses = int(senses)
        if self.senses < 0:
            raise MaxbenchError(f"kerbs senses must be >= 0, got {senses}")
        self.head: KerBSHead | None = None
        self.meta: dict = {}

    def params(self) -> dict:
        return {"senses": self.senses}

    def fit(self, ctx: FitContext) -> None:
        opts = dict(ctx.options)
        if ctx.corpus is None and not opts.get("head_path"):
            raise MaxbenchError("kerbs needs a corpus to train on (its fitting split)")
        cfg = config_from_options(opts, senses=self.senses)
        self.head, self.meta = fit_kerbs(
            ctx.model,
            ctx.corpus,
            opts.get("budget_tokens"),
            cfg,
            progress=opts.get("progress", True),
            retrain=opts.get("retrain", False),
            head_path=opts.get("head_path"),
        )

    def resource_hashes(self) -> dict:
        return {"kerbs_head": self.meta.get("sha256", "")}

    @torch.no_grad()
    def scores(self, logits, hidden):
        if self.head is None:
            raise MaxbenchError("kerbs layer used before fit(); call fit with the model and a corpus")
        if hidden is None:
            raise MaxbenchError("kerbs needs the final hidden state; the decoding loop did not pass it")
        return self.head.word_scores(hidden, logits)


def config_from_options(opts: dict, senses: int | None = None) -> KerBSConfig:
    fields = KerBSConfig.__dataclass_fields__
    kw = {k: v for k, v in opts.items() if k in fields and v is not None}
    if senses is not None:
        kw["senses"] = senses
    return KerBSConfig(**kw)


__all__ = [
    "KerBSLayer",
    "KerBSHead",
    "KerBSConfig",
    "kernel",
    "kernel_from_dot",
    "normalisation_a",
    "fit_kerbs",
    "train_head",
    "Reallocator",
    "TrainData",
    "grouped_logsumexp",
]
