"""A registered plugin metric is not in the default metric set (a plugin metric runs only when named):
``maxbench score`` without ``--metrics`` says so on standard error, naming it and how to ask for it,
instead of leaving it out in silence; asked for, it is scored and no note is printed."""

from __future__ import annotations

import json

import pytest

from maxbench.benchmark.commands import score as score_command
from tests.support.plugin_files import UNIQ2

pytestmark = pytest.mark.usefixtures("no_plugins")


@pytest.fixture
def texts(tmp_path, monkeypatch):
    # a cheap default set, so that the default path itself runs here (the real one loads models)
    monkeypatch.setattr(score_command, "DEFAULT_METRICS", ("rep", "distinct"))
    (tmp_path / "plugin.py").write_text(UNIQ2)
    (tmp_path / "g.txt").write_text("the soup was good and the bread was fresh\nmy dog loved it, the box was small\n")
    return tmp_path


def test_score_with_the_default_metrics_names_the_unscored_plugin_metric_and_how_to_ask(cli, texts):
    rc, out, err = cli("score", "--generations", texts / "g.txt", "--include", texts / "plugin.py", "--json")
    assert rc == 0, err
    assert "uniq2" not in json.loads(out)["scores"]  # not scored, as the docs say; stdout stays JSON
    (note,) = [line for line in err.splitlines() if line.startswith("maxbench: note: ")]
    assert "plugin metric 'uniq2'" in note and str((texts / "plugin.py").resolve()) in note
    assert "is not scored" in note and "--metrics uniq2" in note


def test_a_plugin_metric_asked_for_is_scored_without_a_note(cli, texts):
    rc, out, err = cli(
        "score", "--generations", texts / "g.txt", "--include", texts / "plugin.py", "--metrics", "rep,uniq2", "--json"
    )
    assert rc == 0, err
    assert "uniq2" in json.loads(out)["scores"] and "note" not in err


def test_no_plugin_no_note(cli, texts):
    rc, _, err = cli("score", "--generations", texts / "g.txt", "--json")
    assert rc == 0, err
    assert "note" not in err
