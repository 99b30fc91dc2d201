"""maxbench run: lineup validation, kill -9 and resume, shards, re-rendering the leaderboard."""

import signal
import subprocess
import sys
import time

import pytest

from tests.support.cli import assert_one_line_exit_2
from tests.support.files import file_mode
from tests.support.runs import TINY_LINEUP_SYSTEMS, write_scored_run, write_tiny_lineup
from tests.support.suites import TINY_SYSTEM, write_lineup, write_tiny_suite


def _cmd(reg, tmp_path, run_id, out, *extra):
    return [
        sys.executable,
        "-m",
        "maxbench",
        "run",
        "--lineup",
        str(reg),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--run-id",
        run_id,
        "--out",
        str(tmp_path / out),
        "--n-resamples",
        "200",
        "--threads",
        "1",
        "--workers",
        "1",  # one process (tests/benchmark/run/test_workers.py covers --workers)
        "--no-progress",
        *extra,
    ]


def _outputs(tmp_path, run_id, out):
    files = {"generations": tmp_path / "runs" / run_id / "generations.jsonl"}
    files |= {p.name: p for p in (tmp_path / out).rglob("*") if p.is_file()}
    return {k: v.read_bytes() for k, v in files.items()}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """The tiny lineup run once, uninterrupted, in one process: the bytes that a killed and resumed
    run and a sharded run must both equal (in the same folder, so that only the run ids differ)."""
    tmp_path = tmp_path_factory.mktemp("tiny")  # no run id in the path: the test masks run ids
    reg = write_tiny_lineup(tmp_path)
    subprocess.run(_cmd(reg, tmp_path, "clean", "lb-clean"), check=True, capture_output=True)
    return tmp_path, reg


