"""The method papers' own metric definitions, as named variants beside maxbench's defaults.

A paper's table is reproduced with the metric code that paper ran. Each metric here follows one
original source, checked against it (tests/benchmark/metrics/test_paper_variants.py holds hand-worked
cases and independent re-implementations of each formula):

- Texygen as shipped (geek-ai/Texygen utils/metrics/Bleu.py and SelfBleu.py): ``get_score()``
  defaults to ``is_fast=True``, which keeps only the first 500 references (BLEU) or the first
  500 texts (Self-BLEU: each of them against the other 499). ``texygen-bleu``,
  ``texygen-self-bleu``; maxbench's ``bleu-n`` and ``self-bleu`` use every reference / text.
- The POSG authors' code (FadedCosine/POS-Guided-Neural-Text-Generation util/evaluate.py, as
  eval_LM_metric.py and eval_seq2seq_metric.py call it): ``posg-bleu`` (``bleu_upto``),
  ``posg-self-bleu`` (``selfbleu``), ``posg-kld`` (``kld(gt, predict, 1)``), ``posg-ms-jaccard``
  (``ms_jaccard``), ``posg-distinct`` (``distinct_upto``) and ``posg-rep`` (``repetition``).
  Its Uniq is maxbench's ``uniq``. ``posg-distinct-pos`` is the paper's distinct n-POS (Table 3):
  ``distinct_upto`` over POS tag sequences.

Texygen tokenises with nltk ``word_tokenize``; POSG's texts are the word tokens of its corpora.
Here every variant counts maxbench's word tokens (``tokenize.word_tokens``, named in each
signature), so a variant differs from maxbench's default only in the definition. Scores are
fractions (0-1), as ``bleu-n``, ``self-bleu``, ``rep`` and ``distinct`` are; the papers print
percentages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from maxbench.benchmark.metrics.base import (
    NONNEGATIVE,
    UNIT,
    Metric,
    TextBatch,
    info,
    mean_score,
    signature,
    stats_score,
)
from maxbench.benchmark.metrics.diversity import Repetition, SelfBLEU
from maxbench.benchmark.metrics.ngrams import hashed_counts, token_key
from maxbench.benchmark.metrics.reference import PoolBLEU, text_and_reference_counts
from maxbench.benchmark.metrics.sentence_bleu import SMOOTHING_ID, paired_bleu
from maxbench.benchmark.metrics.stats import PromptStats
from maxbench.benchmark.metrics.tokenize import TOKENIZER_ID
from maxbench.provenance import package_version

#: Texygen's Bleu.sample_size and SelfBleu.sample_size, used when get_score(is_fast=True)
TEXYGEN_SAMPLE_SIZE = 500
#: the POSG authors' BLEU / Self-BLEU: a zero n-gram match count becomes this (evaluate.py)
POSG_ZERO_COUNT = 1e-100
#: the POSG authors' compute_probs: an n-gram missing from one side gets this probability
POSG_FLOOR = 1e-10
#: the POSG authors' distinct_upto keeps texts of more than this many tokens
POSG_DISTINCT_MIN_TOKENS = 5
#: the POSG authors' repetition(): phrases up to this many tokens (Holtzman's code: 90)
POSG_REP_MAX_PHRASE = 100
#: the key of the POSG authors' pad symbol (-1) in ``posg_padded_counts``; token keys are
#: BLAKE2b digests, so a token shares it with chance 2^-64
PAD_KEY = 0


def _orders_text(orders: Sequence[int]) -> str:
    return ",".join(map(str, orders))


def _bleu_signature(metric: Metric, smooth: str, **rest) -> str:
    """The signature of a BLEU-like variant: tokens, orders, weights, smoothing, then ``rest``."""
    return signature(
        metric.name, tok=TOKENIZER_ID, n=_orders_text(metric.orders), weights="uniform(1/n)", smooth=smooth, **rest
    )


class TexygenBLEU(PoolBLEU):
    name = "texygen-bleu"
    score_prefix = "texygen-bleu"
    sample_size = TEXYGEN_SAMPLE_SIZE
    variant = (
        "Texygen BLEU-n as shipped (geek-ai/Texygen utils/metrics/Bleu.py, get_score() with its default "
        "is_fast=True): each text against the first 500 references (prompt order) with nltk sentence_bleu, "
        "smoothing method1, averaged over texts"
    )

    @property
    def signature(self) -> str:
        return _bleu_signature(
            self,
            SMOOTHING_ID,
            refs=f"first-{self.sample_size}-references(prompt-order)",
            avg="mean-over-texts",
            nltk=package_version("nltk"),
        )


class TexygenSelfBLEU(SelfBLEU):
    name = "texygen-self-bleu"
    sample_size = TEXYGEN_SAMPLE_SIZE
    variant = (
        "Texygen Self-BLEU-n as shipped (geek-ai/Texygen utils/metrics/SelfBleu.py, get_score() with its "
        "default is_fast=True): each of the first 500 texts against the other 499 with nltk sentence_bleu, "
        "smoothing method1, averaged over those texts; later texts are not scored"
    )

    @property
    def signature(self) -> str:
        return _bleu_signature(
            self,
            SMOOTHING_ID,
            texts=f"first-{self.sample_size}",
            refs="all-other-texts(leave-one-out,exact)",
            avg="mean-over-texts",
            ci="pool-fixed",
            nltk=package_version("nltk"),
        )


class PosgSelfBLEU(SelfBLEU):
    name = "posg-self-bleu"
    zero_count = POSG_ZERO_COUNT
    variant = (
        "Self-BLEU-n of the POSG authors (POS-Guided-Neural-Text-Generation util/evaluate.py selfbleu, "
        "eval_LM_metric.py): each text against all the other texts, with their own BLEU arithmetic: a "
        "zero n-gram match count becomes 1e-100 (no smoothing, no zero-unigram rule), averaged over "
        "texts; n = 1..4 as that script prints (Table 2 reports Self-BLEU-4)"
    )

    def __init__(self, orders: tuple[int, ...] = (1, 2, 3, 4)):
        super().__init__(orders)

    @property
    def signature(self) -> str:
        return _bleu_signature(
            self,
            f"zero-count->{self.zero_count:g}",
            refs="all-other-texts(leave-one-out,exact)",
            avg="mean-over-texts",
            ci="pool-fixed",
        )


class PosgBLEU(Metric):
    name = "posg-bleu"
    needs_references = True
    variant = (
        "BLEU-n of the POSG authors (POS-Guided-Neural-Text-Generation util/evaluate.py bleu_upto, as "
        "eval_seq2seq_metric.py calls it): each text against its own prompt's reference only, nltk "
        "sentence_bleu, smoothing method1, averaged over texts; n = 1..4 as that script prints"
    )

    @property
    def score_info(self):
        return {s: info(s.replace("bleu", "BLEU"), "higher") for s in self.score_ranges}

    def __init__(self, orders: tuple[int, ...] = (1, 2, 3, 4)):
        self.orders = tuple(orders)

    @property
    def signature(self) -> str:
        return _bleu_signature(
            self,
            SMOOTHING_ID,
            refs="prompt-reference",
            avg="mean-over-texts",
            nltk=package_version("nltk"),
        )

    @property
    def score_ranges(self):
        return {f"{self.name}-{n}": UNIT for n in self.orders}

    def _compute(self, batch: TextBatch):
        own = dict(zip(batch.prompt_order, batch.reference_tokens))
        values = paired_bleu(batch.tokens, [own[p] for p in batch.prompt_ids], self.orders)
        names = list(self.score_ranges)
        return self.result([mean_score(batch, name, values[n]) for n, name in zip(self.orders, names)])


def posg_padded_counts(token_lists: Sequence[Sequence[str]], n: int) -> list[Counter]:
    """Hashed n-gram counts of each text as the POSG authors' ``count(x, n)`` makes them.

    The text is padded with n-1 pad symbols on each side and a window of n slides over
    len(padded) + n - 1 start positions: the len + n - 1 padded n-grams, then windows running
    off the end, which give one all-pad gram of each length n-1 .. 1 and n-1 empty grams per
    text. Every text adds those same grams, to references and generations alike.
    """
    counts = []
    for toks in token_lists:
        padded = [PAD_KEY] * (n - 1) + [token_key(t) for t in toks] + [PAD_KEY] * (n - 1)
        counts.append(Counter(hash(tuple(padded[i : i + n])) for i in range(len(padded) + n - 1)))
    return counts


def _posg_probs(counts: np.ndarray, present: np.ndarray, floor: float) -> np.ndarray:
    """The POSG authors' compute_probs over the union of n-grams: count / total, or ``floor``."""
    total = counts.sum(axis=1, keepdims=True)
    return np.where(present, np.where(counts > 0, counts / total, floor), 0.0)


