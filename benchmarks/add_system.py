"""Adding one system to a lineup whose run exists, warm, against a full warm rerun of that lineup,
side by side in one run, each a ``maxbench run`` command as a user types it.

Set-up (timed, but not compared): the lineup (default: the committed default lineup, its suite,
the real smollm2-135m model) runs once from scratch in a scratch folder (or resumes there, with a
``--workdir`` an earlier run left): every system generated and scored, the leaderboard written. The graph and heads come from ``MAXBENCH_HOME`` when they are
cached there (the set-up's phase table says what it fitted). Then, alternating, ``--repeats`` times:

- ``rerun``: ``maxbench run --lineup L`` again on the finished run: nothing to generate, every score
  from the score cache, the leaderboard written again (what ``bash scripts/main.sh`` does warm);
- ``add``: on a fresh copy of the finished run (the copy is not timed), ``maxbench run --lineup L+S``,
  L with the system ``--add`` appended: only S is generated and scored (the other systems' scores,
  and the baseline's statistics for S's paired test, come from the score cache), then the
  leaderboard with S is written.

Prints the median wall time of each, their ratio and difference, ``add``'s phase table (load,
generate, ref-ppl, score, render), checks that ``add`` left the old rows' bytes alone, decoded only
S and served the old systems' score-cache entries, and the load average (``/proc/loadavg``) before
and after each timed command. Torch runs ``--threads`` threads (default 1) in each process, and the
math libraries as many (OMP, MKL, numba); ``--workers`` as ``maxbench run`` takes it (default: what
fits the machine).

    python benchmarks/add_system.py                   # the default lineup on food-reviews (96 prompts)
    python benchmarks/add_system.py --prompts 8       # its first 8 prompts only: a quick run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import names, nonnegative_int, positive_int, run

DEFAULT_ADD = "smollm2-135m/softmax/top_k=50"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lineup", default="default", help="built-in lineup name or lineup .toml (default: default)")
    ap.add_argument("--add", default=DEFAULT_ADD, help=f"the system added to it (default: {DEFAULT_ADD})")
    ap.add_argument(
        "--prompts", type=positive_int, default=None, help="only the suite's first N prompts (default: all)"
    )
    ap.add_argument("--repeats", type=positive_int, default=1, help="timed runs of each way (default 1)")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--workers", type=positive_int, default=None, help="maxbench run --workers (default: its own)")
    ap.add_argument("--n-resamples", type=nonnegative_int, default=1000, help="bootstrap resamples (default 1000)")
    ap.add_argument("--model", default=None, help="replace every system's model and the evaluator (e.g. tiny-random)")
    ap.add_argument("--systems", type=positive_int, default=None, help="keep only the lineup's first N systems")
    ap.add_argument("--new-tokens", type=positive_int, default=None, help="max_new_tokens of every system")
    ap.add_argument("--metrics", type=names, default=None, help="comma-separated metrics (default: the lineup's)")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one, removed afterwards)")
    args = ap.parse_args()

    lineups = lineup_texts(args)  # every name checked before anything runs
    if args.workdir:
        work = Path(args.workdir)
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from maxbench.errors import MaxbenchError

            raise MaxbenchError(f"cannot use {work} as --workdir: {exc.strerror or exc}") from None
        measure(args, lineups, work)
        return
    work = Path(tempfile.mkdtemp(prefix="maxbench-add-system-"))
    try:
        measure(args, lineups, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def lineup_texts(args) -> dict:
    """The two lineups as TOML (``base``: the lineup as given, cut and rewritten by the options;
    ``added``: the same plus ``--add``), with the suite and what the report names."""
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.run.lineup import load_lineup
    from maxbench.errors import MaxbenchError
    from maxbench.systems.models import check_model
    from maxbench.systems.system_strings import parse_system

    reg = load_lineup(args.lineup)
    suite = load_suite(reg.suite)
    systems = reg.systems[: args.systems] if args.systems else list(reg.systems)
    added = parse_system(args.add)

    def adapt(spec):
        if args.model:
            spec = dataclasses.replace(spec, model=check_model(args.model))
        if args.new_tokens:
            spec = dataclasses.replace(
                spec, decoding=dataclasses.replace(spec.decoding, max_new_tokens=args.new_tokens)
            )
        return spec

    systems, added = [adapt(s) for s in systems], adapt(added)
    added.build_layer()  # an unknown parameter stops here
    if added.name in [s.name for s in systems]:
        raise MaxbenchError(f"--add {added.name} is already a system of the lineup; add another one")
    baseline = reg.baseline
    if baseline is not None:
        baseline = adapt(parse_system(baseline)).name
    if baseline not in [s.name for s in systems]:
        baseline = systems[0].name
    metrics = args.metrics or reg.metrics
    if args.metrics:
        from maxbench.benchmark.metrics.base import parse_metric_list

        parse_metric_list(",".join(args.metrics))
    evaluator = args.model or reg.evaluator

    def toml(names_: list[str], suite_ref: str) -> str:
        lines = [f"name = {json.dumps(reg.name)}", f"suite = {json.dumps(suite_ref)}"]
        if reg.corpus:
            lines.append(f"corpus = {json.dumps(reg.corpus)}")
        lines += [f"samples = {reg.samples}", f"seed = {reg.seed}", f"batch_size = {reg.batch_size}"]
        lines.append(f"baseline = {json.dumps(baseline)}")
        if evaluator:
            lines.append(f"evaluator = {json.dumps(evaluator)}")
        lines.append(f"metrics = {json.dumps(list(metrics))}")
        if reg.include:
            lines.append(f"include = {json.dumps([str(Path(p).resolve()) for p in reg.include])}")
        lines.append(f"systems = {json.dumps(names_)}")
        return "\n".join(lines) + "\n"

    suite_ref = reg.suite if Path(reg.suite).suffix != ".toml" else str(Path(reg.suite).expanduser().resolve())
    return {
        "name": reg.name,
        "suite": suite,
        "suite_ref": suite_ref,
        "systems": [s.name for s in systems],
        "added": added.name,
        "toml": toml,
    }


def loadavg() -> str:
    """The first three fields of /proc/loadavg (1, 5 and 15 minutes)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(args, lineups: dict, work: Path) -> None:
    from maxbench.benchmark.run.workers import thread_env
    from maxbench.benchmark.rundir import GENERATIONS
    from maxbench.errors import MaxbenchError

    suite = lineups["suite"]
    items = suite.items[: args.prompts] if args.prompts else suite.items
    if args.prompts and args.prompts < len(suite.items):
        (work / "p.jsonl").write_text(
            "".join(json.dumps({"id": it.id, "prompt": it.prompt, "reference": it.reference}) + "\n" for it in items)
        )
        (work / "s.toml").write_text(f'name = "{suite.name}-first{len(items)}"\nfile = "p.jsonl"\n')
        suite_ref = str(work / "s.toml")
    else:
        suite_ref = lineups["suite_ref"]
    (work / "base.toml").write_text(lineups["toml"](lineups["systems"], suite_ref))
    (work / "added.toml").write_text(lineups["toml"]([*lineups["systems"], lineups["added"]], suite_ref))
    env = os.environ | thread_env(args.threads)

    def maxbench_run(lineup: str, run_id: str, out: str) -> tuple[float, str, str, str]:
        cmd = [sys.executable, "-m", "maxbench", "run", "--lineup", str(work / lineup)]
        cmd += ["--runs-dir", str(work / "runs"), "--run-id", run_id, "--out", str(work / out)]
        cmd += ["--threads", str(args.threads), "--n-resamples", str(args.n_resamples), "--no-progress"]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        before = loadavg()
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if p.returncode:
            last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
            raise MaxbenchError(f"`maxbench run --lineup {lineup}` failed: {last}")
        return wall, before, loadavg(), p.stdout

    print(
        f"lineup {lineups['name']} ({len(lineups['systems'])} systems) + {lineups['added']} on {suite.name} "
        f"({len(items)} prompts); torch {args.threads} thread(s) per process, --workers "
        f"{args.workers or 'default'}, {args.n_resamples} resamples, {os.cpu_count()} CPUs",
        flush=True,
    )
    setup, l0, l1, out = maxbench_run("base.toml", "run", "lb")
    base_dir = work / "runs" / "run"
    print(
        f"set-up, the lineup from scratch (or resumed in --workdir): {setup:.1f} s (load average {l0} -> {l1}); {fits(base_dir)}",
        flush=True,
    )
    base_rows = (base_dir / GENERATIONS).read_bytes()
    base_cache = _entries(base_dir / "score-cache")

    times: dict[str, list[float]] = {"rerun": [], "add": []}
    loads: dict[str, list[str]] = {"rerun": [], "add": []}
    checks, phases = [], ""
    for r in range(args.repeats):
        for way in ("rerun", "add") if r % 2 == 0 else ("add", "rerun"):
            if way == "rerun":
                wall, l0, l1, _ = maxbench_run("base.toml", "run", "lb")
            else:
                run_id, out_dir = f"add-{r}", f"lb-add-{r}"
                shutil.rmtree(work / "runs" / run_id, ignore_errors=True)
                shutil.rmtree(work / out_dir, ignore_errors=True)
                shutil.copytree(base_dir, work / "runs" / run_id)  # copy2: the cache entries keep their times
                shutil.copytree(work / "lb", work / out_dir)
                wall, l0, l1, out = maxbench_run("added.toml", run_id, out_dir)
                checks.append(check_add(work / "runs" / run_id, base_rows, base_cache, lineups["added"]))
                phases = phase_table(out)
            times[way].append(wall)
            loads[way].append(f"{l0} -> {l1}")

    rerun, add = statistics.median(times["rerun"]), statistics.median(times["add"])
    print(f"{'way':<34} {'wall s':>8}  each run's wall s, load average (1, 5, 15 min) before -> after")
    for label, way, median in (
        ("rerun (everything cached)", "rerun", rerun),
        ("add one system (only its work)", "add", add),
    ):
        each = "; ".join(f"{t:.1f} s, {load}" for t, load in zip(times[way], loads[way]))
        print(f"{label:<34} {median:8.1f}  {each}")
    print(
        f"add / rerun: {add / rerun:.2f}x; the added system's own work: {add - rerun:.1f} s (median of {args.repeats})"
    )
    print(f"add, phase table of its last run:\n{phases}")
    for check in checks:
        print(f"check: {check}")


