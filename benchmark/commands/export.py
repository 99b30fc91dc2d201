"""``maxbench export``: a scored run as a tidy table (the work is ``maxbench.benchmark.present.export``'s)."""

from __future__ import annotations

import sys
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, check_output_file

EXPORT_FORMATS = ("parquet", "csv", "jsonl")


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a scored run as a tidy table (parquet, csv or jsonl)",
        description="Write a scored run's numbers as a tidy table, one row per (system, prompt id, sample, "
        "metric): system, prompt_id, sample, seed, metric, value, signature. Each score has one row over the "
        "whole run (prompt_id empty) and one per prompt where scores.json has per-prompt values; sample and "
        "seed are empty where a prompt has several samples (its value covers them all). See docs/api.md.",
    )
    p.add_argument("run_dir", metavar="RUN", help="a scored run directory (results/runs/<run-id>)")
    p.add_argument("--format", choices=EXPORT_FORMATS, default="jsonl", help="table format (default jsonl)")
    p.add_argument("--out", metavar="FILE", help="file to write (default: stdout for csv and jsonl)")
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from maxbench.benchmark.present.export import encode, run_table

    if args.out is None and args.format == "parquet":
        raise MaxbenchError("--format parquet needs --out FILE (parquet is binary)")
    if args.out is not None:
        from maxbench.rundir import run_inputs

        check_output_file(args.out, "--out", run_inputs(Path(args.run_dir)))
    rows = run_table(Path(args.run_dir))
    data = encode(rows, args.format)
    if args.out is None:
        sys.stdout.write(data.decode())
        return 0
    atomic_write(args.out, data)
    print(f"wrote {args.out} ({len(rows)} rows)", file=sys.stderr)
    return 0
