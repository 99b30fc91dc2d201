"""The POSG output layer: a trained POS head (systems/layers/posg/head.py) over a frozen base model.

``fit`` loads the head trained for (model, corpus, options) or trains it
(systems/layers/posg/fit.py). ``scores`` is the Eq. 2-3 distribution.

Sampling (Eq. 5, POS Guided Sampling): the top ``tag_topk`` tags are kept and renormalised,
a tag is drawn, then the decoding setting (temperature, top-k, nucleus top-p: the loop's own
warpers) is applied to the base logits restricted to that tag's vocabulary and a token is
drawn; both draws use the row's own generator. POS control (section 6.2, Table 9):
``control=JJ, control_factor=10`` multiplies p(JJ | h) by 10 and renormalises, both in the
layer's distribution (``scores``) and in sampling.

Training options (``posg(lm_prior=false)``, ``posg(catch_all=false)``, ``posg(tag_vocab=2000)``,
``posg(seed=2)``, ...) are ``fit_options``: one at its default is not written in the canonical
name and does not move the head's cache key, so heads fitted with different options share a run.
"""

from __future__ import annotations

import math

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc
from maxbench.systems.layers.base import FitContext, OutputLayer, draws_on_device, sample_rows
from maxbench.systems.layers.head_cache import check_fit_options, progress_log, untrained_best_warning
from maxbench.systems.layers.posg.fit import POSGConfig, config_from_options, fit_posg, fit_posg_busy, load_tagger
from maxbench.systems.layers.posg.head import CATCH_ALL, POSGHead

DEFAULT_TAG_TOPK = 5
_FIELDS = POSGConfig.__dataclass_fields__
#: training options a system string may set, with their defaults (those of ``maxbench fit``)
POSG_FIT_OPTIONS = {
    "lm_prior": _FIELDS["lm_prior"].default,
    "catch_all": _FIELDS["catch_all"].default,
    "tag_vocab": _FIELDS["tag_vocab"].default,
    "seed": _FIELDS["seed"].default,
    "epochs": _FIELDS["epochs"].default,
    "lr": _FIELDS["lr"].default,
    "budget_tokens": hc.DEFAULT_BUDGET_TOKENS,
}
_D = POSG_FIT_OPTIONS