class PosgKLD(Metric):
    name = "posg-kld"
    needs_references = True
    higher_is_better = False
    floor = POSG_FLOOR
    variant = (
        "KLD of the POSG authors (POS-Guided-Neural-Text-Generation util/evaluate.py kld(gt, predict, 1)): "
        "KL(P_ref || P_gen) in nats between the unigram distributions of all references and all texts over "
        "their union, a token missing from one side given probability 1e-10 (no smoothing, no renormalising)"
    )

    @property
    def score_info(self):
        return {s: info(s, "lower") for s in self.score_ranges}

    @property
    def signature(self) -> str:
        return signature(
            self.name,
            tok=TOKENIZER_ID,
            direction="KL(ref||gen)",
            unit="nats",
            missing=f"p={self.floor:g}(union-vocab,unnormalised)",
            refs="whole-reference-set",
        )

    @property
    def score_ranges(self):
        return {self.name: NONNEGATIVE}

    def _compute(self, batch: TextBatch):
        (gen, ref), (keys, _) = text_and_reference_counts(batch, (1,), posg_padded_counts)
        floor = self.floor

        def finalize(agg):
            g, f = agg
            present = (g + f) > 0
            pg, pf = _posg_probs(g, present, floor), _posg_probs(f, present, floor)
            return np.where(present, pf * np.log(pf / pg), 0.0).sum(axis=1)  # both > 0 where present

        stats = PromptStats(tuple(batch.prompt_order), (gen, ref), finalize, (keys, keys), bootstrap_ok=False)
        return self.result([stats_score(self.name, stats)])


