"""attr-acc: whether a text carries the attribute its prompt asked for (conditional suites, docs/conditional.md).

The judge is a classifier of the suite's categorical attribute, trained on the **fitting split** of
the corpus the suite was drawn from (the conditional suites hold only test-split texts, so the
classifier never saw a suite's text): scikit-learn's ``TfidfVectorizer`` (word 1-2-grams, min_df 2,
at most 100,000 features, sublinear tf) and ``LogisticRegression`` (lbfgs, C 1, balanced class
weights). Both are deterministic: the same corpus gives the same numbers, with no random state.

A trained classifier is cached by its identity (the corpus's sha256 and its source's, the attribute,
its values, the settings above and scikit-learn's version) in ``$MAXBENCH_HOME/classifiers/`` as plain
arrays (NumPy's format, never a pickle: vocabulary, idf, coefficients), built under a file lock, and
checked against its identity when loaded; a damaged or mismatching file is trained again.

The metric gives two scores: ``attr-acc``, the share of texts the classifier labels with the value
their prompt asked for (an empty text counts as wrong), and ``attr-acc-ceiling``, the classifier's
accuracy on the suite's references cut to the suite's generation length in words (what the judge
can see in a text that does carry the attribute): the same for every system, so it has an interval
but no paired test. ``flip_check`` is the flipped-attribute check: texts generated from a suite with
the attribute set to its opposite (``maxbench.benchmark.data.suites.flipped_suite``) against the originals.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from maxbench.benchmark.metrics.base import UNIT, Conditions, Metric, MetricResult, Score, TextBatch, info, mean_score
from maxbench.benchmark.metrics.base import signature as make_signature
from maxbench.benchmark.metrics.human import cut_words
from maxbench.errors import MaxbenchError

CLASSIFIER_FORMAT = "maxbench-attribute-classifier/1"
TFIDF = {"ngram_range": (1, 2), "min_df": 2, "max_features": 100_000, "sublinear_tf": True, "lowercase": True}
LOGREG = {"C": 1.0, "solver": "lbfgs", "max_iter": 2000, "class_weight": "balanced"}
CLASSIFIER = "tfidf(word-1-2-grams,min-df-2,max-100000,sublinear)+logreg(lbfgs,C-1,balanced)"
NO_ATTRIBUTES = (
    "needs the attributes of a conditional suite (e.g. food-attrs, news-attrs, movie-attrs), and this input has "
    "none (a suite without attributes, a run whose suite file is gone, or --generations)"
)


def _sklearn_version() -> str:
    import sklearn

    return sklearn.__version__


# ---------------------------------------------------------------- the classifier
@dataclass
class AttributeClassifier:
    """A trained attribute classifier: ``predict`` gives each text's value of ``attribute``."""

    corpus: str
    corpus_sha256: str
    attribute: str
    classes: tuple[str, ...]
    n_fit: int  # texts of the fitting split it was trained on
    identity: str
    vectorizer: object  # a fitted sklearn TfidfVectorizer
    coef: np.ndarray  # (1, features) for two classes, else (classes, features)
    intercept: np.ndarray
    path: Path | None = None

    def decision(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.vectorizer.transform(list(texts)) @ self.coef.T) + self.intercept

    def predict(self, texts: Sequence[str]) -> list[str]:
        """Each text's value, as scikit-learn's ``LogisticRegression.predict`` decides it."""
        if not len(texts):
            return []
        scores = self.decision(texts)
        index = (scores[:, 0] > 0).astype(int) if len(self.classes) == 2 else scores.argmax(axis=1)
        return [self.classes[i] for i in index]

    @property
    def signature(self) -> str:
        return f"{self.corpus}@{self.corpus_sha256[:12]}:{self.attribute}:{self.identity[:12]}"


