"""The ``maxbench`` command line, maxbench's front door: one parser, subcommands contributed by
each package. This module sits above ``maxbench.benchmark`` and ``maxbench.human_eval`` and is
the only place that wires the two together (the import contracts in pyproject.toml see it).

Each module in COMMAND_MODULES has ``register(subparsers)``, adding its subcommands with
``set_defaults(func=...)``. Heavy imports (torch, transformers) happen inside the command
functions so that ``--help`` stays fast. A MaxbenchError, or an operating-system error no
command turned into one, becomes one line on stderr and exit status 2; an interrupt exits 130
after the command has flushed what it wrote.
"""

from __future__ import annotations

import argparse
import os
import sys

import maxbench
from maxbench.benchmark.commands import (
    assets,
    compare,
    export,
    fit,
    generate,
    graph,
    leaderboard,
    plugins,
    reproduce,
    run,
    score,
    suites,
    view,
)
from maxbench.errors import MaxbenchError
from maxbench.fileio import os_error
from maxbench.human_eval import cli as human_eval_cli
from maxbench.human_eval.report import cli as report_cli
from maxbench.plugins import add_include_option, include_all

# the order of ``maxbench --help``'s list
COMMAND_MODULES = [
    assets,
    run,
    leaderboard,
    suites,
    generate,
    plugins,
    report_cli,
    human_eval_cli,
    graph,
    score,
    fit,
    reproduce,
    view,
    export,
    compare,
]

#: the commands that build systems or score, which take ``--include PATH`` (docs/plugins.md)
INCLUDE_COMMANDS = (
    "generate",
    "run",
    "score",
    "leaderboard",
    "view",
    "fit",
    "report",
    "study create",
    "compare",
    "plugins",
)


def _subcommands(parser: argparse.ArgumentParser) -> dict:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="maxbench",
        description="Compare output layers of language models with automatic metrics and human ratings.",
    )
    parser.add_argument("--version", action="version", version=f"maxbench {maxbench.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    for command in INCLUDE_COMMANDS:
        p = parser
        for word in command.split():
            p = _subcommands(p)[word]
        add_include_option(p)
    return parser


def _run(args) -> int:
    """The command, after the plugin files it was given are imported (``--include``)."""
    include_all(getattr(args, "include", None))
    return args.func(args)


def run_guarded(prog: str, func, *args) -> int:
    """``func(*args)``'s return code, with a MaxbenchError or an operating-system error as one
    line on stderr (``prog: error: ...``) and its exit code (2), an interrupt as 130: the
    ``maxbench`` command's and the benchmark scripts' (benchmarks/harness.py) one way out."""
    try:
        rc = func(*args)
    except BrokenPipeError:
        return _closed_pipe()
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


#: the exit status of a command whose reader went away (``| head``): 128 + SIGPIPE, as a Unix tool's
CLOSED_PIPE = 141


def _closed_pipe() -> int:
    """A reader that closed the pipe (``maxbench score ... | head``) ends the command quietly, as it
    ends a Unix tool: no message, status 141. Standard output is pointed at /dev/null so that the
    interpreter's last flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor behind sys.stdout (a test's capture)
        pass
    return CLOSED_PIPE


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_guarded("maxbench", _run, args)


if __name__ == "__main__":
    sys.exit(main())
