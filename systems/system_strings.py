"""Named systems: ``<base model>[+<adapter>(<options>)]/<output layer>(<params>)/<decoding>``.

A system string reads back into exactly one system, e.g.
``smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9``. The base model is a built-in
name, a local directory or a hub id, a hub id optionally pinned to a revision as ``owner/name@REVISION``
(e.g. ``org/name@abc123/softmax/greedy``; docs/models.md); the layer is one of LAYERS with keyword parameters;
an adapter (``smollm2-135m+prefix(n=20)``) is one of ``maxbench.systems.adapters.ADAPTERS``, its options
written canonically (defaults left out); the decoding part is a DecodingSetting label.
``SystemSpec.name`` is the canonical form: a built-in layer's training option given at its default
(``kerbs(seed=0)``) is dropped, so it names the same system, run rows and trained head as ``kerbs``.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

from maxbench.errors import MaxbenchError
from maxbench.registry import Registry, closest
from maxbench.systems.adapters import adapter_suffix, canonical_adapter, split_adapter
from maxbench.systems.decoding import DecodingSetting
from maxbench.systems.layers.base import OutputLayer, same_value
from maxbench.systems.models import REVISION, split_revision

#: the output layers; each class's ``name`` is its key here
LAYERS: Registry[type[OutputLayer]] = Registry(
    "output layer",
    {
        "softmax": "maxbench.systems.layers.softmax:SoftmaxLayer",
        "sparsemax": "maxbench.systems.layers.sparsemax.layer:SparsemaxLayer",
        "graphmax": "maxbench.systems.layers.graphmax.layer:GraphmaxLayer",
        "kerbs": "maxbench.systems.layers.kerbs.layer:KerBSLayer",
        "ft-softmax": "maxbench.systems.layers.kerbs.layer:FineTunedSoftmaxLayer",
        "posg": "maxbench.systems.layers.posg.layer:POSGLayer",
    },
    base=OutputLayer,
    group="maxbench.layers",
)


def layer_class(name: str) -> type[OutputLayer]:
    cls = LAYERS.get(name)
    if cls.name != name:
        # system strings and run files carry the layer's own name: the two must agree
        raise MaxbenchError(f"output layer '{name}' is registered as a class named '{cls.name}'")
    return cls


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return repr(v)
    return str(v)


@dataclass(frozen=True)
class SystemSpec:
    model: str
    layer: str
    params: tuple = field(default_factory=tuple)  # ((key, value), ...) as given
    decoding: DecodingSetting = field(default_factory=DecodingSetting)
    adapter: str | None = None  # MODEL+ADAPTER(k=v): the adapter's name (systems/adapters, docs/models.md)
    adapter_params: tuple = field(default_factory=tuple)  # its options, canonical: defaults left out

    @property
    def model_key(self) -> str:
        """The model part of the name: the base model and its adapter, ``org/name@rev+prefix(n=10)``;
        the model itself when there is no adapter. Runs load, record and check models by it."""
        return self.model + adapter_suffix(self.adapter, self.adapter_params)

    def build_adapter(self):
        """The adapter, untrained (None without one)."""
        from maxbench.systems.adapters import adapter_class

        return adapter_class(self.adapter)(**dict(self.adapter_params)) if self.adapter else None

    @property
    def model_name(self) -> str:
        """The model without its ``@REVISION``."""
        return split_revision(self.model)[0]

    @property
    def revision(self) -> str | None:
        """The hub revision written after '@' in the model part, or None."""
        return split_revision(self.model)[1]

    @property
    def name(self) -> str:
        layer = self.layer + (f"({','.join(f'{k}={_fmt(v)}' for k, v in self.params)})" if self.params else "")
        return f"{self.model_key}/{layer}/{self.decoding.label}"

    def code(self) -> dict:
        """Where this system's code comes from (docs/plugins.md): the origins of its layer, its model
        and its adapter, as a run's manifest records them (``maxbench.rundir.check_code`` compares them)."""
        from maxbench.registry import builtin_origin
        from maxbench.systems.models import MODELS

        model = MODELS.origin(self.model) if self.model in MODELS else builtin_origin()
        code = {"layer": LAYERS.origin(self.layer), "model": model}
        if self.adapter:
            from maxbench.systems.adapters import ADAPTERS

            code["adapter"] = ADAPTERS.origin(self.adapter)
        return code

    def build_layer(self) -> OutputLayer:
        cls = layer_class(self.layer)
        try:
            sig = inspect.signature(cls.__init__)
            has_kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
            allowed = [p for p in sig.parameters if p not in ("self",)]
            for key, _ in self.params:
                if key not in allowed and not has_kwargs:
                    near = closest(key, allowed)
                    raise MaxbenchError(
                        f"output layer '{self.layer}' has no parameter '{key}'"
                        + (f": did you mean '{near}'?" if near else ";")
                        + f" its parameters: {', '.join(allowed) or 'none'}"
                    )
            return cls(**dict(self.params))
        except (TypeError, ValueError) as exc:
            raise MaxbenchError(f"system '{self.name}': bad layer parameters: {exc}") from None