def classifier_identity(corpus, attribute: str, values: Sequence[str]) -> str:
    """What a classifier is a function of: the corpus's texts and split (its sha256), the labels' source
    (its sha256), the attribute and its values, the settings and scikit-learn's version."""
    ident = {
        "format": CLASSIFIER_FORMAT,
        "corpus_sha256": corpus.sha256,
        "source_sha256": corpus.meta.get("source_sha256"),
        "attribute": attribute,
        "values": list(values),
        "tfidf": {k: list(v) if isinstance(v, tuple) else v for k, v in TFIDF.items()},
        "logreg": LOGREG,
        "sklearn": _sklearn_version(),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def _cache_path(corpus_name: str, attribute: str, identity: str) -> Path:
    from maxbench.fileio import maxbench_home
    from maxbench.systems.assets import cache_dir

    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in corpus_name)
    return cache_dir(maxbench_home() / "classifiers") / f"{safe}-{attribute}-{identity[:16]}.npz"


def train_classifier(corpus, attribute: str) -> AttributeClassifier:
    """Train the classifier of ``attribute`` on ``corpus.fit``: each fitting text's target (the whole
    review; a news article's body, as a suite's reference is) with its value."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from maxbench.benchmark.data.corpora import attribute_schema, load_attributes

    values = attribute_schema(corpus.name).get(attribute)
    if values is None:
        raise MaxbenchError(f"corpus '{corpus.name}' has no categorical attribute '{attribute}' to classify")
    labelled = load_attributes(corpus.name)
    rows = [(labelled[t].target, labelled[t].attributes[attribute]) for t in corpus.fit if t in labelled]
    missing = [v for v in values if v not in {y for _, y in rows}]
    if missing:
        raise MaxbenchError(f"the fitting split of corpus '{corpus.name}' has no text with {attribute}={missing[0]}")
    vectorizer = TfidfVectorizer(**TFIDF)
    X = vectorizer.fit_transform([t for t, _ in rows])
    model = LogisticRegression(**LOGREG).fit(X, [y for _, y in rows])
    return AttributeClassifier(
        corpus=corpus.name,
        corpus_sha256=corpus.sha256,
        attribute=attribute,
        classes=tuple(str(c) for c in model.classes_),
        n_fit=len(rows),
        identity=classifier_identity(corpus, attribute, values),
        vectorizer=vectorizer,
        coef=np.asarray(model.coef_, dtype=np.float64),
        intercept=np.asarray(model.intercept_, dtype=np.float64),
    )


def save_classifier(clf: AttributeClassifier, path: Path) -> None:
    from maxbench.fileio import atomic_write

    header = {
        "format": CLASSIFIER_FORMAT,
        "identity": clf.identity,
        "corpus": clf.corpus,
        "corpus_sha256": clf.corpus_sha256,
        "attribute": clf.attribute,
        "n_fit": clf.n_fit,
    }
    buf = io.BytesIO()
    np.savez(
        buf,
        header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        terms=np.array(clf.vectorizer.get_feature_names_out(), dtype=str),
        idf=np.asarray(clf.vectorizer.idf_, dtype=np.float64),
        coef=clf.coef,
        intercept=clf.intercept,
        classes=np.array(clf.classes, dtype=str),
    )
    atomic_write(path, buf.getvalue())


def load_classifier(path: Path, identity: str) -> AttributeClassifier:
    """The classifier stored at ``path``; ValueError when it is not the one of ``identity``."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    with np.load(path, allow_pickle=False) as z:
        header = json.loads(z["header"].tobytes().decode())
        if header.get("format") != CLASSIFIER_FORMAT or header.get("identity") != identity:
            raise ValueError("another classifier")
        terms, idf = z["terms"], z["idf"]
        coef, intercept, classes = z["coef"], z["intercept"], z["classes"]
    if len(terms) != len(idf) or coef.shape[1] != len(terms) or len(intercept) != coef.shape[0]:
        raise ValueError("inconsistent arrays")
    vectorizer = TfidfVectorizer(**TFIDF, vocabulary={str(t): i for i, t in enumerate(terms)})
    vectorizer.idf_ = idf
    return AttributeClassifier(
        corpus=header["corpus"],
        corpus_sha256=header["corpus_sha256"],
        attribute=header["attribute"],
        classes=tuple(str(c) for c in classes),
        n_fit=int(header["n_fit"]),
        identity=identity,
        vectorizer=vectorizer,
        coef=coef,
        intercept=intercept,
        path=path,
    )


