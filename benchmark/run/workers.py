"""``maxbench run --workers N``: the run's generation in N worker processes on one machine.

The workers are the shards of ``--shard i/N`` (what ``torchrun ... --shard auto`` launches, one per
GPU), started by the parent as ``python -m maxbench run ... --shard i/N --threads T``: a
multi-GPU job and a job on a few CPU cores go through one code path, and their merged
``generations.jsonl`` is the same file as one process's. Each worker takes whole batches
round-robin, holds a lock on its own shard file, and fits a head or builds a graph under that
cache's lock (``maxbench.locks``), so a head is fitted once whichever worker gets there first; odd
workers walk the lineup backwards so two fits overlap instead of one worker waiting, and a worker
done with its own batches takes over those another has not reached (``maxbench.benchmark.run.runner``;
the shard files and their merge are ``maxbench.rundir``'s).

Workers die with their parent (``PR_SET_PDEATHSIG`` on Linux), and a worker left over would hold its
shard's lock until it ends, so killing the parent or any worker at any moment (``kill -9``)
and running the same command again resumes from every row already written. When every worker is
done, the parent merges the shards, scores and renders as a single process does.

The default N is what fits the machine: the CPU cores this process may use divided by the threads
per worker (``--threads``, default 1 under workers), at most what memory holds (three times the
largest model's weights per worker, an estimate), at most the batches left to generate; on a GPU,
1 (more GPUs: ``torchrun``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.rundir import shard_lines

#: each worker's torch threads unless --threads says otherwise: two single-threaded processes beat one
#: process with two threads on a shared machine
WORKER_THREADS = 1


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity, e.g. a container's or taskset's limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def parse_workers(text: str | None) -> int | None:
    """``--workers``: None (the default: what fits the machine) or a whole number from 1 to the
    cores this process may use; anything else is one line."""
    if text is None:
        return None
    cores = cpu_cores()
    try:
        n = int(text)
    except ValueError:
        raise MaxbenchError(f"--workers must be a whole number of processes (1 to {cores}), got '{text}'") from None
    if not 1 <= n <= cores:
        raise MaxbenchError(
            f"--workers {n}: need 1 to {cores} (the CPU cores this process may use; more workers than cores only "
            f"slow each other down)"
        )
    return n


def default_workers(device: str | None, threads: int | None, pre) -> int:
    """What fits the machine (see the module's docstring); ``pre`` is the run's preflight."""
    from maxbench.systems.decoding import available_memory

    if device is not None and device.startswith("cuda"):
        return 1
    if device is None:
        import torch

        if torch.cuda.is_available():
            return 1
    n = max(1, cpu_cores() // (threads or WORKER_THREADS))
    weights = max(
        (sum(p.numel() * p.element_size() for p in lm.model.parameters()) for lm in pre.models.values()), default=0
    )
    free = available_memory("cpu")
    if weights and free:
        n = min(n, max(1, free // (3 * weights)))
    return n


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def worker_command(args, run_id: str, shard: tuple[int, int], threads: int, device: str | None) -> list[str]:
    """The command line of one worker: the parent's run, one shard of it, ``threads`` threads."""
    cmd = [sys.executable, "-m", "maxbench", "run", "--lineup", args.lineup, "--runs-dir", args.runs_dir]
    cmd += ["--run-id", run_id, "--shard", f"{shard[0]}/{shard[1]}", "--threads", str(threads), "--workers", "1"]
    cmd += ["--no-progress"]
    for path in getattr(args, "include", None) or ():
        cmd += ["--include", str(Path(path).expanduser().resolve())]
    if args.suite:
        cmd += ["--suite", args.suite]
    if getattr(args, "model_args", None):
        cmd += ["--model-args", args.model_args]
    if device:
        cmd += ["--device", device]
    if getattr(args, "generator", None):
        cmd += ["--generator", args.generator]
    return cmd


def thread_env(threads: int) -> dict[str, str]:
    """Each math library's thread count for a worker of ``threads`` threads. numba's pool (the
    graphmax paper solver's CPU kernels) included: with its default of one thread per core, each
    1-thread worker keeps a second thread spinning between the kernels, and workers on a few cores
    slow each other down."""
    return {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}


def run_workers(args, plan, n: int, threads: int, device: str | None, invocation: str, progress: bool) -> None:
    """Generate ``plan`` in ``n`` worker processes and wait for them; a worker that fails stops the
    others and ends in one line (every row written so far is kept for the rerun)."""
    from tqdm import tqdm

    from maxbench.benchmark.run.runner import INVOCATION_ENV

    env = os.environ | {INVOCATION_ENV: invocation} | thread_env(threads)
    procs = [
        subprocess.Popen(
            worker_command(args, plan.run_dir.name, (i, n), threads, device),
            env=env,
            stdout=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        for i in range(n)
    ]
    total = len(plan.canonical_order())
    bar = tqdm(total=total, desc=f"{n} workers", unit="text", disable=not progress, dynamic_ncols=True)
    failed = None
    try:
        while any(p.poll() is None for p in procs) and failed is None:
            time.sleep(1.0)
            failed = next((i for i, p in enumerate(procs) if p.returncode not in (None, 0)), None)
            if progress:
                bar.update(min(total, shard_lines(plan.run_dir)) - bar.n)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait()
        bar.close()
    failed = next((i for i, p in enumerate(procs) if p.returncode != 0), failed)
    if failed is not None:
        rc = procs[failed].returncode
        how = f"signal {-rc}" if rc < 0 else f"exit status {rc}"
        raise MaxbenchError(
            f"worker {failed} of {n} stopped ({how}); every row written so far is kept: "
            f"run the same command again to resume"
        )