class POSGLayer(OutputLayer):
    """``posg(tag_topk=5)``, optionally ``control=JJ,control_factor=10``; training options
    ``lm_prior``, ``catch_all``, ``tag_vocab``, ``seed``, ``epochs``, ``lr``, ``budget_tokens``."""

    name = "posg"
    needs_hidden = True
    needs_fit = True
    can_be_sparse = True
    fit_options = POSG_FIT_OPTIONS

    def __init__(
        self,
        tag_topk: int = DEFAULT_TAG_TOPK,
        control: str | None = None,
        control_factor: float = 10.0,
        lm_prior: bool = _D["lm_prior"],
        catch_all: bool = _D["catch_all"],
        tag_vocab: int = _D["tag_vocab"],
        seed: int = _D["seed"],
        epochs: int = _D["epochs"],
        lr: float = _D["lr"],
        budget_tokens: int = _D["budget_tokens"],
    ):
        if int(tag_topk) < 0:
            raise MaxbenchError(f"posg tag_topk must be >= 0 (0 keeps every tag), got {tag_topk}")
        if control_factor <= 0:
            raise MaxbenchError(f"posg control_factor must be > 0, got {control_factor}")
        self.tag_topk, self.control, self.control_factor = int(tag_topk), control or None, float(control_factor)
        given = dict(
            lm_prior=lm_prior,
            catch_all=catch_all,
            tag_vocab=tag_vocab,
            seed=seed,
            epochs=epochs,
            lr=lr,
            budget_tokens=budget_tokens,
        )
        for key, value in check_fit_options(self.name, given, self.fit_options).items():
            setattr(self, key, value)
        self.meta: dict = {}
        self.head: POSGHead | None = None
        self._tagger = None  # loaded by fit_busy for the head's identity, kept for fit

    def params(self) -> dict:
        p: dict = {"tag_topk": self.tag_topk}
        if self.control:
            p.update(control=self.control, control_factor=self.control_factor)
        return {**p, **self.non_default_fit_options()}

    def config(self, options: dict | None = None) -> tuple[POSGConfig, int | None]:
        """The training config and budget this layer fits with: ``options`` (a caller's), overridden
        by the options the system string sets away from their defaults."""
        opts = {**(options or {}), **self.non_default_fit_options()}
        return config_from_options(opts), opts.get("budget_tokens")

    def set_head(self, head: POSGHead) -> None:
        if self.control and self.control not in head.tags:
            raise MaxbenchError(
                f"posg control tag '{self.control}' is not one of the head's tags: "
                f"{', '.join(t for t in head.tags if t != CATCH_ALL)}"
            )
        self.head = head
        self._control_id = head.tags.index(self.control) if self.control else None

    def fit_busy(self, ctx: FitContext) -> bool:
        """Whether ``fit(ctx)`` would now wait on another process training this head or building the
        hidden-state cache it trains on (shared with KerBS and the other heads of the same model,
        corpus and budget). The head's identity names the tagger, so spaCy's is loaded here (the fit
        would load it anyway) and kept for ``fit``."""
        opts = dict(ctx.options)
        if ctx.corpus is None or opts.get("head_path"):
            return False  # a named head loads at once; without a corpus fit refuses
        cfg, budget = self.config(opts)
        self._tagger = opts.get("tagger") or self._tagger or load_tagger()
        return fit_posg_busy(ctx.model, ctx.corpus, budget, cfg, self._tagger, retrain=opts.get("retrain", False))

    def fit(self, ctx: FitContext) -> None:
        opts = dict(ctx.options)
        if ctx.corpus is None and not opts.get("head_path"):
            raise MaxbenchError("posg needs a corpus to train on (its fitting split)")
        cfg, budget = self.config(opts)
        tagger, self._tagger = opts.get("tagger") or self._tagger, None
        head, self.meta = fit_posg(
            ctx.model,
            ctx.corpus,
            budget,
            cfg,
            tagger=tagger,
            progress=opts.get("progress", True),
            retrain=opts.get("retrain", False),
            head_path=opts.get("head_path"),
        )
        self.set_head(head)
        if self.meta.get("untrained_best"):
            progress_log(untrained_best_warning(self.name, self.meta))

    def resource_hashes(self) -> dict:
        out = {"posg_head": self.meta.get("sha256", "")}
        if self.meta.get("untrained_best"):
            out["untrained_best"] = True  # written only when true: the manifests of other runs stay as they were
        return out

    @torch.no_grad()
    def scores(self, logits, hidden):
        if self.head is None:
            raise MaxbenchError("posg layer used before fit(); call fit with the model and a corpus")
        if hidden is None:
            raise MaxbenchError("posg needs the final hidden state; the decoding loop did not pass it")
        self._logits = logits.float()
        class_lse = self.head.class_lse(self._logits)
        self._tag_logp = self.head.tag_logprobs(hidden, self._logits, self._control_id, self.control_factor, class_lse)
        return self.head.word_logprobs(self._logits, self._tag_logp, class_lse)

    @torch.no_grad()
    def sample(self, scores, warp, generators):
        """POS Guided Sampling: top-k tags, draw a tag, then the decoding setting within its vocabulary.

        Only the drawn tag's vocabulary is warped (one row per text, not ``tag_topk``): the warpers
        work row by row, so the draw is the same as from all kept tags' rows, at 1/tag_topk of the cost
        (the sorting of top-p over a 262k vocabulary dominated Gemma's steps). The mixture the draw
        comes from is :attr:`last_probs`, computed when asked for."""
        tag_p = self._tag_logp.exp()
        k = self.tag_topk or tag_p.shape[1]
        k = min(k, tag_p.shape[1])
        top_p, top_c = tag_p.topk(k, dim=-1)  # (B, k)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        self._kept = (top_p, top_c, warp)
        # the CPU generator draws on the host; the device generator where the probabilities are
        host = not draws_on_device(generators)
        slot = sample_rows(top_p.cpu() if host else top_p, generators)
        tags = top_c.gather(1, slot.to(top_c.device)[:, None])[:, 0]
        self.last_tags = tags.cpu() if host else tags
        chosen = self._within(tags[:, None], warp)[:, 0]
        return sample_rows(chosen.cpu() if host else chosen, generators)

    def _within(self, classes: torch.Tensor, warp) -> torch.Tensor:
        """(B, k, V): for each row's classes (B, k), the token distribution within that class's
        vocabulary under the decoding setting (Eq. 5); zero for an empty class (never kept)."""
        bsz, vocab = self._logits.shape
        member = self.head.membership.T  # (T, V)
        restricted = (
            self._logits[:, None, :].expand(bsz, classes.shape[1], vocab).masked_fill(~member[classes], -math.inf)
        )
        within = torch.softmax(warp(restricted.reshape(-1, vocab)).float(), dim=-1).reshape(bsz, -1, vocab)
        return torch.nan_to_num(within, nan=0.0)

    @property
    def last_probs(self) -> torch.Tensor:
        """The distribution the last :meth:`sample` drew from: the kept tags' within-tag
        distributions mixed by their renormalised probabilities (B, V)."""
        top_p, top_c, warp = self._kept
        return (top_p[:, :, None] * self._within(top_c, warp)).sum(1)
