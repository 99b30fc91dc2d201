"""Adapters on a conditional suite learn its attributes from its corpus: an attribute that no text of
the corpus's fitting split carries is refused naming it (not "the fitting split is empty", nor "never
saw score='great'")."""

from __future__ import annotations

import pytest

from maxbench.errors import MaxbenchError


@pytest.mark.parametrize(
    "carried",
    [
        {"stars": "5"},  # the suite's 'score' missing from every text
        {},  # no attribute at all
    ],
)
def test_an_attribute_the_corpus_never_carries_is_refused_naming_it(monkeypatch, tmp_path, carried):
    import maxbench.benchmark.data.corpora as corpora
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.run.runner import adapter_training_data
    from maxbench.rundir import RunPlan

    fit = [f"the soup number {i} was warm" for i in range(4)]
    corpus = corpora.Corpus("tiny", fit, ["the bread was fresh"], {"sha256": "0" * 64})
    rows = {t: corpora.AttributedText(t, t, dict(carried)) for t in corpus.fit}
    monkeypatch.setattr(corpora, "load_corpus", lambda name: corpus)
    monkeypatch.setattr(corpora, "load_attributes", lambda name: rows)
    plan = RunPlan(run_dir=tmp_path / "r", suite=load_suite("food-attrs"), systems=[], corpus="food-reviews")
    with pytest.raises(MaxbenchError, match=r"asks for attribute 'score', which no text of corpus") as exc:
        adapter_training_data(plan)
    assert f"(it has {', '.join(carried) or 'none'})" in str(exc.value)
