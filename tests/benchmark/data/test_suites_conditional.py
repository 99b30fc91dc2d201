"""Conditional suites (docs/conditional.md): items with attributes and prompts rendered from them, the
built-in food-attrs, news-attrs and movie-attrs (balanced, held-out texts only, rebuilt byte-identically),
attr-acc's classifier (deterministic, cached by identity, signed), its ceiling, the flipped-attribute
check, and the one-line refusal of a conditional system on a suite without attributes."""

from __future__ import annotations

import collections
import hashlib
import json
import random
import textwrap
import tomllib

import numpy as np
import pytest

from maxbench.benchmark.data import corpora
from maxbench.benchmark.data.suite_build import CONDITIONAL_BUILD
from maxbench.benchmark.data.suites import (
    CONDITIONAL_SUITES,
    SUITE_DIR,
    builtin_suites,
    flipped_suite,
    load_suite,
    require_attributes,
    save_suite,
)
from maxbench.errors import MaxbenchError

# ---------------------------------------------------------------- suite files with attributes

MANIFEST = """
name = "mine"
file = "{file}"
template = "Category: {{category}}. Headline: {{headline}}. Article:"
max_new_tokens = 160
generation_words = 120

[attributes.category]
values = ["business", "tech"]
labels = {{ tech = "technology" }}

[attributes.headline]
kind = "text"
"""


def _suite(tmp_path, body: str, file: str = "s.jsonl", manifest: str = MANIFEST):
    (tmp_path / file).write_text(body)
    m = tmp_path / "s.toml"
    m.write_text(manifest.format(file=file))
    return m


def _row(**kw) -> str:
    return json.dumps(kw) + "\n"


def test_items_with_attributes_load_and_their_prompt_is_rendered(tmp_path):
    body = _row(id="a", attributes={"category": "tech", "headline": "Chips get faster"}, reference="Body one.")
    body += _row(
        id="b",
        attributes={"category": "business", "headline": "Shares {rise}"},
        prompt="Category: business. Headline: Shares {rise}. Article:",
        reference="Body two.",
    )
    suite = load_suite(str(_suite(tmp_path, body)))
    assert suite.conditional and suite.max_new_tokens == 160 and suite.generation_words == 120
    a, b = suite.items
    assert a.prompt == "Category: technology. Headline: Chips get faster. Article:"  # the label, not the value
    assert a.attributes == {"category": "tech", "headline": "Chips get faster"} and a.reference == "Body one."
    assert b.prompt.endswith("Shares {rise}. Article:")  # a value's braces are text
    described = suite.describe()["conditional"]
    assert described["attributes"] == {
        "category": {"kind": "categorical", "values": ["business", "tech"], "labels": {"tech": "technology"}},
        "headline": {"kind": "text"},
    }
    assert described["max_new_tokens"] == 160 and described["template"].startswith("Category: {category}")
    assert hash(a) == hash(a)  # items stay hashable (the runner groups them)


def test_attributes_from_csv_columns(tmp_path):
    body = "id,category,headline,reference\na,tech,Chips,Body\n"
    suite = load_suite(str(_suite(tmp_path, body, "s.csv")))
    assert suite.items[0].prompt == "Category: technology. Headline: Chips. Article:"


@pytest.mark.parametrize(
    "body, words",
    [
        (_row(attributes={"category": "sport", "headline": "x"}), "attribute 'category' is 'sport', not one of"),
        (_row(attributes={"category": "tech"}), "attribute 'headline' is missing"),
        (_row(attributes={"category": "tech", "headline": "x", "mood": "y"}), "unknown attribute 'mood'"),
        (_row(prompt="Write"), "'attributes' is missing"),
        (_row(attributes={"category": "tech", "headline": 3}), "attribute 'headline' is the number 3"),
        (
            _row(attributes={"category": "tech", "headline": "x"}, prompt="Something else"),
            "is not the item's attributes rendered by the manifest's template",
        ),
    ],
)
def test_bad_attributes_are_one_line_naming_the_line(tmp_path, body, words):
    with pytest.raises(MaxbenchError) as err:
        load_suite(str(_suite(tmp_path, body)))
    assert words in str(err.value) and "s.jsonl:1" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "manifest, words",
    [
        ('name = "m"\nfile = "{file}"\ntemplate = "A {{x}}"\n', "has a 'template' but no [attributes]"),
        (MANIFEST.replace("{{headline}}", "{{title}}"), "the template's field '{title}' is not an attribute"),
        (MANIFEST.replace("{{headline}}", "{{headline!r}}"), "field '{headline!r}' is not an attribute"),
        (MANIFEST.replace('kind = "text"', 'kind = "number"'), "needs values = [...] (categorical) or kind"),
        (MANIFEST.replace('"business", "tech"', '"tech", "tech"'), "'values' must be a list of distinct"),
        (MANIFEST.replace("tech = ", "sport = "), "'labels' must be a table from some of its values"),
        (MANIFEST.replace("max_new_tokens = 160", "max_new_tokens = 0"), "'max_new_tokens' must be a whole number"),
    ],
)
def test_bad_conditional_manifests_are_one_line(tmp_path, manifest, words):
    body = _row(attributes={"category": "tech", "headline": "x"})
    with pytest.raises(MaxbenchError) as err:
        load_suite(str(_suite(tmp_path, body, manifest=manifest)))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_txt_file_cannot_carry_attributes(tmp_path):
    with pytest.raises(MaxbenchError, match="is a TXT file; the items of a conditional suite carry attributes"):
        load_suite(str(_suite(tmp_path, "one prompt\n", "s.txt")))


