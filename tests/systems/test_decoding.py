"""The decoding loop: token-exact with transformers' generate, its statistics, its refusals,
reference log-probabilities."""

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.decoding import DecodingSetting, decode, reference_logprobs, reference_states, reference_windows
from maxbench.systems.layers.softmax import SoftmaxLayer

PROMPTS = [
    "I have bought these cookies twice and",
    "The soup arrived cold, but the",
    "My dog loves this food because",
    "After three weeks of using it,",
]


def _hf_generate(lm, prompt, seed, **kw):
    enc = lm.tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(seed)
    ids = lm.model.generate(**enc, max_new_tokens=24, pad_token_id=lm.tokenizer.pad_token_id, **kw)
    ids = ids[0, enc["input_ids"].shape[1] :].tolist()
    eos = lm.tokenizer.eos_token_id
    return ids[: ids.index(eos)] if eos in ids else ids


@pytest.mark.slow
def test_greedy_batch_equals_generate(smollm2):
    res = decode(smollm2, SoftmaxLayer(), PROMPTS, DecodingSetting(do_sample=False, max_new_tokens=24), [0] * 4)
    for prompt, row in zip(PROMPTS, res):
        assert row["token_ids"] == _hf_generate(
            smollm2, prompt, 0, do_sample=False, top_k=None, top_p=None, temperature=None
        )


@pytest.mark.slow
def test_seeded_top_p_equals_generate(smollm2):
    seeds = [11, 12, 13, 14]
    res = decode(smollm2, SoftmaxLayer(), PROMPTS, DecodingSetting(top_p=0.9, max_new_tokens=24), seeds)
    for prompt, seed, row in zip(PROMPTS, seeds, res):
        assert row["token_ids"] == _hf_generate(
            smollm2, prompt, seed, do_sample=True, top_p=0.9, top_k=0, temperature=1.0
        )
    # and each row is independent of its batch: decoding it alone gives the same tokens
    alone = decode(smollm2, SoftmaxLayer(), PROMPTS[2:3], DecodingSetting(top_p=0.9, max_new_tokens=24), seeds[2:3])
    assert alone[0]["token_ids"] == res[2]["token_ids"]


@pytest.mark.slow
def test_temperature_and_top_k_equal_generate(smollm2):
    res = decode(
        smollm2, SoftmaxLayer(), PROMPTS[:1], DecodingSetting(temperature=0.7, top_k=40, max_new_tokens=24), [5]
    )
    assert res[0]["token_ids"] == _hf_generate(
        smollm2, PROMPTS[0], 5, do_sample=True, temperature=0.7, top_k=40, top_p=1.0
    )


def test_stats_and_finish(tiny):
    res = decode(tiny, SoftmaxLayer(), ["abc", "a much longer prompt"], DecodingSetting(max_new_tokens=5), [1, 2])
    for row in res:
        assert row["finish"] in ("eos", "length")
        st = row["stats"]
        assert all(0 < s <= tiny.vocab_size for s in st["support"])
        assert all(0 < t <= 1 for t in st["top1"]) and all(e >= 0 for e in st["entropy"])


def test_each_step_records_the_chosen_tokens_probability_and_text_piece(tiny):
    """p_chosen is the layer's probability of the token drawn (greedy: the top-1 mass itself), and the
    pieces join to the text, one per generated token (the explorer shades tokens with them)."""
    greedy = decode(tiny, SoftmaxLayer(), ["abc", "xyz q"], DecodingSetting(do_sample=False, max_new_tokens=6), [1, 2])
    sampled = decode(tiny, SoftmaxLayer(), ["abc", "xyz q"], DecodingSetting(max_new_tokens=6), [1, 2])
    for row in greedy:
        assert row["stats"]["p_chosen"] == row["stats"]["top1"]
    for row in greedy + sampled:
        st = row["stats"]
        assert len(st["p_chosen"]) == len(st["entropy"]) and all(0 < p <= t for p, t in zip(st["p_chosen"], st["top1"]))
        assert len(row["pieces"]) == row["n_tokens"] and "".join(row["pieces"]) == row["text"]
        n = len(row["token_ids"])
        assert row["pieces"] == [
            tiny.tokenizer.decode(row["token_ids"][: k + 1])[len(tiny.tokenizer.decode(row["token_ids"][:k])) :]
            for k in range(n)
        ] or "\ufffd" in tiny.tokenizer.decode(row["token_ids"][:n])


def test_empty_prompt_and_nan_logits_are_refused(tiny):
    with pytest.raises(MaxbenchError, match="prompt 1 is empty"):
        decode(tiny, SoftmaxLayer(), ["ok", "  "], DecodingSetting(), [0, 0])

    class Broken(SoftmaxLayer):
        pass

    model = tiny.model
    orig = model.forward

    def nan_forward(*a, **k):
        out = orig(*a, **k)
        out.logits[:] = float("nan")
        return out

    model.forward = nan_forward
    try:
        with pytest.raises(MaxbenchError, match="logits contain NaN"):
            decode(tiny, Broken(), ["ok"], DecodingSetting(), [0])
    finally:
        model.forward = orig