_LOADED: dict[str, AttributeClassifier] = {}


def get_classifier(corpus_name: str, attribute: str, rebuild: bool = False) -> AttributeClassifier:
    """The classifier of ``attribute`` for corpus ``corpus_name`` (or a fold view of it): from this
    process, from the cache, or trained and cached (under the cache file's lock: a second process
    waits for the first one's classifier instead of training it too)."""
    from maxbench.benchmark.data.corpora import attribute_schema, load_corpus
    from maxbench.locks import exclusive

    values = attribute_schema(corpus_name).get(attribute)
    if values is None:
        raise MaxbenchError(f"corpus '{corpus_name}' has no categorical attribute '{attribute}' to classify")
    corpus = load_corpus(corpus_name)
    identity = classifier_identity(corpus, attribute, values)
    if identity in _LOADED and not rebuild:
        return _LOADED[identity]
    path = _cache_path(corpus_name, attribute, identity)
    with exclusive(path):
        clf = None
        if path.exists() and not rebuild:
            try:
                clf = load_classifier(path, identity)
            except (OSError, ValueError, KeyError, json.JSONDecodeError, UnicodeDecodeError):
                print(
                    f"maxbench: classifier file {path} is damaged or another one's; training it again", file=sys.stderr
                )
        if clf is None:
            clf = train_classifier(corpus, attribute)
            save_classifier(clf, path)
            clf.path = path
    _LOADED[identity] = clf
    return clf


# ---------------------------------------------------------------- conditions of a suite
def conditions_of(suite) -> Conditions:
    """The ``Conditions`` of a conditional suite (``maxbench.benchmark.data.suites.Suite``), for a TextBatch."""
    if not suite.conditional:
        raise MaxbenchError(f"suite '{suite.name}' has no attributes")
    return Conditions(
        suite=f"{suite.name}@{suite.sha256}",
        attributes={it.id: dict(it.attributes) for it in suite.items},
        schema={k: a.values for k, a in suite.attributes.items()},
        corpus=suite.corpus,
        corpus_sha256=suite.corpus_sha256,
        generation_words=suite.generation_words,
    )


def classified_attribute(conditions: Conditions) -> tuple[str | None, str | None]:
    """(the attribute attr-acc classifies, None) or (None, why it cannot): the suite's one categorical
    attribute, which its corpus must carry with the same values."""
    from maxbench.benchmark.data.corpora import ATTRIBUTES, parse_view

    categorical = [k for k, v in conditions.schema.items() if v is not None]
    if len(categorical) != 1:
        return (
            None,
            f"classifies a suite's one categorical attribute, and suite {conditions.suite.split('@')[0]} has {len(categorical)}",
        )
    attribute = categorical[0]
    if conditions.corpus is None:
        return None, "needs the suite's corpus (its manifest's 'corpus') to train its classifier on"
    try:
        base = (parse_view(conditions.corpus) or (conditions.corpus,))[0]
    except MaxbenchError as exc:
        return None, f"cannot use the suite's corpus: {exc}"
    if base not in ATTRIBUTES:
        return None, f"needs a corpus with attribute labels to train on, and '{conditions.corpus}' has none"
    values = ATTRIBUTES[base][1].get(attribute)
    if values is None or set(values) != set(conditions.schema[attribute]):
        return (
            None,
            f"needs corpus '{conditions.corpus}' to label '{attribute}' with the suite's values, and it does not",
        )
    return attribute, None


