"""``reproduce --report-only`` reads each run's ``scores.json`` through the run folder's owner: a
truncated file is one line naming it, not a traceback."""

from __future__ import annotations

import json

import pytest

from maxbench import plugins
from maxbench.benchmark.reproduce.evidence import read_scores
from maxbench.errors import MaxbenchError


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def test_a_truncated_scores_json_is_one_line_naming_it(cli, tmp_path):
    rows = [{"id": f"p{i}", "prompt": f"Review number {i}: the soup was"} for i in range(2)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "two"\nfile = "p.jsonl"\n')
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", tmp_path / "s.toml", "--decoding", "greedy,max_new_tokens=3",
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress", "--threads", "1",
    )  # fmt: skip
    assert rc == 0, err
    run = tmp_path / "runs" / "r"
    assert cli("score", run, "--metrics", "uniq", "--bootstrap", "0", "--quiet")[0] == 0
    assert read_scores(run)["systems"]
    text = (run / "scores.json").read_text()
    (run / "scores.json").write_text(text[: len(text) // 2])
    with pytest.raises(MaxbenchError) as exc:
        read_scores(run)
    assert str(run / "scores.json") in str(exc.value) and "\n" not in str(exc.value)
    assert read_scores(tmp_path / "runs") is None  # a folder without scores


def test_a_damaged_timings_line_is_one_line_naming_the_file(tmp_path):
    from types import SimpleNamespace

    from maxbench.benchmark.reproduce.evidence import run_wall_seconds, time_per_token

    run = tmp_path / "r"
    run.mkdir()
    (run / "timings.jsonl").write_text('{"phase": "generate a", "seconds": 1.0}\n{"phase": "gen\n')
    with pytest.raises(MaxbenchError, match="timings.jsonl") as exc:
        run_wall_seconds(SimpleNamespace(run_dir=run))
    assert "\n" not in str(exc.value)
    with pytest.raises(MaxbenchError, match="timings.jsonl"):
        time_per_token(run)
    (run / "timings.jsonl").write_text('{"phase": "generate a", "seconds": 1.5}\n{"phase": "gen')  # cut mid-write
    assert run_wall_seconds(SimpleNamespace(run_dir=run)) == 1.5
