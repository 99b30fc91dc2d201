"""Run directories: resumable, canonical, byte-identical after interruption; shards merge; reference
states shared."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from maxbench.benchmark.data.suites import load_suite
from maxbench.benchmark.run.runner import derive_seed, generate_run
from maxbench.locks import exclusive, held
from maxbench.rundir import (
    CLAIMS,
    GENERATIONS,
    REFERENCE_STATES,
    RowsSeen,
    RunPlan,
    merge_shards,
    read_rows,
    shard_file,
)
from maxbench.systems.layers.base import OutputLayer
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.system_strings import parse_system


@pytest.fixture
def suite_path(tmp_path):
    rows = [
        {"id": f"p{i:02d}", "prompt": f"Review number {i}: the soup was", "reference": f"reference {i}"}
        for i in range(10)
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "ten"\nfile = "p.jsonl"\n')
    return tmp_path / "s.toml"


def _plan(
    run_dir,
    suite_path,
    systems=("tiny-random/softmax/top_p=0.9,max_new_tokens=12", "tiny-random/softmax/greedy,max_new_tokens=12"),
    **kw,
):
    return RunPlan(
        run_dir=run_dir,
        suite=load_suite(str(suite_path)),
        systems=[parse_system(s) for s in systems],
        **{"samples": 2, "seed": 7, "batch_size": 3} | kw,
    )


def test_rows_are_keyed_complete_and_canonical(tmp_path, suite_path):
    out = generate_run(_plan(tmp_path / "r", suite_path), device="cpu", progress=False)
    rows = read_rows(out)
    assert len(rows) == 2 * 10 * 2
    keys = [(r["system"], r["prompt_id"], r["sample"]) for r in rows]
    assert len(set(keys)) == len(keys)
    assert keys == sorted(keys, key=lambda k: (k[0] != rows[0]["system"], k[1], k[2]))
    r0 = rows[0]
    assert r0["seed"] == derive_seed(7, r0["prompt_id"], r0["sample"])
    assert set(r0["stats"]) >= {"entropy", "support", "top1"}
    assert len(r0["stats"]["entropy"]) >= r0["n_tokens"]
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["suite"]["sha256"] == load_suite(str(suite_path)).sha256
    assert manifest["models"]["tiny-random"]["hash"] and manifest["versions"]["torch"]


def test_rerun_after_partial_write_is_byte_identical(tmp_path, suite_path):
    full = generate_run(_plan(tmp_path / "a", suite_path), device="cpu", progress=False).read_bytes()
    plan_b = _plan(tmp_path / "b", suite_path)
    out = generate_run(plan_b, device="cpu", progress=False)
    lines = out.read_bytes().splitlines(keepends=True)
    # A crash mid-write: some whole rows of a batch and half of the next line survive.
    out.write_bytes(b"".join(lines[:7]) + lines[7][:25])
    generate_run(plan_b, device="cpu", progress=False)
    assert out.read_bytes() == full
    generate_run(plan_b, device="cpu", progress=False)  # nothing left to do: unchanged
    assert out.read_bytes() == full


def test_shards_merge_to_the_single_run(tmp_path, suite_path):
    single = generate_run(_plan(tmp_path / "one", suite_path), device="cpu", progress=False).read_bytes()
    assert not (tmp_path / "one" / REFERENCE_STATES).exists()  # one process: nothing to share, nothing left
    plan = _plan(tmp_path / "sharded", suite_path)
    for i in range(3):
        generate_run(plan, device="cpu", shard=(i, 3), progress=False)
    assert not (tmp_path / "sharded" / GENERATIONS).exists()
    # the shards shared the references' forward passes through the run folder, which the merge removes
    assert len(list((tmp_path / "sharded" / REFERENCE_STATES).glob("*.pt"))) == len(plan.suite.items)
    assert merge_shards(plan).read_bytes() == single
    assert not (tmp_path / "sharded" / REFERENCE_STATES).exists()


def test_shards_are_numbered_across_systems(tmp_path, suite_path):
    """Each system has 2 batches here; 4 shards must all get work (batches 0-3 across the two systems)."""
    plan = _plan(tmp_path / "one", suite_path, batch_size=10)
    single = generate_run(plan, device="cpu", progress=False).read_bytes()
    plan = _plan(tmp_path / "sharded", suite_path, batch_size=10)
    for i in range(4):
        rows = read_rows(generate_run(plan, device="cpu", shard=(i, 4), progress=False))
        assert len(rows) == 10 and len({r["system"] for r in rows}) == 1
    assert merge_shards(plan).read_bytes() == single


def test_a_shard_takes_over_the_batches_a_running_shard_has_not_reached(tmp_path, suite_path):
    """Shard 1 is running (it holds its file's lock, here: stuck in a long fit) and is decoding its
    batch of unit 3 (it holds that claim): shard 0 decodes its own batches, then every batch of
    shard 1 but the claimed one, into its own file; shard 1 then finds only that one left. The
    merged run is the single process's bytes, whoever decoded what."""
    single = generate_run(_plan(tmp_path / "one", suite_path), device="cpu", progress=False).read_bytes()
    plan = _plan(tmp_path / "sharded", suite_path)  # 2 systems x 7 batches of 3 rows (20 rows each)
    run = tmp_path / "sharded"
    with exclusive(shard_file(run, (1, 2))), exclusive(run / CLAIMS / "batch-3"):
        rows = read_rows(generate_run(plan, device="cpu", shard=(0, 2), progress=False))
    # each system: jobs (prompt, sample) p00/0, p00/1, ... in batches of 3; units 0-6 and 7-13, the 7th of 2 jobs
    assert len(rows) == 40 - 3  # everything but unit 3: the first system's jobs 9-11
    rows = read_rows(generate_run(plan, device="cpu", shard=(1, 2), progress=False))
    assert [(r["prompt_id"], r["sample"]) for r in rows] == [("p04", 1), ("p05", 0), ("p05", 1)]
    assert merge_shards(plan).read_bytes() == single


def test_a_shard_that_is_not_running_keeps_its_batches(tmp_path, suite_path):
    """--shard i/n run at separate times (or on separate machines) still generates exactly shard i."""
    plan = _plan(tmp_path / "sharded", suite_path)
    rows = read_rows(generate_run(plan, device="cpu", shard=(0, 2), progress=False))
    assert len(rows) == 20  # the even units of 14: 0, 2, 4, 6 (3 + 3 + 3 + 2 jobs), 8, 10, 12 (3 each)
    assert RowsSeen(tmp_path / "sharded").refresh() == {(r["system"], r["prompt_id"], r["sample"]) for r in rows}


def test_a_batch_whose_layer_another_worker_is_fitting_is_left_for_later(tmp_path, suite_path, monkeypatch):
    """Worker 1 reaches a system whose head worker 0 is fitting (it holds the system's fit claim): rather
    than wait on the head's lock, it leaves the batch for later and goes on; with ``wait`` (when nothing
    else is left) it fits, i.e. waits for the cache and loads it."""
    from maxbench.benchmark.data import corpora
    from maxbench.benchmark.run import runner

    class Layer(OutputLayer):
        needs_fit = True

        def fit(self, ctx):
            fits.append(ctx)

    class LM:
        def describe(self):
            return {}

    fits, decoded = [], []
    plan = _plan(tmp_path / "r", suite_path)
    pre = runner.Preflight(layers=[Layer(), Layer()], todo=[], done=set(), models={"tiny-random": LM()})
    monkeypatch.setattr(runner, "update_manifest", lambda *a: None)
    monkeypatch.setattr(corpora, "load_corpus", lambda name: None)
    monkeypatch.setattr(runner._Decoder, "_decode", lambda self, si, batch: decoded.append((si, len(batch))))
    work = runner._Decoder(plan, pre, tmp_path / "out.jsonl", False, runner.PhaseTimer(tmp_path / "r"))
    batch = plan.batches(plan.systems[0])[0]
    with exclusive(tmp_path / "r" / CLAIMS / "fit-0"):  # worker 0 is fitting system 0's layer
        assert work.batch(0, 0, batch, wait=False) is None and not fits and not decoded
        assert work.batch(1, 7, batch, wait=False) is True and decoded == [(1, 3)]  # another system goes on
    assert work.batch(0, 0, batch, wait=False) is True and len(fits) == 2 and decoded[-1] == (0, 3)


class BusySoftmax(SoftmaxLayer):
    """Softmax with a fit, busy (``fit_busy``) while another process holds the lock of ``path``, as a
    layer whose cache another process is building; its fit records whether that lock was still held."""

    needs_fit = True

    def __init__(self, path, fits):
        self.path, self.fits = path, fits

    def fit_busy(self, ctx):
        return held(self.path)

    def fit(self, ctx):
        self.fits.append(held(self.path))


def _with_busy_layer(monkeypatch, si, layer):
    """Runs whose system ``si`` has ``layer`` (its rows are softmax's) and no fitting corpus to load."""
    from maxbench.benchmark.data import corpora
    from maxbench.benchmark.run import runner

    real = runner.preflight

    def preflight(plan, **kw):
        pre = real(plan, **kw)
        pre.layers[si] = layer
        return pre

    monkeypatch.setattr(runner, "preflight", preflight)
    monkeypatch.setattr(corpora, "load_corpus", lambda name: None)


#: three systems of the tiny model whose middle one a test makes busy
THREE_SYSTEMS = (
    "tiny-random/softmax/top_p=0.9,max_new_tokens=12",
    "tiny-random/softmax/greedy,max_new_tokens=12",
    "tiny-random/softmax/top_k=5,max_new_tokens=12",
)


def test_a_batch_whose_fit_would_wait_on_another_process_is_left_for_later_and_waited_for_only_last(
    tmp_path, suite_path, monkeypatch
):
    """With ``wait=False`` a layer whose ``fit_busy`` is true is not fitted (the batch is left for
    later, other systems go on); with ``wait`` it is. A run whose busy layer never frees decodes every
    other system first, then fits it (waiting) rather than dropping its batches or spinning."""
    from maxbench.benchmark.run import runner
    from tests.support.locks import held_by_another_process

    fits, lock = [], tmp_path / "cache-being-built"
    systems = THREE_SYSTEMS
    single = generate_run(_plan(tmp_path / "one", suite_path, systems), device="cpu", progress=False).read_bytes()
    _with_busy_layer(monkeypatch, 1, BusySoftmax(lock, fits))
    order = []
    real_decode = runner._Decoder._decode
    monkeypatch.setattr(runner._Decoder, "_decode", lambda self, si, b: order.append(si) or real_decode(self, si, b))
    with held_by_another_process(lock):
        out = generate_run(_plan(tmp_path / "r", suite_path, systems), device="cpu", progress=False)
    assert order == [0] * 7 + [2] * 7 + [1] * 7  # system 1 last, all of it, fitted once
    assert fits == [True]  # nothing else was left: it fitted while the lock was still held (fit waits there)
    assert out.read_bytes() == single


def test_a_deferred_fit_goes_first_once_it_no_longer_waits_before_any_batch_is_taken_over(
    tmp_path, suite_path, monkeypatch
):
    """Shard 0 of 2 (shard 1 is running, stuck before its first batch): system 1's fit would wait on a
    cache another process is building, so shard 0 decodes its batches of systems 0 and 2 and takes
    over shard 1's batches; the build ends after the first one it takes over, and from then system 1's
    batches of shard 0 go first (fitted once, the lock free), before it takes over any more. The
    merged run is the single process's bytes."""
    from maxbench.benchmark.run import runner
    from tests.support.locks import HeldLock

    fits, lock_path = [], tmp_path / "cache-being-built"
    systems = THREE_SYSTEMS
    single = generate_run(_plan(tmp_path / "one", suite_path, systems), device="cpu", progress=False).read_bytes()
    _with_busy_layer(monkeypatch, 1, BusySoftmax(lock_path, fits))
    lock = HeldLock(lock_path)
    units = []
    real_batch = runner._Decoder.batch

    def batch(self, si, unit, b, wait=True):
        done = real_batch(self, si, unit, b, wait)
        if done:
            units.append(unit)
            if unit % 2:  # the first batch taken over from shard 1: the other process's build ends
                lock.release()
        return done

    monkeypatch.setattr(runner._Decoder, "batch", batch)
    plan = _plan(tmp_path / "sharded", suite_path, systems)  # 3 systems x 7 batches: units 0-6, 7-13, 14-20
    try:
        with exclusive(shard_file(plan.run_dir, (1, 2))):
            generate_run(plan, device="cpu", shard=(0, 2), progress=False)
    finally:
        lock.release()
    # its own units of systems 0 and 2, one of shard 1's (walked backwards: its last is unit 5), then
    # system 1's own (8, 10, 12), then the rest of shard 1's from the end of its order
    assert units == [0, 2, 4, 6, 14, 16, 18, 20, 5, 8, 10, 12, 3, 1, 13, 11, 9, 7, 19, 17, 15]
    assert fits == [False]
    assert read_rows(generate_run(plan, device="cpu", shard=(1, 2), progress=False)) == []
    assert merge_shards(plan).read_bytes() == single


def test_rows_seen_reads_only_what_was_appended_and_rereads_a_replaced_file(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    path = run / "generations.shard-0-of-2.jsonl"
    row = lambda p: json.dumps({"system": "s", "prompt_id": p, "sample": 0}) + "\n"  # noqa: E731
    path.write_text(row("a") + row("b")[:10])  # a write cut in the middle of a line
    seen = RowsSeen(run)
    assert seen.refresh() == {("s", "a", 0)}
    with open(path, "a") as f:
        f.write(row("b")[10:] + row("c"))
    assert seen.refresh() == {("s", "a", 0), ("s", "b", 0), ("s", "c", 0)}
    (run / "new").write_text(row("d"))
    (run / "new").replace(path)  # the canonical rewrite replaces the file
    assert ("s", "d", 0) in seen.refresh()
    with open(path, "a") as f:
        f.write("{not json\n")
    with pytest.raises(Exception, match=r"generations.shard-0-of-2.jsonl:2 is not valid JSON"):
        seen.refresh()
    path.write_text(row("d") + '{"system": "s"}\n')
    with pytest.raises(Exception, match=r"generations.shard-0-of-2.jsonl:2 is not a row; the run file is damaged"):
        RowsSeen(run).refresh()


def test_run_dir_of_another_run_is_refused(cli, tmp_path, suite_path):
    args = [
        "generate",
        "--model",
        "tiny-random",
        "--suite",
        suite_path,
        "--runs-dir",
        tmp_path,
        "--run-id",
        "r",
        "--decoding",
        "greedy,max_new_tokens=4",
        "--no-progress",
    ]
    assert cli(*args)[0] == 0
    before = (tmp_path / "r" / GENERATIONS).read_bytes()
    rc, _, err = cli(*args[:-2], "top_p=0.5,max_new_tokens=4", "--no-progress")
    assert rc == 2 and "was made by a different run" in err and err.count("\n") == 1
    assert (tmp_path / "r" / GENERATIONS).read_bytes() == before


def test_kill_9_mid_generation_then_resume(tmp_path, suite_path):
    """A real `maxbench generate` process is killed while writing; the rerun completes the file
    exactly as an uninterrupted run writes it."""
    base = [
        sys.executable,
        "-m",
        "maxbench",
        "generate",
        "--model",
        "tiny-random",
        "--suite",
        str(suite_path),
        "--decoding",
        "top_p=0.9,max_new_tokens=48",
        "--samples",
        "3",
        "--batch-size",
        "2",
        "--no-progress",
        "--runs-dir",
        str(tmp_path),
        "--threads",
        "1",
    ]
    subprocess.run(base + ["--run-id", "clean"], check=True, capture_output=True)
    proc = subprocess.Popen(base + ["--run-id", "killed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = tmp_path / "killed" / GENERATIONS
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 4):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = out.read_bytes().count(b"\n")
    assert 0 < partial < 30, "the kill must land mid-run"
    subprocess.run(base + ["--run-id", "killed"], check=True, capture_output=True)
    assert out.read_bytes() == (tmp_path / "clean" / GENERATIONS).read_bytes()


def test_reference_states_are_computed_once_per_model_and_give_the_same_logprobs(tiny):
    from types import SimpleNamespace

    from maxbench.benchmark.run.runner import ReferenceStateCache
    from maxbench.systems.decoding import reference_logprobs
    from maxbench.systems.layers.sparsemax.layer import SparsemaxLayer

    item = SimpleNamespace(id="p0", prompt="the soup", reference="was cold and salty")
    cache = ReferenceStateCache()
    first = cache.get(tiny, "tiny-random", item)
    assert cache.get(tiny, "tiny-random", item) is first and cache.used == first.nbytes
    for layer in (SoftmaxLayer(), SparsemaxLayer()):
        fresh = reference_logprobs(tiny, layer, [item.prompt], [item.reference], chunk=4)
        assert reference_logprobs(tiny, layer, [], [], chunk=4, states=[first]) == fresh
    full = ReferenceStateCache(max_bytes=0)  # over budget: computed again, same values
    again = full.get(tiny, "tiny-random", item)
    assert again is not full.get(tiny, "tiny-random", item) and torch.equal(again.hidden, first.hidden)


def test_workers_share_reference_states_through_the_run_folder(tiny, tmp_path, monkeypatch):
    """A second worker's cache reads the state the first wrote instead of running the forward
    pass again; a file it cannot read (a killed writer, a corrupt disk) is computed again."""
    from types import SimpleNamespace

    import maxbench.systems.decoding
    from maxbench.benchmark.run.runner import ReferenceStateCache

    computed = []
    real = maxbench.systems.decoding.reference_states
    monkeypatch.setattr(maxbench.systems.decoding, "reference_states", lambda *a: computed.append(a[1:]) or real(*a))
    item = SimpleNamespace(id="p0", prompt="the soup", reference="was cold and salty")
    other = SimpleNamespace(id="p1", prompt="the soup", reference="was warm")
    first = ReferenceStateCache(directory=tmp_path).get(tiny, "tiny-random", item)
    assert len(computed) == 1 and len(list(tmp_path.glob("*.pt"))) == 1
    second = ReferenceStateCache(directory=tmp_path)
    shared = second.get(tiny, "tiny-random", item)
    assert len(computed) == 1  # read, not computed
    assert torch.equal(shared.hidden, first.hidden) and torch.equal(shared.targets, first.targets)
    assert shared.hidden.dtype == first.hidden.dtype and shared.hidden.device == first.hidden.device
    second.get(tiny, "tiny-random", other)  # another reference: its own file
    assert len(computed) == 2 and len(list(tmp_path.glob("*.pt"))) == 2
    for path in tmp_path.glob("*.pt"):
        path.write_bytes(path.read_bytes()[:100])  # truncated
    again = ReferenceStateCache(directory=tmp_path).get(tiny, "tiny-random", item)
    assert len(computed) == 3 and torch.equal(again.hidden, first.hidden)
