"""Reading a scored run for the leaderboard: a scores file of the wrong shape is reported where it
is wrong."""

import json
from pathlib import Path

import pytest

from maxbench.errors import MaxbenchError


def _scored(tmp_path, systems, **extra) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "scores.json").write_text(json.dumps({"systems": systems, **extra}))
    return run


@pytest.mark.parametrize(
    ("systems", "extra", "expected"),
    [
        ("softmax", {}, "'systems' is a string, expected an object"),
        ({"a/softmax/greedy": "oops"}, {}, "systems['a/softmax/greedy'] is a string, expected an object"),
        ({"s": {"scores": "x"}}, {}, "systems['s']['scores'] is a string"),
        ({"s": {"scores": {"bleu-4": 3}}}, {}, "systems['s']['scores']['bleu-4'] is a number"),
        ({"s": {"scores": {}}}, {"comparisons": "none"}, "'comparisons' is a string"),
        ({"s": {"scores": {}}}, {"comparisons": {"systems": {"s": []}}}, "comparisons['systems']['s'] is a list"),
    ],
)
def test_a_wrongly_typed_scores_value_is_reported_where_it_is(tmp_path, systems, extra, expected):
    from maxbench.benchmark.present.leaderboard import load_scored_run

    with pytest.raises(MaxbenchError) as err:
        load_scored_run(_scored(tmp_path, systems, **extra))
    assert expected in str(err.value) and "rescore the run" in str(err.value)


def test_missing_systems_is_still_reported_as_missing(tmp_path):
    from maxbench.benchmark.present.leaderboard import load_scored_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "scores.json").write_text("{}")
    with pytest.raises(MaxbenchError, match="has no 'systems' table"):
        load_scored_run(run)


def test_a_string_identity_in_the_manifest_is_reported(tmp_path):
    from maxbench.benchmark.present.leaderboard import load_scored_run

    run = _scored(tmp_path, {"s": {"scores": {}}})
    (run / "manifest.json").write_text(json.dumps({"identity": "x"}))
    with pytest.raises(MaxbenchError, match="'identity' is a string"):
        load_scored_run(run)
