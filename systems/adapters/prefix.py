"""Prefix-tuning (Li and Liang, ACL 2021) through ``peft``, decoded by maxbench's own loop.

``prefix(n=10)``: ``n`` trained virtual key/value positions in front of every layer's attention;
the base model stays frozen. ``peft``'s ``PrefixTuningConfig`` makes and trains them. For
decoding, ``PeftModelForCausalLM.forward`` cannot be called by a loop that keeps its own KV cache
(it replaces ``past_key_values`` on every call), so ``PrefixLM`` does what ``peft``'s ``generate``
does around the base model: on the first call the cache is ``peft``'s own ``get_prompt`` (the
prefix keys and values), the attention mask gets ``n`` ones in front, and every position is moved
``n`` on. maxbench's loop then decodes it as any model, and its tokens equal ``peft``'s
``generate`` (greedy and seeded sampling; tests/systems/adapters/test_lora_prefix.py).

Options: ``n`` virtual tokens; ``projection`` (the paper's reparametrisation: an MLP makes the
prefix, peft's ``prefix_projection``); training ``steps``, ``batch``, ``lr``, ``max_len`` (tokens
per training text) and ``seed`` (the prefix's initialisation and the order of the examples).
``steps=0`` keeps the seeded random prefix untrained.
"""

from __future__ import annotations

import warnings

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters.base import Adapter, AdapterFitContext, require_positions, shorter_context
from maxbench.systems.adapters.training import train_loop


class PrefixLM(torch.nn.Module):
    """A prefix-tuned model as maxbench's loop calls a model: ``peft``'s prefix in front of the base
    model's own KV cache, the attention mask and positions moved by ``n``."""

    def __init__(self, peft_model, n: int):
        super().__init__()
        self.peft = peft_model
        self.n = int(n)
        self.config = shorter_context(peft_model.get_base_model().config, self.n)

    @property
    def base(self):
        return self.peft.get_base_model()

    def get_output_embeddings(self):
        return self.base.get_output_embeddings()

    def get_input_embeddings(self):
        return self.base.get_input_embeddings()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        bsz = input_ids.shape[0]
        if past_key_values is None:
            # peft's own prefix cache, as its generate() makes it on the first step
            past_key_values = self.peft.get_prompt(batch_size=bsz, max_cache_len=-1)
        if attention_mask is not None:
            ones = torch.ones((bsz, self.n), dtype=attention_mask.dtype, device=attention_mask.device)
            attention_mask = torch.cat([ones, attention_mask], dim=1)
        if position_ids is not None:
            position_ids = position_ids + self.n
        return self.base(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            **kwargs,
        )


class PrefixAdapter(Adapter):
    """``prefix(n=10)``: prefix-tuning of the frozen base model on the fitting split."""

    name = "prefix"
    OPTIONS = {
        "n": 10,
        "init": "text",
        "projection": False,
        "steps": 50,
        "batch": 8,
        "lr": 0.005,
        "max_len": 128,
        "seed": 0,
    }
    CHOICES = {"init": ("text", "random")}
    version = "1"

    def check(self) -> None:
        o = self.options
        for key in ("n", "batch", "max_len"):
            if o[key] < 1:
                raise MaxbenchError(f"adapter 'prefix': {key} must be >= 1, got {o[key]}")
        if o["steps"] < 0:
            raise MaxbenchError(f"adapter 'prefix': steps must be >= 0, got {o['steps']}")
        if not o["lr"] > 0:
            raise MaxbenchError(f"adapter 'prefix': lr must be > 0, got {o['lr']}")
        if o["projection"] and o["init"] == "text":
            raise MaxbenchError(
                "adapter 'prefix': projection=true starts from peft's random MLP; give init=random with it"
            )

    def peft_config(self, inference: bool = False):
        """peft's configuration; ``inference``: the prefix as trained (its keys and values), without the
        projection that made it."""
        from peft import PrefixTuningConfig

        return PrefixTuningConfig(
            task_type="CAUSAL_LM",
            num_virtual_tokens=self.options["n"],
            prefix_projection=self.options["projection"],
            inference_mode=inference,
        )

    def _peft_model(self, lm, inference: bool = False):
        from peft import get_peft_model

        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecations that peft calls
            torch.manual_seed(self.options["seed"])
            model = get_peft_model(lm.model, self.peft_config(inference))
        return model.to(lm.device)

    def train(self, lm, ctx: AdapterFitContext) -> tuple[dict, dict]:
        from peft import get_peft_model_state_dict

        require_positions(getattr(lm.model.config, "max_position_embeddings", None), self.options["n"])

        model = self._peft_model(lm)
        if self.options["init"] == "text":
            init_from_text(model, lm, ctx.examples, self.options["n"])
        what = self.suffix()[1:]
        measured = train_loop(model, lm, ctx.examples, self.options, what, ctx.options.get("progress", True))
        return get_peft_model_state_dict(model), measured

    def apply(self, lm, tensors: dict):
        """The prefix-tuned model for maxbench's loop; ``.peft`` is the ``PeftModel`` (its ``generate``)."""
        from peft import set_peft_model_state_dict

        model = self._peft_model(lm, inference=True)
        set_peft_model_state_dict(model, {k: v.to(lm.device) for k, v in tensors.items()})
        model.eval()
        return PrefixLM(model, self.options["n"]).eval()


@torch.no_grad()
def init_from_text(model, lm, examples, n: int) -> None:
    """Start the prefix as the keys and values the base model gives a real text's first ``n`` tokens
    (Li and Liang's initialisation with real words' activations): the first training text in the fixed
    order, repeated when shorter than ``n`` tokens. Untrained, the prefix is then a context of the
    domain instead of random keys and values that the model never saw."""
    from maxbench.systems.adapters.base import training_order

    if not examples:
        raise MaxbenchError("adapter 'prefix': init=text needs a training text (the fitting split is empty)")
    first = examples[training_order(examples)[0]]
    ids = lm.tokenizer((first.prompt + " " + first.text).strip(), add_special_tokens=True)["input_ids"]
    ids = (ids * (n // max(1, len(ids)) + 1))[:n]
    out = lm.model(input_ids=torch.tensor([ids], device=lm.device), use_cache=True)
    cache = out.past_key_values
    layers = []
    for layer in range(len(cache.layers)):
        keys, values = cache.layers[layer].keys, cache.layers[layer].values  # (1, kv heads, n, head dim)
        layers += [keys[0].permute(1, 0, 2), values[0].permute(1, 0, 2)]  # (n, kv heads, head dim) each
    weight = model.prompt_encoder[model.active_adapter].embedding.weight
    weight.copy_(torch.stack(layers, dim=1).reshape(n, -1).to(weight.dtype))
