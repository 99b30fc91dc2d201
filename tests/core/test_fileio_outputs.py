"""An output never lands on an input: every command that writes a file refuses, before any work, a path
that is one of its inputs or resolves to one through links (``maxbench.fileio.check_not_input``)."""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest

from maxbench.errors import MaxbenchError
from maxbench.fileio import check_not_input, check_output_file
from maxbench.human_eval.testing.participants import SYSTEMS, write_run


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_refusal(rc, err, *named):
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    for text in named:
        assert str(text) in lines[0], (text, lines[0])
    assert "an input of this command" in lines[0]


@pytest.fixture
def study(cli, tmp_path, monkeypatch):
    """A study in a SQLite database of its own; returns (database file, URL, study slug)."""
    monkeypatch.chdir(tmp_path)
    run = write_run(tmp_path / "runs" / "r1", SYSTEMS, 5)
    db = tmp_path / "R.sqlite3"
    url = f"sqlite:///{db}"
    argv = ["study", "create", run, "--items-per-system", 2, "--raters-per-item", 1, "--rubric", "fluency"]
    rc, out, err = cli(*argv, "--db", url)
    assert rc == 0, err
    slug = out.split("study: ")[1].split()[0]
    return db, url, slug


def study_count(db) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from study").fetchone()[0]


def test_the_check_resolves_links_and_hard_links(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("x\n")
    inputs = [(data, "the texts")]
    (tmp_path / "soft").symlink_to(data)
    os.link(data, tmp_path / "hard")
    (tmp_path / "folder-link").symlink_to(tmp_path, target_is_directory=True)
    for out in (data, tmp_path / "soft", tmp_path / "hard", tmp_path / "folder-link" / "data.jsonl"):
        with pytest.raises(MaxbenchError, match="an input of this command"):
            check_output_file(out, "--out", inputs)
    check_output_file(tmp_path / "other.jsonl", "--out", inputs)  # another file is fine
    with pytest.raises(MaxbenchError, match="replaced whole, and it holds the texts"):
        check_not_input(tmp_path, "--out", inputs, whole_folder=True)
    check_not_input(tmp_path / "sub", "--out", inputs, whole_folder=True)


@pytest.mark.parametrize("action", ["participants", "export"])
@pytest.mark.parametrize("spelling", ["same", "link", "wal"])
def test_study_outputs_never_replace_the_ratings_database(cli, study, tmp_path, action, spelling):
    db, url, slug = study
    before = digest(db)
    target = {"same": db, "link": tmp_path / "ratings-link", "wal": tmp_path / "R.sqlite3-wal"}[spelling]
    if spelling == "link":
        target.symlink_to(db)
    rc, out, err = cli("study", action, slug, "--db", url, "--out", "R.sqlite3" if spelling == "same" else target)
    one_line_refusal(rc, err, "--out", db)
    assert digest(db) == before and study_count(db) == 1


def test_study_create_never_writes_its_links_over_the_database(cli, study, tmp_path):
    db, url, _ = study
    before = digest(db)
    run = tmp_path / "runs" / "r1"
    argv = ["study", "create", run, "--items-per-system", 2, "--raters-per-item", 1, "--rubric", "fluency"]
    rc, out, err = cli(*argv, "--db", url, "--links-out", db)
    one_line_refusal(rc, err, "--links-out", db)
    assert "adm-" not in out and digest(db) == before and study_count(db) == 1  # no second study either
    rc, _, err = cli(*argv, "--db", url, "--links-out", run / "generations.jsonl")
    one_line_refusal(rc, err, "the run's texts")


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "runs" / "a", SYSTEMS, 3)


@pytest.mark.parametrize("name", ["generations.jsonl", "scores.json", "manifest.json", "generations.removed.jsonl"])
def test_export_refuses_a_file_of_the_run(cli, run, name):
    (run / "scores.json").write_text("{}\n")
    before = {p.name: digest(p) for p in run.iterdir()}
    rc, _, err = cli("export", run, "--format", "jsonl", "--out", run / name)
    one_line_refusal(rc, err, run / name)
    assert {p.name: digest(p) for p in run.iterdir()} == before


def test_export_refuses_a_link_to_a_file_of_the_run(cli, run, tmp_path):
    (tmp_path / "table.jsonl").symlink_to(run / "generations.jsonl")
    rc, _, err = cli("export", run, "--out", tmp_path / "table.jsonl")
    one_line_refusal(rc, err, "the run's texts")


def test_compare_refuses_a_file_of_either_run(cli, run, tmp_path):
    other = write_run(tmp_path / "runs" / "b", SYSTEMS, 3)
    for target in (run / "generations.jsonl", other / "manifest.json"):
        before = digest(target)
        rc, _, err = cli("compare", run, other, "--out", target)
        one_line_refusal(rc, err, target)
        assert digest(target) == before


def test_view_refuses_a_folder_holding_a_run_or_the_study_file(cli, run, tmp_path):
    rc, _, err = cli("view", run, "--out", tmp_path / "runs")
    one_line_refusal(rc, err, "replaced whole", run)
    study = tmp_path / "out" / "study.json"
    study.parent.mkdir()
    study.write_text("{}")
    rc, _, err = cli("view", run, "--study", study, "--out", tmp_path / "out")
    one_line_refusal(rc, err, study)
    assert study.read_text() == "{}"


def test_leaderboard_refuses_an_out_folder_whose_files_are_links_to_the_run(cli, run, tmp_path):
    out = tmp_path / "board"
    out.mkdir()
    (out / "leaderboard.csv").symlink_to(run / "scores.json")
    (run / "scores.json").write_text("{}\n")
    rc, _, err = cli("leaderboard", run, "--out", out)
    one_line_refusal(rc, err, f"--out {out}: its {out / 'leaderboard.csv'}", "the run's scores")
    assert (run / "scores.json").read_text() == "{}\n"


def test_report_refuses_to_write_over_its_ratings_file(cli, tmp_path):
    ratings = tmp_path / "reports" / "pilot" / "report.json"
    ratings.parent.mkdir(parents=True)
    source = os.path.join(os.path.dirname(__file__), "..", "data", "ratings_paired.csv")
    ratings.write_bytes(open(source, "rb").read())
    before = digest(ratings)
    rc, _, err = cli("report", "--ratings", ratings, "--out", tmp_path / "reports", "--name", "pilot")
    one_line_refusal(rc, err, ratings)
    rc, _, err = cli("report", "--ratings", ratings, "--out", tmp_path / "reports")  # the name not yet known
    one_line_refusal(rc, err, ratings)
    assert digest(ratings) == before


def test_run_refuses_an_out_folder_where_the_leaderboard_would_replace_its_suite(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prompts = tmp_path / "leaderboard.csv"  # a user's suite whose data file has the leaderboard's name
    prompts.write_text('{"id": "p0", "prompt": "The soup was", "reference": "cold"}\n')
    (tmp_path / "s.toml").write_text('name = "one"\nfile = "leaderboard.csv"\nformat = "jsonl"\n')
    (tmp_path / "l.toml").write_text('name = "mine"\nsystems = ["tiny-random/softmax/greedy,max_new_tokens=2"]\n')
    argv = ["run", "--lineup", "l.toml", "--suite", "s.toml", "--out", ".", "--runs-dir", "runs", "--metrics", "rep"]
    rc, _, err = cli(*argv, "--threads", 1, "--no-progress")
    one_line_refusal(rc, err, "suite one's prompts", prompts)
    assert not (tmp_path / "runs").exists()  # refused before the first token
