"""FCTG, the Friendly Conditional Text Generator (Kawamae, WSDM 2023), as an adapter of the base model.

``fctg(mu=0,mam=ce,alm=tr)``: the base model with

- **MVA** (multi-view attention), in every layer: each text token's attention output is
  ``B_c * softmax(QK^T/sqrt(d) + M_c) V + (1 - B_c) * softmax(QK^T/sqrt(d) + M_s) V``, where ``M_s``
  is the model's own (causal, padding) mask, ``M_c`` lets the token attend to the attribute tokens
  only, and the gate ``B_c = sigmoid(A) * 1[sigmoid(A) > mu]``, ``A = [H_a ; H_L] W_b + C_b`` per
  layer and head (``H_a``: the mean of the layer's input over the attribute tokens, ``H_L``: the
  token's own). Q, K and V are the base model's, used by both views. It is a function registered
  through transformers' ``AttentionInterface`` (the model's own attention function computes the
  self view), so maxbench's own KV-cache loop decodes it and output layers compose on top. With
  the gate closed (``mu`` at 1, or ``mva=false``) the model is the one below MVA, bit for bit (the
  base model itself with ``r=0``).
- **MAM** (masked attribute modelling, ``mam=ce``): 15% of the attribute tokens (at least one; the
  fixed end of the template excluded) are replaced in the training input by a mask token and
  predicted, cross-entropy through the frozen LM head, from the mean of the text's top-layer states.
- **ALM** (attribute-linguistic matching, ``alm=cn|tr|mtr``): the mean top-layer states of the
  attribute part and of the text part, projected into one space (unit vectors), are matched:
  ``cn`` InfoNCE (temperature 0.1), ``tr`` triplet (margin 0.2, averaged over every negative of the
  batch), ``mtr`` minimum triplet (the nearest negative). A negative is a text of the batch whose
  attributes differ from the anchor's.
- the LM loss on the text; ``L = 1 * LM + 0.1 * MAM + 0.1 * ALM``.

The pretrained model itself is fine-tuned through LoRA of rank ``r`` (the attention's query and value
projections, as the ``lora`` adapter; ``r=0``: frozen, only the gates learn), merged after
training. docs/conditional.md#fctg says which parts follow the slides and which are readings.

FCTG's ``[EOA]`` is the marker every conditional adapter finds (``systems/adapters/conditional.py``:
the longest token sequence every training prompt ends with, `` stars. Review:`` for ``food-attrs``),
one rule for training, decoding (the KV cache keeps which positions are attributes) and reference
perplexities (prompt and reference in one call). The refusal of unseen attribute values, the LoRA
and the installation of the attention function are that module's too.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters.base import AdapterFitContext, TrainingExample
from maxbench.systems.adapters.conditional import (
    ConditionalAdapter,
    ConditionalLM,
    attribute_positions,
    install_attention,
    own_attention,
)

#: loss weights (lambda_F, lambda_M, lambda_A of the slides)
WEIGHTS = {"lm": 1.0, "mam": 0.1, "alm": 0.1}
#: the share of attribute tokens MAM masks
MAM_RATE = 0.15
#: ALM's temperature (cn) and margin (tr, mtr), and the dimension of the shared space
TAU = 0.1
MARGIN = 0.2
ALM_DIM = 128
#: the gate's bias at initialisation: sigmoid(-4) = 0.018, nearly the base model
GATE_BIAS = -4.0
_PREFIX = "fctg_mva_"


# --------------------------------------------------------------------------- MVA
class MvaState:
    """One forward's (or one decoding's, kept on its KV cache) MVA state."""

    def __init__(self, attr: torch.Tensor, gates, mu: float, pool: dict | None = None):
        self.attr = attr  # (batch, key positions so far) bool: which are attribute tokens
        self.gates = gates  # torch.nn.ModuleList of Linear(2 d, heads), one per layer
        self.mu = float(mu)
        self.hidden: dict = {}  # layer -> that layer's attention input, this call
        self.pool: dict = {} if pool is None else pool  # layer -> mean over the attribute tokens
        self.open_gates = 0  # gate values > 0 seen in this call (for tests and diagnostics)


def mva_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The attention function registered as ``fctg_mva_<impl>``: the model's own attention (the self
    view, ``M_s``) mixed by the gate with attention to the attribute tokens only (``M_c``)."""
    state = kwargs.pop("fctg_state", None)
    own = own_attention(module)
    out_s, weights = own(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    if state is None or state.gates is None:
        return out_s, weights
    layer = module.layer_idx
    h = state.hidden.pop(layer)  # (batch, q, d)
    q, kv = query.shape[2], key.shape[2]
    attr_q = state.attr[:, -q:]
    if layer not in state.pool:
        w = attr_q.to(h.dtype)[..., None]
        state.pool[layer] = (h * w).sum(1) / w.sum(1).clamp_min(1.0)
    pool = state.pool[layer]
    s = torch.sigmoid(state.gates[layer](torch.cat([pool[:, None, :].expand_as(h), h], dim=-1)))  # (b, q, heads)
    keys_attr = state.attr[:, -kv:]
    # attribute tokens see the same keys in both views (they precede the text): no gate there
    usable = (~attr_q) & keys_attr.any(1, keepdim=True)
    gate = s * (s > state.mu).to(s.dtype) * usable[..., None].to(s.dtype)
    state.open_gates += int((gate > 0).sum())
    if not bool((gate > 0).any()):
        return out_s, weights
    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1) if groups > 1 else key
    v = value.repeat_interleave(groups, dim=1) if groups > 1 else value
    mask_c = torch.zeros(keys_attr.shape, dtype=query.dtype, device=query.device)
    mask_c = mask_c.masked_fill(~keys_attr, torch.finfo(query.dtype).min)[:, None, None, :]
    out_c = F.scaled_dot_product_attention(query, k, v, attn_mask=mask_c, scale=scaling).transpose(1, 2)
    g = gate[..., None].to(out_s.dtype)
    return g * out_c + (1 - g) * out_s, weights


