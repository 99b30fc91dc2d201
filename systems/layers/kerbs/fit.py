"""Fitting a KerBS head (systems/layers/kerbs/head.py) on a frozen base model's cached hidden states.

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
  = 0, so they hold almost no mass (the untrained head's validation perplexity is within a
  fraction of a percent of softmax's) and the least-used senses that Algorithm 1 takes first
  cost their word nothing. (Full-size copies of the anchors, which double their word's
  probability, made training and every reallocation worse.)
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
- Training is Adam on the cached hidden states (systems/hidden_cache.py) with early stopping
  on the validation part's perplexity (the best epoch is kept) and learning-rate decay
  when it stops improving, as in the paper's section 5.1.

The fine-tuned softmax control (``ft-softmax``, ``kernel=False`` with no extra senses) is this same
training with one sense per word and theta held at 0: the active words' output embeddings are
fine-tuned on the same positions, with the same anchors, learning rate, epochs, batch order and
early stopping, and the head is a plain softmax over them. KerBS against it separates what the
senses and the kernel add from what fine-tuning the output embeddings on in-domain text adds.

The defaults (lr 5e-5, 1024 extra senses, 2 epochs) come from the measurements recorded in
benchmarks/head_training.py, which reruns them: higher learning rates end above where they
started, reallocation changes little at this budget (the kernel and the trained anchors give
the gain), and epochs beyond 2 gain little at the cost of the main command's time budget
(``maxbench fit --layer kerbs --epochs 4`` trains longer).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc
from maxbench.systems.layers.head_cache import (
    WHEN_SET,
    fit_busy,
    head_identity,
    head_perplexity_key,
    load_or_train,
    part_logprobs_each,
    progress_log,
)
from maxbench.systems.layers.kerbs.head import DEFAULT_EXTRA_SENSES, MAX_SENSES_PER_WORD, KerBSHead
from maxbench.systems.layers.workspace import Workspace, logsumexp_rows

KERBS_VERSION = "1"
#: the layer whose heads are KerBS training without extra senses and with theta held at 0
CONTROL_LAYER = "ft-softmax"
DEFAULT_ACTIVE_VOCAB = 8192
THETA_RESET = 1e-8


# --------------------------------------------------------------------------- training
@dataclass
class KerBSConfig:
    """Training options of a KerBS head; every field is part of the head's identity."""

    senses: int = DEFAULT_EXTRA_SENSES  # extra senses beyond one per word
    active_vocab: int = DEFAULT_ACTIVE_VOCAB
    epochs: int = 2  # more gain little for their time (benchmarks/head_training.py)
    batch_size: int = 256
    lr: float = 5e-5  # 1e-4 ends worse, 2e-4 worse than untrained (benchmarks/head_training.py)
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
    # False: theta is held at 0 (every sense scores by the inner product, as softmax does); with no
    # extra senses this is the fine-tuned softmax control. In the identity only when False.
    kernel: bool = field(default=True, metadata=WHEN_SET)

    def __post_init__(self):
        for name in ("senses", "active_vocab", "epochs", "batch_size", "realloc_every"):
            if getattr(self, name) < (0 if name == "senses" else 1):
                raise MaxbenchError(
                    f"KerBS option {name} must be >= {0 if name == 'senses' else 1}, got {getattr(self, name)}"
                )
        if not isinstance(self.kernel, bool):
            raise MaxbenchError(f"KerBS option kernel must be true or false, got {self.kernel!r}")


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
    """Train ``head`` in place: Adam with Algorithm 1's reallocation, early stopping and
    learning-rate decay on the validation perplexity.

    Parameters
    ----------
    head : KerBSHead
        The head to train, on the device where training runs.
    train, valid : TrainData
        Training positions and the validation positions for early stopping.
    cfg : KerBSConfig
        Learning rates, epochs, batch size, reallocation settings and seed; without ``kernel``
        theta stays at 0 (it is not trained).
    progress : bool
        Show a progress bar on stderr.
    log : callable, optional
        ``log(line)`` after each epoch.

    Returns
    -------
    dict
        ``history`` (per epoch: ``train_loss``, the mean training loss in nats per position over the
        epoch's batches as the parameters moved; ``valid_ppl``, the validation perplexity at its end;
        senses ``moved``; epoch 0 = untrained, validation only),
        ``best_valid_ppl``, ``steps``, ``moves`` and ``train_seconds``. The head ends at the
        epoch with the best validation perplexity.
    """
    dev = head.anchor_w.device
    gen = torch.Generator().manual_seed(cfg.seed)
    groups = [{"params": [head.anchor_w, head.extra_w], "lr": cfg.lr}]
    if cfg.kernel:
        groups.append({"params": [head.anchor_theta, head.extra_theta], "lr": cfg.lr_theta})
    opt = torch.optim.Adam(groups, eps=cfg.adam_eps)
    n = len(train.target_active)
    reference = train.hidden[torch.randperm(n, generator=gen)[:2048]].to(dev).float()
    realloc = Reallocator(head, cfg, reference)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    history = [{"epoch": 0, "valid_ppl": math.exp(evaluate_nll(head, valid)), "moved": 0}]
    best = (history[0]["valid_ppl"], {k: v.clone() for k, v in head.state_tensors().items()})
    step, t0 = 0, time.time()
    bar = hc.progress_bar(cfg.epochs * steps_per_epoch, "kerbs", progress, unit="step")
    try:
        for epoch in range(1, cfg.epochs + 1):
            moved, running, loss_sum = 0, 0.0, 0.0
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
                batch_loss = float(loss.detach())
                loss_sum += batch_loss * len(idx)
                running = 0.98 * running + 0.02 * batch_loss if running else batch_loss
                bar.set_postfix(train_ppl=f"{math.exp(running):.2f}")
                bar.update(1)
            vppl = math.exp(evaluate_nll(head, valid))
            history.append(
                {
                    "epoch": epoch,
                    "train_loss": loss_sum / n,
                    "valid_ppl": vppl,
                    "moved": moved,
                    "seconds": round(time.time() - t0, 1),
                }
            )
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
    """Cached positions -> active-index targets, frozen-target logits and the frozen tail's lse
    (``chunk`` positions at a time, every chunk's (chunk, V - A) temporaries in the same buffers)."""
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
    work = Workspace()
    for s in range(0, n, chunk):
        h = hidden[s : s + chunk].to(dev).float()
        if len(w_tail):
            logits = torch.mm(h, w_tail.T, out=work.take("logits", (len(h), len(w_tail)), h))
            tail_lse[s : s + chunk] = logsumexp_rows(logits, work.take("lse", (len(h),), h), work).cpu()
        else:
            tail_lse[s : s + chunk] = -math.inf
        tgt_logit[s : s + chunk] = (h * weight[target[s : s + chunk].to(dev)]).sum(-1).cpu()
        if progress:
            progress(min(chunk, n - s))
    return TrainData(hidden=hidden, target_active=lookup[target], target_base_logit=tgt_logit, tail_lse=tail_lse)


