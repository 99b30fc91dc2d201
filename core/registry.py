"""The one registry of maxbench: names mapped to objects that are imported on first use.

As lm-evaluation-harness's ``lm_eval/api/registry.py``, but small. An entry is a
``"module:Object"`` string (or the object itself), so listing or checking names imports
nothing and ``maxbench --help`` stays fast. Base models (``systems/models.py``), output layers
(``systems/system_strings.py``) and metrics (``benchmark/metrics/base.py``) are registries;
a name that is not registered is a ``MaxbenchError`` of one line naming it, the closest
known name and all known names (``unknown_name``, which the lineup files of
``benchmark/run/lineup.py`` use too).

Plugins (docs/plugins.md): a registry with an entry-point ``group`` adds that group's entry points
on first use, and ``add_plugin`` adds a plugin registered from an included file or a session.
Every name has an ``origin`` (where its code came from), which run manifests and score caches
record; a plugin may not take a built-in's name, nor one another plugin declared.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.util
import json
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Generic, TypeVar

from maxbench.errors import MaxbenchError

T = TypeVar("T")


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name most like ``name`` (case ignored), or None when none is alike."""
    known = list(known)
    by_lower = {k.lower(): k for k in known}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.5)
    return by_lower[match[0]] if match else None


def unknown_name(kind: str, name: str, known: Iterable[str], hint: str = "") -> MaxbenchError:
    """The one-line error for a name that is not one of ``known``: what it is, the closest known
    name, every known name, and ``hint`` (what else would be accepted)."""
    known = list(known)
    near = closest(name, known)
    guess = f": did you mean '{near}'?" if near else ";"
    tail = f" ({hint})" if hint else ""
    return MaxbenchError(f"unknown {kind} '{name}'{guess} known {kind}s: {', '.join(known) or 'none'}{tail}")


#: the origin a registration made now records (a file being included), innermost last
_RECORDING: list[dict] = []
#: every registry with an entry-point group, for ``maxbench plugins`` and the tests
REGISTRIES: weakref.WeakValueDictionary[str, Registry] = weakref.WeakValueDictionary()


def builtin_origin() -> dict:
    """The origin of every built-in: maxbench itself, at its installed version."""
    try:
        version = metadata.version("maxbench")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"source": "maxbench", "version": version}


def is_editable(dist) -> bool:
    """Whether the distribution was installed in editable mode (``pip install -e``), by its
    ``direct_url.json`` (PEP 610)."""
    import json

    try:
        text = dist.read_text("direct_url.json")
        return bool(text) and bool(json.loads(text).get("dir_info", {}).get("editable"))
    except (OSError, ValueError, AttributeError):
        return False


