"""The ``maxbench`` command line: one parser, subcommands contributed by each package.

Each module in COMMAND_MODULES has ``register(subparsers)``, adding its subcommands with
``set_defaults(func=...)``. Heavy imports (torch, transformers) happen inside the command
functions so that ``--help`` stays fast. A MaxbenchError, or an operating-system error no
command turned into one, becomes one line on stderr and exit status 2; an interrupt exits 130
after the command has flushed what it wrote.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from core.errors import MaxbenchError
from core.fileio import os_error

COMMAND_MODULES = [
    "benchmark.commands",
    "human_eval.report_cli",
    "human_eval.cli",
    "benchmark.graph_cli",
    "benchmark.metrics.cli",
    "benchmark.heads_cli",
    "benchmark.reproduce.cli",
    "benchmark.explorer.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="maxbench",
        description="Compare output layers of language models with automatic metrics and human ratings.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def run_guarded(prog: str, func, *args) -> int:
    """``func(*args)``'s return code, with a MaxbenchError or an operating-system error as one
    line on stderr (``prog: error: ...``) and its exit code (2), an interrupt as 130: the
    ``maxbench`` command's and the benchmark scripts' (benchmarks/harness.py) one way out."""
    try:
        rc = func(*args)
    except MaxbenchError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        # the operating system's answer about a path no command anticipated: still one line
        err = os_error(exc.filename, exc, "use") if exc.filename else MaxbenchError(exc.strerror or str(exc))
        print(f"{prog}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; what was written so far is kept", file=sys.stderr)
        return 130
    return int(rc or 0)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_guarded("maxbench", args.func, args)


if __name__ == "__main__":
    sys.exit(main())
