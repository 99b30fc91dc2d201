"""``maxbench leaderboard``: re-render the leaderboard of scored runs, or check it against a committed one."""

from __future__ import annotations

from pathlib import Path

from maxbench.errors import MaxbenchError


def register(sub) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="re-render the leaderboard from scored runs, without generating",
        description="Render leaderboard.md/.csv/.html and plots from the scores.json of runs.",
    )
    p.add_argument("run_dirs", nargs="+", help="run directories (each scored: scores.json)")
    p.add_argument("--out", default="results", help="output folder (default results/)")
    p.add_argument(
        "--mixed",
        action="store_true",
        help="allow runs on different suites, prompt counts, seeds or sample counts, or runs sharing a "
        "system, in one table: rows then name their run and suite, and the best value is marked per suite",
    )
    p.add_argument(
        "--check",
        metavar="DIR",
        help="write nothing: compare the runs' texts and leaderboard with the committed ones in DIR (its "
        "leaderboard.csv and explorer/, e.g. results): the same texts, every number within --rtol (exit 0), "
        "else the differences and exit 1 (docs/reproducibility.md)",
    )
    p.add_argument(
        "--rtol", type=float, default=None, metavar="R", help="--check: relative tolerance of a number (default 1e-5)"
    )
    p.add_argument(
        "--ppl-rtol",
        type=float,
        default=None,
        metavar="R",
        help="--check: relative tolerance of a perplexity (ppl, ref-ppl, ref-eps-ppl; default 1e-3)",
    )
    p.set_defaults(func=cmd_leaderboard)


def cmd_leaderboard(args) -> int:
    from maxbench.benchmark.present.leaderboard import render

    if args.check is not None:
        from maxbench.benchmark.present import check as leaderboard_check

        rtol = leaderboard_check.RTOL if args.rtol is None else args.rtol
        ppl_rtol = leaderboard_check.PPL_RTOL if args.ppl_rtol is None else args.ppl_rtol
        return leaderboard_check.check([Path(r) for r in args.run_dirs], Path(args.check), args.mixed, rtol, ppl_rtol)
    if args.rtol is not None or args.ppl_rtol is not None:
        raise MaxbenchError("--rtol and --ppl-rtol go with --check DIR (the tolerances of the comparison)")

    for path in render([Path(r) for r in args.run_dirs], Path(args.out), mixed=args.mixed):
        print(f"wrote {path}")
    return 0
