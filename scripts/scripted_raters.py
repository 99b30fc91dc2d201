"""Scripted raters: drive every annotator link of a study to the finish page through the real
rating app over HTTP, rating each text by a fixed, documented rule on the text shown.

These raters are scripted, not people. Their ratings exist so that the study path (study create ->
serve -> rate -> export -> ``maxbench view --study`` / ``maxbench report --study``) runs end to end
on real generations and its metric-vs-rating correlations mean something checkable: they measure
how well each automatic metric tracks THIS rule, not human judgment.

The rule (rubric ``posg-lm``: ``diversity`` and ``quality``, 1-5; any rubric with those names).
A rater reads only what the annotator page shows (the continuation; never a system name). With
``words`` the continuation's alphabetic word tokens, lower-cased (``maxbench.benchmark.metrics.tokenize``):

- ``length``   = min(1, len(words) / 20): short and empty texts say little;
- ``repeat``   = share of the text's word 4-grams (all tokens, lower-cased) seen earlier in it;
- ``known``    = share of ``words`` in the lexicon: word types seen at least 3 times in the
  ``--lexicon-corpus`` (its fit split; the food-reviews corpus for the default run);
- ``distinct`` = distinct ``words`` / ``words``.

  quality   = 1 + 4 * length * (1 - repeat) * known ** 2
  diversity = 1 + 4 * length * distinct

Each annotator adds a bias of their own, uniform in [-0.5, 0.5] (seeded by the seed and their
label), and each rating a Gaussian noise of s.d. 0.75 (seeded by the seed, the label, the criterion
and the text); the value is rounded and clipped to the rubric's scale. So the same study, links and
seed give the same ratings in any order. Attention-check pages get the instructed answer, the
comprehension check the rubric's answer.

    python scripts/scripted_raters.py --links links.csv --server http://127.0.0.1:8765 \\
        --rubric posg-lm --lexicon-corpus food-reviews --seed 0
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import http.client
import random
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from maxbench.benchmark.metrics.tokenize import word_tokens  # noqa: E402
from maxbench.errors import MaxbenchError  # noqa: E402
from maxbench.human_eval.studies.rubrics import load_rubric  # noqa: E402
from maxbench.human_eval.testing.participants import ScriptedAnnotator  # noqa: E402

MIN_COUNT = 3  # a lexicon word occurs at least this often in the corpus
FULL_LENGTH = 20  # words for a text to count as long enough
BIAS = 0.5  # annotator bias: uniform in [-BIAS, BIAS]
NOISE = 0.75  # s.d. of each rating's Gaussian noise
RETRIES = 3  # reconnections per page
_TEXT = re.compile(r'<div class="textbox" id="text">(.*?)</div>', re.S)


def lexicon_of(texts, min_count: int = MIN_COUNT) -> frozenset[str]:
    """Word types (lower-cased, alphabetic) seen at least ``min_count`` times in ``texts``."""
    counts = Counter(w for t in texts for w in t.lower().split() if w.isalpha())
    return frozenset(w for w, c in counts.items() if c >= min_count)


def features(text: str, lexicon: frozenset[str]) -> dict[str, float]:
    tokens = [t.lower() for t in word_tokens(text)]
    words = [t for t in tokens if t.isalpha()]
    grams = [tuple(tokens[i : i + 4]) for i in range(len(tokens) - 3)]
    seen, repeated = set(), 0
    for g in grams:
        repeated += g in seen
        seen.add(g)
    return {
        "length": min(1.0, len(words) / FULL_LENGTH),
        "repeat": repeated / len(grams) if grams else 0.0,
        "known": sum(w in lexicon for w in words) / len(words) if words else 0.0,
        "distinct": len(set(words)) / len(words) if words else 0.0,
    }


def latent(f: dict[str, float]) -> dict[str, float]:
    """The rule's noiseless score of each criterion (1 to 5)."""
    return {
        "quality": 1 + 4 * f["length"] * (1 - f["repeat"]) * f["known"] ** 2,
        "diversity": 1 + 4 * f["length"] * f["distinct"],
    }


def _rng(*parts) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big"))


def rating(text: str, label: str, criterion: str, lexicon: frozenset[str], seed: int, lo: int, hi: int) -> int:
    """One scripted annotator's rating of ``text`` on ``criterion``."""
    scores = latent(features(text, lexicon))
    if criterion not in scores:
        raise MaxbenchError(f"the scripted rule rates {' and '.join(sorted(scores))}, not '{criterion}'")
    bias = _rng(seed, label, "bias").uniform(-BIAS, BIAS)
    noise = _rng(seed, label, criterion, text).gauss(0.0, NOISE)
    return max(lo, min(hi, round(scores[criterion] + bias + noise)))


def page_text(page: str) -> str:
    """The continuation an annotator page shows (empty where it says none was produced)."""
    match = _TEXT.search(page)
    if match is None:
        raise MaxbenchError("the annotator page shows no text to rate (a pairwise rubric? the rule rates one text)")
    body = match.group(1)
    return "" if body.startswith("<em>") else html.unescape(body)


def read_links(path: Path) -> list[tuple[str, str]]:
    """(label, link) of each annotator from ``study create --links-out``."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [(row["annotator"], row["link"]) for row in csv.DictReader(f)]
    except (OSError, KeyError) as exc:
        raise MaxbenchError(
            f"cannot read the links file {path} ({exc}); write it with study create --links-out"
        ) from None


def drive(server: str, links, rubric, lexicon: frozenset[str], seed: int) -> dict[str, int]:
    """Rate every page of every link, annotator after annotator; returns pages rated per label."""
    answer = rubric.comprehension_check().answer
    done = {}
    for label, link in links:
        annotator = ScriptedAnnotator(server, link, answer)

        def choose(_path, field, annotator=annotator, label=label):
            text = page_text(annotator.page)
            return rating(text, label, field[2:], lexicon, seed, rubric.scale_min, rubric.scale_max)

        try:
            path = annotator.start()
            while path:
                for attempt in range(RETRIES + 1):
                    try:
                        path = annotator.rate_page(path, choose)
                        break
                    except (OSError, http.client.HTTPException):
                        # a keep-alive connection the server closed: reconnect and show the page again
                        # (a rating already stored answers the GET with a redirect to the next page)
                        annotator.close()
                        if attempt == RETRIES:
                            raise
        finally:
            annotator.close()
        done[label] = len(annotator.acks)
    return done


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--links", type=Path, required=True, help="the CSV of maxbench study create --links-out")
    p.add_argument("--server", required=True, help="the rating app's address, e.g. http://127.0.0.1:8765")
    p.add_argument("--rubric", default="posg-lm", help="the study's rubric (default: %(default)s)")
    p.add_argument("--lexicon-corpus", default="food-reviews", help="corpus of the lexicon (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of biases and noise (default: %(default)s)")
    args = p.parse_args(argv)
    try:
        from maxbench.benchmark.data.corpora import load_corpus

        links, rubric = read_links(args.links), load_rubric(args.rubric)
        lexicon = lexicon_of(load_corpus(args.lexicon_corpus).fit)
        done = drive(args.server, links, rubric, lexicon, args.seed)
    except MaxbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{sum(done.values())} pages rated by {len(done)} scripted raters (lexicon: {len(lexicon)} words)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
