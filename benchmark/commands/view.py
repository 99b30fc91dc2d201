"""``maxbench view``: write the results explorer of scored runs (and a study's ratings)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "view",
        help="write a static results explorer (leaderboard, texts side by side, plots, metrics vs humans)",
        description="Write a self-contained static explorer (HTML + JS + JSON; no server, no CDN) of scored runs "
        "into --out: open its index.html in a browser, from the disk or from any web server. It changes no "
        "run. With --study, each rated text shows its ratings, and a report correlates every metric with "
        "every rated aspect.",
    )
    p.add_argument("run_dirs", nargs="+", help="scored run directories (each with scores.json)")
    p.add_argument(
        "--study",
        metavar="FILE",
        help="a study's ratings as `maxbench study export ID --format explorer --out FILE` writes them",
    )
    p.add_argument("--out", default="results/explorer", help="output folder, replaced whole (default: %(default)s)")
    p.set_defaults(func=cmd_view)


def cmd_view(args) -> int:
    from maxbench.benchmark.present.explorer import write_explorer
    from maxbench.fileio import check_not_input
    from maxbench.rundir import run_inputs

    inputs = [i for r in args.run_dirs for i in run_inputs(Path(r))]
    if args.study is not None:
        inputs.append((Path(args.study), "the study file"))
    check_not_input(args.out, "--out", inputs, whole_folder=True)
    path = write_explorer([Path(r) for r in args.run_dirs], Path(args.out), study=args.study)
    print(f"wrote {path} (open it in a browser)")
    return 0
