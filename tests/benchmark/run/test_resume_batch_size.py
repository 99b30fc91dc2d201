"""A run stopped by CUDA running out of memory goes on at a smaller batch size: a run of the device
generator resumes with ``--batch-size`` and ends with the rows an uninterrupted run makes, token for
token, its manifest recording both batch sizes; a run of the CPU generator, whose text depends on its
batch, is refused at another batch size in one line, nothing lost."""

import json

import pytest
import torch

import maxbench.systems.decoding
from tests.support.cli import assert_one_line_exit_2

#: prompts of different lengths, so that a batch pads some of them and two batch sizes pad them otherwise
PROMPTS = [f"Review {i}: the {'very ' * (i % 3)}soup was" for i in range(8)]


def _suite(tmp_path):
    rows = [{"id": f"p{i:02d}", "prompt": p, "reference": f"cold and salty {i}"} for i, p in enumerate(PROMPTS)]
    (tmp_path / "eight.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "eight.toml").write_text('name = "eight"\nfile = "eight.jsonl"\n')
    return tmp_path / "eight.toml"


def _generate(cli, tmp_path, run_id, batch_size, *extra):
    return cli(
        "generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--decoding", "top_p=0.9,max_new_tokens=6",
        "--runs-dir", tmp_path / "runs", "--run-id", run_id, "--no-progress", "--threads", "1",
        "--batch-size", str(batch_size), *extra,
    )  # fmt: skip


def _rows(tmp_path, run_id) -> list[dict]:
    return [json.loads(r) for r in (tmp_path / "runs" / run_id / "generations.jsonl").read_text().split("\n") if r]


def _manifest(tmp_path, run_id) -> dict:
    return json.loads((tmp_path / "runs" / run_id / "manifest.json").read_text())


def _out_of_memory_on_the_second_batch(monkeypatch):
    """CUDA running out of memory on the run's second batch, as a GPU would."""
    real, calls = maxbench.systems.decoding.decode, {"n": 0}

    def decode(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(*a, **k)

    monkeypatch.setattr(maxbench.systems.decoding, "decode", decode)


def test_a_device_generator_run_out_of_memory_at_batch_4_resumed_at_batch_2_gives_the_uninterrupted_rows(
    cli, tmp_path, monkeypatch
):
    rc, _, err = _generate(cli, tmp_path, "whole", 4, "--generator", "device")
    assert rc == 0, err
    with monkeypatch.context() as m:
        _out_of_memory_on_the_second_batch(m)
        assert_one_line_exit_2(
            _generate(cli, tmp_path, "r", 4, "--generator", "device"),
            "ran out of memory decoding a batch of 4 prompts",
            "resume with --batch-size 2",
            "every finished row is kept",
        )
    assert [r["prompt_id"] for r in _rows(tmp_path, "r")] == ["p00", "p01", "p02", "p03"]
    rc, _, err = _generate(cli, tmp_path, "r", 2, "--generator", "device")
    assert rc == 0, err
    assert "resumes at batch size 2 (4 rows were finished before" in err
    whole, resumed = _rows(tmp_path, "whole"), _rows(tmp_path, "r")
    assert [(r["prompt_id"], r["seed"]) for r in resumed] == [(r["prompt_id"], r["seed"]) for r in whole]
    assert [r["token_ids"] for r in resumed] == [r["token_ids"] for r in whole]
    assert [r["text"] for r in resumed] == [r["text"] for r in whole]
    assert sum(len(r["token_ids"]) for r in whole) > 8  # sampled text to compare, not empty rows
    manifest = _manifest(tmp_path, "r")
    assert manifest["identity"] == _manifest(tmp_path, "whole")["identity"]  # batch size 4, the first part's
    assert [(p["batch_size"], p["rows_before"]) for p in manifest["batch_sizes"]] == [(4, 0), (2, 4)]
    assert "batch_sizes" not in _manifest(tmp_path, "whole")
    rc, _, err = _generate(cli, tmp_path, "r", 2, "--generator", "device")  # finished: nothing new recorded
    assert rc == 0, err
    assert _manifest(tmp_path, "r") == manifest


def test_a_cpu_generator_run_out_of_memory_says_to_start_a_new_run_and_refuses_another_batch_size(
    cli, tmp_path, monkeypatch
):
    import maxbench.systems.models

    with monkeypatch.context() as m:
        _out_of_memory_on_the_second_batch(m)
        assert_one_line_exit_2(
            _generate(cli, tmp_path, "r", 4),
            "ran out of memory decoding a batch of 4 prompts",
            "every finished row is kept",
            "start a new --run-id with --batch-size 2",
            "--generator device",
        )
    run = tmp_path / "runs" / "r"
    files = {p.name: p.read_bytes() for p in (run / "generations.jsonl", run / "manifest.json")}
    with monkeypatch.context() as m:
        m.setattr(maxbench.systems.models, "load_model", pytest.fail)  # refused before any model loads
        assert_one_line_exit_2(
            _generate(cli, tmp_path, "r", 2),
            "was generated at batch size 4 with the cpu generator",
            "resume it with --batch-size 4",
        )
    assert {p.name: p.read_bytes() for p in (run / "generations.jsonl", run / "manifest.json")} == files
    rc, _, err = _generate(cli, tmp_path, "r", 4)  # at its own batch size the run resumes
    assert rc == 0, err
    assert [r["prompt_id"] for r in _rows(tmp_path, "r")] == [f"p{i:02d}" for i in range(8)]