# ---------------------------------------------------------------- the metric
class AttributeAccuracy(Metric):
    name = "attr-acc"
    higher_is_better = True
    # what a conditional run is about, so it leads the compact table, with the ceiling to read it against
    compact_scores = ("attr-acc", "attr-acc-ceiling")

    @property
    def score_info(self):
        return {
            "attr-acc": info("attr-acc", "higher", column=10),
            "attr-acc-ceiling": info("attr-acc ceiling", "higher", column=20),
        }

    @property
    def variant(self) -> str:
        return (
            "share of texts a TF-IDF + logistic-regression classifier (scikit-learn), trained on the fitting split "
            "of the suite's corpus, labels with the attribute value their prompt asked for (an empty text is "
            "wrong); ceiling: its accuracy on the references cut to the suite's generation length in words"
        )

    @property
    def signature(self) -> str:
        return make_signature(
            "attr-acc",
            classifier=CLASSIFIER,
            fit="fitting-split",
            empty="wrong",
            ceiling="references-cut-to-generation-words",
            format=CLASSIFIER_FORMAT,
            sklearn=_sklearn_version(),
        )

    @property
    def score_ranges(self) -> dict[str, tuple[float, float]]:
        return {"attr-acc": UNIT, "attr-acc-ceiling": UNIT}

    def unavailable(self, batch: TextBatch) -> str | None:
        if batch.conditions is None:
            return NO_ATTRIBUTES
        return classified_attribute(batch.conditions)[1]

    def _compute(self, batch: TextBatch) -> MetricResult:
        from maxbench.benchmark.metrics.stats import (
            DEFAULT_LEVEL,
            DEFAULT_RESAMPLES,
            DEFAULT_SEED,
            bootstrap_ci,
            mean_stats,
        )

        cond = batch.conditions
        attribute, _ = classified_attribute(cond)
        clf = get_classifier(cond.corpus, attribute)
        wanted = [cond.attributes[p][attribute] for p in batch.prompt_ids]
        predicted = clf.predict(batch.texts)
        per_text = [float(bool(t.strip()) and y == w) for t, y, w in zip(batch.texts, predicted, wanted)]
        scores = [mean_score(batch, "attr-acc", per_text)]
        notes = [f"classifier {clf.signature}, trained on {clf.n_fit:,} texts of the fitting split"]
        if cond.corpus_sha256 and cond.corpus_sha256 != clf.corpus_sha256:
            notes.append(
                f"corpus '{cond.corpus}' is not the one the suite was drawn from (sha256 {clf.corpus_sha256[:12]}... "
                f"against {cond.corpus_sha256[:12]}...)"
            )
        if batch.references is None:
            scores.append(
                Score("attr-acc-ceiling", None, None, reason="the suite has no references to find the ceiling on")
            )
        else:
            order = batch.prompt_order
            refs = [cut_words(batch.references[p], cond.generation_words) for p in order]
            hits = np.array([float(y == cond.attributes[p][attribute]) for p, y in zip(order, clf.predict(refs))])
            stats = mean_stats(order, np.arange(len(order)), hits)
            ci = bootstrap_ci(stats, DEFAULT_RESAMPLES, DEFAULT_SEED, DEFAULT_LEVEL, UNIT)
            interval = None
            if ci.confidence_interval is not None:
                method = f"{ci.method}, {DEFAULT_RESAMPLES} resamples, seed {DEFAULT_SEED}; the same for every system: not tested"
                interval = (*ci.confidence_interval, method)
            scores.append(Score("attr-acc-ceiling", float(hits.mean()), None, interval=interval))
            seen = _in_fitting_split(cond.corpus, batch.reference_list)
            if seen:
                notes.append(f"{seen} of {len(order)} references are texts of the classifier's fitting split")
        result = self.result(scores, "; ".join(notes))
        words = cond.generation_words if cond.generation_words is not None else "whole"
        return replace(
            result,
            signature=f"{self.signature}|suite:{cond.suite.split('@')[0]}@{cond.suite.split('@')[-1][:12]}"
            f"|attribute:{attribute}|trained:{clf.signature}|ceiling-words:{words}",
        )


