"""Adapters: trained changes of a base model, named after it in system strings (``MODEL+ADAPTER(k=v)``).

``ADAPTERS`` is the fourth registry (``maxbench.registry.Registry``, entry-point group
``maxbench.adapters``), beside the output layers, base models and metrics: a user's adapter
subclasses ``Adapter`` (``systems/adapters/base.py``) and joins it through an entry point,
``--include`` or ``maxbench.register_adapter`` (docs/plugins.md). The built-ins:

- ``prefix``: prefix-tuning through ``peft``, decoded by maxbench's own loop (``prefix.py``);
- ``lora``: a LoRA fine-tune through ``peft``, merged into the weights (``lora.py``);
- ``fctg``: FCTG (issue 40): multi-view attention (two masks mixed by a gate), trained with masked
  attribute modelling and attribute-linguistic matching beside the LM loss (``fctg.py``);
- ``nrp``: non-residual prompting rebuilt (issue 40): a LoRA prompt model whose states the frozen
  model's text attends to in a separate, non-residual stream (``nrp.py``);
- ``peft``: a PEFT adapter the user already has (``path=``, the folder ``save_pretrained`` wrote),
  loaded without training: merged into the weights, or a prefix decoded as ``prefix`` (``pretrained.py``).

``fctg`` and ``nrp`` condition on a suite item's attributes: they subclass ``ConditionalAdapter``
(``conditional.py``: the attribute part, the values seen, their LoRA, and the one helper that
installs an attention function through transformers' ``AttentionInterface``).

``split_adapter`` and ``canonical_adapter`` are the grammar of the model part of a system string.
"""

from __future__ import annotations

import re
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.registry import Registry
from maxbench.systems.adapters.base import Adapter, AdapterFitContext, TrainingExample, adapter_suffix

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AdapterFitContext",
    "TrainingExample",
    "adapter_class",
    "adapter_code",
    "adapter_suffix",
    "canonical_adapter",
    "split_adapter",
    "stacked_adapters",
]

#: the adapters; each class's ``name`` is its key here
ADAPTERS: Registry[type[Adapter]] = Registry(
    "adapter",
    {
        "prefix": "maxbench.systems.adapters.prefix:PrefixAdapter",
        "lora": "maxbench.systems.adapters.lora:LoraAdapter",
        "fctg": "maxbench.systems.adapters.fctg:FctgAdapter",
        "nrp": "maxbench.systems.adapters.nrp:NrpAdapter",
        "peft": "maxbench.systems.adapters.pretrained:PeftAdapter",
    },
    base=Adapter,
    group="maxbench.adapters",
)

_ADAPTER = re.compile(r"^(?P<model>.+?)\+(?P<adapter>[A-Za-z_][A-Za-z0-9_-]*)(?:\((?P<params>[^()]*)\))?$")


def adapter_class(name: str) -> type[Adapter]:
    cls = ADAPTERS.get(name)
    if cls.name != name:
        raise MaxbenchError(f"adapter '{name}' is registered as a class named '{cls.name}'")
    return cls


def adapter_code(adapter: Adapter) -> dict:
    """Where ``adapter``'s code comes from, as its trained state's identity records it: a built-in's
    ``version`` only (upgrading maxbench does not retrain), a plugin's origin (``ADAPTERS.origin``)."""
    from maxbench.registry import builtin_origin

    origin = ADAPTERS.origin(adapter.name)
    return {"version": adapter.version} if origin == builtin_origin() else origin


def split_adapter(model_part: str, value=lambda s: s) -> tuple[str, str | None, tuple]:
    """``MODEL+ADAPTER(k=v,...)`` -> (MODEL, ADAPTER, ((k, v), ...)), values read by ``value``;
    without '+', or for an existing folder whose name holds one, (model_part, None, ())."""
    if "+" not in model_part or Path(model_part).expanduser().is_dir():
        return model_part, None, ()
    m = _ADAPTER.match(model_part)
    if not m:
        raise MaxbenchError(
            f"cannot read the adapter in '{model_part}'; write MODEL+ADAPTER(key=value,...), e.g. smollm2-135m+prefix(n=10)"
        )
    stacked, base = stacked_adapters(model_part)
    if len(stacked) > 1:
        raise MaxbenchError(
            f"'{model_part}' stacks {len(stacked)} adapters ({', '.join(stacked)}) on '{base}': a system has at most "
            f"one adapter (stacking is not supported); give one, e.g. '{base}+{stacked[-1]}'"
        )
    params = []
    for part in filter(None, (p.strip() for p in (m.group("params") or "").split(","))):
        if "=" not in part:
            raise MaxbenchError(f"adapter '{m.group('adapter')}': option '{part}' needs the form key=value")
        key, val = (s.strip() for s in part.split("=", 1))
        if key in dict(params):
            raise MaxbenchError(f"adapter '{m.group('adapter')}': option '{key}' is given twice")
        params.append((key, value(val)))
    return m.group("model"), m.group("adapter"), tuple(params)


def stacked_adapters(model_part: str) -> tuple[list[str], str]:
    """The adapters ``model_part`` names one after another (``MODEL+A(..)+B(..)`` -> ([A, B], MODEL)),
    innermost first, and the model under them; only registered adapter names count, so a model name
    that merely holds a '+' is left whole."""
    names: list[str] = []
    rest = model_part
    while "+" in rest and not Path(rest).expanduser().is_dir():
        m = _ADAPTER.match(rest)
        if not m or m.group("adapter") not in ADAPTERS:
            break
        names.insert(0, m.group("adapter"))
        rest = m.group("model")
    return names, rest


def canonical_adapter(name: str, params: tuple) -> tuple:
    """The adapter's options as the canonical name writes them (checked; defaults left out). An
    unknown adapter or option is one line with the closest known name."""
    ADAPTERS.check(name)
    return adapter_class(name).canonical_params(params)