def _keep_hidden(module, args, kwargs):
    state = kwargs.get("fctg_state")
    if state is not None and state.gates is not None:
        state.hidden[module.layer_idx] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


def install(model) -> callable:
    """Make ``model`` call ``mva_attention`` and keep each layer's attention input for the gate;
    returns the function that undoes it. Without an ``fctg_state`` in the call, the model computes
    what it computed before."""
    return install_attention(model, "fctg", _PREFIX, mva_attention, pre_hook=_keep_hidden)


class FctgLM(ConditionalLM):
    """The base model with MVA, called as maxbench's loop calls a model. ``gates`` None: no MVA."""

    def __init__(self, base, gates, marker: list[int], mu: float):
        super().__init__(base, marker, install(base) if gates is not None else None)
        self.gates = gates
        self.mu = float(mu)

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None, attributes=None, **kwargs):
        """``attributes``: (batch, length) bool, the attribute tokens, when the caller knows them
        (training); otherwise found by the marker rule (``attribute_positions``)."""
        if self.gates is None:
            return self.base(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=past_key_values,
                use_cache=use_cache,
                **kwargs,
            )
        from transformers import DynamicCache

        use_cache = self.config.use_cache if use_cache is None else use_cache
        prev = getattr(past_key_values, "_fctg_state", None) if past_key_values is not None else None
        if prev is not None:
            new = torch.zeros(input_ids.shape, dtype=torch.bool, device=input_ids.device)  # text tokens
            state = MvaState(torch.cat([prev.attr, new], dim=1), self.gates, self.mu, prev.pool)
        else:
            attr = attributes if attributes is not None else attribute_positions(input_ids, attention_mask, self.marker)
            state = MvaState(attr.to(input_ids.device), self.gates, self.mu)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        out = self.base(
            input_ids=input_ids,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            use_cache=use_cache,
            fctg_state=state,
            **kwargs,
        )
        state.hidden.clear()
        if use_cache and out.past_key_values is not None:
            out.past_key_values._fctg_state = state
        self.last_state = state
        return out


