"""Real corpora extracted from registry packages, cleaned, deduplicated and split.

Each corpus is read from its asset (maxbench.systems.assets), cleaned (markup stripped, HTML entities
decoded, whitespace normalised), deduplicated (first occurrence kept) and split by a hash of
the cleaned text: a text goes to the test split when the first 8 hex digits of its sha256,
read as an integer, are divisible by 10 (about 10%). The split therefore does not depend
on the order of the source and never changes while the text does not. The extracted corpus
is cached as JSONL with a manifest (source, licence, counts, sha256) under
``$MAXBENCH_HOME/corpora``.
"""

from __future__ import annotations

import hashlib
import html
import json
import lzma
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, maxbench_home
from maxbench.registry import closest
from maxbench.systems.assets import ASSETS, fetch

CORPUS_VERSION = "1"
_TAG = re.compile(r"<[^>]{0,200}>")
_WS = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """Strip markup (``<br />`` and other tags), decode HTML entities, normalise whitespace."""
    text = _TAG.sub(" ", text)
    text = html.unescape(text)
    return _WS.sub(" ", text).strip()


def is_test(text: str) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 10 == 0


@dataclass
class Corpus:
    name: str
    fit: list[str]
    test: list[str]
    meta: dict = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return self.meta["sha256"]


def _food_reviews() -> list[str]:
    """Amazon fine food reviews as shipped in R's modeldata. The .rdb is R's lazy-load database:
    each object is a 4-byte length, a compression tag ('Z' = xz) and a raw LZMA2 stream of R
    serialisation."""
    return [text for text, _, _ in _food_review_rows()]


