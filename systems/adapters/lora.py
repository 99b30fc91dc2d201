"""The fine-tuned baseline: LoRA (Hu et al., ICLR 2022) through ``peft``, merged into the weights.

``lora(r=8)``: rank-``r`` updates of the base model's linear layers, trained on the fitting split
with the base weights frozen, then merged (``merge_and_unload``), so decoding runs a plain
transformers model of the base model's architecture at the base model's speed.

Options: ``r`` (rank), ``alpha`` (scale alpha / r), ``modules`` (``default``: peft's choice for the
architecture, the attention's query and value projections for Llama and Gemma; ``all-linear``:
every linear layer but the LM head), training ``steps``, ``batch``, ``lr``, ``max_len`` and ``seed``.
``steps=0`` gives the base model back (LoRA's B starts at zero).
"""

from __future__ import annotations

import warnings

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters.base import Adapter, AdapterFitContext
from maxbench.systems.adapters.training import train_loop


class LoraAdapter(Adapter):
    """``lora(r=8)``: a LoRA fine-tune of the base model on the fitting split, merged."""

    name = "lora"
    OPTIONS = {
        "r": 8,
        "alpha": 16,
        "modules": "default",
        "steps": 50,
        "batch": 8,
        "lr": 0.001,
        "max_len": 128,
        "seed": 0,
    }
    CHOICES = {"modules": ("default", "all-linear")}
    version = "1"

    def check(self) -> None:
        o = self.options
        for key in ("r", "alpha", "batch", "max_len"):
            if o[key] < 1:
                raise MaxbenchError(f"adapter 'lora': {key} must be >= 1, got {o[key]}")
        if o["steps"] < 0:
            raise MaxbenchError(f"adapter 'lora': steps must be >= 0, got {o['steps']}")
        if not o["lr"] > 0:
            raise MaxbenchError(f"adapter 'lora': lr must be > 0, got {o['lr']}")

    def peft_config(self):
        from peft import LoraConfig

        modules = None if self.options["modules"] == "default" else self.options["modules"]
        return LoraConfig(
            task_type="CAUSAL_LM",
            r=self.options["r"],
            lora_alpha=self.options["alpha"],
            lora_dropout=0.0,
            target_modules=modules,
        )

    def _peft_model(self, lm):
        from peft import get_peft_model

        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecations that peft calls
            torch.manual_seed(self.options["seed"])
            model = get_peft_model(lm.model, self.peft_config())
        return model.to(lm.device)

    def train(self, lm, ctx: AdapterFitContext) -> tuple[dict, dict]:
        from peft import get_peft_model_state_dict

        model = self._peft_model(lm)
        try:
            measured = train_loop(
                model, lm, ctx.examples, self.options, self.suffix()[1:], ctx.options.get("progress", True)
            )
            tensors = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        finally:
            model.unload()  # the base model's own layers back, unchanged
        return tensors, measured

    def apply(self, lm, tensors: dict):
        """The base model with the trained LoRA weights merged into it (a plain transformers model)."""
        from peft import set_peft_model_state_dict

        model = self._peft_model(lm)
        set_peft_model_state_dict(model, {k: v.to(lm.device) for k, v in tensors.items()})
        return model.merge_and_unload().eval()