# --------------------------------------------------------------------------- ALM and MAM
def alm_loss(kind: str, va: torch.Tensor, vt: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Attribute-linguistic matching of ``va`` (batch, dim; attribute vectors) with ``vt`` (text
    vectors), pair i matching; ``groups``: (batch,) ints, equal where two items' attributes are equal
    (such a pair is no negative). Anchors without a negative in the batch are left out; a batch with
    none gives 0."""
    va, vt = F.normalize(va, dim=-1), F.normalize(vt, dim=-1)
    neg = groups[:, None] != groups[None, :]
    rows = neg.any(1)
    if not bool(rows.any()):
        return (va.sum() + vt.sum()) * 0.0
    if kind == "cn":
        eye = torch.eye(len(va), dtype=torch.bool, device=va.device)
        logits = (va @ vt.T / TAU).masked_fill(~(neg | eye), float("-inf"))
        per = -torch.log_softmax(logits, dim=1).diagonal()
    else:
        d = ((va[:, None, :] - vt[None, :, :]) ** 2).sum(-1).add(1e-12).sqrt()  # anchor i to text k
        pos = d.diagonal()
        if kind == "tr":
            hinge = (pos[:, None] - d + MARGIN).clamp_min(0.0) * neg
            per = hinge.sum(1) / neg.sum(1).clamp_min(1)
        elif kind == "mtr":
            nearest = d.masked_fill(~neg, float("inf")).min(1).values
            per = (pos - nearest + MARGIN).clamp_min(0.0)
        else:
            raise ValueError(kind)
    return per[rows].mean()


def mam_positions(attr: torch.Tensor, marker_len: int, gen: torch.Generator) -> torch.Tensor:
    """(batch, length) bool: the attribute tokens MAM masks, 15% (at least one) of each row's attribute
    tokens before the marker, drawn by ``gen``."""
    out = torch.zeros_like(attr)
    for b in range(attr.shape[0]):
        where = attr[b].nonzero().flatten().tolist()
        cand = where[: max(0, len(where) - marker_len)]
        if not cand:
            continue
        k = max(1, round(MAM_RATE * len(cand)))
        for j in torch.randperm(len(cand), generator=gen)[:k].tolist():
            out[b, cand[j]] = True
    return out


def _group_key(attributes: dict | None) -> str:
    return json.dumps(attributes or {}, sort_keys=True)


# --------------------------------------------------------------------------- the adapter
class FctgAdapter(ConditionalAdapter):
    """``fctg(mu=0,mam=ce,alm=tr)``: FCTG on the conditional suite's fitting split."""

    name = "fctg"
    OPTIONS = {
        "mu": 0.0,
        "mam": "ce",
        "alm": "tr",
        "mva": True,
        "r": 8,
        "alpha": 16,
        "steps": 50,
        "batch": 8,
        "lr": 0.001,
        "max_len": 128,
        "seed": 0,
    }
    CHOICES = {"mam": ("ce", "none"), "alm": ("cn", "tr", "mtr", "none")}
    version = "1"

    def check(self) -> None:
        o = self.options
        if not 0.0 <= o["mu"] <= 1.0:
            raise MaxbenchError(f"adapter 'fctg': mu must be in [0, 1], got {o['mu']}")
        for key in ("batch", "max_len", "alpha"):
            if o[key] < 1:
                raise MaxbenchError(f"adapter 'fctg': {key} must be >= 1, got {o[key]}")
        for key in ("steps", "r"):
            if o[key] < 0:
                raise MaxbenchError(f"adapter 'fctg': {key} must be >= 0, got {o[key]}")
        if not o["lr"] > 0:
            raise MaxbenchError(f"adapter 'fctg': lr must be > 0, got {o['lr']}")
        if not o["mva"] and o["r"] == 0:
            raise MaxbenchError("adapter 'fctg': mva=false with r=0 leaves nothing to train; give r >= 1")

    # ------------------------------------------------------------------ the parts
    def _gates(self, config):
        layers = config.num_hidden_layers
        d, heads = config.hidden_size, config.num_attention_heads
        gates = torch.nn.ModuleList(torch.nn.Linear(2 * d, heads) for _ in range(layers))
        with torch.no_grad():
            for g in gates:
                g.weight.zero_()
                g.bias.fill_(GATE_BIAS)
        return gates

    # ------------------------------------------------------------------ train and apply
    def train(self, lm, ctx: AdapterFitContext) -> tuple[dict, dict]:
        from maxbench.systems.adapters.training import collate, encode_examples, tenth_mean, train_loop, training_rows

        o = self.options
        what, examples, marker = self.conditional_examples(lm, ctx)

        def encode(tok, ordered: list[TrainingExample], max_len: int) -> list:
            """``encode_examples``' rows, each with the group of its attributes (ALM's negatives)."""
            groups: dict[str, int] = {}
            out = []
            for e in ordered:
                enc = encode_examples(tok, [e], max_len)
                if enc:
                    out.append((*enc[0], groups.setdefault(_group_key(e.attributes), len(groups))))
            return out

        encoded = training_rows(lm, examples, o, what, encode)
        config = lm.model.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(o["seed"])
            gates = self._gates(config) if o["mva"] else None
            proj_a = torch.nn.Linear(config.hidden_size, ALM_DIM)
            proj_t = torch.nn.Linear(config.hidden_size, ALM_DIM)
            mam_head = torch.nn.Linear(config.hidden_size, config.hidden_size)
            with torch.no_grad():
                mam_head.weight.copy_(torch.eye(config.hidden_size))
                mam_head.bias.zero_()
            peft_model = self.lora(lm.model) if o["r"] else None
        extra = torch.nn.ModuleList([m for m in (gates, proj_a, proj_t, mam_head) if m is not None])
        extra.to(lm.device, dtype=lm.model.dtype)
        if peft_model is None:
            for p in lm.model.parameters():
                p.requires_grad_(False)
        model = FctgLM(lm.model, gates, marker, o["mu"])
        params = [p for p in model.base.parameters() if p.requires_grad] + list(extra.parameters())
        mask_id = lm.tokenizer.mask_token_id
        mask_id = mask_id if mask_id is not None else lm.tokenizer.pad_token_id
        head = lm.model.get_output_embeddings()
        gen = torch.Generator().manual_seed(int(o["seed"]) + 1)
        parts = {"lm": [], "mam": [], "alm": []}

        def loss(rows) -> torch.Tensor:
            """One step's ``L = 1 * LM + 0.1 * MAM + 0.1 * ALM``; each part's value kept in ``parts``."""
            batch = collate([(x, y) for x, y, _ in rows], lm.tokenizer.pad_token_id, lm.device)
            group = torch.tensor([g for _, _, g in rows], device=lm.device)
            attr = attribute_positions(batch["input_ids"], batch["attention_mask"], marker)
            ids = batch["input_ids"]
            masked = mam_positions(attr, len(marker), gen) if o["mam"] != "none" else None
            if masked is not None:
                ids = ids.masked_fill(masked, mask_id)
            out = model(
                input_ids=ids,
                attention_mask=batch["attention_mask"],
                labels=batch["labels"],
                attributes=attr,
                use_cache=False,
                output_hidden_states=True,
            )
            total = WEIGHTS["lm"] * out.loss
            parts["lm"].append(out.loss.item())
            top = out.hidden_states[-1]
            valid = batch["attention_mask"].bool()
            text = (valid & ~attr).to(top.dtype)[..., None]
            v_text = (top * text).sum(1) / text.sum(1).clamp_min(1.0)
            if masked is not None and bool(masked.any()):
                logits = head(mam_head(v_text)).float()  # (batch, vocabulary)
                rows_m, cols_m = masked.nonzero(as_tuple=True)
                mam = F.cross_entropy(logits[rows_m], batch["input_ids"][rows_m, cols_m])
                total = total + WEIGHTS["mam"] * mam
                parts["mam"].append(mam.item())
            if o["alm"] != "none":
                a = attr.to(top.dtype)[..., None]
                v_attr = (top * a).sum(1) / a.sum(1).clamp_min(1.0)
                alm = alm_loss(o["alm"], proj_a(v_attr), proj_t(v_text), group)
                total = total + WEIGHTS["alm"] * alm
                parts["alm"].append(alm.item())
            return total

        try:
            progress = ctx.options.get("progress", True)
            trained = train_loop(model, lm, examples, o, what, progress, params=params, encoded=encoded, loss=loss)
            tensors = {"marker": torch.tensor(marker, dtype=torch.long)}
            if gates is not None:
                for i, g in enumerate(gates):
                    tensors[f"gate.{i}.weight"] = g.weight.detach().clone()
                    tensors[f"gate.{i}.bias"] = g.bias.detach().clone()
            if peft_model is not None:
                tensors.update(self.lora_tensors(peft_model))
        finally:
            model.uninstall()
            if peft_model is not None:
                peft_model.unload()
            for p in lm.model.parameters():
                p.requires_grad_(False)
        # the loop's summary with each part's last loss after the total's (the order it is recorded in)
        timing = ("train_seconds", "train_cpu_seconds", "step_cpu_seconds")
        measured = {
            **{k: v for k, v in trained.items() if k not in timing},
            **{f"{k}_loss_last": tenth_mean(v, last=True) for k, v in parts.items()},
            **{k: trained[k] for k in timing},
            **self.recorded_attributes(lm, marker, ctx),
        }
        return tensors, measured

    def apply(self, lm, tensors: dict):
        """The base model (LoRA merged into it when ``r`` > 0) with MVA, for maxbench's loop."""
        o = self.options
        base = lm.model
        if any(k.startswith("lora.") for k in tensors):
            base = self.merged_lora(base, tensors, lm.device)
        gates = None
        if o["mva"]:
            gates = self._gates(base.config)
            with torch.no_grad():
                for i, g in enumerate(gates):
                    g.weight.copy_(tensors[f"gate.{i}.weight"])
                    g.bias.copy_(tensors[f"gate.{i}.bias"])
            gates.to(lm.device, dtype=base.dtype)
        return FctgLM(base.eval(), gates, tensors["marker"].tolist(), o["mu"]).eval()
