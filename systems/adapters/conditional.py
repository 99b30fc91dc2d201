"""The base of the adapters that condition on a suite item's attributes: ``ConditionalAdapter``
(FCTG, NRP, and a plugin's), and the one way such an adapter replaces the base model's attention.

What every conditional adapter shares:

- **the attribute part** of an input: the longest token sequence every training prompt ends with
  (for ``food-attrs``, `` stars. Review:``) is the marker; an input's attribute part is everything
  up to and including its first occurrence (the whole input when it does not occur). One rule for
  training, decoding and reference perplexities (``attribute_positions``);
- **the values it saw**: a suite item whose categorical attribute has a value the training examples
  never carry is refused in a run's preflight, before any model loads (``check_attribute_values``,
  the hook every ``Adapter`` has), and the values are recorded beside the trained state;
- **its LoRA** of rank ``r`` (``alpha``) on the base model's default modules, made under the
  adapter's ``seed``, stored as ``lora.*`` tensors and merged when applied;
- **its attention** (``install_attention``): a function registered through transformers'
  ``AttentionInterface`` under ``<prefix><the model's own implementation>``, with the own
  implementation's mask function, that each attention layer calls instead of its own (which it
  keeps, ``own_attention``); architecture-agnostic, decoded by maxbench's own KV-cache loop. A
  model that carries one conditional adapter's attention is refused another's: the two would
  stack, each taking the other's for the model's own.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters.base import Adapter, AdapterFitContext, TrainingExample

#: the attribute under which an attention layer keeps the model's own attention function
_OWN = "_maxbench_own_attention"
#: every prefix ``install_attention`` has registered a function under (a model carrying one is refused)
_PREFIXES: set[str] = set()


# --------------------------------------------------------------------------- the attribute part
def common_suffix(seqs: list[list[int]]) -> list[int]:
    """The longest token sequence that ends every one of ``seqs``."""
    if not seqs:
        return []
    out = list(seqs[0])
    for s in seqs[1:]:
        n = 0
        while n < min(len(out), len(s)) and out[-1 - n] == s[-1 - n]:
            n += 1
        out = out[len(out) - n :]
    return out


def attribute_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, marker: list[int]):
    """(batch, length) bool: the attribute tokens of each row, its real tokens up to and including the
    first occurrence of ``marker``, or all its real tokens when it has none."""
    bsz, n = input_ids.shape
    valid = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    out = torch.zeros((bsz, n), dtype=torch.bool, device=input_ids.device)
    ids, ok = input_ids.tolist(), valid.tolist()
    m = len(marker)
    for b in range(bsz):
        where = [i for i in range(n) if ok[b][i]]
        toks = [ids[b][i] for i in where]
        end = len(toks)
        for i in range(len(toks) - m + 1):
            if m and toks[i : i + m] == marker:
                end = i + m
                break
        for i in where[:end]:
            out[b, i] = True
    return out


# --------------------------------------------------------------------------- the attention
def attention_modules(model) -> list:
    """The attention layers of a transformers decoder: the modules with a ``layer_idx`` and a ``q_proj``."""
    return [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "q_proj")]


def own_attention(module) -> Callable:
    """The attention function ``module`` called before ``install_attention`` (the model's own)."""
    return getattr(module, _OWN)


def install_attention(model, adapter: str, prefix: str, function: Callable, pre_hook: Callable | None = None):
    """Make every attention layer of ``model`` call ``function`` (the signature of transformers'
    attention functions; it finds the layer's own one with ``own_attention(module)``), registered
    under ``prefix`` + the model's own implementation; ``pre_hook``, when given, is registered on each
    attention layer as a forward pre-hook with kwargs. Returns the function that undoes all of it.
    A call without the adapter's own keyword arguments must compute what the model computed before.
    A model that carries a conditional adapter's attention already is one line (``adapter`` names
    the adapter in it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    config = model.config
    own_name = config._attn_implementation
    _PREFIXES.add(prefix)
    carried = next((p for p in sorted(_PREFIXES) if own_name.startswith(p)), None)
    if carried is not None:
        raise MaxbenchError(
            f"adapter '{adapter}': this model carries a conditional adapter's attention already ('{own_name}'); "
            "give each conditional adapter its own base model"
        )
    name = prefix + own_name
    AttentionInterface.register(name, function)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[own_name])
    handles = []
    modules = attention_modules(model)
    for m in modules:
        eager = getattr(sys.modules[type(m).__module__], "eager_attention_forward", None)
        setattr(m, _OWN, ALL_ATTENTION_FUNCTIONS.get_interface(own_name, eager))
        if pre_hook is not None:
            handles.append(m.register_forward_pre_hook(pre_hook, with_kwargs=True))
    config._attn_implementation = name

    def undo():
        config._attn_implementation = own_name
        for h in handles:
            h.remove()
        for m in modules:
            delattr(m, _OWN)

    return undo


class ConditionalLM(torch.nn.Module):
    """What a conditional adapter's ``apply`` returns, called as maxbench's loop calls a model: the
    base model (``base``, whose config it shares), the marker, and the undo of its attention."""

    def __init__(self, base, marker: list[int], undo: Callable | None):
        super().__init__()
        self.base = base
        self.marker = list(marker)
        self.config = base.config
        self._undo = undo

    def get_output_embeddings(self):
        return self.base.get_output_embeddings()

    def get_input_embeddings(self):
        return self.base.get_input_embeddings()

    def uninstall(self) -> None:
        """The base model's own attention back (after training, so the base model is left as it was)."""
        if self._undo is not None:
            self._undo()
            self._undo = None


# --------------------------------------------------------------------------- the adapter
class ConditionalAdapter(Adapter):
    """An adapter that conditions on a suite item's attributes (``needs_attributes``). A subclass
    declares ``OPTIONS`` with ``r``, ``alpha`` and ``seed`` when it uses ``lora``/``merged_lora``."""

    needs_attributes = True

    @staticmethod
    def seen_values(examples: list[TrainingExample], attributes: dict | None) -> dict:
        """The values of each categorical attribute (``attributes``: name -> spec or its ``describe()``)
        that ``examples`` carry."""
        out: dict[str, set] = {}
        for name, spec in (attributes or {}).items():
            categorical = spec.get("kind") == "categorical" if isinstance(spec, dict) else spec.categorical
            if categorical:
                out[name] = {str(e.attributes[name]) for e in examples if e.attributes and name in e.attributes}
        return {k: sorted(v) for k, v in out.items()}

    def check_attribute_values(self, suite, examples: list[TrainingExample]) -> None:
        """A suite item whose categorical attribute has a value the training examples never carry is
        one line (free-text attributes are open)."""
        seen = self.seen_values(examples, getattr(suite, "attributes", None))
        for item in suite.items:
            for name, values in seen.items():
                value = (item.attributes or {}).get(name)
                if value is not None and str(value) not in values:
                    raise MaxbenchError(
                        f"adapter '{self.name}' never saw {name}='{value}' (suite '{suite.name}', item '{item.id}'): "
                        f"its training data has {name} in {', '.join(values) or 'no value'}"
                    )

    def attribute_marker(self, lm, examples: list[TrainingExample]) -> list[int]:
        """The tokens every training prompt ends with (where the attribute part ends); an error when none."""
        tok = lm.tokenizer
        prompts = sorted({e.prompt for e in examples if e.prompt})
        marker = common_suffix([tok(p, add_special_tokens=True)["input_ids"] for p in prompts])
        if not marker:
            raise MaxbenchError(
                f"adapter '{self.name}': its training prompts end in no common text (the template's end, e.g. 'Review:'), "
                "which marks where the attributes end; use a conditional suite whose template ends in fixed text"
            )
        return marker

    def conditional_examples(self, lm, ctx: AdapterFitContext) -> tuple[str, list[TrainingExample], list[int]]:
        """(the adapter's name in messages, the training examples with a prompt and attributes, the
        marker where their attribute part ends); an error when there are none."""
        what = self.suffix()[1:]
        examples = [e for e in ctx.examples if e.prompt and e.attributes]
        if not examples:
            raise MaxbenchError(
                f"{what}: no training text with attributes ({self.name.upper()} learns a conditional suite's corpus)"
            )
        return what, examples, self.attribute_marker(lm, examples)

    def recorded_attributes(self, lm, marker: list[int], ctx: AdapterFitContext) -> dict:
        """What a conditional adapter records besides its training: its marker and the attribute
        values its training examples carry."""
        return {
            "marker": lm.tokenizer.decode(marker),
            "attribute_values": self.seen_values(ctx.examples, ctx.data.get("attributes")),
        }

    # ------------------------------------------------------------------ its LoRA
    def lora(self, model):
        """``model`` wrapped in a LoRA of rank ``r`` (``alpha``; peft's default modules), initialised
        from torch's current random state (the caller seeds it)."""
        from peft import LoraConfig, get_peft_model

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            cfg = LoraConfig(
                task_type="CAUSAL_LM", r=self.options["r"], lora_alpha=self.options["alpha"], lora_dropout=0.0
            )
            return get_peft_model(model, cfg)

    @staticmethod
    def lora_tensors(peft_model) -> dict:
        """The trained LoRA's weights, as stored: ``lora.<peft's name>``."""
        from peft import get_peft_model_state_dict

        return {f"lora.{k}": v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}

    def merged_lora(self, model, tensors: dict, device):
        """``model`` with the LoRA stored in ``tensors`` (``lora.*``) merged into its weights."""
        from peft import set_peft_model_state_dict

        lora = {k[len("lora.") :]: v.to(device) for k, v in tensors.items() if k.startswith("lora.")}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.options["seed"])
            peft_model = self.lora(model)
        set_peft_model_state_dict(peft_model, lora)
        return peft_model.merge_and_unload()
