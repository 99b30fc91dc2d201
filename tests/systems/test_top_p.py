"""maxbench's top-p warper gives transformers' output bit for bit (systems/top_p.py)."""

import pytest
import torch
import transformers as tf

from maxbench.systems.decoding import DecodingSetting
from maxbench.systems.top_p import TopPLogitsWarper, sorted_scores


@pytest.fixture(scope="module")
def real_scores(smollm2):
    """SmolLM2's next-token logits after 16 prompts, and the same rows as sparse log-probabilities
    (-inf outside the 200 best tokens, as sparsemax, graphmax's paper solver and POSG give)."""
    prompts = [
        "This coffee supposedly is premium, it tastes",
        "I've used Whip It for a long time.",
        "The movie was",
        "My dog loves these treats because",
        "Terrible service, the",
        "Once upon a time",
        "The best part of the film",
        "I ordered two boxes and",
    ] * 2
    tok = smollm2.tokenizer
    enc = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = smollm2.model(**enc)
    last = enc["attention_mask"].sum(-1) - 1
    logits = out.logits[torch.arange(len(prompts)), last].float()
    logits[8:] *= 0.3  # flatter rows: a nucleus of thousands of tokens
    top = logits.topk(200, dim=-1).indices
    sparse = torch.full_like(logits, float("-inf")).scatter(1, top, torch.log_softmax(logits.gather(1, top), -1))
    return logits, sparse


@pytest.mark.parametrize("top_p", [0.9, 0.5, 0.95, 0.999, 0.01])
@pytest.mark.parametrize("keep", [1, 3])
def test_same_output_as_transformers_on_real_scores(real_scores, top_p, keep):
    for scores in real_scores:
        ours = TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=keep)(None, scores)
        theirs = tf.TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=keep)(None, scores)
        assert torch.equal(ours, theirs)
        assert torch.isfinite(ours).sum(-1).min() >= keep


def test_sorted_scores_are_torchs_sorted_values_with_negative_zero_as_zero():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 40_000, generator=g) * 4
    scores[0, :10] = -0.0
    scores[0, 10:20] = 0.0
    scores[1, :100] = float("-inf")
    scores[2, 7] = float("-inf")
    ours = sorted_scores(scores)
    assert torch.equal(ours, torch.sort(scores).values)
    assert not torch.signbit(ours[0][ours[0] == 0]).any()


def test_a_tie_group_across_the_cut_is_decided_as_transformers_does():
    """Rows built so that the cut falls inside a group of equal scores: which members go is
    torch's sort order within the group, so those rows take transformers' own path."""
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(6, 30_000, generator=g).abs() + 0.5
    scores[:, :15_000] = 0.0  # the lowest 15,000 scores, equal, hold about a fifth of the mass
    scores[3:, :15_000] = -7.0  # rows 3-5: the group lies wholly below the cut
    warper = TopPLogitsWarper(top_p=0.9)
    theirs = tf.TopPLogitsWarper(top_p=0.9)(None, scores)
    kept_in_group = torch.isfinite(theirs[:3, :15_000]).sum(-1)
    assert ((kept_in_group > 0) & (kept_in_group < 15_000)).all()  # the cut splits the group
    assert torch.equal(warper(None, scores), theirs)


def test_scores_of_other_dtypes_and_with_nan_or_inf_take_transformers_path(monkeypatch):
    calls = []
    monkeypatch.setattr(tf.TopPLogitsWarper, "__call__", lambda self, ids, s: calls.append(s) or s)
    g = torch.Generator().manual_seed(2)
    base = torch.randn(3, 1000, generator=g)
    sparse = base.masked_fill(base < 1.0, float("-inf"))
    warper = TopPLogitsWarper(top_p=0.8)
    bad = []
    for scores in (base, sparse):
        for value in (float("nan"), -float("nan"), float("inf")):
            bad.append(scores.clone())
            bad[-1][1, 17] = value
    for scores in [base.double(), base.half(), base[None]] + bad:
        calls.clear()
        assert warper(None, scores) is scores and len(calls) == 1
    assert torch.signbit(torch.tensor(-float("nan"))) and not torch.signbit(torch.tensor(float("nan")))
    calls.clear()
    for scores in (base, sparse):
        assert torch.isinf(warper(None, scores)).any()
    assert calls == []


def test_the_decoding_setting_uses_it():
    (warper,) = DecodingSetting.parse("top_p=0.9").warpers()
    assert isinstance(warper, TopPLogitsWarper) and warper.top_p == 0.9
