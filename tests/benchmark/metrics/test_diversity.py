"""Rep, seq-rep, Distinct, Uniq, KLD and MS-Jaccard on small cases worked out by hand.

The texts use bare lowercase words so that the shared tokeniser returns exactly the words.
"""

from __future__ import annotations

import math

import pytest

from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.benchmark.metrics.diversity import repetition_loop
from maxbench.benchmark.metrics.tokenize import word_tokens


def batch(texts, refs=None):
    ids = [f"p{i}" for i in range(len(texts))]
    return TextBatch(list(texts), ids, dict(zip(ids, refs)) if refs is not None else None)


def test_tokeniser_splits_sentence_final_periods():
    # word_tokenize(preserve_line=True) would leave "sales." glued; the shared tokeniser must not
    assert word_tokens("Profits rose. Sales fell.") == ["Profits", "rose", ".", "Sales", "fell", "."]


@pytest.mark.parametrize(
    "text, loop",
    [
        ("a b c d e f", None),  # nothing repeats at the end
        ("x y a b c a b c", (3, 2)),  # 'a b c' twice at the end: a loop
        ("x a b a b a b", None),  # 'a b' three times, but a phrase under 3 tokens needs > 50 repeats
        ("z " + "w " * 51, (1, 51)),  # one token 51 times: > 50 repeats is a loop whatever the length
        ("z " + "w " * 50, None),  # 50 times is not
        # the length with the most repeats decides: 'a' six times (n=1) beats 'a a a' twice (n=3),
        # and n=1 with 6 repeats is not a loop
        ("k a a a a a a", None),
        ("", None),
    ],
)
def test_rep_follows_holtzman(text, loop):
    assert repetition_loop(word_tokens(text)) == loop


def test_rep_metric_is_the_share_of_looping_texts():
    res = get_metric("rep").compute(batch(["x y a b c a b c", "a b c d e f", "x a b a b a b", "z " + "w " * 51]))
    assert res.scores["rep"].value == 2 / 4
    assert res.higher_is_better is False


def test_seq_rep_4():
    # 'a b c d a b c d': 4-grams abcd bcda cdab dabc abcd -> 4 unique of 5 -> 1 - 4/5 = 0.2
    # 'a b c d e': 2 unique of 2 -> 0; 'a b c' has no 4-gram and is left out
    res = get_metric("seq-rep").compute(batch(["a b c d a b c d", "a b c d e", "a b c"]))
    assert res.scores["seq-rep-4"].value == pytest.approx(0.1, abs=1e-12)
    assert math.isnan(res.scores["seq-rep-4"].per_text[2])


def test_distinct_both_variants_and_uniq():
    texts = ["a b a b", "a c"]
    res = get_metric("distinct").compute(batch(texts))
    s = {k: v.value for k, v in res.scores.items()}
    # per text, n=1: {a,b}/4 = 0.5 and {a,c}/2 = 1 -> mean 0.75; corpus: {a,b,c}/6 = 0.5
    assert s["distinct-1-per-text"] == pytest.approx(0.75, abs=1e-12)
    assert s["distinct-1-corpus"] == pytest.approx(0.5, abs=1e-12)
    # n=2: {ab,ba}/3 and {ac}/1 -> mean (2/3 + 1)/2 = 5/6; corpus {ab,ba,ac}/4 = 0.75
    assert s["distinct-2-per-text"] == pytest.approx(5 / 6, abs=1e-12)
    assert s["distinct-2-corpus"] == pytest.approx(0.75, abs=1e-12)
    # n=3: 'a b a', 'b a b' -> 2/2 = 1; 'a c' has none; corpus 2/2
    assert s["distinct-3-per-text"] == pytest.approx(1.0, abs=1e-12)
    assert get_metric("uniq").compute(batch(texts)).scores["uniq"].value == 3


