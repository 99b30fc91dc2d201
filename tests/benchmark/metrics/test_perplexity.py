"""Perplexity of generations under an evaluator LM, and of references under a system (epsilon-PPL)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.benchmark.metrics.perplexity import reference_perplexity, token_nll


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
