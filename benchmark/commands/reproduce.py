"""``maxbench reproduce PAPER``: run a paper's protocol and write its reproduction report."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from maxbench.errors import MaxbenchError

DEFAULT_OUT = Path("results") / "reproductions"


def register(sub) -> None:
    from maxbench.benchmark.commands.options import add_model_options

    p = sub.add_parser(
        "reproduce",
        help="run a method paper's protocol and compare its claims with maxbench's numbers",
        description="Run the protocol of a method paper (graphmax, posg, kerbs, fctg: folds, systems, decoding and "
        "metrics from benchmark/reproduce/papers/PAPER.toml) as ordinary resumable runs under "
        "results/reproductions/PAPER/runs/, score them, and write results/reproductions/PAPER/report.{md,html,csv,json}: "
        "one verdict per claim x base model x corpus on the relative scale (by the rules every report prints), "
        "the rows behind each, the deviations from the paper and the diagnostics. Prints a wall-time estimate first. "
        "--report-only renders the report from the runs' scores.json as they are, without generating or rescoring "
        "(comparisons between two systems that are not the baseline, and the human references' scores, are "
        "computed once from the generations and kept in pairs.json, the report's evidence beside it).",
    )
    p.add_argument("paper", help="graphmax, posg, kerbs or fctg (or a paper .toml file in their format)")
    p.add_argument("--folds", type=int, default=None, help="cross-validation folds (default: the paper's)")
    p.add_argument("--folds-run", type=int, default=None, help="run only the first N folds for every model")
    p.add_argument("--prompts", type=int, default=None, help="prompts per fold (0: every usable text of the fold)")
    p.add_argument("--models", default=None, help="comma-separated subset of the protocol's base models")
    p.add_argument("--corpora", default=None, help="comma-separated subset of the protocol's corpora")
    p.add_argument(
        "--roles",
        default=None,
        help="comma-separated subset of the protocol's system roles to generate (a first piece of a long "
        "protocol; the report shows the others' cells as partial)",
    )
    p.add_argument(
        "--full", action="store_true", help="lift the documented subsamples (the protocol's 'full' settings)"
    )
    p.add_argument("--out", default=None, help="output folder (default results/reproductions/PAPER)")
    p.add_argument("--shard", default=None, help="i/n: generate only shard i of n of every run and stop")
    p.add_argument("--estimate", action="store_true", help="print the runs and the estimate, and stop")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="render the report from the runs and their scores.json as they are: nothing is generated or rescored; "
        "a run that is not complete or not scored makes its cells 'partial'",
    )
    p.add_argument("--n-resamples", type=int, default=1000, help="bootstrap / permutation resamples")
    p.add_argument("--no-progress", action="store_true")
    add_model_options(p)
    p.set_defaults(func=cmd_reproduce)


def _list(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def cmd_reproduce(args) -> int:
    from maxbench.benchmark.reproduce.flipped import execute_flipped, plan_flipped
    from maxbench.benchmark.reproduce.papers import load_paper
    from maxbench.benchmark.reproduce.protocol import (
        Options,
        check_controls,
        check_metrics,
        estimate_seconds,
        execute,
        plan_runs,
    )
    from maxbench.benchmark.reproduce.report import check_out, write_report
    from maxbench.rundir import parse_shard

    paper = load_paper(args.paper)
    if args.n_resamples < 1:
        raise MaxbenchError(f"--n-resamples must be >= 1, got {args.n_resamples}")
    shard = parse_shard(args.shard)
    metrics = check_metrics(paper)  # before any file is written; --estimate checks what a run would
    out = Path(args.out) if args.out else DEFAULT_OUT / paper.name
    check_out(paper, out)
    opts = Options(
        models=_list(args.models),
        corpora=_list(args.corpora),
        folds=args.folds,
        folds_run=args.folds_run,
        prompts=args.prompts,
        full=args.full,
        roles=_list(args.roles),
    )
    runs = plan_runs(paper, opts, out)
    flips = plan_flipped(paper, runs, out)  # the flipped-attribute check's runs (conditional suites)
    if not args.estimate:
        check_controls(paper, out)
        from maxbench.benchmark.reproduce.controls import check as check_seed_controls

        check_seed_controls(paper, out)  # the [[controls]] files: one line, exit 2, before anything is written
    every = runs + [f.flipped for f in flips]
    est, left = estimate_seconds(every), estimate_seconds(every, remaining=True)
    print(
        f"{paper.name}: {len(every)} runs, {sum(len(r.plan.suite.items) * len(r.plan.systems) for r in every)} "
        f"generations; estimate about {est / 60:.0f} min on one CPU thread, of which about {left / 60:.0f} min "
        "not yet done (less for cached fits)",
        file=sys.stderr,
    )
    if args.estimate:
        for r in every:
            print(f"  {r.run_dir}  ({len(r.plan.suite.items)} prompts x {len(r.plan.systems)} systems)")
        return 0
    if not args.report_only:
        execute(
            runs,
            metrics,
            device=args.device,
            threads=args.threads,
            shard=shard,
            progress=not args.no_progress,
            n_resamples=args.n_resamples,
        )
        execute_flipped(flips, device=args.device, threads=args.threads, shard=shard, progress=not args.no_progress)
        if shard is not None:
            print("shard done; when every shard is done, run the same command without --shard to score and report")
            return 0
    # The command that regenerates the report from nothing: --report-only only re-renders, so it is left out.
    argv = [a for a in sys.argv[1:] if a != "--report-only"]
    command = "maxbench " + shlex.join(argv if argv[:1] == ["reproduce"] else ["reproduce", args.paper])
    for path in write_report(paper, runs, out, command, args.n_resamples, flips):
        print(f"wrote {path}")
    return 0
