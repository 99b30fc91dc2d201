"""The number formats of a reproduction report (shared by the renderer and the claim kinds)."""

from __future__ import annotations

from maxbench.benchmark.reproduce.verdicts import Estimate


def value(v: float | None, sd: float | None = None) -> str:
    """A value to four significant digits, with its sd; 'n/a' if None."""
    if v is None:
        return "n/a"
    text = f"{v:.4g}"
    return text + (f" ± {sd:.2g}" if sd is not None else "")


def pct(v: float | None) -> str:
    """A fraction in signed per cent ('' if None)."""
    if v is None:
        return ""
    return f"{100 * v:+,.0f}%" if abs(v) >= 1 else f"{100 * v:+.3g}%"


def pct_interval(est: float | None, lo: float | None, hi: float | None) -> str:
    """A relative difference with its interval, in per cent."""
    if est is None:
        return "n/a"
    return pct(est) + ("" if lo is None else f" [{pct(lo)}, {pct(hi)}]")


def times(e: Estimate, shift: float = 0.0, digits: int = 3) -> str:
    """A ratio as 'xR [xL, xH]' (``shift`` 1: the estimate is the ratio - 1)."""
    if e.estimate is None:
        return "n/a"
    lo = "" if e.low is None else f" [x{e.low + shift:.{digits}g}, x{e.high + shift:.{digits}g}]"
    return f"x{e.estimate + shift:.{digits}g}{lo}"


def difference(e: Estimate) -> str:
    """An absolute difference with its interval."""
    if e.estimate is None:
        return "n/a"
    if e.low is None:
        return f"{e.estimate:+.4g}"
    return f"{e.estimate:+.4g} [{e.low:+.4g}, {e.high:+.4g}]"


def p_value(p: float | None) -> str:
    if p is None:
        return ""
    return "<0.0001" if p < 1e-4 else f"{p:.2g}"
