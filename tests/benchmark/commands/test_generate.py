"""``maxbench generate``: several systems into one run, bad numbers and names refused in one line
before any work, the smoke suite generated."""

import json
import math

import pytest

from tests.support.cli import assert_one_line_exit_2
from tests.support.suites import write_tiny_suite


def test_smoke_suite_generates_on_tiny_random(tmp_path, cli):
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", "smoke", "--runs-dir", tmp_path, "--run-id", "r",
        "--max-new-tokens", "4", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    rows = [json.loads(line) for line in (tmp_path / "r" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["reference_logprobs"] for r in rows)
    long = [r for r in rows if r.get("reference_stride")]
    assert long and all(r["reference_stride"] == 256 and len(r["reference_logprobs"]) > 512 for r in long)
    assert all(v is None or math.isfinite(v) for r in rows for v in r["reference_logprobs"])
    rc, _, err = cli("score", tmp_path / "r", "--metrics", "ref-ppl")
    assert rc == 0, err
    scores = json.loads((tmp_path / "r" / "scores.json").read_text())
    assert "|stride:256" in json.dumps(scores)


@pytest.mark.parametrize(
    "prompt, reference, decoding, words",
    [
        ("Hello {i}", "x", "greedy,max_new_tokens=100000000", "max_new_tokens=100000000 needs 100000"),
        ("a" * 10_000_000 + "{i}", "x", "greedy,max_new_tokens=4", "at least"),
    ],
    # a reference past the context is scored in strided windows now (tests/benchmark/metrics/test_perplexity.py)
    ids=["max_new_tokens=1e8", "10-MB-prompt"],
)
def test_positions_past_the_models_context_are_refused_before_generating(
    tmp_path, cli, prompt, reference, decoding, words
):
    suite = write_tiny_suite(tmp_path, n=2, prompt=prompt, reference=reference)
    rc = cli(
        "generate", "--model", "tiny-random", "--suite", suite, "--decoding", decoding, "--runs-dir", tmp_path / "runs",
        "--no-progress",
    )  # fmt: skip
    assert_one_line_exit_2(rc, words, "tiny-random's context of 512")
    assert not (tmp_path / "runs").exists()


def test_a_batch_that_cannot_fit_in_memory_is_refused_before_generating(tmp_path, cli, monkeypatch):
    import maxbench.systems.decoding

    monkeypatch.setattr(maxbench.systems.decoding, "available_memory", lambda device: 1 << 16)
    rc = cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path), "--runs-dir", tmp_path / "runs"
    )
    assert_one_line_exit_2(rc, "GiB free", "lower the batch size")
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- generate: several systems, max new tokens
def test_generate_takes_several_layers_and_systems_into_one_run(tmp_path, cli):
    rc, out, err = cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path, n=2), "--decoding", "greedy",
        "--layer", "softmax", "--layer", "sparsemax", "--system", "tiny-random/softmax/top_p=0.9",
        "--max-new-tokens", "3", "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    assert list(manifest["systems"]) == [
        "tiny-random/softmax/greedy,max_new_tokens=3",
        "tiny-random/sparsemax/greedy,max_new_tokens=3",
        "tiny-random/softmax/top_p=0.9,max_new_tokens=3",
    ]
    rows = [json.loads(line) for line in (tmp_path / "runs" / "r" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 and all(r["n_tokens"] <= 3 for r in rows)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--system", "tiny-random/softmax/greedy,max_new_tokens=9", "--max-new-tokens", "3"], "give it in one place"),
        (["--layer", "softmax", "--layer", "softmax"], "is given twice"),
        (["--max-new-tokens", "0"], "max_new_tokens must be >= 1"),
    ],
)
def test_generate_conflicting_systems_are_refused(tmp_path, cli, argv, words):
    rc = cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path), "--runs-dir", tmp_path / "r", *argv
    )
    assert_one_line_exit_2(rc, words)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--samples", "100000000"], "600,000,000 rows (prompts x samples x systems)"),
        (["--decoding", "temp=1e400"], "temperature must be a finite number"),
    ],
)
def test_out_of_range_numbers_are_refused_before_any_work(tmp_path, cli, argv, words):
    rc = cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path), "--runs-dir", tmp_path / "r", *argv
    )
    assert_one_line_exit_2(rc, words)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("model", ["a/b..c", "a/b--c"])
def test_model_that_is_not_a_valid_hub_id_is_one_line(tmp_path, cli, model):
    rc = cli("generate", "--model", model, "--suite", write_tiny_suite(tmp_path), "--runs-dir", tmp_path / "r")
    assert_one_line_exit_2(rc, "is not a valid Hugging Face hub id")
    assert not (tmp_path / "r").exists()
