"""NRP, non-residual prompting (Carlsson, Öhman, Liu, Verlinden, Nivre and Sahlgren; ACL 2022), rebuilt
as an adapter of the base model: ``nrp(r=8)``.

The official code is GPT-2 only, pins transformers 4.8.1 and downloads a prompt model trained on a
large corpus (FreddeFrallan/Non-Residual-Prompting on GitHub, the authors' repository); this is a rebuild on maxbench's base models, trained on the
conditional suite's fitting split like the other adapters, and called what it is. Three streams
of states (the FCTG slides' colours):

- **red**, the prompt model's states: a copy of the base model with a LoRA of rank ``r`` (trained)
  reads the attribute part of the input (everything up to the template's end, every conditional
  adapter's rule: ``conditional.attribute_positions``) at its own positions 0..L-1;
- **green**, the text's own states: the frozen base model reads the text alone (from the last
  attribute token on, at positions 0, 1, ...), never the prompt, so its KV cache does not depend on
  the attributes (the "non-residual" property: the prompt never enters the text's residual stream);
- **yellow**, text+prompt states: the frozen base model again, on the same text tokens and
  positions, whose attention in every layer reads the red keys and values and the green ones up to
  its own position (causal) instead of its own. The yellow stream's last layer gives the
  next-token distribution.

It goes through transformers' ``AttentionInterface`` (the model's own attention function, called
with the red and green keys and values), so it is architecture-agnostic and maxbench's own
KV-cache loop decodes it: the first call reads the prompt (red once, green from its last token),
each later call extends the green cache by one token and runs the yellow stream for that token.
Attribute positions other than the last have no yellow state; their outputs are the prompt
model's own (used by nothing). ``hidden_states`` holds the final layer only.

What it lacks against the paper: the prompt model's pre-training on a large corpus with NRP's
word-inclusion and other instruction tasks (here 50 steps on the suite's fitting split), a
separate full prompt model (a LoRA of the same weights here), and the paper's position-invariant
prompt embeddings beyond RoPE's relative positions. docs/conditional.md#nrp says the same.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters.base import AdapterFitContext
from maxbench.systems.adapters.conditional import (
    ConditionalAdapter,
    ConditionalLM,
    attribute_positions,
    install_attention,
    own_attention,
)

_PREFIX = "nrp_"


class NrpState:
    """One call's yellow-stream inputs: the red cache and mask, the green cache, and the mask."""

    def __init__(self, red, red_mask: torch.Tensor, green):
        self.red = red  # DynamicCache of the prompt model over the attribute part
        self.red_mask = red_mask  # (batch, Lr) bool
        self.green = green  # DynamicCache of the base model over the text so far
        self.mask: torch.Tensor | None = None  # (batch, 1, q, Lr + Lg) additive, this call's


