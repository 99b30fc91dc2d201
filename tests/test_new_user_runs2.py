"""More of what a new user broke (issue 41): a study viewed over another run's texts (2e), a run copied
from another machine resumed under other weights (2f), Ctrl-C during score eaten by a destructor (5c), a
full disk while the graph cache is written (5d). Each is one line (exit 2, or 130 for an interrupt), never
a traceback, and nothing computed is lost."""

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.explorer_fixtures import make_scored_run, make_study_export
from tests.test_new_user_runs import _gen_args, _lines, _one_line_exit_2, _score_args, run, scored  # noqa: F401


# ---------------------------------------------------------------- 2e a study of another run
@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    root = tmp_path_factory.mktemp("study41")
    from maxbench.cli import main

    run_dir = make_scored_run(root)
    assert main([str(a) for a in _score_args(run_dir)]) == 0  # the fixture edits a text after scoring
    return root, run_dir, make_study_export(root, run_dir)


def test_view_refuses_a_study_of_another_run(cli, studied, tmp_path):
    root, run_dir, study = studied
    doc = json.loads(study.read_text())
    own = doc["run_id"]
    other = doc | {"run_id": "someone-elses-run"}  # same systems, same prompt ids: only the run differs
    (tmp_path / "other.json").write_text(json.dumps(other))
    err = _one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "other.json", "--out", tmp_path / "o1"))
    assert "someone-elses-run" in err and own in err, err
    assert not (tmp_path / "o1" / "index.html").exists()
    # the run regenerated under the same name: the export's rated text is not the run's text
    rated = doc["ratings"][0]
    (tmp_path / "texts.json").write_text(
        json.dumps(doc | {"ratings": [rated | {"text": "a text this run never held"}] + doc["ratings"][1:]})
    )
    err = _one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "texts.json", "--out", tmp_path / "o2"))
    assert rated["system"] in err and rated["prompt_id"] in err and "sha256" in err, err
    # the study's own run and texts still join
    texts = [r | {"text_sha256": None} for r in doc["ratings"]]
    (tmp_path / "same.json").write_text(json.dumps(doc | {"ratings": texts}))
    rc, _, err = cli("view", run_dir, "--study", tmp_path / "same.json", "--out", tmp_path / "o3")
    assert rc == 0, err


# ---------------------------------------------------------------- 2f a run copied from another machine
def test_resume_refuses_a_run_generated_with_other_weights(cli, run, scored):  # noqa: F811
    manifest = json.loads((run / "manifest.json").read_text())
    here = manifest["models"]["tiny-random"]["hash"]
    theirs = "f" * 64
    manifest["models"]["tiny-random"]["hash"] = theirs  # as recorded on the other machine
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (run / "generations.jsonl").write_text("".join(x + "\n" for x in _lines(run)[:-1]))  # work left to resume
    rows = (run / "generations.jsonl").read_bytes()
    err = _one_line_exit_2(cli(*_gen_args(scored, run)), theirs, here, "tiny-random", "--run-id")
    assert "Traceback" not in err
    assert json.loads((run / "manifest.json").read_text())["models"]["tiny-random"]["hash"] == theirs
    assert (run / "generations.jsonl").read_bytes() == rows  # nothing appended under the wrong hash


# ---------------------------------------------------------------- 5c Ctrl-C eaten by a destructor
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the eaten interrupt
def test_an_interrupt_during_score_exits_130_even_when_a_destructor_eats_it(cli, run, monkeypatch):  # noqa: F811
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
    rc, _, err = cli(*_score_args(run))
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
    rc, _, err = cli(*_score_args(run))
    assert rc == 130 and (run / "scores.json").read_bytes() == before


# ---------------------------------------------------------------- 5d a full disk under the graph cache
def test_a_full_disk_while_the_graph_cache_is_written_is_one_line(tmp_path):
    script = textwrap.dedent(
        """
        import contextlib, errno, gc, sys
        from pathlib import Path
        import maxbench.systems.graph as g
        from maxbench.cli import run_guarded

        real = g.atomic_open

        class Full:
            def __init__(self, f):
                self.f, self.n = f, 0
            def write(self, b):
                self.n += len(b)
                if self.n > 100:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return self.f.write(b)
            def __getattr__(self, k):
                return getattr(self.f, k)

        @contextlib.contextmanager
        def full_open(path, mode=None):
            with real(path, mode) as f:
                yield Full(f)

        g.atomic_open = full_open
        graph = g.build_graph([[1, 2, 3, 4, 2, 1] * 50], 10)
        rc = run_guarded("maxbench", g.save_graph, graph, Path(sys.argv[1]) / "g.npz")
        gc.collect()
        sys.exit(rc)
        """
    )
    out = tmp_path / "graphs"
    res = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("maxbench: error: disk full") and res.stderr.count("\n") == 1, res.stderr
    assert "Exception ignored" not in res.stderr and "Traceback" not in res.stderr
    assert list(out.iterdir()) == []  # no half-written graph, no temporary file left
