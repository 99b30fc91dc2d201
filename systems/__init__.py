"""What generates text: base models, output layers, the corpus graph, the decoding loop.

``from systems import sparsemax, graphmax`` gives the two operators as plain functions; they
are imported on first access so that importing ``systems`` stays light (no torch/scipy).
"""

import core  # noqa: F401  (first: pins the CPU arithmetic before NumPy or torch load)

_LAZY_OPERATORS = {
    "sparsemax": "systems.layers.sparsemax",
    "graphmax": "systems.layers.graphmax",
}


def __getattr__(name):
    if name in _LAZY_OPERATORS:
        import importlib

        return getattr(importlib.import_module(_LAZY_OPERATORS[name]), name)
    raise AttributeError(f"module 'systems' has no attribute {name!r}")