def layer_label(layer_name: str) -> str:
    """How messages name a layer: a plugin's with its origin, a built-in's by its name."""
    from maxbench.registry import describe_origin

    if LAYERS.is_builtin(layer_name):
        return f"output layer '{layer_name}'"
    return f"plugin output layer '{layer_name}' from {describe_origin(LAYERS.origin(layer_name))}"


def probe_layer(layer_name: str, layer: OutputLayer) -> None:
    """Call a plugin layer's ``scores`` once on a tiny random input (logits (2, 16), and hidden
    states (2, 8) when it needs them) before any generation: an exception, a wrong shape or a NaN
    is one line naming the plugin. Built-ins, and layers that must be fitted first, are not probed."""
    import torch

    from maxbench.systems.layers.base import check_scores_form

    if LAYERS.is_builtin(layer_name) or layer.needs_fit:
        return
    what = layer_label(layer_name)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 16, generator=gen)
    hidden = torch.randn(2, 8, generator=gen) if layer.needs_hidden else None
    try:
        with torch.no_grad():
            out = layer.scores(logits, hidden)
    except Exception as exc:  # noqa: BLE001 - the plugin's own failure, as one line
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise MaxbenchError(
            f"{what}: scores() failed on logits of shape (2, 16): {type(exc).__name__}"
            + (f": {detail}" if detail else "")
        ) from None
    check_scores_form(out, logits, what, "on a probe")
    if bool(torch.isnan(out).any() or torch.isposinf(out).any()):
        raise MaxbenchError(f"{what}: scores() returned NaN or +inf on logits of shape (2, 16)")
    if not torch.isfinite(out).any(dim=-1).all():
        raise MaxbenchError(f"{what}: scores() gave a row with no finite score (every token -inf)")


def _without_default_fit_options(layer: str, params: tuple) -> tuple:
    """``params`` without the built-in layer's training options (``fit_options``) that are at their
    defaults: ``kerbs(seed=0)`` is ``kerbs``. Plugin layers keep their parameters as given (their code
    is not imported to read a system string)."""
    if not params or not LAYERS.is_builtin(layer):
        return params
    defaults = layer_class(layer).fit_options
    return tuple((k, v) for k, v in params if not (k in defaults and same_value(v, defaults[k])))


_SYSTEM = re.compile(
    r"^(?P<model>.+?)/(?P<layer>[A-Za-z_][A-Za-z0-9_-]*)(?:\((?P<params>[^()]*)\))?/(?P<decoding>[^/]+)$"
)


def parse_system(text: str) -> SystemSpec:
    m = _SYSTEM.match(text.strip())
    if not m:
        raise MaxbenchError(
            f"cannot read system '{text}'; write MODEL/LAYER(key=value,...)/DECODING, "
            f"e.g. smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9"
        )
    params = []
    for part in filter(None, (p.strip() for p in (m.group("params") or "").split(","))):
        if "=" not in part:
            raise MaxbenchError(f"system '{text}': layer parameter '{part}' needs the form key=value")
        key, val = (s.strip() for s in part.split("=", 1))
        params.append((key, _value(val)))
    base, adapter, adapter_params = split_adapter(m.group("model"), _value)
    model, rev = split_revision(base)
    if rev is not None and not (model and REVISION.fullmatch(rev)):
        raise MaxbenchError(
            f"system '{text}': write the model as MODEL@REVISION with a revision of letters, digits, '.', '_' "
            f"or '-' (e.g. org/name@abc123/softmax/greedy)"
        )
    LAYERS.check(m.group("layer"))  # fail early on an unknown layer, before importing any
    if adapter is not None:
        adapter_params = canonical_adapter(adapter, adapter_params)  # an unknown adapter or option: one line
    return SystemSpec(
        model=base,
        layer=m.group("layer"),
        params=_without_default_fit_options(m.group("layer"), tuple(params)),
        decoding=DecodingSetting.parse(m.group("decoding")),
        adapter=adapter,
        adapter_params=adapter_params,
    )