def test_kld_unigram_add_one():
    # gen 'a a b', ref 'a b c'; union {a,b,c}; add-one: gen (3,2,1)/6, ref (2,2,2)/6
    # KL(ref||gen) = 1/3 [log((1/3)/(1/2)) + log(1) + log((1/3)/(1/6))] = log(4/3) / 3
    res = get_metric("kld").compute(batch(["a a b"], ["a b c"]))
    assert res.scores["kld"].value == pytest.approx(math.log(4 / 3) / 3, abs=1e-12)
    assert res.higher_is_better is False
    assert get_metric("kld").compute(batch(["a b c"], ["a b c"])).scores["kld"].value == pytest.approx(0, abs=1e-15)


def test_ms_jaccard_geometric_mean_over_orders():
    # two prompts, each generation 'a b', each reference 'a b c'; counts per text:
    # n=1 gen a1 b1, ref a1 b1 c1 -> (1+1)/(1+1+1) = 2/3
    # n=2 gen ab1, ref ab1 bc1 -> 1/2;  n=3 gen none, ref abc1 -> 0
    res = get_metric("ms-jaccard").compute(batch(["a b", "a b"], ["a b c", "a b c"]))
    s = {k: v.value for k, v in res.scores.items()}
    assert s["ms-jaccard-1"] == pytest.approx(2 / 3, abs=1e-12)
    assert s["ms-jaccard-2"] == pytest.approx(math.sqrt(2 / 3 * 1 / 2), abs=1e-12)
    assert s["ms-jaccard-3"] == pytest.approx(0.0, abs=1e-12)


def test_ms_jaccard_normalises_by_number_of_texts():
    # one generation 'a b' per prompt, two samples of it: counts per text stay a1 b1, so the
    # score must not change when every generation is duplicated
    one = get_metric("ms-jaccard").compute(batch(["a b", "a d"], ["a b", "a c"]))
    two = get_metric("ms-jaccard").compute(
        TextBatch(["a b", "a b", "a d", "a d"], ["p0", "p0", "p1", "p1"], {"p0": "a b", "p1": "a c"})
    )
    for k in one.scores:
        assert one.scores[k].value == pytest.approx(two.scores[k].value, abs=1e-12)
    # n=1: gen a1 b.5 d.5, ref a1 b.5 c.5 -> (1+.5)/(1+.5+.5+.5) = 0.6
    assert one.scores["ms-jaccard-1"].value == pytest.approx(0.6, abs=1e-12)


def test_self_bleu_needs_two_texts():
    res = get_metric("self-bleu").compute(batch(["only one text here"]))
    assert res.scores["self-bleu-4"].value is None and "two texts" in res.notes


def test_metric_objects_carry_name_variant_signature_direction():
    for name in (
        "sacrebleu",
        "bleu-n",
        "rouge-l",
        "meteor",
        "bertscore",
        "ppl",
        "self-bleu",
        "rep",
        "seq-rep",
        "distinct",
        "uniq",
        "kld",
        "ms-jaccard",
        "ref-ppl",
    ):
        m = get_metric(name)
        assert m.name == name and m.variant and isinstance(m.higher_is_better, bool)
        assert m.signature.startswith(name + "|")


def test_corpus_level_scores_do_not_depend_on_pythonhashseed():
    """n-gram keys fix the order of corpus-level sums; with str hashes it varied by process."""
    import os
    import subprocess
    import sys

    code = (
        "import random\n"
        "from maxbench.benchmark.metrics.base import get_metric\n"
        "from maxbench.benchmark.metrics.base import TextBatch\n"
        "rng = random.Random(0)\n"
        "words = [f'w{i}' for i in range(300)]\n"
        "texts = [' '.join(rng.choice(words) for _ in range(40)) for _ in range(60)]\n"
        "ids = [f'p{i % 20}' for i in range(60)]\n"
        "refs = {f'p{i}': ' '.join(rng.choice(words) for _ in range(30)) for i in range(20)}\n"
        "batch = TextBatch(texts, ids, refs)\n"
        "for name in ('kld', 'ms-jaccard', 'distinct'):\n"
        "    for key, score in sorted(get_metric(name).compute(batch).scores.items()):\n"
        "        print(key, repr(score.value))\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, PYTHONHASHSEED=seed),
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outs) == 1 and "ms-jaccard-3" in outs.pop()
