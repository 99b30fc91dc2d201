"""``maxbench run`` sequentially vs ``--workers N``, side by side in one run, on the real model.

A small lineup (softmax and graphmax exact on the embedded model, the first prompts of the
food-reviews suite, a cheap metric) is run from scratch in fresh run directories, in the order
given by --schedules, each a full ``maxbench run`` command as a user types it:

- ``seq1``: one process, one torch thread (``--workers 1 --threads 1``);
- ``seq``: one process with torch's own thread count (``--workers 1``, what the main job did before
  ``--workers``);
- ``w2``: two workers, one thread each (``--workers 2 --threads 1``, the default on 2 cores).

Prints the wall time of each, its ratio to the first schedule, whether each wrote the same
``generations.jsonl`` bytes as the first, and the load average before and after (on a shared
machine another process may occupy a core: read the ratios with it). The graph and heads are
cached (MAXBENCH_HOME) before the first timing, so the schedules time generation and scoring.

    python benchmarks/parallel_run.py --prompts 16 --schedules seq1,w2,seq
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import names, positive_int, run

SCHEDULES = {
    "seq1": ["--workers", "1", "--threads", "1"],
    "seq": ["--workers", "1"],
    "w2": ["--workers", "2", "--threads", "1"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=positive_int, default=16)
    ap.add_argument("--batch-size", type=positive_int, default=8)
    ap.add_argument("--new-tokens", type=positive_int, default=64)
    ap.add_argument("--systems", default="softmax;graphmax(lam=1.0,solver=exact)", help="layers, separated by ;")
    ap.add_argument("--schedules", type=names, default="seq1,w2,seq", help=f"from: {', '.join(SCHEDULES)}")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one, removed afterwards)")
    args = ap.parse_args()
    unknown = [name for name in args.schedules if name not in SCHEDULES]
    if unknown:
        ap.error(f"--schedules: unknown schedule {unknown[0]!r}; choose from {', '.join(SCHEDULES)}")

    from maxbench.systems.system_strings import parse_system

    systems = [f"smollm2-135m/{layer}/top_p=0.9,max_new_tokens={args.new_tokens}" for layer in args.systems.split(";")]
    for system in systems:
        parse_system(system)  # a bad layer or setting stops here, before any run
    if args.workdir:
        work = Path(args.workdir)
        work.mkdir(parents=True, exist_ok=True)
        measure(args, systems, work)
        return
    work = Path(tempfile.mkdtemp(prefix="maxbench-parallel-"))
    try:
        measure(args, systems, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(args, systems: list[str], work: Path) -> None:
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.rundir import GENERATIONS
    from maxbench.errors import MaxbenchError

    items = load_suite("food-reviews").items[: args.prompts]
    (work / "p.jsonl").write_text(
        "".join(json.dumps({"id": it.id, "prompt": it.prompt, "reference": it.reference}) + "\n" for it in items)
    )
    (work / "s.toml").write_text(f'name = "food-{args.prompts}"\nfile = "p.jsonl"\n')
    (work / "reg.toml").write_text(
        f'name = "par"\nsuite = "{work / "s.toml"}"\ncorpus = "food-reviews"\nsamples = 1\nseed = 1234\n'
        f'batch_size = {args.batch_size}\nbaseline = "{systems[0]}"\nmetrics = ["distinct"]\n'
        f"systems = {json.dumps(systems)}\n"
    )

    def run_schedule(name: str, extra: list[str]) -> tuple[float, bytes]:
        cmd = [sys.executable, "-m", "maxbench", "run", "--lineup", str(work / "reg.toml")]
        cmd += ["--runs-dir", str(work / "runs"), "--run-id", name, "--out", str(work / f"lb-{name}")]
        cmd += ["--n-resamples", "100", "--no-progress", *extra]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode:
            last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
            raise MaxbenchError(f"the {name} run failed: {last}")
        return wall, (work / "runs" / name / GENERATIONS).read_bytes()

    run_schedule("warm-up", SCHEDULES["seq1"])  # graph and heads into the cache, files into the page cache
    load_before = os.getloadavg()
    results = {}
    for name in args.schedules:
        results[name] = run_schedule(name, SCHEDULES[name])
    load_after = os.getloadavg()
    first = next(iter(results))
    print(
        f"{len(systems)} systems x {args.prompts} prompts, batch {args.batch_size}, {args.new_tokens} new tokens, "
        f"{os.cpu_count()} CPUs; load average before {load_before[0]:.2f} {load_before[1]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f}"
    )
    print(f"{'schedule':<8} {'command options':<32} {'wall s':>7} {'speed-up':>8}  same generations as {first}")
    for name, (wall, gen) in results.items():
        same = "yes" if gen == results[first][1] else "NO (other floating-point bits)"
        ratio = results[first][0] / wall
        print(f"{name:<8} {' '.join(SCHEDULES[name]):<32} {wall:7.1f} {ratio:7.2f}x  {same}")


if __name__ == "__main__":
    run(main)
