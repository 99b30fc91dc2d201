"""What generates text: base models, output layers, the corpus graph, the decoding loop.

``from maxbench.systems import sparsemax, graphmax`` gives the two operators as plain functions; they
are imported on first access so that importing ``maxbench.systems`` stays light (no torch/scipy).
"""

_LAZY_OPERATORS = {
    "sparsemax": "maxbench.systems.layers.sparsemax.operator",
    "graphmax": "maxbench.systems.layers.graphmax.operator",
}


def __getattr__(name):
    if name in _LAZY_OPERATORS:
        import importlib

        return getattr(importlib.import_module(_LAZY_OPERATORS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