def nrp_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The attention function registered as ``nrp_<impl>``: with an ``nrp_state`` in the call (the
    yellow stream), the layer's own attention over the red and green keys and values instead of its
    own; without one, the model's own attention, unchanged."""
    state = kwargs.pop("nrp_state", None)
    own = own_attention(module)
    if state is None:
        return own(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    layer = module.layer_idx
    red, green = state.red.layers[layer], state.green.layers[layer]
    k = torch.cat([red.keys, green.keys], dim=2)
    v = torch.cat([red.values, green.values], dim=2)
    return own(module, query, k, v, state.mask.to(query.dtype), scaling=scaling, dropout=dropout, **kwargs)


def install(model) -> callable:
    """Make ``model`` call ``nrp_attention``; returns the function that undoes it."""
    return install_attention(model, "nrp", _PREFIX, nrp_attention)


def _additive(allowed: torch.Tensor, dtype) -> torch.Tensor:
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


class NrpLM(ConditionalLM):
    """The frozen base model (green and yellow streams) and the prompt model (red), called as
    maxbench's loop calls a model."""

    def __init__(self, base, prompt_model, marker: list[int]):
        super().__init__(base, marker, install(base))
        self.prompt_model = prompt_model

    def _yellow(self, ids: torch.Tensor, positions: torch.Tensor, state: NrpState, allowed_green: torch.Tensor):
        """The yellow stream's final (normed) states for ``ids`` at ``positions``; ``allowed_green``
        (batch, q, Lg) says which green keys each query reads."""
        b, q = ids.shape
        red = state.red_mask[:, None, :].expand(b, q, state.red_mask.shape[1])
        allowed = torch.cat([red, allowed_green], dim=2)[:, None]
        state.mask = _additive(allowed, torch.float32)
        out = self.base(
            input_ids=ids,
            position_ids=positions,
            use_cache=False,
            output_hidden_states=True,
            logits_to_keep=1,  # the states are what is used: no LM head over every position here
            nrp_state=state,
        )
        return out.hidden_states[-1]

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None, labels=None, **kwargs):
        from transformers import DynamicCache
        from transformers.modeling_outputs import CausalLMOutputWithPast

        keep = kwargs.get("logits_to_keep", 0)
        head = self.base.get_output_embeddings()
        state = getattr(past_key_values, "_nrp_state", None) if past_key_values is not None else None
        if state is not None:  # a later decoding step: every new token is text
            green = state.green
            n = green.get_seq_length()
            q = input_ids.shape[1]
            positions = torch.arange(n, n + q, device=input_ids.device)[None].expand(input_ids.shape[0], q)
            with torch.no_grad():
                self.base(
                    input_ids=input_ids, position_ids=positions, past_key_values=green, use_cache=True, logits_to_keep=1
                )
            allowed = torch.ones((q, n + q), dtype=torch.bool, device=input_ids.device).tril(n)
            hidden = self._yellow(input_ids, positions, state, allowed[None].expand(input_ids.shape[0], q, n + q))
            logits = head(hidden[:, -keep:] if keep else hidden)
            green._nrp_state = state
            return CausalLMOutputWithPast(logits=logits, past_key_values=green, hidden_states=(hidden,))
        # the first call: split each row into its attribute part (red) and its text (green)
        bsz, width = input_ids.shape
        valid = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        attr = attribute_positions(input_ids, attention_mask, self.marker)
        rows_red, rows_green, where = [], [], []
        for b in range(bsz):
            idx = valid[b].nonzero().flatten().tolist()
            n_attr = int(attr[b].sum())
            if n_attr == 0:
                raise MaxbenchError("adapter 'nrp': an input row has no tokens")
            rows_red.append(input_ids[b, idx[:n_attr]])
            rows_green.append(input_ids[b, idx[n_attr - 1 :]])  # from the last attribute token on
            where.append(idx)
        lr = max(len(r) for r in rows_red)
        lg = max(len(g) for g in rows_green)
        if use_cache and len({len(g) for g in rows_green}) > 1:
            raise MaxbenchError(
                "adapter 'nrp': decoding needs every prompt of a batch to end with the attribute template's end "
                f"({self.config.name_or_path or 'the template'}'s marker): one prompt has text after it"
            )
        pad = 0
        red_ids = torch.full((bsz, lr), pad, dtype=torch.long, device=input_ids.device)
        red_mask = torch.zeros((bsz, lr), dtype=torch.bool, device=input_ids.device)
        green_ids = torch.full((bsz, lg), pad, dtype=torch.long, device=input_ids.device)
        green_mask = torch.zeros((bsz, lg), dtype=torch.bool, device=input_ids.device)
        for b in range(bsz):
            r, g = rows_red[b], rows_green[b]
            red_ids[b, lr - len(r) :], red_mask[b, lr - len(r) :] = r, True  # left-padded
            green_ids[b, : len(g)], green_mask[b, : len(g)] = g, True  # right-padded
        red_pos = (red_mask.long().cumsum(-1) - 1).clamp_min(0)
        red_out = self.prompt_model(
            input_ids=red_ids,
            attention_mask=red_mask.long(),
            position_ids=red_pos,
            use_cache=True,
            output_hidden_states=True,
            logits_to_keep=1,
        )
        green_cache = DynamicCache(config=self.config)
        green_pos = torch.arange(lg, device=input_ids.device)[None].expand(bsz, lg)
        with torch.no_grad():
            self.base(
                input_ids=green_ids,
                position_ids=green_pos,
                past_key_values=green_cache,
                use_cache=True,
                logits_to_keep=1,
            )
        state = NrpState(red_out.past_key_values, red_mask, green_cache)
        causal = torch.ones((lg, lg), dtype=torch.bool, device=input_ids.device).tril()
        allowed = causal[None] & green_mask[:, None, :]
        allowed = allowed | torch.eye(lg, dtype=torch.bool, device=input_ids.device)[None]  # padding reads itself
        yellow = self._yellow(green_ids, green_pos, state, allowed)
        # back to the input's layout: text positions from yellow, the other attribute positions from red
        red_h = red_out.hidden_states[-1]
        hidden = torch.zeros((bsz, width, yellow.shape[-1]), dtype=yellow.dtype, device=yellow.device)
        for b in range(bsz):
            idx = where[b]
            n_attr = len(rows_red[b])
            if n_attr > 1:
                hidden[b, idx[: n_attr - 1]] = red_h[b, lr - n_attr : lr - 1]
            hidden[b, idx[n_attr - 1 :]] = yellow[b, : len(rows_green[b])]
        loss = None
        if labels is not None:
            logits_all = head(hidden).float()
            loss = F.cross_entropy(
                logits_all[:, :-1].reshape(-1, logits_all.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        logits = head(hidden[:, -keep:] if keep else hidden)
        if use_cache:
            green_cache._nrp_state = state
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, past_key_values=green_cache if use_cache else None, hidden_states=(hidden,)
        )


class NrpAdapter(ConditionalAdapter):
    """``nrp(r=8)``: a non-residual prompt model (LoRA of the base model) trained on the fitting split."""

    name = "nrp"
    OPTIONS = {"r": 8, "alpha": 16, "steps": 50, "batch": 8, "lr": 0.001, "max_len": 128, "seed": 0}
    version = "1"

    def check(self) -> None:
        o = self.options
        for key in ("r", "alpha", "batch", "max_len"):
            if o[key] < 1:
                raise MaxbenchError(f"adapter 'nrp': {key} must be >= 1, got {o[key]}")
        if o["steps"] < 0:
            raise MaxbenchError(f"adapter 'nrp': steps must be >= 0, got {o['steps']}")
        if not o["lr"] > 0:
            raise MaxbenchError(f"adapter 'nrp': lr must be > 0, got {o['lr']}")

    @staticmethod
    def _frozen_copy(model):
        """A copy of the base model, its weights frozen: what the prompt model's LoRA wraps."""
        out = copy.deepcopy(model)
        for p in out.parameters():
            p.requires_grad_(False)
        return out

    def train(self, lm, ctx: AdapterFitContext) -> tuple[dict, dict]:
        from maxbench.systems.adapters.training import collate, train_loop, training_rows

        o = self.options
        what, examples, marker = self.conditional_examples(lm, ctx)
        encoded = training_rows(lm, examples, o, what)
        for p in lm.model.parameters():
            p.requires_grad_(False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(o["seed"])
            prompt = self.lora(self._frozen_copy(lm.model))
        model = NrpLM(lm.model, prompt, marker)
        params = [p for p in prompt.parameters() if p.requires_grad]

        def loss(rows) -> torch.Tensor:
            return model(**collate(rows, lm.tokenizer.pad_token_id, lm.device), use_cache=False).loss

        try:
            progress = ctx.options.get("progress", True)
            measured = train_loop(model, lm, examples, o, what, progress, params=params, encoded=encoded, loss=loss)
            tensors = {"marker": torch.tensor(marker, dtype=torch.long), **self.lora_tensors(prompt)}
        finally:
            model.uninstall()
        return tensors, {**measured, **self.recorded_attributes(lm, marker, ctx)}

    def apply(self, lm, tensors: dict):
        """The frozen base model with the trained prompt model (its LoRA merged), for maxbench's loop."""
        prompt = self.merged_lora(self._frozen_copy(lm.model), tensors, lm.device).eval()
        return NrpLM(lm.model.eval(), prompt, tensors["marker"].tolist()).eval()