def _entries(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def check_add(run_dir: Path, base_rows: bytes, base_cache: dict, added: str) -> str:
    """What ``add`` did to the run: the old rows, the systems decoded, the score-cache entries reused."""
    from maxbench.benchmark.rundir import GENERATIONS, TIMINGS, read_rows

    rows = (run_dir / GENERATIONS).read_bytes()
    old = set(base_rows.splitlines())
    new = [line for line in rows.splitlines() if line not in old]
    untouched = old <= set(rows.splitlines()) and all(json.loads(line)["system"] == added for line in new)
    timings = read_rows(run_dir / TIMINGS)
    last = timings[-1]["invocation"] if timings else None
    decoded = sorted(
        {r["phase"].split(" ", 1)[1] for r in timings if r["invocation"] == last and r["phase"].startswith("generate ")}
    )
    cache = _entries(run_dir / "score-cache")
    served = sum(1 for name, body in base_cache.items() if name.endswith(".json") and cache.get(name) == body)
    old_entries = sum(1 for name in base_cache if name.endswith(".json"))
    written = sum(1 for name in cache if name.endswith(".json") and name not in base_cache)
    text = (
        f"old rows' bytes untouched, {len(new)} new rows all of the added system: {'yes' if untouched else 'NO'}; "
        f"decoded: {', '.join(decoded) or 'nothing'}; score-cache entries of the lineup served: {served} of "
        f"{old_entries}, new: {written}"
    )
    if served < old_entries:
        text += (
            " -- NOT the warm path: the score cache missed (did the metric modules' source, which its keys "
            "hold, change during the measurement?)"
        )
    return text


def fits(run_dir: Path) -> str:
    """The set-up's fit phases (a cached graph or head loads in seconds, a fit takes minutes)."""
    from maxbench.benchmark.rundir import TIMINGS, read_rows

    rows = read_rows(run_dir / TIMINGS)
    last = rows[-1]["invocation"] if rows else None  # the set-up's own invocation
    found = [f"{r['phase']} {r['seconds']:.1f} s" for r in rows if r["invocation"] == last and r["phase"][:4] == "fit "]
    return "its fits (cached: seconds): " + ("; ".join(found) if found else "none")


def phase_table(stdout: str) -> str:
    """The phase table ``maxbench run`` printed last."""
    lines = stdout.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("time by phase:")), default=None)
    return "\n".join(lines[start + 1 :]) if start is not None else "  (none printed)"


if __name__ == "__main__":
    run(main)
