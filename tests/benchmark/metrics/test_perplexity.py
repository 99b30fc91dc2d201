"""Perplexity of generations under an evaluator LM, and of references under a system (epsilon-PPL)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.benchmark.metrics.perplexity import ReferencePPL, reference_perplexity, text_windows, token_nll
from maxbench.systems.decoding import reference_logprobs
from maxbench.systems.layers.softmax import SoftmaxLayer


def test_reference_perplexity_by_hand():
    # two reference tokens with p = 0.5 and 0.25: PPL = exp(-(log .5 + log .25) / 2) = sqrt(8)
    r = reference_perplexity([[math.log(0.5), math.log(0.25)]], vocab_size=4, epsilon=0.1)
    assert r.ppl == pytest.approx(math.sqrt(8), abs=1e-12)
    assert r.n_zero == 0 and r.n_tokens == 2
    # epsilon-PPL: p' = (p + 0.1) / (1 + 0.1 * 4) = 0.6/1.4 and 0.35/1.4
    assert r.eps_ppl == pytest.approx(math.exp(-(math.log(0.6 / 1.4) + math.log(0.35 / 1.4)) / 2), abs=1e-12)


def test_reference_perplexity_with_zero_probability_tokens():
    # a third token got p = 0 (None; -inf means the same): PPL is infinite, epsilon-PPL is not
    r = reference_perplexity([[math.log(0.5), math.log(0.25)], [None], [-math.inf]], vocab_size=4, epsilon=0.1)
    assert r.ppl == math.inf and r.n_zero == 2 and r.n_tokens == 4
    want = math.exp(-(math.log(0.6 / 1.4) + math.log(0.35 / 1.4) + 2 * math.log(0.1 / 1.4)) / 4)
    assert r.eps_ppl == pytest.approx(want, abs=1e-12)
    # the same thing as mixing with the uniform distribution, weight eps V / (1 + eps V) = 0.4 / 1.4
    lam = 0.4 / 1.4
    mixed = [(1 - lam) * p + lam / 4 for p in (0.5, 0.25, 0.0, 0.0)]
    assert r.eps_ppl == pytest.approx(math.exp(-np.mean(np.log(mixed))), abs=1e-12)
    with pytest.raises(ValueError):
        reference_perplexity([[0.5]], vocab_size=4)  # a log-probability cannot be positive


def test_ref_ppl_metric_from_batch_rows():
    b = TextBatch(
        ["x", "y"],
        ["p", "q"],
        {"p": "r1", "q": "r2"},
        reference_logprobs={"p": [math.log(0.5)], "q": [None]},
        vocab_size=4,
    )
    res = get_metric("ref-ppl", epsilon=0.1).compute(b)
    assert res.scores["ref-ppl"].value is None  # infinite
    assert res.scores["ref-zero-frac"].value == pytest.approx(0.5)
    assert res.scores["ref-eps-ppl"].value == pytest.approx(math.exp(-(math.log(0.6 / 1.4) + math.log(0.1 / 1.4)) / 2))
    assert "1 of 2" in res.notes


@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


def direct_nll(model, ids, start):
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    return -sum(logp[t - 1, ids[t]].item() for t in range(start, len(ids)))


def test_token_nll_batched_equals_one_sequence_at_a_time(tiny_llama):
    contexts = [[1, 2, 3], [], [4], [5, 6, 7, 8, 9, 10]]
    conts = [[11, 12, 13, 14], [15, 16, 17], [], [18]]
    nll, counts = token_nll(tiny_llama, contexts, conts, batch_size=3)
    assert list(counts) == [4, 2, 0, 1]  # no context: the first token has nothing to be predicted from
    for ctx, cont, got in zip(contexts, conts, nll):
        if cont:
            assert got == pytest.approx(direct_nll(tiny_llama, ctx + cont, max(len(ctx), 1)), abs=1e-4)
    assert nll[2] == 0.0


def test_token_nll_scores_past_a_long_context_in_strided_windows(tiny_llama):
    # a prompt longer than max_length: its last 16 - 8 tokens before the first 8 text tokens, then a
    # window moving by the stride of 8 (half of 16) over the rest: every text token scored once
    ctx, cont = list(range(1, 40)), list(range(40, 50))
    nll, counts = token_nll(tiny_llama, [ctx], [cont], max_length=16)
    seq = ctx + cont
    assert counts[0] == 10
    want = direct_nll(tiny_llama, seq[31:47], 8) + direct_nll(tiny_llama, seq[33:49], 14)
    assert nll[0] == pytest.approx(want, abs=1e-4)
    # a text that fits, with a long prompt and one text token per window: the prompt's last 15 tokens
    nll, counts = token_nll(tiny_llama, [ctx], [cont[:1]], max_length=16)
    assert counts[0] == 1 and nll[0] == pytest.approx(direct_nll(tiny_llama, seq[24:40], 15), abs=1e-4)


def test_ppl_metric_with_the_tiny_random_model():
    pytest.importorskip("maxbench.systems.models")
    from maxbench.systems.models import load_model

    b = TextBatch(
        [" and then it rained.", "", " Fine."],
        ["p", "p", "q"],
        {"p": "r", "q": "r"},
        prompts={"p": "It was sunny", "q": "Well"},
    )
    metric = get_metric("ppl", model="tiny-random")
    res = metric.compute(b)
    lm = load_model("tiny-random")
    total, n = 0.0, 0
    for text, pid in ((" and then it rained.", "p"), (" Fine.", "q")):
        ctx = lm.tokenizer(b.prompts[pid])["input_ids"]
        cont = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
        total += direct_nll(lm.model, ctx + cont, len(ctx))
        n += len(cont)
    assert res.scores["ppl"].value == pytest.approx(math.exp(total / n), rel=1e-4)
    assert math.isnan(res.scores["ppl"].per_text[1])  # the empty text has no tokens
    assert "model:tiny-random" in res.signature and "weights:not-loaded" not in res.signature


def test_a_reference_longer_than_the_context_gets_finite_values_and_the_stride_in_the_signature(tiny):
    context = tiny.model.config.max_position_embeddings
    prompt, ref = "Once upon a time", " ".join(f"w{i}" for i in range(context))  # far more tokens than the context
    layer = SoftmaxLayer()
    (lp,) = reference_logprobs(tiny, layer, [prompt], [ref])
    n_ref = len(tiny.tokenizer(" " + ref, add_special_tokens=False)["input_ids"])
    assert len(lp) == n_ref > context and all(v is not None and math.isfinite(v) and v <= 0 for v in lp)
    refs = {"p": ref}
    metric = ReferencePPL()
    plain_sig = metric.signature
    res = metric.compute(TextBatch(["x"], ["p"], refs, {"p": prompt}, {"p": lp}, tiny.vocab_size, context // 2))
    assert res.signature == plain_sig + f"|stride:{context // 2}"
    assert math.isfinite(res.scores["ref-eps-ppl"].value) and math.isfinite(res.scores["ref-ppl"].value)
    # a batch with no strided reference keeps the signature the committed leaderboards have
    again = metric.compute(TextBatch(["x"], ["p"], {"p": "a b"}, None, {"p": [-1.0, -2.0]}, 10))
    assert again.signature == plain_sig and "stride" not in plain_sig


# ---------------------------------------------------------------- ppl past the evaluator's context
def test_text_windows_score_each_text_token_once_with_enough_context():
    assert text_windows(3, 10, 10) == [(0, 10, 3)]
    assert text_windows(0, 10, 10) == [(0, 10, 1)]  # the first token has nothing before it
    for n_ctx, n_total, context, stride in [
        (3, 10, 6, None),
        (2, 40, 8, 3),
        (0, 100, 16, None),
        (30, 35, 8, None),  # the prompt alone fills the context
        (30, 100, 8, 8),  # a stride of the whole context: one token of context at least
        (9, 10, 8, None),
    ]:
        windows = text_windows(n_ctx, n_total, context, stride)
        scored = [t for _, end, first in windows for t in range(first, end)]
        assert scored == list(range(max(n_ctx, 1), n_total))
        s = min(stride or context // 2, context - 1)
        for start, end, first in windows:
            assert 0 <= start < first < end and end - start <= context
            assert first - start >= (context - s if start else first)
    with pytest.raises(ValueError):
        text_windows(3, 10, 1)


def _direct_nll(model, ids, start):
    import torch

    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    return -sum(logp[t - 1, ids[t]].item() for t in range(start, len(ids)))


def test_ppl_scores_a_text_longer_than_the_evaluators_context_in_strided_windows(tiny):
    context = tiny.model.config.max_position_embeddings
    assert context == 512
    prompt = "Once upon a time"
    long_text = " " + " ".join(f"w{i}" for i in range(400))
    short_text = " and then it rained."
    ctx = tiny.tokenizer(prompt)["input_ids"]
    cont = tiny.tokenizer(long_text, add_special_tokens=False)["input_ids"]
    assert len(cont) > context  # the text alone is longer than the context
    metric = get_metric("ppl", model="tiny-random")
    plain = metric.compute(TextBatch([short_text], ["p"], None, {"p": prompt}))
    res = metric.compute(TextBatch([long_text, short_text], ["p", "q"], None, {"p": prompt, "q": prompt}))
    # every token of the long text scored (none cut), in windows of the context moving by half of it
    short = tiny.tokenizer(short_text, add_special_tokens=False)["input_ids"]
    assert f"{len(cont) + len(short)} evaluator tokens scored" in res.notes
    assert res.signature == plain.signature + f"|stride:{context // 2}"
    seq = ctx + cont
    nll = sum(_direct_nll(tiny.model, seq[s:e], f - s) for s, e, f in text_windows(len(ctx), len(seq), context))
    nll += _direct_nll(tiny.model, ctx + short, len(ctx))
    assert res.scores["ppl"].value == pytest.approx(math.exp(nll / (len(cont) + len(short))), rel=1e-5)
    assert all(math.isfinite(v) for v in res.scores["ppl"].per_text)
    # a batch whose texts fit keeps the signature the committed leaderboards have, and its values
    again = metric.compute(TextBatch([short_text], ["p"], None, {"p": prompt}))
    assert again.signature == plain.signature and "stride" not in plain.signature
    assert again.scores["ppl"].value == plain.scores["ppl"].value


def test_ppl_under_a_fixed_evaluator_is_ppl_under_that_model_kept_under_its_own_score_name():
    """ppl-gemma3-270m and ppl-smollm2-135m (cross-evaluation) are ppl under their evaluator whatever
    --evaluator says; the computation is ppl's, checked here with an evaluator of the same class on
    tiny-random against ppl with --evaluator tiny-random."""
    pytest.importorskip("maxbench.systems.models")
    from maxbench.benchmark.metrics.perplexity import EvaluatorPerplexity

    gemma = get_metric("ppl-gemma3-270m", model="smollm2-135m")  # --evaluator does not apply
    assert gemma.model == "gemma3-270m" and list(gemma.score_ranges) == ["ppl-gemma3-270m"]
    assert list(gemma.score_info) == ["ppl-gemma3-270m"] and gemma.score_info["ppl-gemma3-270m"].goal == "human"
    assert get_metric("ppl-smollm2-135m").model == "smollm2-135m"

    class TinyPerplexity(EvaluatorPerplexity):
        name = "ppl-tiny-random"
        evaluator = "tiny-random"
        label = "tiny"

    b = TextBatch(
        [" and then it rained.", " Fine.", " So it goes."],
        ["p", "q", "q"],
        {"p": "r", "q": "r"},
        prompts={"p": "It was sunny", "q": "Well"},
    )
    cross = TinyPerplexity().compute(b)
    plain = get_metric("ppl", model="tiny-random").compute(b)
    assert list(cross.scores) == ["ppl-tiny-random"]
    got, want = cross.scores["ppl-tiny-random"], plain.scores["ppl"]
    assert got.value == pytest.approx(want.value, rel=1e-9) and got.value > 1
    assert list(got.per_text) == pytest.approx(list(want.per_text), rel=1e-9)
    assert (
        cross.signature.startswith("ppl-tiny-random|model:tiny-random|") and "weights:not-loaded" not in cross.signature
    )