def test_kill_9_during_run_then_rerun_is_byte_identical(clean_run):
    tmp_path, reg = clean_run
    proc = subprocess.Popen(
        _cmd(reg, tmp_path, "killed", "lb-killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    gen = tmp_path / "runs" / "killed" / "generations.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and (not gen.exists() or gen.read_bytes().count(b"\n") < 6):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 0 < gen.read_bytes().count(b"\n") < 3 * 12 * 2, "the kill must land mid-generation"
    assert not (tmp_path / "lb-killed" / "leaderboard.md").exists()
    subprocess.run(_cmd(reg, tmp_path, "killed", "lb-killed"), check=True, capture_output=True)
    clean, killed = _outputs(tmp_path, "clean", "lb-clean"), _outputs(tmp_path, "killed", "lb-killed")
    assert (
        set(clean)
        == set(killed)
        >= {"generations", "leaderboard.md", "leaderboard.csv", "leaderboard.html", "tradeoff.png", "steps.png"}
    )
    for name in clean:
        if name in ("leaderboard.md", "index.html"):  # name their source run directory (index.html: the explorer's)
            assert clean[name].replace(b"clean", b"X") == killed[name].replace(b"killed", b"X")
        elif name == "leaderboard.html":
            continue  # same table; embeds the same PNGs, compared above
        else:
            assert clean[name] == killed[name], name
    md = clean["leaderboard.md"].decode()
    # three systems in the compact table that leads and again in the full table under "All metrics"
    assert md.count("| `tiny-random/") == 6 and "\n## All metrics\n" in md
    assert "bleu-4" in md and "self-bleu-4" in md


def test_shards_then_merge_equal_one_process(clean_run):
    tmp_path, reg = clean_run
    for i in range(2):
        p = subprocess.run(_cmd(reg, tmp_path, "sh", "lb-sh", "--shard", f"{i}/2"), capture_output=True, text=True)
        assert p.returncode == 0 and "without --shard" in p.stdout
    subprocess.run(_cmd(reg, tmp_path, "sh", "lb-sh"), check=True, capture_output=True)
    one, sh = _outputs(tmp_path, "clean", "lb-clean"), _outputs(tmp_path, "sh", "lb-sh")
    assert one["generations"] == sh["generations"] and one["leaderboard.csv"] == sh["leaderboard.csv"]


def test_leaderboard_rerenders_without_generating(tmp_path, cli):
    reg = write_tiny_lineup(tmp_path, TINY_LINEUP_SYSTEMS[:2])
    subprocess.run(_cmd(reg, tmp_path, "r", "lb"), check=True, capture_output=True)
    before = {n: (tmp_path / "lb" / n).read_bytes() for n in ("leaderboard.csv", "leaderboard.html")}
    rc, out, _ = cli("leaderboard", tmp_path / "runs" / "r", "--out", tmp_path / "lb2")
    assert rc == 0
    for name, data in before.items():
        assert (tmp_path / "lb2" / name).read_bytes() == data, name
    assert (tmp_path / "lb2" / "leaderboard.md").read_text().startswith("# maxbench leaderboard: t on twelve\n")
    rows = (tmp_path / "lb2" / "leaderboard.csv").read_text().splitlines()
    assert rows[0].startswith("system,bleu-2,bleu-2_ci_low,bleu-2_ci_high,bleu-2_p_vs_baseline")
    html = (tmp_path / "lb2" / "leaderboard.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html


@pytest.mark.parametrize(
    "systems, extra, words",
    [
        (["tiny-random/nosuch/greedy"], "", "unknown output layer 'nosuch'"),
        (["tiny-random/grapmax/greedy"], "", "unknown output layer 'grapmax': did you mean 'graphmax'?"),
        (["tiny-random/graphmax(lamb=1.0)/greedy"], "", "has no parameter 'lamb': did you mean 'lam'?"),
        (["tiny-random/graphmax(lam=-1.0)/greedy"], "", "lam"),
        (["tiny-random/softmax/greedy", "tiny-random/softmax/greedy"], "", "lists a system twice"),
        # a misspelled model in the second system fails before the first one generates
        (["tiny-random/softmax/greedy", "tiny-randon/softmax/greedy"], "", "did you mean 'tiny-random'?"),
        (TINY_LINEUP_SYSTEMS, "colour = 3\n", "unknown key 'colour'"),
        (TINY_LINEUP_SYSTEMS, "smaples = 3\n", "unknown key 'smaples': did you mean 'samples'?"),
        (TINY_LINEUP_SYSTEMS, "seed = 'one'\n", "'seed' must be a whole number >= 0"),
        (TINY_LINEUP_SYSTEMS, "", "unknown metric 'rouge': did you mean 'rouge-l'?"),
    ],
)
def test_bad_registries_exit_2(tmp_path, cli, systems, extra, words):
    reg = write_tiny_lineup(tmp_path, systems, extra)
    if "rouge" in words:
        reg.write_text(reg.read_text().replace('"rouge-l"]', '"rouge"]'))
    if "twice" in words:
        reg.write_text(reg.read_text().replace(f'baseline = "{systems[0]}"\n', ""))
    rc, _, err = cli("run", "--lineup", reg, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "lb")
    assert rc == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "runs").exists()


def test_run_dir_of_another_registry_is_refused(tmp_path, cli):
    reg = write_tiny_lineup(tmp_path, TINY_LINEUP_SYSTEMS[:1])
    assert subprocess.run(_cmd(reg, tmp_path, "r", "lb"), capture_output=True).returncode == 0
    before = (tmp_path / "runs" / "r" / "generations.jsonl").read_bytes()
    other = write_tiny_lineup(tmp_path, TINY_LINEUP_SYSTEMS[1:2])
    rc, _, err = cli(
        "run",
        "--lineup",
        other,
        "--runs-dir",
        tmp_path / "runs",
        "--run-id",
        "r",
        "--out",
        tmp_path / "lb",
        "--no-progress",
    )
    assert rc == 2 and "was made by a different run" in err
    assert (tmp_path / "runs" / "r" / "generations.jsonl").read_bytes() == before


def test_builtin_lineups_are_valid():
    from maxbench.benchmark.run.lineup import builtin_lineups, load_lineup

    assert list(builtin_lineups()) == [
        "base-lms",
        "conditional",
        "decoding-baselines",
        "default",
        "frontier",
        "lambda-sweep",
        "smoke-sweep",
    ]
    conditional = load_lineup("conditional")
    assert conditional.suite == "food-attrs" and "attr-acc" in conditional.metrics
    assert [s.adapter for s in conditional.systems] == [None, "lora", "prefix", "fctg", "fctg"]
    # FCTG as the slides describe it (the base model frozen), and version 1's LoRA reading beside it
    assert [dict(s.adapter_params) for s in conditional.systems[3:]] == [{}, {"r": 8}]
    assert {s.decoding.max_new_tokens for s in conditional.systems} == {96}
    reg = load_lineup("default")
    layers = [s.layer for s in reg.systems]
    assert layers == ["softmax", "sparsemax", "graphmax", "graphmax", "kerbs", "posg"]
    assert reg.baseline == reg.systems[0].name and reg.suite == "food-reviews"
    assert reg.name == "default" and reg.samples == 1 and reg.batch_size == 48 and "ms-jaccard" in reg.metrics
    baselines = load_lineup("decoding-baselines")
    samplers = {s.decoding.label for s in baselines.systems if s.layer == "softmax"}
    assert samplers == {"top_p=0.9", "typical_p=0.95", "epsilon=0.0006", "eta=0.002", "min_p=0.1"}
    assert {s.layer for s in baselines.systems} == {"softmax", "sparsemax", "graphmax", "kerbs", "posg"}
    assert {"mauve", "coherence", "diversity"} <= set(baselines.metrics) and baselines.suite == "food-reviews"
    smoke = load_lineup("smoke-sweep")  # the README's sweep: two sweeps sharing pure sampling, baseline among them
    assert smoke.suite == "smoke" and {k: v.record()["values"] for k, v in smoke.sweeps.items()} == {
        "softmax temp": [0.7, 1.0, 1.3],
        "softmax top-p": [0.7, 0.9, 1.0],
    }
    assert len(smoke.systems) == 5 and smoke.baseline in smoke.sweeps["softmax top-p"].record()["systems"]
    sweep = load_lineup("lambda-sweep")
    assert sorted({dict(s.params).get("lam") for s in sweep.systems if s.layer == "graphmax"}) == [
        0.3,
        1.0,
        3.0,
        10.0,
        30.0,
    ]


def test_run_and_leaderboard_files_are_readable_by_colleagues(tmp_path, cli, umask_022):
    """manifest.json, generations.jsonl (rewritten atomically when complete) and the leaderboard
    files were 0600 (tempfile.mkstemp's mode) before."""
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path), "--decoding", "greedy,max_new_tokens=2",
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    for name in ("manifest.json", "generations.jsonl"):
        assert file_mode(tmp_path / "runs" / "r" / name) == 0o644, name
    write_scored_run(tmp_path / "runs", "s", ["m/softmax/greedy"])
    rc, _, err = cli("leaderboard", tmp_path / "runs" / "s", "--out", tmp_path / "lb")
    assert rc == 0, err
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html"):
        assert file_mode(tmp_path / "lb" / name) == 0o644, name


# ---------------------------------------------------------------- checked before work starts
def _run(cli, tmp_path, lineup, *extra):
    return cli(
        "run", "--lineup", lineup, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "lb",
        "--no-progress", "--n-resamples", "10", *extra,
    )  # fmt: skip


def test_misspelled_model_in_the_second_system_answers_at_once(tmp_path, cli):
    lineup = write_lineup(tmp_path, [TINY_SYSTEM, "tiny-rando/softmax/greedy"])
    t0 = time.monotonic()
    assert_one_line_exit_2(_run(cli, tmp_path, lineup), "unknown base model 'tiny-rando'", "did you mean 'tiny-random'")
    assert time.monotonic() - t0 < 20
    assert not (tmp_path / "runs").exists()


def test_hub_model_offline_in_the_second_system_fails_before_the_first_generates(tmp_path, cli, monkeypatch):
    """Before, the first system generated in full and the hub was tried for a minute; the run
    directory was left half made."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    lineup = write_lineup(tmp_path, [TINY_SYSTEM, "no-org/no-such-model/softmax/greedy"])
    assert_one_line_exit_2(_run(cli, tmp_path, lineup), "cannot load model 'no-org/no-such-model'", "HF_HUB_OFFLINE")
    assert not (tmp_path / "runs").exists()


def test_unknown_corpus_is_refused_before_any_work(tmp_path, cli):
    lineup = write_lineup(tmp_path, [TINY_SYSTEM], corpus="food-revews")
    assert_one_line_exit_2(_run(cli, tmp_path, lineup), "unknown corpus 'food-revews'", "did you mean 'food-reviews'")
    assert not (tmp_path / "runs").exists()


def test_leaderboard_folder_that_cannot_be_written_is_refused_before_generating(tmp_path, cli):
    (tmp_path / "afile").write_text("x")
    lineup = write_lineup(tmp_path, [TINY_SYSTEM])
    rc, _, err = cli(
        "run", "--lineup", lineup, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "afile", "--no-progress"
    )
    assert_one_line_exit_2((rc, "", err), "--out", "is a file")
    assert not (tmp_path / "runs").exists()


def test_free_disk_space_is_checked_before_the_first_token(tmp_path, cli, monkeypatch):
    import maxbench.benchmark.run.runner

    monkeypatch.setattr(maxbench.benchmark.run.runner, "free_bytes", lambda path: 1 << 20)
    lineup = write_lineup(tmp_path, [TINY_SYSTEM])
    assert_one_line_exit_2(_run(cli, tmp_path, lineup), "MiB are free there")
    assert not (tmp_path / "runs").exists()


def test_negative_resamples_are_refused_before_any_work(tmp_path, cli):
    assert_one_line_exit_2(
        _run(cli, tmp_path, write_lineup(tmp_path, [TINY_SYSTEM]), "--n-resamples", "-1"), "--n-resamples must be >= 0"
    )
    assert not (tmp_path / "runs").exists()
