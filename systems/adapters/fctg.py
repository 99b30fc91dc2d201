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
  fixed end of the template excluded) are replaced by a mask token in a copy of the training input
  (run in the same call as the intact input, which alone carries the LM and ALM losses: the text is
  conditioned on every attribute, as the slides' ``L_FCTG``) and predicted, cross-entropy through
  the frozen LM head, from the mean of the copy's top-layer text states.
- **ALM** (attribute-linguistic matching, ``alm=cn|tr|mtr``): the mean top-layer states of the
  attribute part and of the text part, projected into one space (unit vectors), are matched:
  ``cn`` InfoNCE (temperature 0.1), ``tr`` triplet (margin 0.2, averaged over every negative of the
  batch), ``mtr`` minimum triplet (the nearest negative). A negative is a text of the batch whose
  attributes differ from the anchor's.
- the LM loss on the text; ``L = 1 * LM + 0.1 * MAM + 0.1 * ALM``.

The pretrained model is frozen (``r=0``, the slides: the attention's "Parameters will not be
optimized"): the gates and MAM's and ALM's maps learn. ``r>0`` adds a LoRA fine-tune of rank ``r``
(the attention's query and value projections, as the ``lora`` adapter), merged after training.

The gate can learn to open: with ``select`` its start ``C_b`` and learning rate are chosen from
``GATE_GRID`` by the LM loss on a held-out tenth of the fitting rows (``split_validation``) after a
probe of a fifth of ``steps`` each, and the fit keeps its checkpoint of lowest held-out loss. The
meta records the trained gate's distribution over the held-out texts' tokens and, per trained
component, how far its values moved from their start (``moved``) and whether that is under
``INERT`` (``inert``). docs/conditional.md#fctg says which parts follow the slides and which are
readings.

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
#: the gate's start (its bias C_b; W_b starts at 0) and learning rate with ``select=false``:
#: sigmoid(-4) = 0.018, nearly the base model, at the other parameters' rate (the version-1 setting)
GATE_BIAS = -4.0
#: ``select=true``: the (start bias, learning rate) pairs of the gate tried on the fitting split. The
#: starts are gates of 0.018, 0.27 and 0.88 (the last above every threshold ``mu`` of the ablation:
#: a gate below ``mu`` is shut and gets no gradient, so only a start above it can learn there); AdamW
#: moves a parameter by about its learning rate per step, so 0.001 (the other parameters' rate) and
#: 0.01 move a bias by up to 0.05 and 0.5 in 50 steps, and ``W_b`` (started at 0) moves ``A`` by up
#: to that times the summed size of the gate's 2d inputs
GATE_GRID = tuple((bias, lr) for bias in (-4.0, -1.0, 2.0) for lr in (0.001, 0.01))
#: the validation rows: the last tenth of the fitting rows, at least 8 and at most 32 (fewer when
#: the split is that small; at least one row is left to train on)
VALIDATION = (0.1, 8, 32)
#: a trained component whose values moved by less than this from their start is inert
INERT = 0.01
#: the quantiles of the trained gate recorded in the meta
QUANTILES = (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
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
        self.record: list | None = None  # when a list: (layer, B_c of every text token and head) per call


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
    if state.record is not None:
        state.record.append((layer, gate[usable].detach().float().cpu()))
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
        self.record: list | None = None  # set to a list to collect the gate values of the next calls

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
        state.record = self.record
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
def split_validation(encoded: list) -> tuple[list, list]:
    """(training rows, validation rows): the validation rows are the last tenth of ``encoded`` (at
    least 8, at most 32; ``VALIDATION``), never all of it; none when fewer than two rows."""
    share, least, most = VALIDATION
    n = min(most, max(least, round(share * len(encoded))), len(encoded) - 1) if len(encoded) > 1 else 0
    return (encoded[: len(encoded) - n], encoded[len(encoded) - n :]) if n > 0 else (encoded, [])


def quantiles(values: torch.Tensor) -> dict:
    """``QUANTILES`` of ``values`` (1-D; the nearest rank), to 4 places, keyed ``q<percent>``."""
    if values.numel() == 0:
        return {}
    ordered = values.double().sort().values
    last = len(ordered) - 1
    return {f"q{round(100 * p):g}": round(float(ordered[round(p * last)]), 4) for p in QUANTILES}


class FctgAdapter(ConditionalAdapter):
    """``fctg(mu=0,mam=ce,alm=tr)``: FCTG on the conditional suite's fitting split, the base model
    frozen (``r=0``; ``r>0`` adds a LoRA fine-tune, the version-1 reading)."""

    name = "fctg"
    OPTIONS = {
        "mu": 0.0,
        "mam": "ce",
        "alm": "tr",
        "mva": True,
        "r": 0,
        "alpha": 16,
        "select": True,
        "gate_bias": GATE_BIAS,
        "gate_lr": 0.001,
        "steps": 50,
        "batch": 8,
        "lr": 0.001,
        "max_len": 128,
        "seed": 0,
    }
    CHOICES = {"mam": ("ce", "none"), "alm": ("cn", "tr", "mtr", "none")}
    version = "2"

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
        for key in ("lr", "gate_lr"):
            if not o[key] > 0:
                raise MaxbenchError(f"adapter 'fctg': {key} must be > 0, got {o[key]}")
        if o["select"] and (o["gate_bias"] != GATE_BIAS or o["gate_lr"] != self.OPTIONS["gate_lr"]):
            raise MaxbenchError(
                "adapter 'fctg': gate_bias and gate_lr are chosen on the fitting split when select=true; "
                "give select=false to fix them"
            )
        if not o["mva"] and o["r"] == 0:
            raise MaxbenchError(
                "adapter 'fctg': mva=false with r=0 leaves nothing to train (it is the base model); give r >= 1"
            )

    # ------------------------------------------------------------------ the parts
    def _gates(self, config, bias: float = GATE_BIAS):
        layers = config.num_hidden_layers
        d, heads = config.hidden_size, config.num_attention_heads
        gates = torch.nn.ModuleList(torch.nn.Linear(2 * d, heads) for _ in range(layers))
        with torch.no_grad():
            for g in gates:
                g.weight.zero_()
                g.bias.fill_(bias)
        return gates

    # ------------------------------------------------------------------ train and apply
    def train(self, lm, ctx: AdapterFitContext) -> tuple[dict, dict]:
        """The fit, after choosing the gate (``select``): each ``GATE_GRID`` pair trains a probe of a
        fifth of ``steps`` on the training rows (``split_validation``), and the pair with the lowest
        validation LM loss trains the adapter; that fit keeps the state of its checkpoint (every
        fifth of ``steps``) with the lowest validation loss (its budget)."""
        from maxbench.systems.adapters.training import encode_examples, training_rows

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
        rows, val = split_validation(encoded)
        steps = int(o["steps"])
        every = max(1, steps // 5)
        progress = ctx.options.get("progress", True)
        gate: dict = {}
        pick = (float(o["gate_bias"]), float(o["gate_lr"]))
        if o["mva"] and o["select"] and steps and val:
            probes = []
            for bias, glr in GATE_GRID:
                fit = self._fit(lm, examples, rows, val, marker, bias, glr, every, [every], what, False)
                probes.append({"gate_bias": bias, "gate_lr": glr, "val_loss": fit["best_loss"]})
            best = min(range(len(probes)), key=lambda i: (probes[i]["val_loss"], i))
            pick = (probes[best]["gate_bias"], probes[best]["gate_lr"])
            gate["grid"] = probes
            gate["probe_steps"] = every
        checkpoints = sorted({*range(every, steps + 1, every), steps}) if val else []
        fit = self._fit(lm, examples, rows, val, marker, *pick, steps, checkpoints, what, progress)
        tensors, trained = fit["tensors"], fit["trained"]
        if o["mva"]:
            gate = {"selected": "grid" in gate, "gate_bias": pick[0], "gate_lr": pick[1], **gate}
        timing = ("train_seconds", "train_cpu_seconds", "step_cpu_seconds", "step_cpu_median")
        measured = {
            **{k: v for k, v in trained.items() if k not in timing},
            **{f"{k}_loss_last": v for k, v in fit["parts"].items()},
            "validation_rows": len(val),
            "validation_loss": fit["val_losses"],
            "best_step": fit["best_step"],
            **({"gate": {**gate, **fit["gate_values"]}} if o["mva"] else {}),
            "moved": fit["moved"],
            "inert": {k: v < INERT for k, v in fit["moved"].items()},
            **{k: trained[k] for k in timing},
            **self.recorded_attributes(lm, marker, ctx),
        }
        return tensors, measured

    def _fit(self, lm, examples, rows, val, marker, bias, gate_lr, steps, checkpoints, what, progress) -> dict:
        """One training of ``steps`` steps on ``rows`` with the gate started at ``bias`` and trained at
        ``gate_lr``; the validation LM loss of ``val`` at each of ``checkpoints``, the state of the
        lowest kept. Returns the tensors, train_loop's summary, each loss part's last tenth, the
        validation losses, the best step, what each component moved from its start and, with MVA, the
        distribution of the gate over the validation rows' text tokens."""
        from maxbench.systems.adapters.training import collate, tenth_mean, train_loop

        o = dict(self.options, steps=steps)
        config = lm.model.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(o["seed"])
            gates = self._gates(config, bias) if o["mva"] else None
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
        lora_params = [p for p in model.base.parameters() if p.requires_grad]
        heads = [p for m in (proj_a, proj_t, mam_head) for p in m.parameters()]
        groups = [{"params": lora_params + heads}]
        if gates is not None:
            groups.append({"params": list(gates.parameters()), "lr": float(gate_lr)})
        components = {"lora": lora_params, "mam": list(mam_head.parameters()), "alm": heads[:4]}
        components = {
            k: v
            for k, v in components.items()
            if v and (k != "mam" or o["mam"] != "none") and (k != "alm" or o["alm"] != "none")
        }
        start = {k: [p.detach().clone() for p in v] for k, v in components.items()}
        mask_id = lm.tokenizer.mask_token_id
        mask_id = mask_id if mask_id is not None else lm.tokenizer.pad_token_id
        head = lm.model.get_output_embeddings()
        gen = torch.Generator().manual_seed(int(o["seed"]) + 1)
        parts = {"lm": [], "mam": [], "alm": []}
        pad = lm.tokenizer.pad_token_id

        def loss(batch_rows) -> torch.Tensor:
            """One step's ``L = 1 * LM + 0.1 * MAM + 0.1 * ALM``; each part's value kept in ``parts``.
            The LM and ALM read the input as it is; MAM reads a copy with its masked attribute tokens
            (the same forward call, a second half of the batch), so the text is never conditioned on
            a masked attribute."""
            batch = collate([(x, y) for x, y, _ in batch_rows], pad, lm.device)
            group = torch.tensor([g for _, _, g in batch_rows], device=lm.device)
            attr = attribute_positions(batch["input_ids"], batch["attention_mask"], marker)
            ids, mask, labels, attr_all = batch["input_ids"], batch["attention_mask"], batch["labels"], attr
            masked = mam_positions(attr, len(marker), gen) if o["mam"] != "none" else None
            n = ids.shape[0]
            if masked is not None:
                ids = torch.cat([ids, ids.masked_fill(masked, mask_id)])
                mask = torch.cat([mask, mask])
                labels = torch.cat([labels, torch.full_like(labels, -100)])
                attr_all = torch.cat([attr, attr])
            out = model(
                input_ids=ids,
                attention_mask=mask,
                labels=labels,
                attributes=attr_all,
                use_cache=False,
                output_hidden_states=True,
            )
            total = WEIGHTS["lm"] * out.loss
            parts["lm"].append(out.loss.item())
            top = out.hidden_states[-1]
            text = (batch["attention_mask"].bool() & ~attr).to(top.dtype)[..., None]
            if masked is not None and bool(masked.any()):
                v_masked = (top[n:] * text).sum(1) / text.sum(1).clamp_min(1.0)
                logits = head(mam_head(v_masked)).float()  # (batch, vocabulary)
                rows_m, cols_m = masked.nonzero(as_tuple=True)
                mam = F.cross_entropy(logits[rows_m], batch["input_ids"][rows_m, cols_m])
                total = total + WEIGHTS["mam"] * mam
                parts["mam"].append(mam.item())
            if o["alm"] != "none":
                v_text = (top[:n] * text).sum(1) / text.sum(1).clamp_min(1.0)
                a = attr.to(top.dtype)[..., None]
                v_attr = (top[:n] * a).sum(1) / a.sum(1).clamp_min(1.0)
                alm = alm_loss(o["alm"], proj_a(v_attr), proj_t(v_text), group)
                total = total + WEIGHTS["alm"] * alm
                parts["alm"].append(alm.item())
            return total

        def validate(record: list | None = None) -> float:
            """The LM loss of the validation rows (per target token), the attributes intact."""
            total, count = 0.0, 0
            model.record = record
            with torch.no_grad():
                for i in range(0, len(val), int(o["batch"])):
                    batch = collate([(x, y) for x, y, _ in val[i : i + int(o["batch"])]], pad, lm.device)
                    attr = attribute_positions(batch["input_ids"], batch["attention_mask"], marker)
                    out = model(**batch, attributes=attr, use_cache=False)
                    k = int((batch["labels"][:, 1:] != -100).sum())
                    total, count = total + out.loss.item() * k, count + k
            model.record = None
            return round(total / max(count, 1), 4)

        trainable = [p for g in groups for p in g["params"]]
        val_losses: dict[int, float] = {}
        best = {"step": None, "loss": float("inf"), "state": None}

        def checkpoint(step: int) -> None:
            if step in checkpoints:
                v = validate()
                val_losses[step] = v
                if v < best["loss"]:
                    best.update(step=step, loss=v, state=[p.detach().clone() for p in trainable])

        try:
            trained = train_loop(
                model, lm, examples, o, what, progress, params=groups, encoded=rows, loss=loss, on_step=checkpoint
            )
            if best["state"] is not None:
                with torch.no_grad():
                    for p, v in zip(trainable, best["state"]):
                        p.copy_(v)
            moved = {
                k: round(max((float((p.detach() - s).abs().max()) for p, s in zip(v, start[k])), default=0.0), 4)
                for k, v in components.items()
            }
            gate_values: dict = {}
            if gates is not None and val:
                record: list = []
                validate(record)
                values = torch.cat([v.flatten() for _, v in record]) if record else torch.zeros(0)
                s0 = torch.sigmoid(torch.tensor(float(bias))).item()
                g0 = s0 if s0 > o["mu"] else 0.0
                per_layer: dict[int, list] = {}
                for layer, v in record:
                    per_layer.setdefault(layer, []).append(v.flatten())
                gate_values = {
                    "start": round(g0, 4),
                    "values": int(values.numel()),
                    "quantiles": quantiles(values),
                    "open_share": round(float((values > 0).double().mean()), 4) if values.numel() else None,
                    "layer_median": [round(float(torch.cat(per_layer[k]).median()), 4) for k in sorted(per_layer)],
                }
                moved["mva"] = round(float((values - g0).abs().max()), 4) if values.numel() else 0.0
            elif gates is not None:
                moved["mva"] = round(max(float((g.bias.detach() - bias).abs().max()) for g in gates), 4)
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
        return {
            "tensors": tensors,
            "trained": trained,
            "parts": {k: tenth_mean(v, last=True) for k, v in parts.items()},
            "val_losses": {str(k): v for k, v in sorted(val_losses.items())},
            "best_step": best["step"],
            "best_loss": best["loss"] if best["step"] is not None else float("inf"),
            "moved": dict(sorted(moved.items())),
            "gate_values": gate_values,
        }

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
