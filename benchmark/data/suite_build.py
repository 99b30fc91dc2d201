"""Building the built-in suites from the corpora's test splits (deterministic: the committed files
in ``benchmark/suites/`` come out byte-identical):
``python -m maxbench.benchmark.data.suite_build build [NAME ...] [--out DIR] [--check]``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from maxbench.benchmark.data.suites import SUITE_DIR, AttributeSpec, Suite, SuiteItem, render_prompt, save_suite
from maxbench.errors import MaxbenchError
from maxbench.fileio import check_not_input, check_output_dir, ensure_dir


def review_items(texts: list[str], prefix: str, n: int, max_prompt_words: int = 8) -> list[dict]:
    """Prompt = the opening words of a held-out review (its first sentence when that is
    shorter than ``max_prompt_words`` words), reference = the rest of that review: the
    continuation the model is asked to write. Reviews of 20-200 words are used."""

    out = []
    for text in texts:
        words = text.split()
        if not 20 <= len(words) <= 200:
            continue
        first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].split()
        k = len(first) if 3 <= len(first) < max_prompt_words else max_prompt_words
        out.append({"id": f"{prefix}-{len(out):04d}", "prompt": " ".join(words[:k]), "reference": " ".join(words[k:])})
        if len(out) == n:
            break
    return out


def prefix_items(texts: list[str], prefix: str, n: int, prefix_words: int = 50, ref_words: int = 100) -> list[dict]:
    """POSG-style: a 50-word prefix and the next 100 words as the reference continuation
    (words, not model tokens, so the suite does not depend on a tokenizer)."""
    out = []
    for text in texts:
        words = text.split()
        if len(words) < prefix_words + ref_words:
            continue
        out.append(
            {
                "id": f"{prefix}-{len(out):04d}",
                "prompt": " ".join(words[:prefix_words]),
                "reference": " ".join(words[prefix_words : prefix_words + ref_words]),
            }
        )
        if len(out) == n:
            break
    return out


def window_items(texts: list[str], prefix: str, n: int, prefix_words: int = 50, ref_words: int = 100) -> list[dict]:
    """POSG's language-modelling protocol on long texts: each text cut into consecutive,
    non-overlapping windows of 150 whitespace words, a window's first 50 words the prefix and
    the next 100 the reference (as the POSG paper cut Wikitext-103's test set into 1,536 prefixes)."""
    out = []
    width = prefix_words + ref_words
    for text in texts:
        words = text.split()
        for start in range(0, len(words) - width + 1, width):
            window = words[start : start + width]
            out.append(
                {
                    "id": f"{prefix}-{len(out):04d}",
                    "prompt": " ".join(window[:prefix_words]),
                    "reference": " ".join(window[prefix_words:]),
                }
            )
            if len(out) == n:
                return out
    return out


BUILD = {
    # name: (corpus, builder, n, description)
    "food-reviews": ("food-reviews", review_items, 96, "Opening words of held-out Amazon fine food reviews"),
    "movie-reviews": ("movie-reviews", review_items, 96, "Opening words of held-out IMDB reviews"),
    "news-prefix": (
        "news",
        prefix_items,
        64,
        "POSG-style: 50-word prefix of held-out BBC articles, 100-word reference",
    ),
    "smoke": ("food-reviews", review_items, 4, "Four food-review prompts, for tests"),
}


#: the conditional suites (docs/conditional.md): name -> how it is drawn from its corpus's test split.
#: ``per_value`` held-out texts for each value of the categorical ``attribute`` (balanced, the values
#: interleaved), their targets (the whole review; a news article's body) of ``words`` words;
#: ``generation_words`` is ``max_new_tokens`` in words: the median number of words in the first
#: ``max_new_tokens`` SmolLM2 tokens of the corpus's held-out texts (food 79, IMDB 76, BBC 123 of 160)
CONDITIONAL_BUILD = {
    "food-attrs": {
        "corpus": "food-reviews",
        "attribute": "score",
        "per_value": 40,
        "words": (20, 300),
        "template": "Rating: {score}. Review:",
        "labels": {"score": {"great": "5 stars", "other": "1 to 4 stars"}},
        "max_new_tokens": 96,
        "generation_words": 79,
        "description": "Held-out Amazon fine food reviews from their rating (5 stars or 1 to 4 stars), 40 of each",
    },
    "news-attrs": {
        "corpus": "news",
        "attribute": "category",
        "per_value": 12,
        "words": (100, 400),
        "template": "Category: {category}. Headline: {headline}. Article:",
        "labels": {},
        "max_new_tokens": 160,
        "generation_words": 123,
        "description": "Held-out BBC articles' bodies from their category and headline, 12 of each category",
    },
    "movie-attrs": {
        "corpus": "movie-reviews",
        "attribute": "sentiment",
        "per_value": 40,
        "words": (20, 300),
        "template": "Sentiment: {sentiment}. Review:",
        "labels": {},
        "max_new_tokens": 96,
        "generation_words": 76,
        "description": "Held-out IMDB reviews from their sentiment (negative or positive), 40 of each",
    },
}


def _schema_of(name: str, cfg: dict) -> dict[str, AttributeSpec]:
    from maxbench.benchmark.data.corpora import attribute_schema

    labels = cfg["labels"]
    return {
        key: AttributeSpec(key)
        if values is None
        else AttributeSpec(key, tuple(values), tuple((v, labels[key][v]) for v in values if v in labels.get(key, {})))
        for key, values in attribute_schema(cfg["corpus"]).items()
    }


def _conditional_items(name: str, cfg: dict, corpus, attributed: dict, schema: dict[str, AttributeSpec]) -> list[dict]:
    """The items of conditional suite ``name``: held-out texts only (``corpus.test``, so no text of the
    suite is in a fitting split: graphs, heads and attr-acc's classifier never see it), and none whose
    target is also the target of a fitting text (BBC has six held-out bodies that a fitting article
    repeats under another headline), in a seeded order, ``per_value`` of each value of the attribute,
    the values interleaved."""
    import random

    from maxbench.benchmark.data.corpora import is_test

    attribute, per_value, (low, high) = cfg["attribute"], cfg["per_value"], cfg["words"]
    fitting = {attributed[t].target for t in corpus.fit if t in attributed}
    texts = list(corpus.test)
    random.Random(f"maxbench-suite-{name}").shuffle(texts)  # fixed order independent of the source
    pools: dict[str, list] = {v: [] for v in schema[attribute].values}
    for text in texts:
        row = attributed.get(text)  # None: attributes ambiguous in the source
        if row is None or not is_test(row.text) or row.target in fitting or not low <= len(row.target.split()) <= high:
            continue
        pool = pools[row.attributes[attribute]]
        if len(pool) < per_value:
            pool.append(row)
    short = {v: len(p) for v, p in pools.items() if len(p) < per_value}
    if short:
        raise MaxbenchError(f"suite '{name}': too few held-out texts for {short} ({per_value} of each are needed)")
    items = []
    for i in range(per_value):
        for value in schema[attribute].values:
            row = pools[value][i]
            attributes = {k: row.attributes[k] for k in schema}
            items.append(
                {
                    "id": f"{name}-{len(items):04d}",
                    "attributes": attributes,
                    "prompt": render_prompt(cfg["template"], schema, attributes),
                    "reference": row.target,
                }
            )
    return items


def _build_one(name: str, out_dir: Path) -> int:
    import random

    from maxbench.benchmark.data.corpora import load_attributes, load_corpus

    if name in CONDITIONAL_BUILD:
        cfg = CONDITIONAL_BUILD[name]
        corpus = load_corpus(cfg["corpus"])
        schema = _schema_of(name, cfg)
        items = _conditional_items(name, cfg, corpus, load_attributes(cfg["corpus"]), schema)
        suite = Suite(
            name=name,
            version="1",
            items=[SuiteItem(it["id"], it["prompt"], it["reference"], it["attributes"]) for it in items],
            sha256="",
            path=out_dir / f"{name}.toml",
            description=cfg["description"],
            attributes=schema,
            template=cfg["template"],
            max_new_tokens=cfg["max_new_tokens"],
            generation_words=cfg["generation_words"],
            corpus=cfg["corpus"],
            corpus_sha256=corpus.sha256,
        )
        low, high = cfg["words"]
        selection = (
            f"held-out texts (test split) whose target has {low}-{high} words and is no fitting text's target, "
            f"{cfg['per_value']} for each "
            f"value of {cfg['attribute']}, the values interleaved, in the order of a seeded shuffle"
        )
        save_suite(suite, out_dir, extra={"split": "test", "selection": selection})
        return len(items)
    corpus_name, builder, n, description = BUILD[name]
    corpus = load_corpus(corpus_name)
    texts = list(corpus.test)
    random.Random(f"maxbench-suite-{name}").shuffle(texts)  # fixed order independent of the source
    items = builder(texts, name, n)
    suite = Suite(
        name=name,
        version="1",
        items=[SuiteItem(it["id"], it["prompt"], it["reference"]) for it in items],
        sha256="",
        path=out_dir / f"{name}.toml",
        description=description,
        corpus=corpus_name,
        corpus_sha256=corpus.sha256,
    )
    save_suite(suite, out_dir, extra={"split": "test"})
    return len(items)


def build_suites(names: list[str] | None = None, out_dir: str | Path = SUITE_DIR) -> dict[str, int]:
    """Build the built-in suites ``names`` (all when None) from the corpora into ``out_dir``
    (deterministic: the committed files come out byte-identical); returns each one's item count."""
    known = list(BUILD) + list(CONDITIONAL_BUILD)
    names = known if not names else names
    for name in names:
        if name not in known:
            raise MaxbenchError(f"no built-in suite '{name}' to build; built-in suites: {', '.join(known)}")
    from maxbench.benchmark.data.corpora import corpus_inputs

    out_dir = Path(out_dir)
    check_output_dir(out_dir, "--out")  # the shared output checks, before any corpus is read
    for name in names:
        corpus = CONDITIONAL_BUILD[name]["corpus"] if name in CONDITIONAL_BUILD else BUILD[name][0]
        for ext in ("jsonl", "toml"):
            check_not_input(out_dir / f"{name}.{ext}", f"--out {out_dir}: its", corpus_inputs(corpus))
    ensure_dir(out_dir, "--out")
    return {name: _build_one(name, out_dir) for name in names}


def build_builtin_suites() -> None:
    for name, n in build_suites().items():
        print(f"{name}: {n} items")


def main(argv: list[str] | None = None) -> int:
    """``python -m maxbench.benchmark.data.suite_build build [NAME ...] [--out DIR] [--check]``: build the
    built-in suites from the corpora (into ``benchmark/suites/``, or DIR); ``--check`` builds them in a
    temporary folder and compares every file with the committed one (exit status 1 when one differs)."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m maxbench.benchmark.data.suite_build")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("names", nargs="*", help="suites to build (default: every built-in suite)")
    parser.add_argument("--out", default=None, help=f"where to write them (default: {SUITE_DIR})")
    parser.add_argument("--check", action="store_true", help="compare a fresh build with the committed files")
    args = parser.parse_args(argv)
    if not args.check:
        for name, n in build_suites(args.names, args.out or SUITE_DIR).items():
            print(f"{name}: {n} items")
        return 0
    differ = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, n in build_suites(args.names, tmp).items():
            files = [f"{name}.{ext}" for ext in ("jsonl", "toml")]
            bad = [
                f
                for f in files
                if not (SUITE_DIR / f).is_file() or (Path(tmp) / f).read_bytes() != (SUITE_DIR / f).read_bytes()
            ]
            differ += bad
            print(f"{name}: {n} items, {'differs: ' + ', '.join(bad) if bad else 'byte-identical'}")
    if differ:
        print(f"differ from the committed files: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MaxbenchError as exc:
        print(f"python -m maxbench.benchmark.data.suite_build: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
