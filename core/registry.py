"""The one registry of maxbench: names mapped to objects that are imported on first use.

As lm-evaluation-harness's ``lm_eval/api/registry.py``, but small. An entry is a
``"module:Object"`` string (or the object itself), so listing or checking names imports
nothing and ``maxbench --help`` stays fast. Base models (``systems/models.py``), output layers
(``systems/system_strings.py``) and metrics (``benchmark/metrics/base.py``) are registries;
a name that is not registered is a ``MaxbenchError`` of one line naming it, the closest
known name and all known names (``unknown_name``, which the lineup files of
``benchmark/lineup.py`` use too).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
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


class Registry(Generic[T]):
    """Names of one ``kind`` mapped to objects, given as ``"module:Object"`` and imported on first
    ``get``. ``base``, when given, is the class every registered class must subclass."""

    def __init__(self, kind: str, entries: Mapping[str, str | T] | None = None, base: type | None = None):
        self.kind = kind
        self.base = base
        self._entries: dict[str, str | T] = {}
        for name, target in (entries or {}).items():
            self.register(name, target)

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
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def check(self, name: str, hint: str = "") -> str:
        """``name`` if registered, else the one-line error with the closest known name; imports nothing."""
        if name not in self._entries:
            raise unknown_name(self.kind, name, self._entries, hint)
        return name

    def get(self, name: str) -> T:
        """The object registered as ``name``, imported now if it was registered as a string."""
        target = self._entries[self.check(name)]
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                if exc.name is None or not module.startswith(exc.name):
                    raise  # the module exists but needs something missing: keep the real traceback
                raise MaxbenchError(
                    f"{self.kind} '{name}' is registered as {target}, but module {module} does not exist"
                ) from None
            except AttributeError:
                raise MaxbenchError(
                    f"{self.kind} '{name}' is registered as {target}, but {module} has no {attr}"
                ) from None
            if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
                raise MaxbenchError(f"{self.kind} '{name}' ({target}) is not a {self.base.__name__}")
            self._entries[name] = obj
            target = obj
        return target


def _path(target: object) -> str:
    if isinstance(target, str):
        return target
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"
