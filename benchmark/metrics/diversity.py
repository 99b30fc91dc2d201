"""Diversity of a system's texts, no references needed: Self-BLEU, Rep, seq-rep, Distinct, Uniq.

All count the shared word tokens (``tokenize.word_tokens``). Several definitions circulate
under each name; each metric's variant and signature say which one this is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from maxbench.benchmark.metrics.base import (
    NONNEGATIVE,
    UNIT,
    Metric,
    TextBatch,
    first_items,
    info,
    mean_score,
    signature,
    stats_score,
)
from maxbench.benchmark.metrics.ngrams import count_blocks, hashed_counts, ngrams
from maxbench.benchmark.metrics.sentence_bleu import SMOOTHING_ID, self_bleu
from maxbench.benchmark.metrics.stats import PromptStats
from maxbench.benchmark.metrics.tokenize import TOKENIZER_ID
from maxbench.provenance import package_version

# Holtzman et al.'s loop test (``repetition_loop``): the Rep metric's signature reads these
LOOP_MAX_PHRASE = 90  # longest phrase looked for
LOOP_MIN_PHRASE = 3  # shortest phrase whose repeats count as a loop ...
LOOP_MIN_REPEATS = 2  # ... once it is repeated back to back this many times at the end
LOOP_MANY = 50  # or any phrase repeated more often than this


class SelfBLEU(Metric):
    name = "self-bleu"
    higher_is_better = False
    variant = (
        "Self-BLEU-n (Zhu et al. 2018, Texygen), leave-one-out: each text against all the system's "
        "other texts (every prompt and sample) with nltk sentence_bleu, averaged over texts"
    )

    @property
    def score_info(self):
        own = type(self).name == "self-bleu"  # the papers' variants follow in run order
        return {
            s: info(
                s.replace("self-bleu", "Self-BLEU"),
                "human",
                column=10 * int(s.rsplit("-", 1)[1]) + 170 if own else None,
                compact=5 if own and s == "self-bleu-4" else None,
            )
            for s in self.score_ranges
        }

    sample_size: int | None = None  # score only the first this many texts (None: all)
    zero_count: float | None = None  # None: nltk method1; else a zero match count becomes this

    def __init__(self, orders: tuple[int, ...] = (2, 3, 4, 5)):
        self.orders = tuple(orders)

    @property
    def signature(self) -> str:
        return signature(
            "self-bleu",
            tok=TOKENIZER_ID,
            n=",".join(map(str, self.orders)),
            weights="uniform(1/n)",
            smooth=SMOOTHING_ID,
            refs="all-other-texts(leave-one-out,exact)",
            avg="mean-over-texts",
            ci="pool-fixed",
            nltk=package_version("nltk"),
        )

    @property
    def score_ranges(self):
        return {f"{self.name}-{n}": UNIT for n in self.orders}

    def _compute(self, batch: TextBatch):
        names = list(self.score_ranges)
        scored, note = first_items(batch.tokens, self.sample_size, "texts")
        if len(scored) < 2:
            why = "Self-BLEU needs at least two texts"
            nan = np.full(len(batch.texts), np.nan)
            return self.result([mean_score(batch, name, nan, why) for name in names], notes=why)
        values = self_bleu(scored, self.orders, self.zero_count)
        scores = []
        for n, name in zip(self.orders, names):
            per_text = np.full(len(batch.texts), np.nan)  # texts after the first sample_size: not scored
            per_text[: len(scored)] = values[n]
            scores.append(mean_score(batch, name, per_text))
        return self.result(scores, notes=note)


def repetition_loop(
    tokens: Sequence[str], max_phrase: int = LOOP_MAX_PHRASE, min_phrase: int = LOOP_MIN_PHRASE, many: int = LOOP_MANY
) -> tuple[int, int] | None:
    """Holtzman et al. (2020)'s test: does the text end in a repetition loop?

    For every phrase length n up to ``max_phrase`` count how many times the last n tokens
    repeat back to back at the end; take the length with the most repeats (the shortest on a
    tie). It is a loop if that phrase occurs at least twice and is at least ``min_phrase``
    tokens long, or occurs more than ``many`` times. Returns (phrase length, repeats) or None.
    """
    best_n, best_repeats = 1, 1
    size = len(tokens)
    for n in range(1, min(max_phrase, size) + 1):
        tail = tokens[size - n :]
        repeats = 1
        while (repeats + 1) * n <= size and tokens[size - (repeats + 1) * n : size - repeats * n] == tail:
            repeats += 1
        if repeats > best_repeats:
            best_n, best_repeats = n, repeats
    if best_repeats >= LOOP_MIN_REPEATS and (best_n >= min_phrase or best_repeats > many):
        return best_n, best_repeats
    return None


class Repetition(Metric):
    name = "rep"
    higher_is_better = False
    max_phrase = LOOP_MAX_PHRASE  # the longest phrase looked for
    variant = (
        "Rep (Holtzman et al. 2020, their code ari-holtzman/degen metrics/repetition.py: phrases up to "
        "90 tokens): share of texts that end in a repetition loop (a phrase of >= 3 tokens repeated "
        "back to back at the end, or any phrase > 50 times), as a fraction; the POSG authors' code "
        "looks for phrases up to 100 tokens (posg-rep)"
    )

    @property
    def score_info(self):
        own = type(self).name == "rep"
        return {s: info(s, "human", column=230 if own else None, compact=6 if own else None) for s in self.score_ranges}

    @property
    def signature(self) -> str:
        return signature(
            self.name,
            tok=TOKENIZER_ID,
            max_phrase=self.max_phrase,
            min_phrase=LOOP_MIN_PHRASE,
            min_repeats=LOOP_MIN_REPEATS,
            or_repeats_over=LOOP_MANY,
            unit="fraction-of-texts",
        )

    def _compute(self, batch: TextBatch):
        values = [0.0 if repetition_loop(t, self.max_phrase) is None else 1.0 for t in batch.tokens]
        return self.result([mean_score(batch, self.name, values)])


class SeqRep(Metric):
    name = "seq-rep"
    higher_is_better = False
    variant = (
        "seq-rep-n (Welleck et al. 2020): per text 1 - unique n-grams / n-grams, mean over texts that have an n-gram"
    )

    @property
    def score_info(self):
        return {s: info(s, "human", column=240 if s == "seq-rep-4" else None) for s in self.score_ranges}

    def __init__(self, n: int = 4):
        self.n = n

    @property
    def signature(self) -> str:
        return signature("seq-rep", tok=TOKENIZER_ID, n=self.n, avg="mean-over-texts(with>=1 n-gram)")

    @property
    def score_ranges(self):
        return {f"seq-rep-{self.n}": UNIT}

    def _compute(self, batch: TextBatch):
        values = []
        for toks in batch.tokens:
            grams = ngrams(toks, self.n)
            values.append(1.0 - len(set(grams)) / len(grams) if grams else math.nan)
        (name,) = self.score_ranges
        return self.result([mean_score(batch, name, values, f"no text has {self.n} tokens")])


class Distinct(Metric):
    name = "distinct"
    variant = (
        "Distinct-n in two variants: per-text (Li et al. 2016's ratio on each text, unique n-grams / "
        "n-grams, mean over texts with an n-gram; equals 1 - Welleck et al. 2020's seq-rep-n of the "
        "text; not the POSG authors' distinct_upto, which divides by tokens: posg-distinct) and corpus "
        "(unique n-grams / n-grams over all texts; Li et al. 2016, GEM-metrics ngrams.py)"
    )

    @property
    def score_info(self):
        def column(s):
            n = int(s.split("-")[1])
            return 240 + 10 * n if s.endswith("-corpus") and n <= 4 else None

        return {s: info(s, "human", column=column(s)) for s in self.score_ranges}

    def __init__(self, orders: tuple[int, ...] = (1, 2, 3)):
        self.orders = tuple(orders)

    @property
    def signature(self) -> str:
        return signature(
            "distinct", tok=TOKENIZER_ID, n=",".join(map(str, self.orders)), variants="per-text(mean),corpus"
        )

    @property
    def score_ranges(self):
        return {f"distinct-{n}-{variant}": UNIT for n in self.orders for variant in ("per-text", "corpus")}

    def _compute(self, batch: TextBatch):
        scores = []
        n_prompts = len(batch.prompt_order)
        names = iter(self.score_ranges)
        for n in self.orders:
            undefined = f"no text has {n} tokens"
            counts = hashed_counts(batch.tokens, n)
            per_text = [len(c) / sum(c.values()) if c else math.nan for c in counts]
            scores.append(mean_score(batch, next(names), per_text, undefined))
            keys, (matrix,) = count_blocks([(batch.prompt_index, counts)], n_prompts)
            stats = PromptStats(
                tuple(batch.prompt_order),
                (matrix,),
                lambda agg: (agg[0] > 0).sum(axis=1) / agg[0].sum(axis=1),
                (keys,),
                bootstrap_ok=False,
            )
            scores.append(stats_score(next(names), stats, undefined=undefined))
        return self.result(scores)


class Uniq(Metric):
    name = "uniq"
    variant = "Uniq (POSG): number of distinct word tokens over all the system's texts (grows with their number)"

    @property
    def score_info(self):
        return {"uniq": info("Uniq", "human", percent=False, column=300, digits=0)}

    @property
    def signature(self) -> str:
        return signature("uniq", tok=TOKENIZER_ID, unit="types")

    @property
    def score_ranges(self):
        return {"uniq": NONNEGATIVE}

    def _compute(self, batch: TextBatch):
        keys, (matrix,) = count_blocks([(batch.prompt_index, hashed_counts(batch.tokens, 1))], len(batch.prompt_order))
        stats = PromptStats(
            tuple(batch.prompt_order),
            (matrix,),
            lambda agg: (agg[0] > 0).sum(axis=1).astype(np.float64),
            (keys,),
            bootstrap_ok=False,
        )
        return self.result([stats_score("uniq", stats)])


class SuDiversity(Metric):
    name = "diversity"
    variant = (
        "diversity (Su et al. 2022, as SimCTG's measure_repetition_and_diversity computes it): the product "
        "over n = 2..4 of (1 - rep-n), rep-n = 1 - (sum over texts of the distinct n-grams within each text) "
        "/ (sum over texts of its n-grams); as in their code, a text's last n-gram is not counted"
    )

    @property
    def score_info(self):
        return {"diversity": info("diversity", "human", column=290)}

    def __init__(self, orders: tuple[int, ...] = (2, 3, 4)):
        self.orders = tuple(orders)

    @property
    def signature(self) -> str:
        return signature(
            "diversity",
            tok=TOKENIZER_ID,
            n=",".join(map(str, self.orders)),
            rep="1-sum(unique-per-text)/sum(ngrams)",
            last_ngram="not-counted(as-SimCTG)",
            agg="prod(1-rep-n)",
        )

    def _compute(self, batch: TextBatch):
        rows = np.zeros((len(batch.prompt_order), 2 * len(self.orders)))
        for p, toks in zip(batch.prompt_index, batch.tokens):
            for j, n in enumerate(self.orders):
                grams = ngrams(toks[:-1], n)  # SimCTG's eval_text stops before the n-gram ending the text
                rows[p, 2 * j : 2 * j + 2] += (len(set(grams)), len(grams))

        def finalize(agg):
            return np.prod(agg[0][:, 0::2] / agg[0][:, 1::2], axis=1)

        stats = PromptStats(tuple(batch.prompt_order), (rows,), finalize)
        longest = max(self.orders) + 1
        return self.result([stats_score("diversity", stats, undefined=f"no text has {longest} tokens")])
