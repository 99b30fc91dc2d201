"""The KerBS output layer: a trained KerBS head (systems/layers/kerbs/head.py) over a frozen base model,
and its control, the fine-tuned softmax (``ft-softmax``).

``fit`` loads the head trained for (model, corpus, options) or trains it
(systems/layers/kerbs/fit.py); per decoding step the scores are the head's word scores.
The training options the system string may set (``kerbs(seed=2)``, ``ft-softmax(seed=2)``) are
``fit_options``; one at its default is not written in the canonical name and does not move the
head's cache key.
"""

from __future__ import annotations

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc
from maxbench.systems.layers.base import FitContext, OutputLayer
from maxbench.systems.layers.head_cache import check_fit_options, progress_log, untrained_best_warning
from maxbench.systems.layers.kerbs.fit import CONTROL_LAYER, KerBSConfig, config_from_options, fit_kerbs, fit_kerbs_busy
from maxbench.systems.layers.kerbs.head import DEFAULT_EXTRA_SENSES, KerBSHead

_FIELDS = KerBSConfig.__dataclass_fields__
#: training options a system string may set, with their defaults (those of ``maxbench fit``)
KERBS_FIT_OPTIONS = {
    "seed": _FIELDS["seed"].default,
    "epochs": _FIELDS["epochs"].default,
    "lr": _FIELDS["lr"].default,
    "active_vocab": _FIELDS["active_vocab"].default,
    "budget_tokens": hc.DEFAULT_BUDGET_TOKENS,
}
_D = KERBS_FIT_OPTIONS


class KerBSLayer(OutputLayer):
    """``kerbs(senses=N)``: N extra senses beyond one per word (default 1024); training options
    ``seed``, ``epochs``, ``lr``, ``active_vocab``, ``budget_tokens``."""

    name = "kerbs"
    needs_hidden = True
    needs_fit = True
    fit_options = KERBS_FIT_OPTIONS
    #: theta trained (the kernel); the control holds it at 0
    kernel = True

    def __init__(
        self,
        senses: int = DEFAULT_EXTRA_SENSES,
        seed: int = _D["seed"],
        epochs: int = _D["epochs"],
        lr: float = _D["lr"],
        active_vocab: int = _D["active_vocab"],
        budget_tokens: int = _D["budget_tokens"],
    ):
        self.senses = int(senses)
        if self.senses < 0:
            raise MaxbenchError(f"kerbs senses must be >= 0, got {senses}")
        given = dict(seed=seed, epochs=epochs, lr=lr, active_vocab=active_vocab, budget_tokens=budget_tokens)
        for key, value in check_fit_options(self.name, given, self.fit_options).items():
            setattr(self, key, value)
        self.head: KerBSHead | None = None
        self.meta: dict = {}

    def params(self) -> dict:
        return {"senses": self.senses, **self.non_default_fit_options()}

    def config(self, options: dict | None = None) -> tuple[KerBSConfig, int | None]:
        """The training config and budget this layer fits with: ``options`` (a caller's, e.g.
        ``maxbench fit``'s), overridden by the options the system string sets away from their defaults."""
        opts = {**(options or {}), **self.non_default_fit_options()}
        cfg = config_from_options(opts, senses=self.senses)
        if not self.kernel:
            cfg.kernel = False
        return cfg, opts.get("budget_tokens")

    def fit(self, ctx: FitContext) -> None:
        opts = dict(ctx.options)
        if ctx.corpus is None and not opts.get("head_path"):
            raise MaxbenchError(f"{self.name} needs a corpus to train on (its fitting split)")
        cfg, budget = self.config(opts)
        self.head, self.meta = fit_kerbs(
            ctx.model,
            ctx.corpus,
            budget,
            cfg,
            progress=opts.get("progress", True),
            retrain=opts.get("retrain", False),
            head_path=opts.get("head_path"),
            layer=self.name,
        )
        if self.meta.get("untrained_best"):
            progress_log(untrained_best_warning(self.name, self.meta))

    def fit_busy(self, ctx: FitContext) -> bool:
        """Whether ``fit(ctx)`` would now wait on another process training this head or building the
        hidden-state cache it trains on (shared with POSG and the other heads of the same model,
        corpus and budget)."""
        opts = dict(ctx.options)
        cfg, budget = self.config(opts)
        return fit_kerbs_busy(
            ctx.model,
            ctx.corpus,
            budget,
            cfg,
            retrain=opts.get("retrain", False),
            head_path=opts.get("head_path"),
            layer=self.name,
        )

    def resource_hashes(self) -> dict:
        out = {f"{self.name.replace('-', '_')}_head": self.meta.get("sha256", "")}
        if self.meta.get("untrained_best"):
            out["untrained_best"] = True  # written only when true: the manifests of other runs stay as they were
        return out

    @torch.no_grad()
    def scores(self, logits, hidden):
        if self.head is None:
            raise MaxbenchError(f"{self.name} layer used before fit(); call fit with the model and a corpus")
        if hidden is None:
            raise MaxbenchError(f"{self.name} needs the final hidden state; the decoding loop did not pass it")
        return self.head.word_scores(hidden, logits)


class FineTunedSoftmaxLayer(KerBSLayer):
    """``ft-softmax``: KerBS's control, softmax over output embeddings fine-tuned on the fitting split.

    The KerBS head with one sense per word and theta held at 0 (so each word scores h . w, a plain
    softmax), trained by KerBS's own code with KerBS's anchors, data, learning rate, epochs, seed,
    batch order and early stopping; only the extra senses and the kernel are missing. Its training
    options are KerBS's with KerBS's defaults, so ``kerbs(seed=S)`` and ``ft-softmax(seed=S)``
    differ in nothing else."""

    name = CONTROL_LAYER
    kernel = False

    def __init__(
        self,
        seed: int = _D["seed"],
        epochs: int = _D["epochs"],
        lr: float = _D["lr"],
        active_vocab: int = _D["active_vocab"],
        budget_tokens: int = _D["budget_tokens"],
    ):
        super().__init__(0, seed, epochs, lr, active_vocab, budget_tokens)

    def params(self) -> dict:
        return self.non_default_fit_options()
