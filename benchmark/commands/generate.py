"""``maxbench generate``: one run of the systems given on the command line."""

from __future__ import annotations

from pathlib import Path

from maxbench.benchmark.commands.options import (
    DEFAULT_RUNS,
    add_generator_option,
    add_model_args_option,
    add_model_options,
    run_id,
)
from maxbench.errors import MaxbenchError


def register(sub) -> None:
    from maxbench.rundir import add_drop_option

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
    add_generator_option(p)
    add_model_args_option(p)
    p.set_defaults(func=cmd_generate)


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
    from maxbench import arguments
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.run.runner import generate_run
    from maxbench.rundir import RunPlan, drop_damaged, parse_shard
    from maxbench.systems.models import parse_model_args

    arguments.whole(args.samples, "--samples", 1)
    arguments.whole(args.batch_size, "--batch-size", 1)
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
        generator=args.generator,
    )
    shard = parse_shard(args.shard)
    drop_damaged(plan.run_dir, args.drop_damaged_lines)
    out = generate_run(plan, device=args.device, threads=args.threads, shard=shard, progress=not args.no_progress)
    print(f"wrote {out}")
    return 0
