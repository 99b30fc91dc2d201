"""A run folder that is damaged, edited or made elsewhere is refused in one line whichever command
opens it (generate, score, view, leaderboard), and nothing computed is lost: scores of other
generations, two rows with one key, a suite or system the manifest misstates, a score cache in an
odd place, a damaged line, other weights, an interrupt."""

import hashlib
import json
import shutil
import signal

import pytest

from tests.support.cli import assert_one_line_exit_2
from tests.support.runs import score_args

SUITE_ROWS = [{"id": f"p{i}", "prompt": f"Review number {i}: the soup was", "reference": f"ref {i}"} for i in range(3)]
SOFTMAX = "tiny-random/softmax/top_p=0.9,max_new_tokens=6"


def _gen_args(tmp, run_dir, *more):
    return [
        "generate",
        "--model",
        "tiny-random",
        "--layer",
        "softmax",
        "--layer",
        "sparsemax",
        "--suite",
        tmp / "s.toml",
        "--decoding",
        "top_p=0.9,max_new_tokens=6",
        "--runs-dir",
        run_dir.parent,
        "--run-id",
        run_dir.name,
        "--no-progress",
        "--threads",
        "1",
        *more,
    ]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A generated and scored run of two tiny-random systems on a 3-prompt suite."""
    from maxbench.cli import main

    tmp = tmp_path_factory.mktemp("runs41")
    (tmp / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in SUITE_ROWS))
    (tmp / "s.toml").write_text('name = "three"\nfile = "p.jsonl"\n')
    run = tmp / "runs" / "r"
    assert main([str(a) for a in _gen_args(tmp, run)]) == 0
    assert main([str(a) for a in score_args(run)]) == 0
    return tmp


@pytest.fixture
def run(scored, tmp_path):
    """A copy of the scored run (its suite beside it, as the manifest names it)."""
    d = tmp_path / "runs" / "r"
    shutil.copytree(scored / "runs" / "r", d)
    return d


def _lines(run):
    return (run / "generations.jsonl").read_text().splitlines()


def _write_lines(run, lines, rehash=False):
    path = run / "generations.jsonl"
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    if rehash:  # scores.json made to name the new file, as if scored from it
        doc = json.loads((run / "scores.json").read_text())
        doc["generations_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        (run / "scores.json").write_text(json.dumps(doc))


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- scores of other generations
def test_leaderboard_and_view_refuse_scores_of_other_generations(cli, run, tmp_path):
    old = _sha(run / "generations.jsonl")
    lines = _lines(run)
    row = json.loads(lines[0])
    lines[0] = json.dumps(row | {"text": row["text"] + " changed"})
    _write_lines(run, lines)
    new = _sha(run / "generations.jsonl")
    for cmd in (["leaderboard", run, "--out", tmp_path / "lb"], ["view", run, "--out", tmp_path / "ex"]):
        assert_one_line_exit_2(cli(*cmd), old, new, f"maxbench score {run}")
    assert not (tmp_path / "lb" / "leaderboard.md").exists() and not (tmp_path / "ex" / "index.html").exists()


# ---------------------------------------------------------------- two rows with one key
def test_run_and_score_refuse_two_different_rows_with_one_key(cli, run, scored):
    lines = _lines(run)
    row = json.loads(lines[1])
    lines.append(json.dumps(row | {"text": "another text"}))
    _write_lines(run, lines)
    before = (run / "generations.jsonl").read_bytes()
    key = f"system '{row['system']}', prompt '{row['prompt_id']}', sample {row['sample']}"
    assert_one_line_exit_2(cli(*_gen_args(scored, run)), key, "lines 2 and 7")
    assert_one_line_exit_2(cli(*score_args(run)), key, "lines 2 and 7")
    assert (run / "generations.jsonl").read_bytes() == before  # neither row dropped


# ---------------------------------------------------------------- the manifest
def test_score_checks_the_suite_hash_against_the_suite(cli, run, scored, tmp_path):
    manifest = json.loads((run / "manifest.json").read_text())
    recorded = manifest["suite"]["sha256"]
    (scored / "p.jsonl").write_text((scored / "p.jsonl").read_text().replace("soup", "stew"))
    try:
        now = _sha(scored / "p.jsonl")
        assert_one_line_exit_2(cli(*score_args(run)), recorded[:12], now[:12], "suite 'three'")
    finally:
        (scored / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in SUITE_ROWS))
    manifest["suite"]["sha256"] = "0" * 64  # the manifest's hash edited: not the identity's nor the suite's
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert_one_line_exit_2(cli(*score_args(run)), "sha256")


def test_score_refuses_a_system_whose_model_contradicts_its_string(cli, run):
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["systems"][SOFTMAX]["model"] = "smollm2-135m"
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert_one_line_exit_2(cli(*score_args(run)), SOFTMAX, "smollm2-135m", "contradicts")


@pytest.mark.parametrize("manifest", [[], {"systems": ["a", "b"]}, {"suite": "three"}, {"systems": {"x/y/z": 3}}])
def test_score_refuses_a_manifest_of_the_wrong_shape(cli, run, manifest):
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert_one_line_exit_2(cli(*score_args(run)), "manifest.json")


# ---------------------------------------------------------------- the score cache
def test_pruning_never_deletes_user_files_nor_through_a_link(cli, run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.json").write_text('{"mine": 1}\n')
    (mine / ("a" * 64 + ".json")).write_text('{"mine": 2}\n')
    shutil.rmtree(run / "score-cache")
    (run / "score-cache").symlink_to(mine)
    (run / "scores.json").unlink()
    rc, _, err = cli(*score_args(run))
    assert rc == 0 and "symbolic link" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in mine.iterdir()) == sorted(["notes.json", "a" * 64 + ".json"])
    assert (run / "scores.json").is_file()
    # a real cache folder: a file of the user's there stays too, stale entries go
    (run / "score-cache").unlink()
    assert cli(*score_args(run))[0] == 0
    entries = sorted((run / "score-cache").iterdir())
    (run / "score-cache" / "user.json").write_text("{}\n")
    (run / "score-cache" / ("b" * 64 + ".json")).write_text('{"not": "an entry"}\n')
    stale = run / "score-cache" / ("c" * 64 + ".json")
    stale.write_text(entries[0].read_text().replace(entries[0].stem, stale.stem))
    assert cli(*score_args(run))[0] == 0
    left = {p.name for p in (run / "score-cache").iterdir()}
    assert {"user.json", "b" * 64 + ".json"} <= left and stale.name not in left


def test_a_score_cache_that_is_a_file_or_an_entry_that_is_a_folder_scores_without_it(cli, run):
    good = json.loads((run / "scores.json").read_text())
    shutil.rmtree(run / "score-cache")
    (run / "score-cache").write_text("a file\n")
    (run / "scores.json").unlink()
    rc, _, err = cli(*score_args(run))
    assert rc == 0 and err.startswith("maxbench: warning: score cache") and err.count("\n") == 1, err
    assert json.loads((run / "scores.json").read_text())["systems"] == good["systems"]
    (run / "score-cache").unlink()
    assert cli(*score_args(run))[0] == 0
    for entry in list((run / "score-cache").iterdir()):
        entry.unlink()
        entry.mkdir()
    (run / "scores.json").unlink()
    rc, _, err = cli(*score_args(run))
    assert rc == 0 and "scoring without it" in err and err.count("\n") == 1, err
    assert json.loads((run / "scores.json").read_text())["systems"] == good["systems"]


# ---------------------------------------------------------------- a damaged line
def test_a_damaged_line_is_named_and_can_be_dropped_alone(cli, run, scored):
    lines = _lines(run)
    lines.insert(2, '{"system": "cut in the mid')
    _write_lines(run, lines)
    original = (run / "generations.jsonl").read_bytes()
    err = assert_one_line_exit_2(cli(*score_args(run)), "generations.jsonl:3", "--drop-damaged-lines")
    assert "move it away" not in err
    assert_one_line_exit_2(cli(*_gen_args(scored, run)), "generations.jsonl:3", "--drop-damaged-lines")
    rc, _, err = cli(*score_args(run, "--drop-damaged-lines"))
    assert rc == 0 and "dropped" in err and "generations.jsonl:3" in err, err
    assert (run / "generations.jsonl.bak").read_bytes() == original
    assert _lines(run) == [x for i, x in enumerate(lines) if i != 2]
    assert (run / "scores.json").is_file()
    # a row that is no row (its text a number) is dropped by generate, which writes it again
    lines = _lines(run)
    lines[0] = json.dumps(json.loads(lines[0]) | {"text": 7})
    _write_lines(run, lines)
    rc, _, err = cli(*_gen_args(scored, run, "--drop-damaged-lines"))
    assert rc == 0 and "dropped" in err, err
    assert len(_lines(run)) == 6 and all(isinstance(json.loads(x)["text"], str) for x in _lines(run))


# ---------------------------------------------------------------- view shares score's row rule
@pytest.mark.parametrize(
    "bad, words",
    [
        (lambda r: json.dumps(r | {"text": 12}), ["row 1", "non-string 'text'"]),
        (lambda r: json.dumps({k: v for k, v in r.items() if k != "prompt_id"}), ["row 1", "lacks field 'prompt_id'"]),
        (lambda r: json.dumps(r | {"sample": "x"}), ["row 1", "'sample'"]),
        (lambda r: json.dumps(r | {"sample": 1.5}), ["row 1", "'sample'"]),
        (lambda r: json.dumps(r, ensure_ascii=False).encode().replace(b"Review", b"Rev\xffiew"), [":1", "not UTF-8"]),
    ],
)
def test_view_and_score_refuse_a_row_that_is_no_row(cli, run, tmp_path, bad, words):
    lines = _lines(run)
    lines[0] = bad(json.loads(lines[0]))
    _write_lines(run, lines, rehash=True)
    assert_one_line_exit_2(cli("view", run, "--out", tmp_path / "ex"), "generations.jsonl", *words)
    assert_one_line_exit_2(cli(*score_args(run)), "generations.jsonl", *words)


# ---------------------------------------------------------------- a run copied from another machine
def test_resume_refuses_a_run_generated_with_other_weights(cli, run, scored):
    manifest = json.loads((run / "manifest.json").read_text())
    here = manifest["models"]["tiny-random"]["hash"]
    theirs = "f" * 64
    manifest["models"]["tiny-random"]["hash"] = theirs  # as recorded on the other machine
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (run / "generations.jsonl").write_text("".join(x + "\n" for x in _lines(run)[:-1]))  # work left to resume
    rows = (run / "generations.jsonl").read_bytes()
    err = assert_one_line_exit_2(cli(*_gen_args(scored, run)), theirs, here, "tiny-random", "--run-id")
    assert "Traceback" not in err
    assert json.loads((run / "manifest.json").read_text())["models"]["tiny-random"]["hash"] == theirs
    assert (run / "generations.jsonl").read_bytes() == rows  # nothing appended under the wrong hash


# ---------------------------------------------------------------- Ctrl-C eaten by a destructor
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the eaten interrupt
def test_an_interrupt_during_score_exits_130_even_when_a_destructor_eats_it(cli, run, monkeypatch):
    import maxbench.benchmark.metrics.scoring as scoring

    class Closing:
        def __del__(self):  # Ctrl-C arrives while a destructor runs: Python only prints it
            signal.raise_signal(signal.SIGINT)

    real = scoring.score_batch
    calls = []

    def score_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            Closing()  # collected at once, its __del__ runs here
        return real(*args, **kwargs)

    monkeypatch.setattr(scoring, "score_batch", score_batch)
    (run / "scores.json").unlink()
    for entry in (run / "score-cache").iterdir():
        entry.unlink()  # every system scored again
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN when started in the background
    rc, _, err = cli(*score_args(run))
    assert calls, "the scoring step was not reached"
    assert rc == 130 and "interrupted" in err, err
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back, whatever it was
    assert json.loads((run / "scores.json").read_text())["systems"]  # what was computed is kept
    # an interrupt raised by a scoring step itself: 130, the scores written before kept as they were
    before = (run / "scores.json").read_bytes()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(scoring, "score_batch", interrupted)
    for entry in (run / "score-cache").iterdir():
        entry.unlink()
    rc, _, err = cli(*score_args(run))
    assert rc == 130 and (run / "scores.json").read_bytes() == before
