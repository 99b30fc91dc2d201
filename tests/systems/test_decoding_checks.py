"""Every decoding step checks the layer's scores (``ScoreCheck``): a plugin layer that misbehaves only
after the start-up probe stops the run with one line naming it and the first bad step, and the batches
decoded before it are kept."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from maxbench import plugins
from maxbench.errors import MaxbenchError
from maxbench.systems.layers.base import CHECK_EVERY, ScoreCheck

#: a layer that gives the logits for its first ``calls`` calls (the probe is the first), then ``bad``
LATE = """
import torch

import maxbench
from maxbench.systems.layers.base import OutputLayer


class Late(OutputLayer):
    name = "late"
    calls = 0

    def scores(self, logits, hidden):
        Late.calls += 1
        if Late.calls <= {calls}:
            return logits
        return {bad}


maxbench.register_layer(Late)
"""


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _generate(cli, tmp_path, plugin, decoding="greedy,max_new_tokens=6", batch="8"):
    rows = [{"id": f"p{i}", "prompt": f"Review number {i}: the soup was"} for i in range(4)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "four"\nfile = "p.jsonl"\n')
    return cli(
        "generate", "--model", "tiny-random", "--suite", tmp_path / "s.toml", "--decoding", decoding,
        "--layer", "late", "--include", plugin, "--runs-dir", tmp_path / "runs", "--run-id", "r",
        "--no-progress", "--threads", "1", "--batch-size", batch,
    )  # fmt: skip


def _plugin(tmp_path, bad, calls=1):
    path = tmp_path / "late.py"
    path.write_text(textwrap.dedent(LATE.format(bad=bad, calls=calls)))
    return path


@pytest.mark.parametrize(
    "bad",
    [
        "logits * float('nan')",
        "torch.full_like(logits, float('-inf'))",
        "logits + float('inf')",
    ],
)
@pytest.mark.parametrize("decoding", ["greedy,max_new_tokens=6", "top_p=0.9,max_new_tokens=6"])
def test_a_layer_that_turns_non_finite_after_the_probe_stops_the_run_naming_it_and_the_step(
    cli, tmp_path, bad, decoding
):
    rc, _, err = _generate(cli, tmp_path, _plugin(tmp_path, bad, calls=3), decoding)
    assert rc == 2 and err.count("\n") == 1, err
    assert "plugin output layer 'late' from file" in err and "decoding step 2" in err
    generations = tmp_path / "runs" / "r" / "generations.jsonl"
    assert not generations.exists() or not generations.read_text().strip()


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("logits.long()", "torch.int64"),
        ("torch.empty_like(logits, device='meta')", "meta"),
        ("torch.cat([logits, logits[:, :1]], dim=1)", "shape"),
        ("logits.tolist()", "list, not a tensor"),
        ("1 / 0", "ZeroDivisionError"),
    ],
)
def test_a_layer_returning_the_wrong_form_after_the_probe_is_one_line(cli, tmp_path, bad, said):
    rc, _, err = _generate(cli, tmp_path, _plugin(tmp_path, bad))
    assert rc == 2 and err.count("\n") == 1, err
    assert "plugin output layer 'late'" in err and said in err and "decoding step 0" in err


@pytest.mark.parametrize(
    ("bad", "said"),
    [("logits.long()", "torch.int64"), ("torch.empty_like(logits, device='meta')", "meta")],
)
def test_the_probe_refuses_integer_and_meta_scores(cli, tmp_path, bad, said):
    rc, _, err = _generate(cli, tmp_path, _plugin(tmp_path, bad, calls=0))
    assert rc == 2 and err.count("\n") == 1, err
    assert "on a probe" in err and said in err
    assert not (tmp_path / "runs" / "r").exists()


def test_batches_decoded_before_the_bad_one_are_kept_and_the_run_resumes(cli, tmp_path):
    # batch size 2: the probe, then 6 steps of the first batch are good; the second batch's first step is NaN
    plugin = _plugin(tmp_path, "logits * float('nan')", calls=7)
    rc, _, err = _generate(cli, tmp_path, plugin, batch="2")
    assert rc == 2 and "decoding step 0" in err
    rows = (tmp_path / "runs" / "r" / "generations.jsonl").read_text().splitlines()
    assert [json.loads(r)["prompt_id"] for r in rows] == ["p0", "p1"]
    plugin.write_text(textwrap.dedent(LATE.format(bad="logits", calls=0)))
    rc, _, err = _generate(cli, tmp_path, plugin, batch="2")
    # the fixed plugin is other code: the run refuses to mix its rows with the first ones, as promised
    assert rc == 2 and "must not be mixed" in err


def test_the_flag_is_read_every_k_steps_not_every_step():
    check = ScoreCheck("layer 'x'")
    logits = torch.zeros(2, 4)
    check.add(torch.full((2, 4), float("nan")), logits, 0)  # recorded, not read yet
    for step in range(1, CHECK_EVERY - 1):
        check.add(logits, logits, step)
    with pytest.raises(MaxbenchError, match="step 0"):
        check.add(logits, logits, CHECK_EVERY - 1)


def test_a_row_with_some_minus_infinity_is_fine_and_a_row_with_only_minus_infinity_is_not():
    check = ScoreCheck("layer 'x'")
    logits = torch.zeros(2, 3)
    check.add(torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf"), 2.0, float("-inf")]]), logits, 0)
    check.read()
    check.add(torch.tensor([[0.0, 1.0, 1.0], [float("-inf")] * 3]), logits, 1)
    with pytest.raises(MaxbenchError, match="step 1"):
        check.read()


def test_a_plugin_layer_whose_own_sample_raises_is_one_line(cli, tmp_path):
    path = tmp_path / "late.py"
    path.write_text(
        textwrap.dedent(LATE.format(bad="logits", calls=1))
        + "\nLate.sample = lambda self, scores, warp, generators: 1 / 0\n"
    )
    rc, _, err = _generate(cli, tmp_path, path, decoding="top_k=5,max_new_tokens=4")
    assert rc == 2 and err.count("\n") == 1, err
    assert "plugin output layer 'late'" in err and "sample() failed at decoding step 0: ZeroDivisionError" in err
