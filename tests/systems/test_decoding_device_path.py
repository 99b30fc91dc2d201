"""What the decoding loop does to spare a GPU host synchronisations, checked on the CPU: ending
read every k steps changes no row, the logits' finiteness flag is read late but names the step's
rows, and CUDA running out of memory stops in one line naming a smaller batch."""

from __future__ import annotations

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.decoding import DecodingSetting, LogitCheck, decode, out_of_memory
from maxbench.systems.layers.softmax import SoftmaxLayer


class EndsRowByRow(SoftmaxLayer):
    """Softmax that makes row r end (EOS) at step r: rows of one batch end at different steps."""

    def __init__(self, eos: int):
        self.eos, self.step = eos, 0

    def scores(self, logits, hidden):
        out = logits.clone()
        rows = torch.arange(out.shape[0])
        out[rows == self.step, self.eos] = 1e4
        out[rows != self.step, self.eos] = float("-inf")
        self.step += 1
        return out


@pytest.mark.parametrize("generator", ["cpu", "device"])
@pytest.mark.parametrize("decoding", ["greedy,max_new_tokens=12", "top_p=0.9,max_new_tokens=12"])
def test_reading_the_end_every_k_steps_changes_no_row(tiny, generator, decoding):
    setting = DecodingSetting.parse(decoding)
    prompts = ["abc", "a longer prompt here", "xyz q", "the soup"]
    eos = tiny.tokenizer.eos_token_id
    one, eight = EndsRowByRow(eos), EndsRowByRow(eos)
    every = decode(tiny, one, prompts, setting, [1, 2, 3, 4], generator=generator, eos_every=1)
    batched = decode(tiny, eight, prompts, setting, [1, 2, 3, 4], generator=generator, eos_every=8)
    assert (one.step, eight.step) == (4, 8)  # the end read at once, and at the 8th step
    assert [r["finish"] for r in every] == ["eos"] * 4 and [r["n_tokens"] for r in every] == [0, 1, 2, 3]
    assert batched == every  # tokens, text, pieces and every step's statistics


def test_the_logits_flag_is_read_late_and_names_the_first_bad_steps_rows():
    check = LogitCheck("the base model", every=4)
    check.add(torch.zeros(3, 5))
    bad = torch.zeros(3, 5)
    bad[1, 2] = float("inf")
    check.add(bad)  # recorded, not read yet
    check.add(torch.full((3, 5), float("nan")))
    with pytest.raises(
        MaxbenchError, match=r"the base model: the model's logits contain NaN or infinite values \(batch rows \[1\]\)"
    ):
        check.add(torch.zeros(3, 5))


@pytest.mark.parametrize(("batch", "said"), [(8, "try a batch size of 4"), (1, "lower max_new_tokens")])
def test_cuda_out_of_memory_is_one_line_naming_a_smaller_batch(tiny, monkeypatch, batch, said):
    calls = {"n": 0}
    orig = tiny.model.forward

    def forward(*a, **k):  # the second step runs out of memory, as a GPU would
        calls["n"] += 1
        if calls["n"] == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return orig(*a, **k)

    monkeypatch.setattr(tiny.model, "forward", forward)
    with pytest.raises(MaxbenchError, match=said) as caught:
        decode(tiny, SoftmaxLayer(), ["abc"] * batch, DecodingSetting(max_new_tokens=4), list(range(batch)))
    assert "\n" not in str(caught.value) and "ran out of memory" in str(caught.value)


@pytest.mark.parametrize(
    ("batch", "resumes", "said"),
    [
        (48, None, ["a batch of 48 prompts", "try a batch size of 24"]),
        (
            48,
            True,
            ["a batch of 48 prompts", "resume with --batch-size 24", "batch_size = 24", "every finished row is kept"],
        ),
        (
            48,
            False,
            [
                "every finished row is kept",
                "the cpu generator, whose text depends on the rest of its batch",
                "start a new --run-id with --batch-size 24",
                "--generator device",
            ],
        ),
        (1, True, ["a batch of 1 prompt;", "every finished row is kept", "lower max_new_tokens"]),
    ],
)
def test_the_out_of_memory_line_names_the_batch_size_to_try_and_how_the_run_goes_on(batch, resumes, said):
    error = out_of_memory("cuda:0", batch, resumes)
    assert isinstance(error, MaxbenchError) and (error.device, error.batch) == ("cuda:0", batch)
    text = str(error)
    assert text.startswith(f"cuda:0 ran out of memory decoding a batch of {batch}") and "\n" not in text
    for words in said:
        assert words in text, text
    if resumes is False:
        assert "resume with" not in text


@pytest.mark.parametrize(
    ("decoding", "generator"),
    [
        ("greedy,max_new_tokens=16", "cpu"),
        ("top_p=0.9,max_new_tokens=16", "cpu"),
        ("top_k=20,max_new_tokens=16", "device"),
    ],
)
def test_the_static_kv_cache_gives_the_eager_loops_tokens(tiny, decoding, generator):
    setting = DecodingSetting.parse(decoding)
    prompts = [f"Review {i}: the {'soup ' * (i % 5)}was" for i in range(8)]
    eager = decode(tiny, SoftmaxLayer(), prompts, setting, list(range(8)), generator=generator)
    static = decode(tiny, SoftmaxLayer(), prompts, setting, list(range(8)), generator=generator, kv_cache="static")
    assert [r["token_ids"] for r in static] == [r["token_ids"] for r in eager]
    assert [r["text"] for r in static] == [r["text"] for r in eager]
    for a, b in zip(eager, static):  # attention over the whole static cache: the last digits may move
        for key, values in a["stats"].items():
            assert b["stats"][key] == pytest.approx(values, rel=1e-4, abs=1e-6)


def test_an_unknown_kv_cache_is_one_line(tiny):
    with pytest.raises(MaxbenchError, match="unknown kv_cache 'paged'; use dynamic or static"):
        decode(tiny, SoftmaxLayer(), ["abc"], DecodingSetting(), [0], kv_cache="paged")
