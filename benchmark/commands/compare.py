"""``maxbench compare``: paired tests between the systems of two runs (the work is
``maxbench.benchmark.metrics.compare``'s)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from maxbench.fileio import atomic_write, check_output_file


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="paired tests between the systems of two runs of one suite",
        description="Test each system of RUN_A against the same system (or the one named) of RUN_B: paired "
        "permutation test and paired bootstrap interval over prompts, as maxbench score's comparisons, on the "
        "(prompt id, sample, seed) keys both runs hold. The runs must share suite hash and seed. Prints a "
        "Markdown table (A minus B). The metrics are computed again on the texts: a plugin metric needs its "
        "code (--include, or its installed distribution), a plugin output layer or model none.",
    )
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument(
        "--systems",
        nargs="+",
        metavar="S",
        help="systems to compare: a name both runs hold, or A_SYSTEM=B_SYSTEM (default: every shared system)",
    )
    p.add_argument(
        "--metrics",
        metavar="LIST",
        help="comma-separated metric names (default: those both runs' scores.json name)",
    )
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="resamples of the tests (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--evaluator", default=None, metavar="MODEL", help="evaluator model of the ppl metric")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N for model-based metrics")
    p.add_argument("--out", metavar="FILE", help="also write the comparison as JSON here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    from maxbench.benchmark.metrics.base import parse_metric_list
    from maxbench.benchmark.metrics.compare import (
        check_compare_args,
        check_metric_code,
        compare_markdown,
        compare_runs,
        default_metrics,
    )
    from maxbench.benchmark.metrics.scoring import ScoringOptions

    check_compare_args(args.bootstrap, args.confidence, args.seed, ("--bootstrap", "--confidence", "--seed"))
    run_a, run_b = Path(args.run_a), Path(args.run_b)
    if args.out is not None:
        from maxbench.rundir import run_inputs

        check_output_file(args.out, "--out", run_inputs(run_a) + run_inputs(run_b))
    if args.metrics:  # a plugin metric left without its code: say where it came from, before "unknown metric"
        check_metric_code([t.strip() for t in args.metrics.split(",") if t.strip()], run_a, run_b)
    names = parse_metric_list(args.metrics) if args.metrics else None
    options = ScoringOptions(
        metrics=names or [],
        n_resamples=args.bootstrap,
        seed=args.seed,
        level=args.confidence,
        evaluator=args.evaluator,
        device=args.device,
        progress=not args.quiet,
    )
    if names is None:
        options.metrics = default_metrics(run_a, run_b)
    doc = compare_runs(run_a, run_b, args.systems, options)
    sys.stdout.write(compare_markdown(doc))
    if args.out is not None:
        atomic_write(args.out, json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