def test_the_fast_finiteness_check_agrees_with_isfinite_even_when_the_sum_overflows():
    from maxbench.systems.decoding import warp_rows
    from maxbench.systems.layers.base import all_finite, require_finite_logits

    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    huge = torch.full((2, 8), 3e38)  # every entry finite, the float32 sum is inf
    assert not torch.isfinite(huge.sum())
    cases = [logits, huge, huge.double(), torch.empty(0, 5), torch.arange(12).reshape(3, 4)]
    for r, c, v in [(1, 7, float("nan")), (2, 0, float("inf")), (0, 999, float("-inf"))]:
        bad = logits.clone()
        bad[r, c] = v
        cases.append(bad)
    for t in cases:
        assert all_finite(t) == bool(torch.isfinite(t).all()), t
    require_finite_logits(huge, "x")  # finite logits pass, whatever their sum
    dead = logits.clone()
    dead[2, 0] = float("-inf")
    with pytest.raises(MaxbenchError, match=r"x: the model's logits contain infinite values \(batch rows \[2\]\)"):
        require_finite_logits(dead, "x")
    # warp_rows: finite rows go to the warper whole; a row of -inf only is left as it is
    warp = DecodingSetting.parse("top_p=0.9").warpers()
    assert torch.equal(warp_rows(warp, None, logits), warp(None, logits))
    dead[2] = float("-inf")
    out = warp_rows(warp, None, dead)
    assert torch.equal(out[:2], warp(None, logits[:2])) and torch.isneginf(out[2]).all()


def test_reference_logprobs_are_the_layers_teacher_forced_logprobs(tiny):

    prompt, ref = "the soup", "was cold"
    got = reference_logprobs(tiny, SoftmaxLayer(), [prompt, "x"], [ref, "  "], chunk=3)
    p_ids = tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r_ids = tiny.tokenizer(" " + ref, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = tiny.model(input_ids=torch.tensor([p_ids + r_ids])).logits[0].float()
    want = torch.log_softmax(logits, -1)[len(p_ids) - 1 : -1].gather(1, torch.tensor(r_ids)[:, None])[:, 0]
    assert got[1] == [] and len(got[0]) == len(r_ids)
    assert torch.allclose(torch.tensor(got[0]), want, atol=1e-5)


def test_reference_logprobs_mark_zero_probability_as_none(tiny):

    class OnlyFirstToken(SoftmaxLayer):
        def scores(self, logits, hidden):
            out = torch.full_like(logits, float("-inf"))
            out[:, 0] = 0.0
            return out

    got = reference_logprobs(tiny, OnlyFirstToken(), ["abc"], ["de"])
    assert got == [[None, None, None]]  # " ", "d", "e": none is token 0


# ---------------------------------------------------------------- strided reference perplexity
def test_windows_score_each_token_once_with_enough_context():
    assert reference_windows(3, 10, None) == [(0, 10, 3)]
    assert reference_windows(3, 10, 10) == [(0, 10, 3)]
    for n_prompt, n_total, context, stride in [(3, 10, 6, None), (2, 40, 8, 3), (7, 9, 8, 4), (1, 100, 16, 16)]:
        windows = reference_windows(n_prompt, n_total, context, stride)
        scored = [t for _, end, first in windows for t in range(first, end)]
        assert scored == list(range(n_prompt, n_total))
        s = stride or context // 2
        for start, end, first in windows:
            assert end - start <= context and start >= 0
            assert first - start >= (context - s if start else first)
    with pytest.raises(ValueError, match="prompt alone"):
        reference_windows(8, 20, 8)


def test_strided_states_equal_plain_ones_when_everything_fits(tiny):
    prompt, ref = "Hello there", "word " * 40
    plain = reference_states(tiny, prompt, ref)
    n = len(tiny.tokenizer(prompt)["input_ids"]) + len(plain.targets)
    for context in (n, n + 5):
        same = reference_states(tiny, prompt, ref, context=context)
        assert torch.equal(same.hidden, plain.hidden) and torch.equal(same.targets, plain.targets)
    # strided: the first window is the plain prefix, so its positions match; every token is scored
    strided = reference_states(tiny, prompt, ref, context=24)
    assert strided.hidden.shape == plain.hidden.shape and torch.equal(strided.targets, plain.targets)
    first = 24 - (n - len(plain.targets))
    torch.testing.assert_close(strided.hidden[:first], plain.hidden[:first])


def test_a_prompt_longer_than_the_context_is_refused_in_one_line(tiny):
    with pytest.raises(MaxbenchError, match="cannot be scored for ref-ppl: the prompt alone") as exc:
        reference_states(tiny, "a b c d e f g h", "more words here", context=4)
    assert "\n" not in str(exc.value)


def test_decode_itself_refuses_positions_past_the_context(tiny):
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.system_strings import parse_system

    layer = parse_system("tiny-random/softmax/greedy").build_layer()
    with pytest.raises(MaxbenchError, match="context of 512"):
        decode(tiny, layer, ["x" * 500], DecodingSetting(do_sample=False, max_new_tokens=20), [0])


def test_memory_estimate_grows_with_batch_and_squared_length(tiny):
    from maxbench.systems.decoding import memory_estimate

    small, batch, long = (memory_estimate(tiny, b, t, False) for b, t in ((1, 100), (4, 100), (1, 400)))
    assert batch > 3 * small and long > 4 * small
