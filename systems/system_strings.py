"""Named systems: ``<base model>/<output layer>(<params>)/<decoding>``.

A system string reads back into exactly one system, e.g.
``smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9``. The base model is a built-in
name, a local directory or a hub id; the layer is one of LAYERS with keyword parameters;
the decoding part is a DecodingSetting label. ``SystemSpec.name`` is the canonical form.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

from maxbench.errors import MaxbenchError
from maxbench.registry import Registry, closest
from maxbench.systems.decoding import DecodingSetting
from maxbench.systems.layers.base import OutputLayer

#: the output layers; each class's ``name`` is its key here
LAYERS: Registry[type[OutputLayer]] = Registry(
    "output layer",
    {
        "softmax": "maxbench.systems.layers.softmax:SoftmaxLayer",
        "sparsemax": "maxbench.systems.layers.sparsemax.layer:SparsemaxLayer",
        "graphmax": "maxbench.systems.layers.graphmax.layer:GraphmaxLayer",
        "kerbs": "maxbench.systems.layers.kerbs.layer:KerBSLayer",
        "posg": "maxbench.systems.layers.posg.layer:POSGLayer",
    },
    base=OutputLayer,
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

    @property
    def name(self) -> str:
        layer = self.layer + (f"({','.join(f'{k}={_fmt(v)}' for k, v in self.params)})" if self.params else "")
        return f"{self.model}/{layer}/{self.decoding.label}"

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
    LAYERS.check(m.group("layer"))  # fail early on an unknown layer, before importing any
    return SystemSpec(
        model=m.group("model"),
        layer=m.group("layer"),
        params=tuple(params),
        decoding=DecodingSetting.parse(m.group("decoding")),
    )
