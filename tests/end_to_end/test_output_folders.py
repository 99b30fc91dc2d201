"""Output folders that cannot be folders are refused in one line by every command that writes one."""

import pytest

from tests.support.cli import assert_one_line_exit_2
from tests.support.runs import SCORED_SYSTEMS, write_scored_run
from tests.support.suites import TINY_SYSTEM, write_lineup, write_tiny_suite


@pytest.mark.parametrize(
    "where, words",
    [
        ("/dev/null", "/dev/null is not a folder"),
        ("afile", "afile is a file"),
        ("afile/below", "afile is a file"),
    ],
)
def test_output_folders_that_cannot_be_folders(tmp_path, cli, where, words):
    (tmp_path / "afile").write_text("x")
    target = where if where.startswith("/") else tmp_path / where
    gen = cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path), "--runs-dir", target, "--no-progress",
    )  # fmt: skip
    assert_one_line_exit_2(gen, "run directory", words)
    write_scored_run(tmp_path / "runs", "r", SCORED_SYSTEMS)
    assert_one_line_exit_2(cli("leaderboard", tmp_path / "runs" / "r", "--out", target), "--out", words)
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("command", ["generate", "run"])
@pytest.mark.parametrize("run_id", ["../../escaped", "/ABS", ".hidden", "a/b"])
def test_run_id_that_is_not_one_plain_folder_name_is_refused(tmp_path, cli, command, run_id):
    (tmp_path / "runs").mkdir()
    run_id = run_id.replace("/ABS", str(tmp_path / "abs"))  # an absolute path replaces --runs-dir
    if command == "generate":
        argv = [
            "generate",
            "--model",
            "tiny-random",
            "--suite",
            write_tiny_suite(tmp_path),
            "--runs-dir",
            tmp_path / "runs",
        ]
    else:
        argv = [
            "run",
            "--lineup",
            write_lineup(tmp_path, [TINY_SYSTEM]),
            "--runs-dir",
            tmp_path / "runs",
            "--out",
            tmp_path / "lb",
        ]
    assert_one_line_exit_2(cli(*argv, "--run-id", run_id), "--run-id", "plain folder name")
    assert not (tmp_path / "runs" / run_id).exists()
    assert not list((tmp_path / "runs").iterdir())
