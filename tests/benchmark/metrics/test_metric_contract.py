"""``Metric.compute`` holds every metric's result to the contract (``Metric.check_result``): a plugin
metric that returns the wrong thing, raises, or gives a value outside its declared range is one line
naming it, in Python and from ``maxbench score`` (exit 2, no traceback)."""

from __future__ import annotations

import json
import textwrap

import pytest

from maxbench import plugins
from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.errors import MaxbenchError

METRIC = """
import numpy as np

import maxbench
from maxbench.benchmark.metrics.base import Metric, MetricResult, Score, mean_score


class Bad(Metric):
    name = "bad"
    variant = "test"
    signature = "bad|test"

    def _compute(self, batch):
        return {ret}


maxbench.register_metric(Bad)
"""

CASES = [
    ('{"bad": 1.0}', "compute returned dict, not a MetricResult"),
    ("None", "compute returned NoneType, not a MetricResult"),
    ('"0.5"', "compute returned str, not a MetricResult"),
    ('self.result([Score("bad", 0.5, None, per_text=np.array([0.5]))])', "1 per-text values for 3 texts"),
    ("1 / 0", "compute failed: ZeroDivisionError"),
    ('self.result([Score("other", 0.5, None)])', "computed scores ['other'], but declares ['bad']"),
    ('self.result([Score("bad", float("nan"), None)])', "score 'bad' is nan; give an undefined score as value=None"),
    ('self.result([Score("bad", "0.5", None)])', "has the value '0.5', not a number"),
    ('self.result([Score("bad", 7.0, None)])', "score 'bad' is 7, outside its declared range [0, 1]"),
    ('self.result([mean_score(batch, "bad", [7.0] * len(batch.texts))])', "outside its declared range [0, 1]"),
    ('self.result({"bad": Score("bad", 0.5, None)})', "result() takes a list of Score"),
    (
        'MetricResult("bad", "t", "bad|t", True, {"extra": Score("extra", 0.5, None)})',
        "computed scores ['extra'], but declares ['bad']",
    ),
]


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _include(tmp_path, ret):
    path = tmp_path / "bad.py"
    path.write_text(textwrap.dedent(METRIC.format(ret=ret)))
    plugins.include(path)
    return path


@pytest.mark.parametrize(("ret", "said"), CASES)
def test_a_plugin_metric_breaking_the_contract_is_one_line_naming_it(tmp_path, ret, said):
    path = _include(tmp_path, ret)
    with pytest.raises(MaxbenchError) as exc:
        get_metric("bad").compute(TextBatch(["a b", "c d", "e f"], ["p0", "p1", "p2"]))
    message = str(exc.value)
    assert said in message and f"plugin metric 'bad' from file {path.resolve()}" in message and "\n" not in message


def test_a_value_inside_its_range_is_kept(tmp_path):
    _include(tmp_path, 'self.result([mean_score(batch, "bad", [1.0, 0.0, 0.5])])')
    result = get_metric("bad").compute(TextBatch(["a b", "c d", "e f"], ["p0", "p1", "p2"]))
    assert result.scores["bad"].value == 0.5


def _run(cli, tmp_path):
    rows = [{"id": f"p{i}", "prompt": f"Review number {i}: the soup was"} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "three"\nfile = "p.jsonl"\n')
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", tmp_path / "s.toml", "--decoding", "greedy,max_new_tokens=4",
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress", "--threads", "1",
    )  # fmt: skip
    assert rc == 0, err
    return tmp_path / "runs" / "r"


@pytest.mark.parametrize(("ret", "said"), [CASES[9], CASES[6], CASES[5], CASES[0]])
def test_score_with_a_plugin_metric_breaking_the_contract_exits_2_with_one_line(cli, tmp_path, ret, said):
    run = _run(cli, tmp_path)
    path = tmp_path / "bad.py"
    path.write_text(textwrap.dedent(METRIC.format(ret=ret)))
    rc, _, err = cli("score", run, "--metrics", "uniq,bad", "--bootstrap", "10", "--quiet", "--include", path)
    assert rc == 2 and err.count("\n") == 1 and said in err and "plugin metric 'bad'" in err, err
    doc = json.loads((run / "scores.json").read_text())  # the other metric's scores are kept
    (system,) = doc["systems"].values()
    assert system["scores"]["uniq"]["value"] is not None and system["scores"]["bad"]["value"] is None


def test_flip_check_given_a_run_result_is_one_line():
    from types import SimpleNamespace

    from maxbench.benchmark.metrics.attributes import flip_check

    run = SimpleNamespace(path="r")
    with pytest.raises(MaxbenchError, match="flip_check takes two TextBatch .* are a SimpleNamespace"):
        flip_check(run, run)
