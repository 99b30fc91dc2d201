"""Foundations shared by every maxbench package: the one error type, interval and document types,
provenance and atomic file writing. ``core`` imports no other maxbench package.

Importing ``core`` pins the math libraries to their AVX2 kernels (``core/arithmetic.py``), so
that a result has the same bits on every x86-64 CPU; every maxbench package imports ``core``
before NumPy or torch for that reason.

``maxbench.register_layer``, ``register_model``, ``register_metric``, ``register_adapter``, ``evaluate``,
``load_run`` and ``RunResult`` (``core/api.py``; docs/api.md) are imported on first use, so that
``import maxbench`` stays light. ``maxbench.__version__`` is the installed distribution's version
(``maxbench --version`` prints it)."""

from maxbench.arithmetic import pin_cpu_arithmetic

pin_cpu_arithmetic()

_API = ("register_layer", "register_model", "register_metric", "register_adapter", "evaluate", "load_run", "RunResult")


def _version() -> str:
    """The version of the installed maxbench distribution; from a checkout that was never installed,
    the version its pyproject.toml declares."""
    from importlib import metadata

    try:
        return metadata.version("maxbench")
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def __getattr__(name: str):
    if name == "__version__":
        return _version()
    if name in _API:
        from maxbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'maxbench' has no attribute {name!r}")