def test_suites_without_attributes_are_described_as_before():
    for name in ("smoke", "food-reviews", "news-prefix"):
        suite = load_suite(name)
        assert not suite.conditional and set(suite.describe()) == {"name", "version", "sha256", "n_items", "path"}
        assert all(it.attributes is None for it in suite.items)


# ---------------------------------------------------------------- the built-in conditional suites


def test_builtin_conditional_suites_are_balanced_rendered_and_state_their_generation_length():
    want = {"food-attrs": (80, 96, "score"), "news-attrs": (60, 160, "category"), "movie-attrs": (80, 96, "sentiment")}
    assert set(CONDITIONAL_SUITES) == set(CONDITIONAL_BUILD) == set(want) and set(want) <= set(builtin_suites())
    for name, (n, tokens, attribute) in want.items():
        manifest = builtin_suites()[name]
        spec = tomllib.loads(manifest.read_text())
        assert hashlib.sha256((SUITE_DIR / spec["file"]).read_bytes()).hexdigest() == spec["sha256"]
        assert spec["split"] == "test" and spec["max_new_tokens"] == tokens and spec["generation_words"] > 0
        suite = load_suite(name)
        assert suite.conditional and len(suite.items) == n and suite.corpus == spec["corpus"]
        values = suite.attributes[attribute].values
        counts = collections.Counter(it.attributes[attribute] for it in suite.items)
        assert counts == dict.fromkeys(values, n // len(values))  # balanced
        first = [it.attributes[attribute] for it in suite.items[: len(values)]]
        assert first == list(values)  # interleaved: any prefix is nearly balanced
        for it in suite.items:
            assert it.reference.strip() and it.prompt.endswith(("Review:", "Article:"))
    food = load_suite("food-attrs").items
    assert {it.prompt for it in food} == {"Rating: 5 stars. Review:", "Rating: 1 to 4 stars. Review:"}
    news = load_suite("news-attrs").items[0]
    assert news.prompt == f"Category: {news.attributes['category']}. Headline: {news.attributes['headline']}. Article:"


def _corpora_here(*names: str) -> bool:
    """Whether corpora ``names`` are extracted and their assets (where the attributes are read) unpacked."""
    from maxbench.fileio import maxbench_home

    assets = maxbench_home() / "assets"
    return all(corpora.is_extracted(n) and (assets / corpora.CORPORA[n][1]).exists() for n in names)


needs_corpora = pytest.mark.skipif(
    not _corpora_here("food-reviews", "news", "movie-reviews"),
    reason="the food-reviews, news and movie-reviews corpora and their assets are not in the cache (scripts/main.sh)",
)


@pytest.mark.slow
@needs_corpora
def test_conditional_suites_hold_held_out_texts_only():
    """Every item is a text of its corpus's test split (so no graph, head or classifier was fitted on it),
    with its attributes as the source gives them, and its reference is no fitting text's target."""
    for name in ("food-attrs", "news-attrs"):  # movie-attrs: the same code, on 50,000 texts (the builder test)
        suite = load_suite(name)
        corpus = corpora.load_corpus(suite.corpus)
        labelled = corpora.load_attributes(suite.corpus)
        assert corpus.sha256 == suite.corpus_sha256
        by_target = {row.target: row for row in labelled.values()}
        fitting = {labelled[t].target for t in corpus.fit if t in labelled}
        test = set(corpus.test)
        for it in suite.items:
            row = by_target[it.reference]
            assert row.text in test and corpora.is_test(row.text) and it.reference not in fitting
            assert row.attributes == it.attributes


@pytest.mark.slow
@needs_corpora
def test_the_builder_regenerates_the_committed_suites_byte_identically(tmp_path):
    from maxbench.benchmark.data.suite_build import main

    assert main(["build", *CONDITIONAL_SUITES, "--out", str(tmp_path)]) == 0
    for name in CONDITIONAL_SUITES:
        for ext in ("jsonl", "toml"):
            assert (tmp_path / f"{name}.{ext}").read_bytes() == (SUITE_DIR / f"{name}.{ext}").read_bytes(), name


# ---------------------------------------------------------------- a conditional system on a suite without attributes


def test_a_conditional_system_on_a_suite_without_attributes_is_one_line_exit_2(capsys):
    from maxbench.cli import run_guarded

    assert require_attributes(load_suite("food-attrs")).name == "food-attrs"
    rc = run_guarded("maxbench", require_attributes, load_suite("smoke"), "m/cond/greedy")
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("maxbench: error: system 'm/cond/greedy' is conditional") and "food-attrs" in err


COND_LAYER = """
import maxbench
from maxbench.systems.layers.base import OutputLayer


class Cond(OutputLayer):
    name = "cond"
    needs_attributes = True

    def scores(self, logits, hidden):
        return logits


maxbench.register_layer(Cond)
"""


def test_generate_refuses_a_conditional_layer_on_a_suite_without_attributes_before_anything_runs(cli, tmp_path):
    from maxbench import plugins

    plugin = tmp_path / "cond.py"
    plugin.write_text(textwrap.dedent(COND_LAYER))
    plugins.forget()
    try:
        argv = ["generate", "--model", "tiny-random", "--layer", "cond", "--suite", "smoke", "--include", plugin]
        rc, _, err = cli(*argv, "--runs-dir", tmp_path / "runs", "--run-id", "r")
    finally:
        plugins.forget()
    assert rc == 2 and err.count("\n") == 1 and "is conditional" in err and "suite 'smoke' has no attributes" in err
    assert not (tmp_path / "runs").exists()  # nothing was started


# ---------------------------------------------------------------- attr-acc on a toy corpus

GOOD = "delicious tasty fresh love wonderful perfect yummy".split()
BAD = "stale awful bland refund broken gross soggy".split()
FILLER = "the a it this box bag tea bread coffee price my dog we ordered arrived and was".split()


def _toy_rows():
    rng = random.Random(7)
    rows = []
    for i in range(400):
        mood = "good" if i % 2 else "bad"
        words = [rng.choice(FILLER) for _ in range(25)] + [
            rng.choice(GOOD if mood == "good" else BAD) for _ in range(3)
        ]
        if rng.random() < 0.15:  # some noise: a word of the other side
            words.append(rng.choice(BAD if mood == "good" else GOOD))
        rng.shuffle(words)
        rows.append((" ".join(words) + f" item {i}.", {"mood": mood}, None))
    return rows


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A corpus 'toy' with a categorical attribute 'mood', extracted into a fresh MAXBENCH_HOME."""
    from maxbench.benchmark.metrics import attributes

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setitem(corpora.CORPORA, "toy", (lambda: [t for t, _, _ in _toy_rows()], "modeldata", "toy corpus"))
    monkeypatch.setitem(corpora.ATTRIBUTES, "toy", (_toy_rows, {"mood": ("bad", "good")}))
    monkeypatch.setattr(attributes, "_LOADED", {})
    return corpora.load_corpus("toy")


def _toy_suite(tmp_path, corpus, n=20):
    """A conditional suite of the toy corpus's held-out texts, written as files."""
    from maxbench.benchmark.data.suites import AttributeSpec, Suite, SuiteItem

    labelled = corpora.load_attributes("toy")
    schema = {"mood": AttributeSpec("mood", ("bad", "good"))}
    items = [
        SuiteItem(f"t{i}", f"Mood: {labelled[t].attributes['mood']}. Text:", t, dict(labelled[t].attributes))
        for i, t in enumerate(corpus.test[:n])
    ]
    suite = Suite(
        name="toy-attrs",
        version="1",
        items=items,
        sha256="",
        path=tmp_path / "toy-attrs.toml",
        description="toy",
        attributes=schema,
        template="Mood: {mood}. Text:",
        max_new_tokens=30,
        generation_words=20,
        corpus="toy",
        corpus_sha256=corpus.sha256,
    )
    return load_suite(str(save_suite(suite, tmp_path / "suites")))


def test_the_classifier_is_deterministic_cached_by_identity_and_learns_the_attribute(toy, capsys):
    from maxbench.benchmark.metrics import attributes

    one = attributes.train_classifier(toy, "mood")
    two = attributes.train_classifier(toy, "mood")
    assert one.identity == two.identity and one.classes == ("bad", "good") and one.n_fit == len(toy.fit)
    assert np.array_equal(one.coef, two.coef) and np.array_equal(one.intercept, two.intercept)
    labelled = corpora.load_attributes("toy")
    truth = [labelled[t].attributes["mood"] for t in toy.test]
    assert np.mean([p == y for p, y in zip(one.predict(toy.test), truth)]) >= 0.9
    assert one.predict(["delicious wonderful"]) == ["good"] and one.predict(["stale refund"]) == ["bad"]

    cached = attributes.get_classifier("toy", "mood")
    assert cached.path is not None and cached.path.exists() and cached.identity == one.identity
    attributes._LOADED.clear()
    loaded = attributes.get_classifier("toy", "mood")  # from the file: the same decisions, bit for bit
    assert np.array_equal(loaded.decision(toy.test), one.decision(toy.test))
    # the same as scikit-learn's own predict
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(**attributes.LOGREG).fit(
        one.vectorizer.transform([labelled[t].target for t in toy.fit]),
        [labelled[t].attributes["mood"] for t in toy.fit],
    )
    assert list(model.predict(one.vectorizer.transform(toy.test))) == one.predict(toy.test)

    loaded.path.write_bytes(b"not a classifier")
    attributes._LOADED.clear()
    again = attributes.get_classifier("toy", "mood")
    assert "damaged or another one's; training it again" in capsys.readouterr().err
    assert np.array_equal(again.coef, one.coef)


def test_attr_acc_is_registered_signed_and_scores_with_its_ceiling(toy, tmp_path):
    from maxbench.benchmark.metrics.attributes import conditions_of
    from maxbench.benchmark.metrics.base import METRICS, TextBatch, get_metric

    metric = get_metric("attr-acc")
    assert (
        "attr-acc" in METRICS
        and metric.higher_is_better
        and list(metric.score_ranges)
        == [
            "attr-acc",
            "attr-acc-ceiling",
        ]
    )
    from maxbench.provenance import package_version

    assert metric.signature == (
        "attr-acc|classifier:tfidf(word-1-2-grams,min-df-2,max-100000,sublinear)+logreg(lbfgs,C-1,balanced)"
        "|fit:fitting-split|empty:wrong|ceiling:references-cut-to-generation-words"
        f"|format:maxbench-attribute-classifier/1|sklearn:{package_version('scikit-learn')}"
    )
    suite = _toy_suite(tmp_path, toy)
    ids = [it.id for it in suite.items]
    refs = {it.id: it.reference for it in suite.items}
    wanted = {it.id: it.attributes["mood"] for it in suite.items}
    texts = ["delicious wonderful perfect" if wanted[i] == "good" else "stale awful refund" for i in ids]
    texts[0] = ""  # an empty text is wrong
    batch = TextBatch(texts, ids, refs, None, conditions=conditions_of(suite))
    result = metric.compute(batch)
    acc, ceiling = result.scores["attr-acc"], result.scores["attr-acc-ceiling"]
    assert acc.value == pytest.approx((len(ids) - 1) / len(ids)) and acc.stats is not None
    assert 0.8 <= ceiling.value <= 1 and ceiling.stats is None and "not tested" in ceiling.interval[2]
    assert ceiling.interval[0] <= ceiling.value <= ceiling.interval[1]
    assert "|suite:toy-attrs@" in result.signature and "|attribute:mood|trained:toy@" in result.signature
    assert result.signature.endswith("|ceiling-words:20") and "trained on" in result.notes
    assert metric.compute(batch).scores["attr-acc"].value == acc.value  # deterministic
    # without attributes: not applicable, with the reason
    assert "needs the attributes of a conditional suite" in metric.unavailable(TextBatch(texts, ids, refs))


def test_flip_check_counts_how_often_the_classifier_follows_the_flipped_attribute(toy, tmp_path):
    from maxbench.benchmark.metrics.attributes import conditions_of, flip_check
    from maxbench.benchmark.metrics.base import TextBatch

    suite = _toy_suite(tmp_path, toy, n=6)
    flipped = load_suite(str(save_suite(flipped_suite(suite), tmp_path / "suites")))
    assert flipped.name == "toy-attrs-flipped-mood" and [it.id for it in flipped.items] == [it.id for it in suite.items]
    assert all(a.attributes["mood"] != b.attributes["mood"] for a, b in zip(suite.items, flipped.items))
    assert all(b.prompt == f"Mood: {b.attributes['mood']}. Text:" and b.reference == "" for b in flipped.items)
    words = {"good": "delicious wonderful perfect", "bad": "stale awful refund"}
    ids = [it.id for it in suite.items]
    original = [words[it.attributes["mood"]] for it in suite.items]
    # a system that follows the flip on the first four prompts only, and writes nothing on the last
    followed = [words[b.attributes["mood"]] for b in flipped.items[:4]] + [original[4], ""]
    result = flip_check(
        TextBatch(original, ids, conditions=conditions_of(suite)),
        TextBatch(followed, ids, conditions=conditions_of(flipped)),
    )
    assert (result.n, result.changed, result.to_target, result.flipped) == (6, 4, 4, 4)
    assert result.rates()["flipped"] == pytest.approx(4 / 6) and result.as_dict()["attribute"] == "mood"
    with pytest.raises(MaxbenchError, match="nothing was flipped"):
        flip_check(
            TextBatch(original, ids, conditions=conditions_of(suite)),
            TextBatch(original, ids, conditions=conditions_of(suite)),
        )
    with pytest.raises(MaxbenchError, match="no attributes rendered by a template"):
        flipped_suite(load_suite("smoke"))


def _write_run(tmp_path, suite, texts, name="run"):
    run = tmp_path / name
    run.mkdir()
    rows = [
        {"system": "m/softmax/greedy", "prompt_id": it.id, "sample": 0, "prompt": it.prompt, "reference": it.reference}
        | {"text": t}
        for it, t in zip(suite.items, texts)
    ]
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {
        "run_id": "run",
        "suite": suite.describe(),
        "samples": 1,
        "systems": {"m/softmax/greedy": {"layer": "softmax"}},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_a_run_on_a_conditional_suite_is_scored_with_attr_acc_and_others_say_why_not(toy, tmp_path, cli):
    suite = _toy_suite(tmp_path, toy)
    texts = ["delicious wonderful" if it.attributes["mood"] == "good" else "stale refund" for it in suite.items]
    run = _write_run(tmp_path, suite, texts)
    rc, _, err = cli("score", run, "--metrics", "uniq", "--bootstrap", "50", "--quiet")
    assert rc == 0, err
    doc = json.loads((run / "scores.json").read_text())
    scores = doc["systems"]["m/softmax/greedy"]["scores"]
    assert scores["attr-acc"]["value"] == 1.0 and scores["attr-acc"]["higher_is_better"] is True
    assert scores["attr-acc-ceiling"]["value"] >= 0.8 and scores["attr-acc-ceiling"]["ci_low"] is not None
    assert doc["suite"]["conditional"]["attributes"] == {"mood": {"kind": "categorical", "values": ["bad", "good"]}}

    plain = _write_run(tmp_path, load_suite("smoke"), ["a text"] * 4, "plain")
    rc, _, err = cli("score", plain, "--metrics", "attr-acc,uniq", "--bootstrap", "0")
    assert rc == 0, err
    na = json.loads((plain / "scores.json").read_text())["systems"]["m/softmax/greedy"]
    assert na["scores"]["attr-acc"]["value"] is None and "conditional suite" in na["scores"]["attr-acc"]["reason"]
    assert "attr-acc" in na["not_applicable"]

    gens = tmp_path / "g.txt"
    gens.write_text("one\ntwo\n")
    rc, _, err = cli("score", "--generations", gens, "--metrics", "attr-acc")
    assert rc == 2 and err.count("\n") == 1 and "metric 'attr-acc' needs the attributes of a conditional suite" in err


@pytest.mark.slow
@pytest.mark.skipif(
    not _corpora_here("food-reviews", "news"), reason="the food-reviews and news corpora are not cached"
)
def test_the_ceilings_of_the_builtin_suites():
    """The numbers docs/conditional.md states (movie-attrs: 0.8125, 44,651 IMDB texts to train on, left out)."""
    from maxbench.benchmark.metrics.attributes import conditions_of
    from maxbench.benchmark.metrics.base import TextBatch, get_metric

    for name, ceiling in (("food-attrs", 0.875), ("news-attrs", 0.9166666666666666)):
        suite = load_suite(name)
        ids = [it.id for it in suite.items]
        batch = TextBatch(
            ["x"] * len(ids), ids, {it.id: it.reference for it in suite.items}, None, conditions=conditions_of(suite)
        )
        assert get_metric("attr-acc").compute(batch).scores["attr-acc-ceiling"].value == pytest.approx(ceiling), name