class PosgMSJaccard(Metric):
    name = "posg-ms-jaccard"
    needs_references = True
    floor = POSG_FLOOR
    variant = (
        "MS-Jaccard-n of the POSG authors (POS-Guided-Neural-Text-Generation util/evaluate.py ms_jaccard, "
        "eval_LM_metric.py): per order k the padded k-grams of their count() (with the pad-only and empty "
        "grams its window adds past each text's end) of all references and all texts as probabilities over "
        "their union, a k-gram missing from one side given 1e-10, sum of minima over sum of maxima; "
        "geometric mean over k = 1..n"
    )

    @property
    def score_info(self):
        return {s: info(s, "higher") for s in self.score_ranges}

    def __init__(self, max_n: int = 3):
        self.max_n = max_n

    @property
    def signature(self) -> str:
        return signature(
            self.name,
            tok=TOKENIZER_ID,
            n=f"1..{self.max_n}",
            grams="posg-count(pad=n-1,window-past-end)",
            norm="probability",
            missing=f"p={self.floor:g}",
            mean="geometric(1..n)",
            refs="whole-reference-set",
        )

    @property
    def score_ranges(self):
        return {f"{self.name}-{n}": UNIT for n in range(1, self.max_n + 1)}

    def _compute(self, batch: TextBatch):
        blocks, keys = text_and_reference_counts(batch, range(1, self.max_n + 1), posg_padded_counts)
        floor = self.floor

        def finalize(agg, n):
            log_sum = 0.0
            for g, f in zip(agg[0 : 2 * n : 2], agg[1 : 2 * n : 2]):
                present = (g + f) > 0
                pg, pf = _posg_probs(g, present, floor), _posg_probs(f, present, floor)
                log_sum = log_sum + np.log(np.minimum(pg, pf).sum(axis=1) / np.maximum(pg, pf).sum(axis=1))
            return np.exp(log_sum / n)

        scores = []
        for n, name in enumerate(self.score_ranges, 1):
            stats = PromptStats(
                tuple(batch.prompt_order),
                tuple(blocks[: 2 * n]),
                lambda agg, n=n: finalize(agg, n),
                tuple(keys[: 2 * n]),
                bootstrap_ok=False,
            )
            scores.append(stats_score(name, stats))
        return self.result(scores)


