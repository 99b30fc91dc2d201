"""What every benchmark script shares: argument types that refuse a bad value with argparse's
usage line and exit status 2, the guard that turns a MaxbenchError or an operating-system error
into one line and exit status 2 (``maxbench.cli.run_guarded``, as the ``maxbench`` command
does), the load average printed beside every figure, and the timer that alternates the ways
it compares.

The scripts run from the checkout (``.venv/bin/python benchmarks/<name>.py``), with this folder
on ``sys.path``; ``require_checkout`` puts the checkout there too, for a python without the
project installed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def require_checkout() -> None:
    """Make the checkout's packages (benchmark, systems, core, human_eval) importable."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)


def _int_from(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{text!r} must be {low} or more")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _int_from(text, 1)


def nonnegative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _int_from(text, 0)


def nonnegative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number, 0 or more")
    return value


def positive_ints(text: str) -> list[int]:
    """An argparse type: comma-separated integers >= 1 (``16,48``)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers, e.g. 16,48")
    return [positive_int(p) for p in parts]


def names(text: str) -> list[str]:
    """An argparse type: comma-separated non-empty names (``food-reviews,movie-reviews``)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated names with none empty")
    return parts


def check_inputs(model: str | None = None, corpora=(), suites=()) -> None:
    """Refuse an unknown model, corpus or suite (a MaxbenchError naming it) before anything loads."""
    from maxbench.benchmark.data.corpora import check_corpus
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.models import check_model

    if model is not None:
        check_model(model)
    for name in corpora:
        check_corpus(name)
    for name in suites:
        load_suite(name)


def run(main) -> None:
    """Run a script's ``main`` and exit with its code, bad input as one line and status 2."""
    require_checkout()
    from maxbench.cli import run_guarded

    sys.exit(run_guarded(Path(sys.argv[0]).name, main))


def load_average() -> str:
    """``uptime``'s load average (1, 5, 15 minutes) and the machine's CPU count."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def alternate(ways: dict, repeats: int, *args) -> tuple[dict[str, float], dict]:
    """The median seconds of each of ``ways`` called on ``args`` over ``repeats`` runs that
    alternate their order (so that noise from other processes hits them alike), and each one's
    last result."""
    times: dict[str, list[float]] = {k: [] for k in ways}
    results = {}
    for r in range(repeats):
        for label in list(ways) if r % 2 == 0 else list(ways)[::-1]:
            t0 = time.perf_counter()
            results[label] = ways[label](*args)
            times[label].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}, results
