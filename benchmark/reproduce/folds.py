"""Cross-validation suites: prompts and references from the held-out fold of a corpus.

Fold ``i`` of ``k`` of a corpus is the fold view ``NAME@fold=i/k,seed=S`` (``benchmark/data/corpora.py``):
its fitting split (the other k-1 folds) builds the graph and trains the heads, and its test split
gives the prompts. The fold's texts are shuffled by a seeded generator and turned into items by
the same builders as the built-in suites (``maxbench.benchmark.data.suites``): review prompts (opening words,
reference the rest of the review) or POSG-style prefixes. The suite file is written once and
hashed like any user suite, so a run directory pins exactly which prompts it used.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write

#: a protocol's suite kind -> the built-in suites' builder of items (``suite_build``)
BUILDERS = {"review": "review_items", "prefix": "prefix_items", "windows": "window_items"}


def fold_items(corpus: str, fold: int, k: int, seed: int, n_prompts: int, kind: str) -> list[dict]:
    """The first ``n_prompts`` items of fold ``fold`` of ``k`` (all usable texts when ``n_prompts``
    is 0); a fold with fewer usable texts is one line naming the corpus and fold."""
    from maxbench.benchmark.data import suite_build
    from maxbench.benchmark.data.corpora import fold_view, load_corpus

    view = load_corpus(fold_view(corpus, fold, k, seed))
    texts = list(view.test)
    random.Random(f"maxbench-fold-suite-{view.name}").shuffle(texts)
    builder = getattr(suite_build, BUILDERS[kind])
    items = builder(texts, suite_name(corpus, fold, k, seed), n_prompts or len(texts))
    if len(items) < max(n_prompts, 1):
        raise MaxbenchError(
            f"corpus '{corpus}' is too small for {k} folds of {n_prompts} prompts: fold {fold} holds "
            f"{len(items)} usable texts; use fewer folds or fewer prompts"
        )
    return items


def heldout_items(corpus: str, n_prompts: int, kind: str) -> list[dict]:
    """The first ``n_prompts`` items (all when 0) of the corpus's own test split, in the corpus's
    order: for protocols with a fixed held-out split (POSG's test prefixes)."""
    from maxbench.benchmark.data import suite_build
    from maxbench.benchmark.data.corpora import load_corpus

    texts = load_corpus(corpus).test
    items = getattr(suite_build, BUILDERS[kind])(texts, f"{corpus}-heldout-{kind}", n_prompts or 10**9)
    if len(items) < max(n_prompts, 1):
        raise MaxbenchError(
            f"corpus '{corpus}' is too small for {n_prompts} prompts: its test split gives {len(items)}; ask for fewer"
        )
    return items


def suite_name(corpus: str, fold: int, k: int, seed: int) -> str:
    return f"{corpus}-fold{fold}of{k}-seed{seed}"


def write_suite(items: list[dict], name: str, folder: Path, description: str, corpus: str, heldout: str) -> Path:
    """Write the suite's JSONL and TOML manifest (with its sha256) into ``folder``; returns the manifest.
    ``heldout`` is the corpus or fold view whose test split the items came from (the reference pool of
    heldout-bleu). The same items give the same bytes, so rewriting an existing suite changes nothing."""
    body = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items).encode()
    digest = hashlib.sha256(body).hexdigest()
    data, manifest = folder / f"{name}.jsonl", folder / f"{name}.toml"
    if not data.exists() or data.read_bytes() != body:
        atomic_write(data, body)
    text = (
        f'name = "{name}"\nversion = "1"\ndescription = "{description}"\nfile = "{name}.jsonl"\n'
        f'corpus = "{corpus}"\nheldout = "{heldout}"\nsha256 = "{digest}"\n'
    )
    if not manifest.exists() or manifest.read_text() != text:
        atomic_write(manifest, text)
    return manifest