class PosgDistinct(Metric):
    name = "posg-distinct"
    min_tokens = POSG_DISTINCT_MIN_TOKENS
    variant = (
        "Distinct-n of the POSG authors (POS-Guided-Neural-Text-Generation util/evaluate.py distinct_upto, "
        "eval_LM_metric.py): per text unique n-grams / number of TOKENS, texts of 5 tokens or fewer dropped, "
        "mean over the rest"
    )

    @property
    def score_info(self):
        return {s: info(s, "human") for s in self.score_ranges}

    gram, unit = "n-grams", "tokens"  # what is counted, and in what

    def __init__(self, orders: tuple[int, ...] = (1, 2, 3)):
        self.orders = tuple(orders)

    def _units(self) -> dict:
        """The signature's first part: how a text becomes units."""
        return {"tok": TOKENIZER_ID}

    @property
    def signature(self) -> str:
        return signature(
            self.name,
            **self._units(),
            n=_orders_text(self.orders),
            ratio=f"unique-{self.gram}/{self.unit}",
            texts=f">{self.min_tokens}-{self.unit}",
            avg="mean-over-texts",
        )

    @property
    def score_ranges(self):
        return {f"{self.name}-{n}": UNIT for n in self.orders}

    def _compute(self, batch: TextBatch):
        return self.result(self._distinct(batch, batch.tokens))

    def _distinct(self, batch: TextBatch, token_lists: Sequence[Sequence[str]]) -> list:
        """distinct_upto over ``token_lists`` (one list per text of ``batch``)."""
        lengths = [len(t) for t in token_lists]
        scores = []
        for n, name in zip(self.orders, self.score_ranges):
            per_text = [
                len(c) / size if size > self.min_tokens else np.nan
                for c, size in zip(hashed_counts(token_lists, n), lengths)
            ]
            scores.append(mean_score(batch, name, per_text, f"no text has more than {self.min_tokens} {self.unit}"))
        return scores


class PosgDistinctPOS(PosgDistinct):
    name = "posg-distinct-pos"
    gram, unit = "n-pos", "tags"
    variant = (
        "Distinct-n-POS of the POSG paper (posg.txt section 6, Table 3): every text POS-tagged, an n-POS is n "
        "contiguous tags, and distinct_upto (util/evaluate.py) runs over the tag sequences: per text unique "
        "n-POS / number of tags, texts of 5 tags or fewer dropped, mean over the rest. Tags: spaCy's Penn "
        "Treebank tagger (the one POSG's head is fitted with; the paper: Stanford CoreNLP's XPOS), "
        "whitespace tokens left out"
    )

    def __init__(self, orders: tuple[int, ...] = (1, 2, 3), tagger=None):
        super().__init__(orders)
        self._tagger, self._custom = tagger, tagger is not None

    @property
    def tagger(self):
        """texts -> [(start, end, tag)] per text; spaCy's (``load_tagger``) unless one was given."""
        if self._tagger is None:
            from maxbench.systems.layers.posg.fit import load_tagger

            self._tagger = load_tagger()
        return self._tagger

    def _units(self) -> dict:
        # spaCy's pipeline is pinned (with its sha256) by the asset registry: naming it needs no loading
        if self._custom:
            return {"tagger": getattr(self._tagger, "version", "custom")}
        from maxbench.systems.assets import ASSETS

        asset = ASSETS["spacy-en"]
        return {"tagger": f"spacy-{package_version('spacy')}/{asset.spec}(sha256:{asset.sha256[:12]})"}

    def tags(self, texts: Sequence[str]) -> list[list[str]]:
        """The tag sequence of each text (whitespace tokens left out)."""
        from maxbench.systems.layers.posg.fit import SPACE_TAG

        return [[tag for _, _, tag in words if tag != SPACE_TAG] for words in self.tagger(list(texts))]

    def _compute(self, batch: TextBatch):
        return self.result(self._distinct(batch, self.tags(batch.texts)))


class PosgRep(Repetition):
    name = "posg-rep"
    max_phrase = POSG_REP_MAX_PHRASE
    variant = (
        "Rep of the POSG authors (POS-Guided-Neural-Text-Generation util/evaluate.py repetition, "
        "eval_LM_metric.py): Holtzman et al. (2020)'s loop test with phrases up to 100 tokens (theirs: 90): "
        "share of texts that end in a phrase of >= 3 tokens repeated back to back, or any phrase > 50 times"
    )
