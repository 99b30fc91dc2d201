"""``maxbench run``: a lineup of systems on a suite: fit, generate, score, leaderboard."""

from __future__ import annotations

import sys
from pathlib import Path

from maxbench.benchmark.commands.options import (
    DEFAULT_RUNS,
    add_generator_option,
    add_model_args_option,
    add_model_options,
    lineup_run_id,
)
from maxbench.errors import MaxbenchError


def register(sub) -> None:
    from maxbench.benchmark.commands.score import add_evaluator_option
    from maxbench.rundir import add_drop_option

    p = sub.add_parser(
        "run",
        help="run a lineup of systems on a suite: fit, generate, score, leaderboard",
        description="Fit what needs fitting (graph, heads; cached), generate every system of the "
        "lineup on the suite (resuming), score every run, and write the leaderboard "
        "(md, csv, html, plots). The README's main command runs the default lineup.",
    )
    p.add_argument(
        "--lineup",
        "--registry",
        dest="lineup",
        default="default",
        help="built-in lineup name or a lineup .toml (--registry: its old name)",
    )
    p.add_argument("--suite", default=None, help="override the lineup's suite")
    p.add_argument("--run-id", default=None, help="run directory name (default: <lineup>-<suite>)")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS))
    p.add_argument(
        "--out",
        default=None,
        help="leaderboard folder, with the explorer in its explorer/ (default: results/ for the default lineup, "
        "results/<lineup>/ otherwise)",
    )
    p.add_argument(
        "--shard",
        default=None,
        help="i/n: generate only shard i of n and stop; 'auto' reads RANK/WORLD_SIZE (torchrun, "
        "accelerate launch). Afterwards run once more without --shard to merge, score and render.",
    )
    p.add_argument(
        "--workers",
        default=None,
        help="worker processes that generate side by side, each a shard (i/N) of the run with --threads "
        "threads (default 1 each); default: what fits the machine (its CPU cores, and memory; 1 on a GPU)",
    )
    p.add_argument("--metrics", default=None, help="comma-separated metrics (default: the lineup's)")
    p.add_argument("--n-resamples", type=int, default=1000, help="bootstrap / permutation resamples")
    add_evaluator_option(p, "the lineup's evaluator, else smollm2-135m")
    p.add_argument("--no-progress", action="store_true")
    add_drop_option(p)
    add_model_options(p)
    add_generator_option(p)
    add_model_args_option(p)
    p.set_defaults(func=cmd_run)


def _shard_arg(text):
    import os

    from maxbench.rundir import parse_shard

    if text == "auto":
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise MaxbenchError("--shard auto needs RANK and WORLD_SIZE (set by torchrun or accelerate launch)")
        text = f"{os.environ['RANK']}/{os.environ['WORLD_SIZE']}"
    return parse_shard(text)


