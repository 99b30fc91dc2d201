"""``maxbench frontier``: the frontier report of a scored run with sweeps (docs/frontiers.md)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "frontier",
        help="draw each sweep of a scored run as a curve; matched comparisons, dominance, tuning budgets",
        description="Write frontier.md/.html/.json and plots/frontier-*.png, plots/budget-*.png from the "
        "scores.json of a run whose lineup has sweeps (docs/frontiers.md). Needs no model.",
    )
    p.add_argument("run_dir", help="a scored run directory whose manifest records sweeps")
    p.add_argument("--out", default=None, help="output folder (default: the run folder's results folder, RUN/../..)")
    p.add_argument(
        "--plane",
        action="append",
        metavar="QUALITY,MATCH",
        help="a plane: the quality score (y) and the matching score (x), e.g. bleu-4,self-bleu-4; repeat for "
        "more (default: mauve and the first reference-based score, each against self-bleu-4 or distinct-n)",
    )
    p.add_argument("--against", metavar="SWEEP", help="compare every sweep with this one (default: the baseline's)")
    p.add_argument(
        "--match",
        type=float,
        metavar="VALUE",
        help="the matching score's value to compare at (default: the human row's value)",
    )
    p.set_defaults(func=cmd_frontier)


def cmd_frontier(args) -> int:
    from maxbench.benchmark.present.frontiers import parse_plane, render

    planes = [parse_plane(t) for t in args.plane] if args.plane else None
    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir.resolve().parent.parent
    for path in render(run_dir, out, planes, args.against, args.match):
        print(f"wrote {path}")
    return 0
