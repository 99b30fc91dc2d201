"""Tiny corpora and a rule tagger for tests of trained heads."""

import hashlib
import random

from maxbench.benchmark.data.corpora import Corpus

WORDS = "the a good bad tasty coffee tea dog food is was very not really".split()


def tiny_corpus(n_fit=120, n_test=20, seed=0):
    rng = random.Random(seed)

    def doc():
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))

    fit, test = [doc() for _ in range(n_fit)], [doc() for _ in range(n_test)]
    return Corpus("tiny", fit, test, {"sha256": hashlib.sha256("\n".join(fit + test).encode()).hexdigest()})


def tiny_adapter_corpus(n_fit=40, n_test=5, seed=0) -> Corpus:
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))) for _ in range(n_fit + n_test)]
    return Corpus("tiny", docs[:n_fit], docs[n_fit:], {"sha256": hashlib.sha256("\n".join(docs).encode()).hexdigest()})


ADJ, NOUN, DET, VERB = "good bad tasty sweet".split(), "coffee tea dog food".split(), ["the", "a"], ["is", "was"]
RULES = {**{w: "JJ" for w in ADJ}, **{w: "NN" for w in NOUN}, **{w: "DT" for w in DET}, **{w: "VBZ" for w in VERB}}


def rule_tagger(texts):
    """Stands in for spaCy in unit tests: one tag per known word, XX otherwise."""
    out = []
    for text in texts:
        words, i = [], 0
        for w in text.split(" "):
            words.append((i, i + len(w), RULES.get(w, "XX")))
            i += len(w) + 1
        out.append(words)
    return out


def tagged_corpus(n_fit=120, n_test=20, seed=0):
    rng = random.Random(seed)

    def doc():
        out = []
        for _ in range(rng.randint(2, 5)):
            out += [rng.choice(DET), rng.choice(ADJ), rng.choice(NOUN), rng.choice(VERB), rng.choice(ADJ)]
        return " ".join(out)

    fit, test = [doc() for _ in range(n_fit)], [doc() for _ in range(n_test)]
    return Corpus("tinypos", fit, test, {"sha256": hashlib.sha256("\n".join(fit + test).encode()).hexdigest()})