def _in_fitting_split(corpus_name: str, references: Sequence[str]) -> int:
    """How many references are (the end of) a text of the corpus's fitting split: none for suites drawn
    from its test split, as the built-in ones are."""
    from maxbench.benchmark.data.corpora import load_corpus

    fit = load_corpus(corpus_name).fit
    exact = set(fit)
    return sum(1 for r in references if r.strip() and (r in exact or any(t.endswith(" " + r) for t in fit)))


# ---------------------------------------------------------------- the flipped-attribute check
@dataclass(frozen=True)
class FlipResult:
    """The flipped-attribute check: ``n`` pairs of texts, one generated with a prompt's attribute value
    and one with its opposite (same prompt id, same sample), and how the classifier labels them."""

    attribute: str
    classifier: str  # its signature
    n: int
    changed: int  # the two texts get different labels
    to_target: int  # the flipped text gets the flipped (requested) value
    flipped: int  # the original text gets its value and the flipped text the flipped one

    def rates(self) -> dict:
        share = (lambda k: k / self.n) if self.n else (lambda k: None)
        return {"changed": share(self.changed), "to_target": share(self.to_target), "flipped": share(self.flipped)}

    def as_dict(self) -> dict:
        return {
            "attribute": self.attribute,
            "classifier": self.classifier,
            "n": self.n,
            "changed": self.changed,
            "to_target": self.to_target,
            "flipped": self.flipped,
            "rates": self.rates(),
        }


def flip_check(original: TextBatch, flipped: TextBatch, attribute: str | None = None) -> FlipResult:
    """Count how often attr-acc's classifier follows a flipped attribute. ``original`` holds one system's
    texts on a conditional suite, ``flipped`` the same system's texts on its ``flipped_suite`` (both with
    their ``conditions``, as ``scoring.load_batches`` gives them); the k-th text of a prompt id in one is paired with
    the k-th text of that id in the other (prompts only one batch has are left out). A pair whose
    attribute was not flipped is an error: the two batches are not a suite and its flipped suite."""
    for batch, what in ((original, "original"), (flipped, "flipped")):
        if not isinstance(batch, TextBatch):
            raise MaxbenchError(
                f"flip_check takes two TextBatch (one system's texts, as scoring.load_batches gives them per "
                f"system); its {what} texts are a {type(batch).__name__}: pass load_batches(run)[1][system] of each run"
            )
        if batch.conditions is None:
            raise MaxbenchError(f"the flip check's {what} texts have no attributes: {NO_ATTRIBUTES}")
    if attribute is None:
        attribute, why = classified_attribute(original.conditions)
        if why:
            raise MaxbenchError(f"the flip check {why}")
    clf = get_classifier(original.conditions.corpus, attribute)

    def by_prompt(batch: TextBatch) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t, p in zip(batch.texts, batch.prompt_ids):
            out.setdefault(p, []).append(t)
        return out

    a, b = by_prompt(original), by_prompt(flipped)
    pairs = []
    for pid, texts in a.items():
        for x, y in zip(texts, b.get(pid, [])):
            wanted = original.conditions.attributes[pid][attribute]
            target = flipped.conditions.attributes[pid][attribute]
            if wanted == target:
                raise MaxbenchError(
                    f"prompt '{pid}' asks for {attribute}={wanted} in both batches: nothing was flipped"
                )
            pairs.append((x, y, wanted, target))
    px = clf.predict([x for x, _, _, _ in pairs])
    py = clf.predict([y for _, y, _, _ in pairs])
    ok = [(bool(x.strip()), bool(y.strip())) for x, y, _, _ in pairs]
    return FlipResult(
        attribute=attribute,
        classifier=clf.signature,
        n=len(pairs),
        changed=sum(1 for u, v, (nx, ny) in zip(px, py, ok) if nx and ny and u != v),
        to_target=sum(1 for v, (_, ny), (_, _, _, t) in zip(py, ok, pairs) if ny and v == t),
        flipped=sum(1 for u, v, (nx, ny), (_, _, w, t) in zip(px, py, ok, pairs) if nx and ny and u == w and v == t),
    )
