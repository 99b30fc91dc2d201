"""Foundations shared by every maxbench package: the one error type, interval and document types,
provenance and atomic file writing. ``core`` imports no other maxbench package.

Importing ``core`` pins the math libraries to their AVX2 kernels (``core/arithmetic.py``), so
that a result has the same bits on every x86-64 CPU; every maxbench package imports ``core``
before NumPy or torch for that reason.

``maxbench.register_layer``, ``register_model``, ``register_metric``, ``register_adapter``, ``evaluate``,
``load_run`` and ``RunResult`` (``core/api.py``; docs/api.md) are imported on first use, so that
``import maxbench`` stays light."""

from maxbench.arithmetic import pin_cpu_arithmetic

pin_cpu_arithmetic()

_API = ("register_layer", "register_model", "register_metric", "register_adapter", "evaluate", "load_run", "RunResult")


def __getattr__(name: str):
    if name in _API:
        from maxbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'maxbench' has no attribute {name!r}")
