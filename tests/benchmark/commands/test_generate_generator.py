"""``--generator``: the run's manifest records the device generator (and nothing, for the CPU's default,
so runs made before the option keep their identity), a run resumes only with the generator it was
made with, refused in one line before any model loads; CUDA asked for without CUDA, and CUDA running
out of memory mid-run, are one line too, the finished batches kept."""

import json
import textwrap

import pytest
import torch

from tests.support.cli import assert_one_line_exit_2
from tests.support.suites import write_tiny_suite


def _generate(cli, tmp_path, *extra, decoding="top_p=0.9,max_new_tokens=4"):
    return cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path, n=4), "--decoding", decoding,
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress", "--threads", "1", "--batch-size", "2",
        *extra,
    )  # fmt: skip


def _identity(tmp_path):
    return json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())["identity"]


def _no_model_loads(monkeypatch):
    import maxbench.systems.models

    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(maxbench.systems.models, "load_model", refuse)


def test_the_device_generator_is_recorded_and_resuming_with_the_cpu_one_is_refused_before_loading(
    cli, tmp_path, monkeypatch
):
    rc, _, err = _generate(cli, tmp_path, "--generator", "device")
    assert rc == 0, err
    assert _identity(tmp_path)["generator"] == "device"
    rows = (tmp_path / "runs" / "r" / "generations.jsonl").read_text()
    rc, _, err = _generate(cli, tmp_path, "--generator", "device")  # the same generator resumes
    assert rc == 0, err
    _no_model_loads(monkeypatch)
    for other in (("--generator", "cpu"), ()):  # the CPU's default is the other generator too
        assert_one_line_exit_2(
            _generate(cli, tmp_path, *other),
            "generated with the device generator, not the cpu one",
            "--generator device",
        )
    assert (tmp_path / "runs" / "r" / "generations.jsonl").read_text() == rows


def test_the_cpus_default_records_nothing_and_refuses_the_device_generator(cli, tmp_path, monkeypatch):
    rc, _, err = _generate(cli, tmp_path)
    assert rc == 0, err
    assert "generator" not in _identity(tmp_path)  # the identity of runs made before the option
    _no_model_loads(monkeypatch)
    assert_one_line_exit_2(
        _generate(cli, tmp_path, "--generator", "device"), "with the cpu generator, not the device one"
    )


@pytest.mark.parametrize(
    ("extra", "said"),
    [(("--generator", "gpu"), "unknown generator 'gpu'; use cpu or device"), (("--device", "cuda"), "no CUDA GPU")],
)
def test_an_unknown_generator_and_cuda_without_cuda_are_refused_before_loading(cli, tmp_path, monkeypatch, extra, said):
    if "cuda" in extra and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _no_model_loads(monkeypatch)
    assert_one_line_exit_2(_generate(cli, tmp_path, *extra), said)
    assert not (tmp_path / "runs").exists()


OOM_LAYER = """
import torch

import maxbench
from maxbench.systems.layers.base import OutputLayer


class Big(OutputLayer):
    name = "big"
    calls = 0

    def scores(self, logits, hidden):
        Big.calls += 1
        # the probe, the first batch's 4 steps and its 2 references (ref-ppl) fit; the second batch does not
        if Big.calls > 7:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return logits


maxbench.register_layer(Big)
"""


def test_cuda_out_of_memory_mid_run_is_one_line_naming_a_batch_size_and_keeps_the_finished_rows(cli, tmp_path):
    from maxbench import plugins

    plugin = tmp_path / "big.py"
    plugin.write_text(textwrap.dedent(OOM_LAYER))
    plugins.forget()
    try:
        result = _generate(cli, tmp_path, "--layer", "big", "--include", plugin, decoding="greedy,max_new_tokens=4")
    finally:
        plugins.forget()
    assert_one_line_exit_2(
        result,
        "ran out of memory decoding a batch of 2 prompts",
        "every finished row is kept",
        "start a new --run-id with --batch-size 1",  # the cpu generator's run resumes at its own batch size only
    )
    rows = [json.loads(r) for r in (tmp_path / "runs" / "r" / "generations.jsonl").read_text().splitlines()]
    assert [r["prompt_id"] for r in rows] == ["p00", "p01"]
