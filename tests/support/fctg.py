"""The FCTG adapter's small training examples and contexts, and a generation on the tiny attribute
suite, shared by the conditional adapters' tests."""

from __future__ import annotations

import random

from maxbench.systems.adapters import AdapterFitContext, TrainingExample

WORDS = "the a good bad tasty coffee tea dog food is was very not really".split()


LABEL = {"great": "5 stars", "other": "1 to 4 stars"}


ATTRIBUTES = {"score": {"kind": "categorical", "values": ["great", "other"]}}


def examples(n=24, values=("great", "other"), seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        v = values[i % len(values)]
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        out.append(TrainingExample(f"Rating: {LABEL[v]}. Review:", text, {"score": v}))
    return out


def ctx(lm, exs=None):
    return AdapterFitContext(
        model=lm,
        examples=exs or examples(),
        data={"corpus": "tiny", "sha256": "0" * 64, "split": "fit", "attributes": ATTRIBUTES},
        options={"progress": False},
    )


def fresh():
    from maxbench.systems.models import load_model

    return load_model("tiny-random")


def generate_on_tiny_attrs(cli, tmp_path, monkeypatch, system: str):
    """``maxbench generate`` of ``system`` on a two-item conditional suite over the tiny examples;
    returns (run folder, manifest, rows)."""
    import json

    import maxbench.benchmark.data.corpora as corpora
    from maxbench.benchmark.data.corpora import Corpus

    exs = examples()
    fit = [e.text for e in exs]
    corpus = Corpus("food-reviews", fit, fit[:2], {"sha256": "0" * 64})
    scored = {e.text: corpora.AttributedText(e.text, e.text, e.attributes) for e in exs}
    monkeypatch.setattr(corpora, "load_corpus", lambda name: corpus)
    monkeypatch.setattr(corpora, "load_attributes", lambda name: scored)
    monkeypatch.setattr(corpora, "check_corpus", lambda name: name)
    suite = tmp_path / "suite"
    suite.mkdir()
    items = [
        {"id": f"i{i}", "attributes": {"score": v}, "reference": "good tea"} for i, v in enumerate(["great", "other"])
    ]
    (suite / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    (suite / "tiny-attrs.toml").write_text(
        'name = "tiny-attrs"\nfile = "items.jsonl"\ntemplate = "Rating: {score}. Review:"\nmax_new_tokens = 4\n'
        'generation_words = 3\ncorpus = "food-reviews"\n\n[attributes.score]\nvalues = ["great", "other"]\n'
        'labels = { great = "5 stars", other = "1 to 4 stars" }\n'
    )
    argv = ["generate", "--system", system, "--suite", suite / "tiny-attrs.toml", "--corpus", "food-reviews"]
    rc, _, err = cli(*argv, "--max-new-tokens", "4", "--runs-dir", tmp_path / "runs", "--no-progress")
    assert rc == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    rows = [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines() if line.strip()]
    return run, manifest, rows
