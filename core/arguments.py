"""The checks of arguments that the commands and the Python API share: one place says what a whole
number of resamples, an interval level or a list of names is, and both doors call it before any
work. ``what`` names the argument as its door spells it (``--bootstrap`` on the command line,
``n_resamples`` in Python), so the one line of a refusal names what the user wrote.

argparse has already typed a command's values; the API's arrive as any Python object, so each check
also refuses the wrong type (a string seed, a float count: ``True`` is not a number here) instead of
recording it or failing later with a bare ``TypeError``.
"""

from __future__ import annotations

import numbers
import os

from maxbench.errors import MaxbenchError


def _got(value) -> str:
    return f"got {type(value).__name__} {value!r}"


def whole(value, what: str, minimum: int | None = None, why: str = "") -> int:
    """``value`` as an int: a whole number (not a bool, not a float, not a string), at least
    ``minimum``; ``why`` follows the bound in the message, e.g. " (0: no intervals)"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise MaxbenchError(f"{what} must be a whole number, {_got(value)}")
    if minimum is not None and value < minimum:
        raise MaxbenchError(f"{what} must be >= {minimum}{why}, got {value}")
    return int(value)


def optional_whole(value, what: str, minimum: int | None = None) -> int | None:
    return None if value is None else whole(value, what, minimum)


def level(value, what: str) -> float:
    """An interval level: a number strictly between 0 and 1 (0.95, not 95)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise MaxbenchError(f"{what} must be a number between 0 and 1 (e.g. 0.95), {_got(value)}")
    if not 0 < value < 1:
        raise MaxbenchError(f"{what} must be between 0 and 1 (e.g. 0.95, not 95), got {value}")
    return float(value)


def text(value, what: str, optional: bool = False) -> str | None:
    """A string (or None where ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MaxbenchError(f"{what} must be a string{' or None' if optional else ''}, {_got(value)}")
    return value


def path(value, what: str) -> str | os.PathLike:
    if not isinstance(value, str | os.PathLike):
        raise MaxbenchError(f"{what} must be a path (a string or a pathlib.Path), {_got(value)}")
    return value


def flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise MaxbenchError(f"{what} must be True or False, {_got(value)}")
    return value


def names(value, what: str, optional: bool = False) -> list[str] | None:
    """A list of names: one string (comma-separated, as on the command line: ``"rep,bleu"``), or a
    list or tuple of strings; None where ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    elif not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise MaxbenchError(
            f"{what} must be a name, a comma-separated string of names or a list of them, {_got(value)}"
        )
    return list(value)


# ---------------------------------------------------------------- the checks both doors share


def resamples(value, what: str, minimum: int) -> int:
    """Bootstrap or permutation resamples: ``minimum`` 0 where 0 turns intervals off (scoring), 1
    where a test needs them (compare)."""
    return whole(value, what, minimum, " (0: no intervals)" if minimum == 0 else " (the tests resample)")


def seed(value, what: str) -> int:
    return whole(value, what)


def threads(value, what: str) -> int | None:
    return optional_whole(value, what, 1)
