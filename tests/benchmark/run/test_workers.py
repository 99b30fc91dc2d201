"""maxbench run --workers and torchrun --shard auto: parallel schedules write the same files as one
process, kill -9 of any worker or of the parent resumes to the same bytes, bad --workers values."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maxbench.benchmark.run.workers import cpu_cores
from tests.support.runs import write_tiny_lineup  # the same 3-system tiny-random lineup, 12 prompts x 2 samples

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes are tested on Linux")


def _cmd(tmp: Path, run_id: str, *extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "maxbench",
        "run",
        "--lineup",
        str(tmp / "reg.toml"),
        "--runs-dir",
        str(tmp / "runs"),
        "--run-id",
        run_id,
        "--out",
        str(tmp / f"lb-{run_id}"),
        "--n-resamples",
        "50",
        "--threads",
        "1",
        "--no-progress",
        *extra,
    ]


def _files(tmp: Path, run_id: str) -> dict[str, bytes]:
    run = tmp / "runs" / run_id
    scores = json.loads((run / "scores.json").read_text())
    scores.pop("created")
    scores.pop("run_id")
    return {
        "generations.jsonl": (run / "generations.jsonl").read_bytes(),
        "scores.json": json.dumps(scores).encode(),
        "leaderboard.csv": (tmp / f"lb-{run_id}" / "leaderboard.csv").read_bytes(),
    }


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """One process, one thread: the reference every parallel schedule must equal."""
    tmp = tmp_path_factory.mktemp("par")
    write_tiny_lineup(tmp)
    subprocess.run(_cmd(tmp, "one", "--workers", "1"), check=True, capture_output=True)
    assert not list((tmp / "runs" / "one").glob("generations.shard-*"))
    return tmp, _files(tmp, "one")


def _workers(pid: int) -> list[int]:
    """The worker processes of the run ``pid`` (its children that generate a shard; not, say, a git
    it asks for the code's version)."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    workers = []
    for c in children:
        try:
            if b"--shard" in Path(f"/proc/{c}/cmdline").read_bytes():
                workers.append(c)
        except OSError:
            pass
    return workers


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _rows_written(run: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in run.glob("generations*.jsonl"))


def _start_frozen(tmp: Path, run_id: str):
    """Start a two-worker run and freeze both workers (SIGSTOP) the moment they exist, before they
    have imported torch: from there the test decides who runs, so no kill depends on timing."""
    proc = subprocess.Popen(
        _cmd(tmp, run_id, "--workers", "2"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 120
    workers: list[int] = []
    while time.time() < deadline and proc.poll() is None and len(workers) < 2:
        workers = _workers(proc.pid)
        time.sleep(0.001)
    for w in workers:
        os.kill(w, signal.SIGSTOP)
    return proc, tmp / "runs" / run_id, workers


def _wait_gone(pids: list[int], seconds: float = 240) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.mark.skipif(cpu_cores() < 2, reason="two workers need two cores")
def test_two_workers_write_the_same_files_as_one_process(sequential):
    """Worker 1 walks the lineup backwards, each worker decodes its half of the batches and then takes
    over batches the other has not reached: the merged generations, the scores and the leaderboard
    are the sequential run's bytes."""
    tmp, one = sequential
    p = subprocess.run(_cmd(tmp, "two", "--workers", "2"), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "generated in 2 worker processes x 1 torch thread(s)" in p.stdout
    run = tmp / "runs" / "two"
    assert sorted(x.name for x in run.glob("generations.shard-*.jsonl")) == [
        "generations.shard-0-of-2.jsonl",
        "generations.shard-1-of-2.jsonl",
    ]
    assert _files(tmp, "two") == one
    # the phase table holds both workers' phases, with CPU time and the output layer's share
    table = p.stdout[p.stdout.index("time by phase:") :]
    assert "0/2" in table and "1/2" in table and "layer share" in table and "elapsed" in table
    timings = [json.loads(line) for line in (run / "timings.jsonl").read_text().splitlines()]
    gen = [t for t in timings if t["phase"].startswith("generate ")]
    # each worker decodes its half of every system, and a worker done first takes batches over
    # (work stealing), which adds rows for the systems it took batches of
    assert {t["shard"] for t in gen} == {"0/2", "1/2"} and len({t["phase"] for t in gen}) == 3
    assert all(0 <= t["layer_seconds"] <= t["decode_seconds"] for t in gen)
    assert len({t["invocation"] for t in timings}) == 1


@pytest.mark.skipif(cpu_cores() < 2, reason="two workers need two cores")
def test_kill_9_of_a_worker_then_of_the_parent_then_rerun_is_byte_identical(sequential):
    """Worker 0 writes its half while worker 1 stays frozen, then worker 1 is killed: the run stops
    (one line, exit 2) with half the rows kept. In the rerun worker 0 has nothing left, worker 1 is
    frozen again and the parent is killed: its workers die with it. The next rerun ends with the
    sequential bytes."""
    tmp, one = sequential
    total = 3 * 12 * 2
    proc, run, workers = _start_frozen(tmp, "killed")
    assert len(workers) == 2, "both workers must be seen"
    os.kill(workers[0], signal.SIGCONT)
    assert _wait_gone(workers[:1]), "worker 0 did not finish its half"
    half = _rows_written(run)
    assert 0 < half < total, half
    os.kill(workers[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.count("maxbench: error: worker 1 of 2 stopped (signal 9)") == 1, err
    assert _rows_written(run) == half and not (run / "scores.json").exists()

    proc, run, workers = _start_frozen(tmp, "killed")
    assert len(workers) == 2, "both workers must be seen"
    os.kill(workers[0], signal.SIGCONT)
    assert _wait_gone(workers[:1]), "worker 0 of the rerun did not end (its half is already written)"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert _wait_gone(workers, 30), "a worker outlived its parent"
    assert _rows_written(run) == half and not (run / "scores.json").exists()

    subprocess.run(_cmd(tmp, "killed", "--workers", "2"), check=True, capture_output=True)
    assert _files(tmp, "killed") == one


def test_torchrun_shard_auto_then_merge_equals_one_process(sequential):
    """The scale-out path for real: torchrun starts two ranks on the CPU (--shard auto reads RANK and
    WORLD_SIZE), a plain run merges and scores: the same bytes as one process."""
    tmp, one = sequential
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    assert torchrun, "torch installs torchrun"
    base = _cmd(tmp, "tr")[3:]  # run --lineup ...
    p = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "maxbench", *base, "--shard", "auto"],
        capture_output=True,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    run = tmp / "runs" / "tr"
    assert len(list(run.glob("generations.shard-*-of-2.jsonl"))) == 2 and not (run / "generations.jsonl").exists()
    subprocess.run(_cmd(tmp, "tr"), check=True, capture_output=True)
    assert _files(tmp, "tr") == one


@pytest.mark.parametrize("value", ["0", "-1", "100000", "two", "1.5"])
def test_bad_workers_is_one_line_and_exit_2(tmp_path, cli, value):
    write_tiny_lineup(tmp_path)
    rc, out, err = cli(*_cmd(tmp_path, "bad", "--workers", value)[3:])
    assert rc == 2 and err.count("\n") == 1 and "--workers" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_workers_with_shard_is_refused(tmp_path, cli):
    write_tiny_lineup(tmp_path)
    rc, _, err = cli(*_cmd(tmp_path, "bad", "--workers", "2", "--shard", "0/2")[3:])
    assert rc == 2 and "--workers and --shard" in err and err.count("\n") == 1


def test_workers_get_every_library_s_thread_count():
    """numba's pool too: with its default (a thread per core) a 1-thread worker kept a second
    thread spinning between the paper solver's kernels, and two workers ran 2-8x slower."""
    from maxbench.benchmark.run.workers import thread_env

    assert thread_env(1) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    assert thread_env(3)["NUMBA_NUM_THREADS"] == "3"