def package_code(module_name: str) -> str | None:
    """The sha256 of every ``.py`` file of the top-level package of ``module_name`` (names and contents,
    sorted), found without importing it; None when it has no files of its own."""
    top = module_name.split(".", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        bases = [Path(p) for p in spec.submodule_search_locations]
        files = sorted({f for base in bases for f in base.rglob("*.py")})
    elif spec.origin and spec.origin.endswith(".py"):
        bases, files = [Path(spec.origin).parent], [Path(spec.origin)]
    else:
        return None
    h = hashlib.sha256(b"maxbench-package-code-1\0")
    for f in files:
        rel = next((str(f.relative_to(b)) for b in bases if f.is_relative_to(b)), f.name)
        try:
            h.update(f"{rel}\0".encode() + hashlib.sha256(f.read_bytes()).digest())
        except OSError:
            continue
    return h.hexdigest()


def is_plugin_origin(origin: dict | None) -> bool:
    return isinstance(origin, dict) and origin.get("source") not in (None, "maxbench")


def describe_origin(origin: dict) -> str:
    """An origin in a few words: 'file plugins/x.py (sha256 1a2b3c4d5e6f)', 'maxbench 0.3.0', ..."""
    source = origin.get("source")
    if source == "file":
        helpers = origin.get("helpers")
        more = ""
        if isinstance(helpers, dict) and helpers:
            joined = hashlib.sha256(json.dumps(helpers, sort_keys=True).encode()).hexdigest()[:12]
            more = f", with {len(helpers)} helper module{'s' if len(helpers) > 1 else ''} (sha256 {joined})"
        return f"file {origin.get('path')} (sha256 {str(origin.get('sha256'))[:12]}{more})"
    if source == "entry-point":
        code = f" (editable, code sha256 {str(origin.get('sha256'))[:12]})" if origin.get("editable") else ""
        return f"distribution {origin.get('distribution')} {origin.get('version')}{code}"
    if source == "session":
        return f"a session (source sha256 {str(origin.get('sha256'))[:12]})"
    return f"maxbench {origin.get('version')}"


def _same_plugin(a: dict, b: dict) -> bool:
    """Whether two origins are one plugin declared again (a file included again, perhaps edited;
    a notebook cell run again): the later registration then replaces the earlier."""
    if a.get("source") != b.get("source"):
        return False
    if a["source"] == "file":
        return a.get("path") == b.get("path")
    if a["source"] == "entry-point":
        return a.get("distribution") == b.get("distribution")
    return a["source"] == "session"


@contextlib.contextmanager
def recording(origin: dict):
    """While the block runs, plugins registered without an origin get ``origin`` (``maxbench.plugins.include``)."""
    _RECORDING.append(origin)
    try:
        yield
    finally:
        _RECORDING.pop()


def current_origin() -> dict | None:
    return _RECORDING[-1] if _RECORDING else None


class Registry(Generic[T]):
    """Names of one ``kind`` mapped to objects, given as ``"module:Object"`` and imported on first
    ``get``. ``base``, when given, is the class every registered class must subclass. ``group``,
    when given, is the entry-point group whose entry points are added as plugins on first use."""

    def __init__(
        self,
        kind: str,
        entries: Mapping[str, str | T] | None = None,
        base: type | None = None,
        group: str | None = None,
    ):
        self.kind = kind
        self.base = base
        self.group = group
        self._entries: dict[str, str | T] = {}
        self._origins: dict[str, dict] = {}  # plugins only: a name not here is a built-in
        self._group_loaded = group is None
        for name, target in (entries or {}).items():
            self.register(name, target)
        if group is not None:
            REGISTRIES[group] = self

    def _load_group(self) -> None:
        if self._group_loaded:
            return
        self._group_loaded = True
        for ep in sorted(metadata.entry_points(group=self.group), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else "unknown"
            version = ep.dist.version if ep.dist is not None else "unknown"
            origin = {"source": "entry-point", "distribution": dist, "version": version}
            target = ep.value.split("[", 1)[0].strip()
            if target.count(":") != 1:
                raise MaxbenchError(
                    f"plugin {self.kind} '{ep.name}' of distribution {dist}: entry point '{ep.value}' "
                    "is not of the form 'module:Object'"
                )
            if ep.dist is not None and is_editable(ep.dist):
                # its code is a working folder that changes under one version: the code itself is its identity
                code = package_code(target.split(":", 1)[0])
                if code is not None:
                    origin["editable"] = True
                    origin["sha256"] = code
            self.add_plugin(ep.name, target, origin)

    def add_plugin(self, name: str, target: str | T, origin: dict) -> None:
        """Add the plugin ``name`` with its ``origin``; a name of a built-in, or of another plugin, is
        a one-line error naming the plugin and the problem."""
        self._load_group()
        where = describe_origin(origin)
        if not isinstance(name, str) or not name:
            raise MaxbenchError(f"plugin {self.kind} from {where} has no name; give it a non-empty name")
        if name in self._entries and name not in self._origins:
            raise MaxbenchError(
                f"plugin {self.kind} '{name}' from {where} collides with the built-in {self.kind} '{name}'; "
                "give the plugin another name"
            )
        old = self._origins.get(name)
        if old is not None and not _same_plugin(old, origin):
            raise MaxbenchError(
                f"plugin {self.kind} '{name}' from {where} is declared twice: also by {describe_origin(old)}; "
                "give one of them another name"
            )
        self._entries[name] = target
        self._origins[name] = origin

    def forget_plugins(self, sources: Iterable[str] = ("file", "session")) -> None:
        """Remove the plugins of those sources (tests; a session starting over)."""
        for name, origin in list(self._origins.items()):
            if origin.get("source") in set(sources):
                del self._origins[name], self._entries[name]

    def is_builtin(self, name: str) -> bool:
        self._load_group()
        return name in self._entries and name not in self._origins

    def origin(self, name: str) -> dict:
        """Where the code of ``name`` comes from (docs/plugins.md): a built-in's is maxbench's version."""
        self.check(name)
        return dict(self._origins[name]) if name in self._origins else builtin_origin()

    def plugins(self) -> dict[str, dict]:
        """Every plugin's origin, by name, in the order they were added."""
        self._load_group()
        return {name: dict(origin) for name, origin in self._origins.items()}

    def register(self, name: str, target: str | T | None = None) -> Callable[[T], T] | None:
        """Add ``name``; with no ``target`` this is a class decorator. Registering a name twice for
        two different objects is an error (a plugin must not silently replace a built-in)."""
        if target is None:

            def add(obj: T) -> T:
                self.register(name, obj)
                return obj

            return add
        if isinstance(target, str) and target.count(":") != 1:
            raise ValueError(f"{self.kind} '{name}': entry '{target}' is not of the form 'module:Object'")
        current = self._entries.get(name)
        if current is not None and current != target and _path(current) != _path(target):
            raise ValueError(f"{self.kind} '{name}' is registered twice: as {_path(current)} and as {_path(target)}")
        self._entries[name] = target
        return None

    def __contains__(self, name: object) -> bool:
        self._load_group()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self._load_group()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._load_group()
        return len(self._entries)

    def names(self) -> list[str]:
        self._load_group()
        return list(self._entries)

    def check(self, name: str, hint: str = "") -> str:
        """``name`` if registered, else the one-line error with the closest known name; imports nothing."""
        self._load_group()
        if name not in self._entries:
            raise unknown_name(self.kind, name, self._entries, hint)
        return name

    def get(self, name: str) -> T:
        """The object registered as ``name``, imported now if it was registered as a string."""
        target = self._entries[self.check(name)]
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            try:
                # a plugin's prints on import go to standard error: a command's standard output is its own
                with contextlib.redirect_stdout(sys.stderr) if name in self._origins else contextlib.nullcontext():
                    obj = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                if name in self._origins:
                    raise MaxbenchError(
                        f"plugin {self.kind} '{name}' from {describe_origin(self._origins[name])} cannot be "
                        f"imported ({target}): {type(exc).__name__}: {exc}"
                    ) from None
                if exc.name is None or not module.startswith(exc.name):
                    raise  # the module exists but needs something missing: keep the real traceback
                raise MaxbenchError(
                    f"{self.kind} '{name}' is registered as {target}, but module {module} does not exist"
                ) from None
            except AttributeError:
                raise MaxbenchError(
                    f"{self.kind} '{name}' is registered as {target}, but {module} has no {attr}"
                ) from None
            except Exception as exc:  # noqa: BLE001 - a plugin's own failure on import is one line naming it
                if name not in self._origins:
                    raise
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise MaxbenchError(
                    f"plugin {self.kind} '{name}' from {describe_origin(self._origins[name])} failed to import "
                    f"({target}): {type(exc).__name__}" + (f": {detail}" if detail else "")
                ) from None
            if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
                what = (
                    f"plugin {self.kind} '{name}' from {describe_origin(self._origins[name])}"
                    if name in self._origins
                    else f"{self.kind} '{name}'"
                )
                raise MaxbenchError(f"{what} ({target}) is not a {self.base.__name__}")
            self._entries[name] = obj
            target = obj
        return target


def _path(target: object) -> str:
    if isinstance(target, str):
        return target
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"
