"""Plugins from files: ``include(path)`` imports a ``.py`` file, or every ``.py`` of a folder, so that
the output layers, base models and metrics it registers (``maxbench.register_layer`` and its
siblings, ``core/api.py``) become known by name. While a file is imported, what it registers records
the file's path and sha256 as its origin (docs/plugins.md), or, for code defined in another file of the
user's that it imported (a sibling module registering on import), that file's (``registration_origin``).
What a file prints while imported goes to standard error, so that a command's standard output (``plugins
--json``, a table) stays its own; a file that exits while imported (``sys.exit``) is refused. Every command that builds systems or
scores takes ``--include PATH`` (``add_include_option``), and a lineup file ``include = [...]``.

A base module: it imports nothing above ``maxbench.registry``."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
import sysconfig
import types
from collections.abc import Iterable
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.registry import recording

#: files included in this process: resolved path -> sha256 of the content imported
INCLUDED: dict[str, str] = {}
#: per include under way (innermost last): the origins given to code of other user files it imported,
#: by path, with their module's name; their helper modules are filled in when the include ends
_SIBLINGS: list[dict[str, tuple[dict, str]]] = []


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
    origin = {"source": "file", "path": str(file), "sha256": sha}
    before = set(sys.modules)
    _SIBLINGS.append({})
    try:
        with recording(origin), contextlib.redirect_stdout(sys.stderr):
            spec.loader.exec_module(module)
        imported = [sys.modules[m] for m in sorted(set(sys.modules) - before) if m != name]
        helpers = helper_code(module, imported)
        if helpers:  # the registrations made above hold this very dict
            origin["helpers"] = helpers
        for sibling, module_name in _SIBLINGS[-1].values():  # each with what the include brought in, as above
            helpers = helper_code(sys.modules[module_name], imported) if module_name in sys.modules else {}
            if helpers:
                sibling["helpers"] = helpers
    except MaxbenchError:
        sys.modules.pop(name, None)
        raise  # already one line naming the plugin and its file
    except SystemExit as exc:  # a script's sys.exit(): exit status 0 would hide that nothing was registered
        sys.modules.pop(name, None)
        raise MaxbenchError(
            f"plugin file {file} exited while being imported (sys.exit({exc.code!r})); a plugin file defines and "
            "registers only: put a script's own work under 'if __name__ == \"__main__\":'"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure of a user's file is one line naming it
        sys.modules.pop(name, None)
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise MaxbenchError(
            f"plugin file {file} failed to import: {type(exc).__name__}" + (f": {detail}" if detail else "")
        ) from None
    finally:
        _SIBLINGS.pop()
    INCLUDED[str(file)] = sha


def registration_origin(obj, origin: dict) -> dict:
    """The origin of ``obj`` registered while the file of ``origin`` is included: ``origin`` itself when
    ``obj``'s code is in that file, or not in a user's file; else the user's file that defines ``obj``,
    a module the included file imported that registers on import (a sibling), with its path and sha256
    as an included file's, so that the registration names the file whose code it runs. Its helper modules
    join its origin when the include ends, found as the included file's are (``helper_code``)."""
    module_name = getattr(obj, "__module__", None)
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    if origin.get("source") != "file" or module is None or module_name.split(".", 1)[0] == "maxbench":
        return origin
    path = user_code_file(module)
    if path is None or str(path) == origin.get("path"):
        return origin
    pending = _SIBLINGS[-1] if _SIBLINGS else {}
    if str(path) in pending:
        return pending[str(path)][0]
    try:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return origin
    found = {"source": "file", "path": str(path), "sha256": sha}
    pending[str(path)] = (found, module_name)
    return found


def _library_roots() -> list[Path]:
    """Where released code lives: the standard library and site-packages."""
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))}
    return [Path(r).resolve() for r in roots if r]


def user_code_file(module: types.ModuleType, roots: list[Path] | None = None) -> Path | None:
    """The ``.py`` file of ``module`` when it is a user's code (outside ``_library_roots``), else None;
    maxbench's own modules are left out by name (``helper_code``)."""
    file = getattr(module, "__file__", None)
    if not file or not file.endswith(".py"):
        return None
    path = Path(file).resolve()
    if any(path.is_relative_to(root) for root in (roots if roots is not None else _library_roots())):
        return None
    return path


def helper_code(module: types.ModuleType, imported: list[types.ModuleType] = ()) -> dict[str, str]:
    """``{file: sha256}`` of the user's modules (outside the standard library, site-packages and maxbench)
    that ``module`` reaches through its globals: modules it imported, and the modules of the classes and
    functions it imported from them, followed on through theirs. These are the code a plugin's layer,
    model or metric runs besides its own file, so the plugin's origin covers them: an edited helper is
    other code, as an edited file is. ``imported``: modules the file's import brought in besides (a
    helper imported inside a function that ran then), followed the same way."""
    roots = _library_roots()
    own = getattr(module, "__file__", None)
    seen: set[str] = {module.__name__}
    todo = [module]
    found: dict[str, str] = {}
    pending = [m.__name__ for m in imported]
    while todo or pending:
        values = [sys.modules.get(pending.pop())] if pending else list(vars(todo.pop()).values())
        for value in values:
            if value is None:
                continue
            name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if not isinstance(name, str) or name in seen or name not in sys.modules:
                continue
            seen.add(name)
            if name == "maxbench" or name.startswith("maxbench."):
                continue  # maxbench's own code: its version is recorded elsewhere
            target = sys.modules[name]
            path = user_code_file(target, roots)
            if path is None or str(path) == own:
                continue
            try:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
            todo.append(target)
    return dict(sorted(found.items()))


def forget() -> None:
    """Drop every plugin registered from a file or a session (the tests start each from none)."""
    from maxbench.registry import REGISTRIES

    for registry in list(REGISTRIES.values()):
        registry.forget_plugins()
    INCLUDED.clear()