def cmd_run(args) -> int:
    import os
    import time

    from maxbench import arguments
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.metrics.base import parse_metric_list
    from maxbench.benchmark.metrics.scoring import ScoringOptions, score_run
    from maxbench.benchmark.present.explorer import write_explorer
    from maxbench.benchmark.present.leaderboard import check_render_outputs, render
    from maxbench.benchmark.run.lineup import load_lineup
    from maxbench.benchmark.run.runner import INVOCATION_ENV, PhaseTimer, generate_run, new_invocation, preflight
    from maxbench.benchmark.run.workers import WORKER_THREADS, default_workers, parse_workers, run_workers
    from maxbench.fileio import check_not_input
    from maxbench.rundir import RunPlan, drop_damaged, run_inputs
    from maxbench.systems.models import parse_model_args

    arguments.resamples(args.n_resamples, "--n-resamples", minimum=0)
    arguments.threads(args.threads, "--threads")
    workers = parse_workers(args.workers)
    if args.shard is not None and workers not in (None, 1):
        raise MaxbenchError("--workers and --shard exclude each other: a shard is one worker (give one of them)")
    started = time.perf_counter()
    lineup = load_lineup(args.lineup)
    suite = load_suite(args.suite or lineup.suite)
    metrics = parse_metric_list(args.metrics or ",".join(lineup.metrics) or None)
    shard = _shard_arg(args.shard)
    device = args.device
    if shard is not None and device is None and os.environ.get("LOCAL_RANK") is not None:
        import torch

        if torch.cuda.is_available():
            device = f"cuda:{os.environ['LOCAL_RANK']}"
    run_dir = Path(args.runs_dir) / lineup_run_id(args.run_id, lineup.name, suite.name)
    out_dir = (
        Path(args.out) if args.out else (Path("results") if lineup.name == "default" else Path("results") / lineup.name)
    )
    plan = RunPlan(
        run_dir=run_dir,
        suite=suite,
        systems=lineup.systems,
        samples=lineup.samples,
        seed=lineup.seed,
        batch_size=lineup.batch_size,
        corpus=lineup.corpus,
        lineup=lineup.name,
        model_args=parse_model_args(args.model_args),
        generator=args.generator,
        per_model_args=lineup.model_args,
        sweeps={name: sweep.record() for name, sweep in lineup.sweeps.items()},
    )
    outputs = () if shard is not None else ((out_dir, "--out"),)
    if shard is None:  # what the run ends by writing is none of what it reads
        check_render_outputs([run_dir], out_dir, suite.inputs())
        check_not_input(out_dir / "explorer", "--out", [*suite.inputs(), *run_inputs(run_dir)], whole_folder=True)
    invocation = os.environ.get(INVOCATION_ENV) or new_invocation()
    if os.environ.get(INVOCATION_ENV) is None:  # the workers of a run do not drop lines again
        drop_damaged(run_dir, args.drop_damaged_lines)
    timer = PhaseTimer(run_dir, shard, invocation)  # this process's phases and its workers' in one table
    if shard is None and workers != 1:
        t0 = time.perf_counter()
        # every refusal, once (an adapter is trained here, once, and the workers load it)
        pre = preflight(plan, device=device, threads=args.threads, outputs=outputs, progress=not args.no_progress)
        if pre.load_seconds:
            timer.add("preflight (before the workers)", time.perf_counter() - t0)
        n = workers or default_workers(device, args.threads, pre)
        n = min(n, sum(len(batches) for batches in pre.todo))
        del pre  # the workers load their own models
        if n > 1:
            threads = args.threads or WORKER_THREADS
            run_workers(args, plan, n, threads, device, invocation, progress=not args.no_progress)
            print(f"generated in {n} worker processes x {threads} torch thread(s)")
    out = generate_run(
        plan,
        device=device,
        threads=args.threads,
        shard=shard,
        progress=not args.no_progress,
        timer=timer,
        outputs=outputs,
    )
    if shard is not None:
        print(f"wrote {out}; when every shard is done, run the same command without --shard to merge and score")
        print(timer.summary())
        return 0
    with timer.phase("score"):
        score_run(
            run_dir,
            ScoringOptions(
                metrics=metrics,
                n_resamples=args.n_resamples,
                evaluator=args.evaluator or lineup.evaluator,
                device=device,
                threads=args.threads,
                progress=not args.no_progress,
            ),
            baseline=lineup.baseline,
        )
    with timer.phase("render"):
        written = render([run_dir], out_dir)
        written.append(write_explorer([run_dir], out_dir / "explorer"))
        if lineup.sweeps:  # the frontier report beside the leaderboard (docs/frontiers.md)
            from maxbench.benchmark.present.frontiers import render as render_frontiers

            try:
                written += render_frontiers(run_dir, out_dir)
            except MaxbenchError as exc:  # the scores and leaderboard stand; say why there is no report
                print(f"no frontier report: {exc}", file=sys.stderr)
    for path in written:
        print(f"wrote {path}")
    print(timer.summary(wall=time.perf_counter() - started))
    return 0
