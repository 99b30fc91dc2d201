"""The Python API checks its arguments with the commands' own checks (``maxbench.arguments``), before
any work: a wrong type or range is one MaxbenchError naming the argument, never a bare TypeError, a
value recorded as given and computed as another, or an interval with low > high."""

from __future__ import annotations

import json

import pytest

import maxbench
from maxbench.api import RunResult
from maxbench.errors import MaxbenchError
from maxbench.human_eval.testing.participants import SYSTEMS, write_run

TINY = "tiny-random/softmax/top_p=0.9,max_new_tokens=4"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"level": -1}, "level must be between 0 and 1"),
        ({"level": 95}, "level must be between 0 and 1 (e.g. 0.95, not 95), got 95"),
        ({"level": "0.95"}, "level must be a number between 0 and 1"),
        ({"n_resamples": 0}, "n_resamples must be >= 1"),
        ({"n_resamples": 10.5}, "n_resamples must be a whole number, got float 10.5"),
        ({"seed": "7"}, "seed must be a whole number, got str '7'"),
        ({"metrics": 3}, "metrics must be a name"),
        ({"progress": "yes"}, "progress must be True or False"),
    ],
)
def test_run_result_compare_refuses_what_the_cli_refuses(tmp_path, kwargs, message):
    a = RunResult(tmp_path / "a", {}, [], None)  # nothing is read before the arguments are checked
    with pytest.raises(MaxbenchError) as info:
        a.compare(tmp_path / "b", **kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("flag,value", [("--confidence", "95"), ("--confidence", "-1"), ("--bootstrap", "0")])
def test_the_cli_refuses_the_same_compare_arguments(cli, tmp_path, flag, value):
    rc, _, err = cli("compare", tmp_path / "a", tmp_path / "b", flag, value)
    assert rc == 2 and err.startswith(f"maxbench: error: {flag} must be")


@pytest.mark.parametrize(
    "args,kwargs,message",
    [
        ((TINY,), {"seed": "7"}, "seed must be a whole number, got str '7'"),
        ((TINY,), {"samples": "2"}, "samples must be a whole number, got str '2'"),
        ((5,), {}, "systems must be a system string or a list of them"),
        (([TINY, 5],), {}, "systems must be a system string or a list of them"),
        ((TINY,), {"n_resamples": 10.5}, "n_resamples must be a whole number, got float 10.5"),
        ((TINY,), {"n_resamples": -1}, "n_resamples must be >= 0"),
        ((TINY,), {"batch_size": True}, "batch_size must be a whole number, got bool True"),
        ((TINY,), {"threads": 0}, "threads must be >= 1"),
        ((TINY,), {"metrics": 7}, "metrics must be a name"),
        ((TINY,), {"reference_ppl": "no"}, "reference_ppl must be True or False"),
        ((TINY,), {"run_id": 3}, "run_id must be a string or None"),
        ((TINY,), {"suite": 1}, "suite must be a path"),
    ],
)
def test_evaluate_checks_every_argument_before_any_work(tmp_path, args, kwargs, message):
    runs = tmp_path / "runs"
    with pytest.raises(MaxbenchError) as info:
        maxbench.evaluate(*args, runs_dir=runs, **kwargs)
    assert message in str(info.value)
    assert not runs.exists()  # nothing generated, nothing written


def test_evaluate_reads_one_metric_name_as_one_name_not_its_letters(tmp_path):
    with pytest.raises(MaxbenchError) as info:  # refused by name, as --metrics refuses it; no letters
        maxbench.evaluate(TINY, metrics="nosuchmetric", runs_dir=tmp_path / "runs")
    assert "nosuchmetric" in str(info.value) and "'n'" not in str(info.value)
    from maxbench import arguments

    assert arguments.names("rep", "metrics") == ["rep"]
    assert arguments.names("rep, distinct", "metrics") == ["rep", "distinct"]


def test_compare_with_an_unscored_run_says_which_run_has_no_scores(cli, tmp_path):
    a = write_run(tmp_path / "a", SYSTEMS, 3)
    b = write_run(tmp_path / "b", SYSTEMS, 3)
    (a / "scores.json").write_text(json.dumps({}))
    rc, _, err = cli("compare", a, b)
    assert rc == 2 and f"run {b} has no scores" in err and "--metrics" in err and "MAUVE" not in err
    with pytest.raises(MaxbenchError, match="has no scores.*metrics="):  # the API: its own spelling
        RunResult(a, {}, [], None).compare(b)