# --------------------------------------------------------------------------- fit or load
def fit_kerbs(
    lm,
    corpus,
    budget_tokens: int | None = None,
    cfg: KerBSConfig | None = None,
    progress: bool = True,
    retrain: bool = False,
    log=None,
    head_path=None,
    layer: str = "kerbs",
):
    """The KerBS head for (model, corpus, options): loaded from the cache, or trained and cached.

    Parameters
    ----------
    lm : maxbench.systems.models.LoadedModel
        The frozen base model; its LM head must be a bias-free ``h @ W^T``.
    corpus
        The corpus whose fitting split trains the head (unused with ``head_path``).
    budget_tokens : int, optional
        Training positions from the fitting split (default maxbench.systems.hidden_cache.DEFAULT_BUDGET_TOKENS).
    cfg : KerBSConfig, optional
        Training options (default ``KerBSConfig()``).
    progress : bool
        Show progress bars on stderr.
    retrain : bool
        Train even when a head with this identity is cached.
    log : callable, optional
        ``log(line)`` for per-epoch lines (default: above the progress bars on stderr).
    head_path : path-like, optional
        A complete head directory trained for this model, used instead of the cache.
    layer : str
        "kerbs", or CONTROL_LAYER ("ft-softmax") for the fine-tuned softmax control, whose ``cfg``
        must have no extra senses and no kernel; heads are cached under the layer's name.

    Returns
    -------
    (KerBSHead, dict)
        The head on ``lm.device`` and its meta: the identity, held-out (test part) perplexities
        of softmax and of the head (``test_ppl_kerbs``, ``test_ppl_ft_softmax``), the training
        history, ``best_epoch``, ``untrained_best``, ``sha256`` and ``path``.
    """
    cfg = cfg or KerBSConfig()
    budget_tokens = budget_tokens or hc.DEFAULT_BUDGET_TOKENS
    if layer == CONTROL_LAYER and (cfg.senses or cfg.kernel):
        raise MaxbenchError(
            f"the {CONTROL_LAYER} control has one sense per word and no kernel (senses=0, kernel=False)"
        )
    return load_or_train(
        layer,
        lm,
        restore=lambda tensors, meta: KerBSHead.from_tensors(lm.vocab_size, tensors),
        identity=lambda: head_identity(layer, KERBS_VERSION, lm, corpus, budget_tokens, cfg),
        train=lambda ident: _train(lm, corpus, budget_tokens, cfg, ident, progress, log or progress_log, layer),
        retrain=retrain,
        head_path=head_path,
    )


