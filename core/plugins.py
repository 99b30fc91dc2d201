"""Plugins from files: ``include(path)`` imports a ``.py`` file, or every ``.py`` of a folder, so that
the output layers, base models and metrics it registers (``maxbench.register_layer`` and its
siblings, ``core/api.py``) become known by name. While a file is imported, what it registers records
the file's path and sha256 as its origin (docs/plugins.md). Every command that builds systems or
scores takes ``--include PATH`` (``add_include_option``), and a lineup file ``include = [...]``.

A base module: it imports nothing above ``maxbench.registry``."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.registry import recording

#: files included in this process: resolved path -> sha256 of the content imported
INCLUDED: dict[str, str] = {}


def add_include_option(parser) -> None:
    """The ``--include PATH`` option (repeatable) of a command that builds systems or scores."""
    parser.add_argument(
        "--include",
        action="append",
        default=None,
        metavar="PATH",
        help="a .py file, or a folder of them, registering plugin layers, models or metrics (docs/plugins.md); "
        "repeatable",
    )


def include_all(paths: Iterable[str | Path] | None) -> None:
    for path in paths or ():
        include(path)


def include(path: str | Path) -> list[str]:
    """Import the ``.py`` file ``path``, or every ``.py`` of the folder ``path`` (sorted by name),
    each under a module name of its own; returns the files imported. A file already included with
    the same content is not imported again; one whose content changed is imported again and its
    registrations replace the earlier ones."""
    path = Path(path).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.glob("*.py") if p.is_file())
        if not files:
            raise MaxbenchError(f"--include {path}: the folder holds no .py file")
    elif path.is_file():
        if path.suffix != ".py":
            raise MaxbenchError(f"--include {path}: not a .py file (give a Python file or a folder of them)")
        files = [path]
    else:
        raise MaxbenchError(f"--include {path}: no such file or folder")
    for file in files:
        _include_file(file.resolve())
    return [str(f) for f in files]


def _include_file(file: Path) -> None:
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise MaxbenchError(f"cannot include {file}: {exc.strerror or exc}") from None
    sha = hashlib.sha256(data).hexdigest()
    if INCLUDED.get(str(file)) == sha:
        return
    name = f"maxbench_plugin_{hashlib.sha256(str(file).encode()).hexdigest()[:12]}_{sha[:12]}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise MaxbenchError(f"cannot include {file}: Python cannot import it")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with recording({"source": "file", "path": str(file), "sha256": sha}):
            spec.loader.exec_module(module)
    except MaxbenchError:
        sys.modules.pop(name, None)
        raise  # already one line naming the plugin and its file
    except Exception as exc:  # noqa: BLE001 - any failure of a user's file is one line naming it
        sys.modules.pop(name, None)
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise MaxbenchError(
            f"plugin file {file} failed to import: {type(exc).__name__}" + (f": {detail}" if detail else "")
        ) from None
    INCLUDED[str(file)] = sha


def forget() -> None:
    """Drop every plugin registered from a file or a session (the tests start each from none)."""
    from maxbench.registry import REGISTRIES

    for registry in list(REGISTRIES.values()):
        registry.forget_plugins()
    INCLUDED.clear()