def _food_review_rows() -> list[tuple[str, dict, None]]:
    """(review, {"score": "great" | "other"}, None) of both modeldata objects: the package's
    ``score`` says whether the reviewer gave the product 5 stars ("great") or not ("other")."""
    import rdata

    rdb = fetch("modeldata")
    rdx = rdb.with_suffix(".rdx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rdata warns that the index has no RDS magic
        index = rdata.conversion.convert(rdata.parser.parse_file(rdx))
        blob = rdb.read_bytes()
        rows = []
        for name in ("training_data", "testing_data"):
            off, length = (int(v) for v in index["variables"][name])
            chunk = blob[off : off + length]
            if chunk[4:5] != b"Z":
                raise MaxbenchError(f"{rdb}: object {name} uses an unexpected compression tag {chunk[4:5]!r}")
            raw = lzma.decompress(
                chunk[5:],
                format=lzma.FORMAT_RAW,
                filters=[{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}],
            )
            frame = rdata.conversion.convert(rdata.parser.parse_data(raw))
            rows.extend((str(t), {"score": str(s)}, None) for t, s in zip(frame["review"], frame["score"]))
    return rows


def _movie_reviews() -> list[str]:
    return [text for text, _, _ in _movie_review_rows()]


def _movie_review_rows() -> list[tuple[str, dict, None]]:
    """(review, {"sentiment": "negative" | "positive"}, None) of the IMDB CSV."""
    import pandas as pd

    frame = pd.read_csv(fetch("imdb"))
    reviews = frame["review"].astype(str).tolist()
    return [(t, {"sentiment": str(s)}, None) for t, s in zip(reviews, frame["sentiment"].astype(str))]


def _news() -> list[str]:
    return [text for text, _, _ in _news_rows()]


def _news_rows() -> list[tuple[str, dict, str]]:
    """(article, {"category": its folder, "headline": its first line}, the rest: its body)."""
    root = fetch("bbc")
    rows = []
    for path in sorted(root.glob("*/*.txt")):
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # one article in the source is Windows-1252
            text = raw.decode("cp1252", errors="replace")
        headline, _, body = text.partition("\n")
        rows.append((text, {"category": path.parent.name, "headline": clean_text(headline)}, body))
    return rows


WIKI_PASSAGE_WORDS = 150
#: wiki tags whose contents are not prose: references, tables, galleries, formulas
_DROPPED_TAGS = {"ref", "references", "table", "gallery", "math", "timeline", "imagemap", "score", "syntaxhighlight"}
#: wiki links whose namespace is not prose
_DROPPED_LINKS = ("file", "image", "category")


def _holders(code) -> dict:
    """For every node of the parsed page ``code``, by ``id``: the Wikicode that holds it, and the node
    that holds that Wikicode (None at the top)."""
    holders, todo = {}, [(code, None)]
    while todo:
        wikicode, owner = todo.pop()
        for node in wikicode.nodes:
            holders[id(node)] = (wikicode, owner)
            todo += [(child, node) for child in node.__children__()]
    return holders


def _remove(holders: dict, nodes) -> None:
    """``page.remove(node)`` for each of ``nodes`` in turn, with the same result: the node leaves the
    Wikicode holding it, and a node no longer in the page (inside one removed before) raises
    ValueError, as there. mwparserfromhell searches the whole page for each node it removes, which
    makes the extraction quadratic in the page's size; here the holders come from one walk of the
    page (``_holders``)."""

    def position(wikicode, child) -> int:
        for i, n in enumerate(wikicode.nodes):
            if n is child:
                return i
        raise ValueError(node)

    for node in nodes:
        wikicode, owner = holders[id(node)]
        index = position(wikicode, node)
        while owner is not None:  # every ancestor must still be where the walk found it
            holder, above = holders[id(owner)]
            position(holder, owner)
            owner = above
        wikicode.nodes.pop(index)


def _wikipedia() -> list[str]:
    """Articles (main namespace, no redirects) of the Wikipedia sample in gensim's test data, their
    wiki markup removed by mwparserfromhell (templates, references, tables, comments, file and
    category links dropped; link text kept) and section headings dropped, each article's prose cut
    into consecutive passages of WIKI_PASSAGE_WORDS whitespace words (its last one shorter). The
    passages are the corpus's texts: 106 articles split by the hash rule would leave a handful of
    test articles, 150-word passages leave about 300 held-out passages, each one POSG prefix
    (50 words) and continuation (100 words)."""
    texts = []
    for body in wiki_articles():
        words = wiki_prose(body).split()
        texts += [" ".join(words[i : i + WIKI_PASSAGE_WORDS]) for i in range(0, len(words), WIKI_PASSAGE_WORDS)]
    return texts


def wiki_articles():
    """The wiki markup of each article (main namespace, not a redirect, not empty) of the
    ``gensim-wiki`` asset, in file order."""
    import bz2
    import xml.etree.ElementTree as ET

    with bz2.open(fetch("gensim-wiki")) as f:
        for _, el in ET.iterparse(f):
            if not el.tag.endswith("}page"):
                continue
            ns = next((c.text for c in el if c.tag.endswith("}ns")), "0")
            redirect = any(c.tag.endswith("}redirect") for c in el)
            body = next((r.text for r in el.iter() if r.tag.endswith("}text")), "") or ""
            el.clear()
            if ns == "0" and not redirect and body:
                yield body


def wiki_prose(body: str) -> str:
    """An article's prose: its markup parsed by mwparserfromhell, without section headings, file,
    image and category links, and the tags of ``_DROPPED_TAGS``; then ``strip_code``."""
    import mwparserfromhell

    code = mwparserfromhell.parse(body)
    holders = _holders(code)
    _remove(holders, code.filter_headings(recursive=False))
    links = code.filter_wikilinks()
    _remove(holders, [x for x in links if str(x.title).split(":", 1)[0].strip().lower() in _DROPPED_LINKS])
    tags = code.filter_tags(recursive=False)  # strip_code keeps a tag's contents
    _remove(holders, [t for t in tags if str(t.tag).strip().lower() in _DROPPED_TAGS])
    return code.strip_code(normalize=True, collapse=True)


CORPORA = {
    "food-reviews": (_food_reviews, "modeldata", "Amazon fine food reviews, 5,000 (R modeldata 1.1.0)"),
    "movie-reviews": (_movie_reviews, "imdb", "IMDB movie reviews, 50,000 (Maas et al. 2011)"),
    "news": (_news, "bbc", "BBC news articles 2004-05, 2,225 (Greene & Cunningham 2006)"),
    "wikipedia": (_wikipedia, "gensim-wiki", "English Wikipedia sample, 106 articles (gensim 4.4.0 test data)"),
}


def _extract(name: str) -> tuple[list[str], dict]:
    reader, asset_name, description = CORPORA[name]
    raw = reader()
    seen, texts, empty = set(), [], 0
    for t in raw:
        c = clean_text(t)
        if not c:
            empty += 1
            continue
        if c in seen:
            continue
        seen.add(c)
        texts.append(c)
    asset = ASSETS[asset_name]
    meta = {
        "name": name,
        "version": CORPUS_VERSION,
        "description": description,
        "source": f"{asset.source}:{asset.spec}",
        "source_sha256": asset.sha256,
        "licence": asset.licence,
        "raw_texts": len(raw),
        "empty": empty,
        "duplicates_removed": len(raw) - empty - len(texts),
        "texts": len(texts),
        "words": sum(len(t.split()) for t in texts),
        "split_rule": "test if int(sha256(text)[:8], 16) % 10 == 0",
    }
    return texts, meta


# ---------------------------------------------------------------- fold views (cross-validation)
_VIEW = re.compile(r"^(?P<base>[^@]+)@fold=(?P<fold>-?\d+)/(?P<k>-?\d+),seed=(?P<seed>\d+)$")


def fold_of(text: str, k: int, seed: int) -> int:
    """The cross-validation fold (0..k-1) of a text: a seeded hash of the text, so a text's fold
    does not depend on the order of the corpus and never changes while the text and seed do not."""
    return int(hashlib.sha256(f"{seed}:{text}".encode()).hexdigest()[:8], 16) % k


def fold_view(name: str, fold: int, k: int, seed: int) -> str:
    """The name of corpus ``name`` seen as fold ``fold`` of ``k``: its fitting split is the other k-1
    folds of the whole corpus (fit and test splits together), its test split that fold."""
    return f"{name}@fold={fold}/{k},seed={seed}"


def parse_view(name: str) -> tuple[str, int, int, int] | None:
    """(base corpus, fold, k, seed) of a fold view's name, None for a plain corpus name; a malformed
    or impossible view is one line."""
    if "@" not in name:
        return None
    m = _VIEW.match(name)
    if m is None:
        raise MaxbenchError(
            f"corpus view '{name}' is malformed; write NAME@fold=I/K,seed=S (e.g. food-reviews@fold=0/5,seed=1)"
        )
    base, fold, k, seed = m["base"], int(m["fold"]), int(m["k"]), int(m["seed"])
    if k < 2:
        raise MaxbenchError(f"corpus view '{name}': the fold count must be at least 2, got {k}")
    if not 0 <= fold < k:
        raise MaxbenchError(f"corpus view '{name}': the fold must be between 0 and {k - 1}, got {fold}")
    return base, fold, k, seed


def _load_view(name: str, base: str, fold: int, k: int, seed: int) -> Corpus:
    """A fold view of corpus ``base``. Its identity (``name`` and ``sha256``) differs from the base
    corpus and from every other view, so graphs, hidden states and heads fitted on it are cached
    apart; the base corpus and its caches are untouched."""
    whole = load_corpus(base)
    texts = whole.fit + whole.test
    fit = [t for t in texts if fold_of(t, k, seed) != fold]
    test = [t for t in texts if fold_of(t, k, seed) == fold]
    digest = hashlib.sha256(f"{name}\n{whole.sha256}".encode()).hexdigest()
    meta = dict(
        whole.meta,
        name=name,
        view_of=base,
        view_of_sha256=whole.sha256,
        split_rule=f"test = fold {fold} of {k}: int(sha256(f'{seed}:{{text}}')[:8], 16) % {k} == {fold}",
        sha256=digest,
        fit=len(fit),
        test=len(test),
    )
    return Corpus(name=name, fit=fit, test=test, meta=meta)


def check_corpus(name: str) -> str:
    """``name`` if it is a known corpus or a well-formed fold view of one, else one line with the
    closest known name (nothing is read)."""
    view = parse_view(name)
    if view is not None:
        check_corpus(view[0])
        return name
    if name not in CORPORA:
        near = closest(name, CORPORA)
        guess = f": did you mean '{near}'?" if near else ";"
        raise MaxbenchError(f"unknown corpus '{name}'{guess} known corpora: {', '.join(CORPORA)}")
    return name


def corpus_inputs(name: str) -> list[tuple[Path, str]]:
    """The cache files of corpus ``name`` (``load_corpus``'s), as inputs of a command that reads it
    (``maxbench.fileio.check_not_input``): an output never replaces them."""
    root = maxbench_home() / "corpora"
    return [(root / f"{name}.jsonl", f"corpus {name}'s texts"), (root / f"{name}.json", f"corpus {name}'s record")]


def is_extracted(name: str) -> bool:
    """Whether corpus ``name`` has been extracted into the cache (its files exist; ``load_corpus``
    verifies them)."""
    root = maxbench_home() / "corpora"
    return (root / f"{name}.jsonl").exists() and (root / f"{name}.json").exists()


def load_corpus(name: str) -> Corpus:
    """Return the cleaned, split corpus ``name`` (or a fold view of one), extracting it once into the cache."""
    check_corpus(name)
    view = parse_view(name)
    if view is not None:
        return _load_view(name, *view)
    root = maxbench_home() / "corpora"
    data, meta_path = root / f"{name}.jsonl", root / f"{name}.json"
    meta = None
    if data.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
            body = data.read_bytes()
            if meta.get("version") != CORPUS_VERSION or hashlib.sha256(body).hexdigest() != meta.get("sha256"):
                meta = None
        except (OSError, ValueError):
            meta = None
    if meta is None:
        texts, meta = _extract(name)
        body = "".join(
            json.dumps({"text": t, "split": "test" if is_test(t) else "fit"}, ensure_ascii=False) + "\n" for t in texts
        ).encode()
        meta["sha256"] = hashlib.sha256(body).hexdigest()
        for path, content in ((data, body), (meta_path, json.dumps(meta, indent=1).encode())):
            atomic_write(path, content)
    fit, test = [], []
    for line in body.decode().splitlines():
        row = json.loads(line)
        (test if row["split"] == "test" else fit).append(row["text"])
    meta = dict(meta, fit=len(fit), test=len(test))
    return Corpus(name=name, fit=fit, test=test, meta=meta)


# ---------------------------------------------------------------- attributes (conditional generation)
#: the corpora that carry attributes: name -> (reader of (raw text, attributes, raw target or None),
#: each attribute with its values (a categorical attribute) or None (free text, e.g. a headline))
ATTRIBUTES = {
    "food-reviews": (_food_review_rows, {"score": ("great", "other")}),
    "movie-reviews": (_movie_review_rows, {"sentiment": ("negative", "positive")}),
    "news": (
        _news_rows,
        {"category": ("business", "entertainment", "politics", "sports", "tech"), "headline": None},
    ),
}


@dataclass(frozen=True)
class AttributedText:
    """One text of a corpus with its attributes. ``text`` is the corpus's cleaned text (its key in
    ``Corpus.fit`` / ``Corpus.test``, whose hash decides its split); ``target`` is the part a
    conditional suite asks a model to write: the whole text, or a news article's body (the text
    without its headline, which is an attribute)."""

    text: str
    target: str
    attributes: dict


def attribute_schema(name: str) -> dict[str, tuple[str, ...] | None]:
    """The attributes corpus ``name`` (or a fold view of it) carries; a corpus without attributes is one line."""
    check_corpus(name)
    base = (parse_view(name) or (name,))[0]
    if base not in ATTRIBUTES:
        raise MaxbenchError(f"corpus '{name}' carries no attributes; corpora with attributes: {', '.join(ATTRIBUTES)}")
    return dict(ATTRIBUTES[base][1])


def load_attributes(name: str) -> dict[str, AttributedText]:
    """The attributes of every text of corpus ``name`` (or of a fold view of it: the same texts), by
    the text as ``load_corpus`` gives it: read from the same source and cleaned the same way. A text
    that occurs in the source twice with different attributes is left out (its attributes are
    ambiguous); categorical values outside the schema are an error (the source changed)."""
    schema = attribute_schema(name)
    base = (parse_view(name) or (name,))[0]
    reader = ATTRIBUTES[base][0]
    out: dict[str, AttributedText] = {}
    ambiguous: set[str] = set()
    for raw, attributes, raw_target in reader():
        text = clean_text(raw)
        if not text or text in ambiguous:
            continue
        for key, values in schema.items():
            if values is not None and attributes.get(key) not in values:
                raise MaxbenchError(
                    f"corpus '{base}': a text has {key}={attributes.get(key)!r}, not one of {', '.join(values)}; "
                    "the source changed"
                )
        target = text if raw_target is None else clean_text(raw_target)
        row = AttributedText(text, target, dict(attributes))
        if text in out and out[text] != row:
            del out[text]
            ambiguous.add(text)
            continue
        out.setdefault(text, row)
    return out