def fit_kerbs_busy(
    lm,
    corpus,
    budget_tokens: int | None = None,
    cfg: KerBSConfig | None = None,
    retrain: bool = False,
    head_path=None,
    layer: str = "kerbs",
) -> bool:
    """Whether :func:`fit_kerbs` with these arguments would now wait on another process: training
    or building what this head needs (``maxbench.systems.layers.head_cache.fit_busy``)."""
    cfg = cfg or KerBSConfig()
    budget_tokens = budget_tokens or hc.DEFAULT_BUDGET_TOKENS
    return fit_busy(
        layer,
        lm,
        corpus,
        budget_tokens,
        identity=lambda: head_identity(layer, KERBS_VERSION, lm, corpus, budget_tokens, cfg),
        retrain=retrain,
        head_path=head_path,
    )


def _train(
    lm, corpus, budget_tokens: int, cfg: KerBSConfig, ident: dict, progress: bool, log, layer: str = "kerbs"
) -> tuple:
    """Build the hidden-state cache, train a head on it and measure it on the test part."""
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
    n_prep = len(train_part) + len(cache["valid"])
    with hc.progress_bar(n_prep, "frozen-tail normaliser", progress, unit="pos") as bar:
        train = to_train_data(train_part, weight, active, progress=bar.update)
        valid = to_train_data(cache["valid"], weight, active, progress=bar.update)
    t_prep = time.time() - t0
    result = train_head(head, train, valid, cfg, progress=progress, log=log)
    test = cache["test"]
    t1 = time.time()
    lp_head, lp_soft = part_logprobs_each(test, weight, [head.word_scores, None])
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
        **{head_perplexity_key(layer): float(np.exp(-lp_head.mean()))},
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
    return head, meta


def config_from_options(opts: dict, senses: int | None = None) -> KerBSConfig:
    """A KerBSConfig from layer or command options: the keys it has fields for, None meaning
    default; ``senses`` (the layer's own parameter) wins over the options."""
    fields = KerBSConfig.__dataclass_fields__
    kw = {k: v for k, v in opts.items() if k in fields and v is not None}
    if senses is not None:
        kw["senses"] = senses
    return KerBSConfig(**kw)


__all__ = [
    "KerBSConfig",
    "TrainData",
    "Reallocator",
    "train_head",
    "fit_kerbs",
    "config_from_options",
    "CONTROL_LAYER",
]
