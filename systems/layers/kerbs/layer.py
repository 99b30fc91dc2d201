"""The KerBS output layer: a trained KerBS head (systems/layers/kerbs/head.py) over a frozen base model.

``fit`` loads the head trained for (model, corpus, options) or trains it
(systems/layers/kerbs/fit.py); per decoding step the scores are the head's word scores.
"""

from __future__ import annotations

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.layers.base import FitContext, OutputLayer
from maxbench.systems.layers.kerbs.fit import config_from_options, fit_kerbs
from maxbench.systems.layers.kerbs.head import DEFAULT_EXTRA_SENSES, KerBSHead


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
