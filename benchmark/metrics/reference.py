"""Quality against references: sacreBLEU, Texygen BLEU-n, ROUGE-L, METEOR, BERTScore, KLD, MS-Jaccard.

sacreBLEU, ROUGE-L, METEOR and BERTScore compare each text with its own prompt's reference;
BLEU-n compares each text with the whole reference set (Texygen, the graphmax papers); KLD
and MS-Jaccard compare the n-gram statistics of all texts with those of all references.
Every number comes from the field's library where one exists (sacrebleu, nltk, rouge-score,
bert-score); tests/benchmark/metrics/test_reference.py checks equality with direct library calls.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

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
from maxbench.benchmark.metrics.ngrams import count_blocks, hashed_counts
from maxbench.benchmark.metrics.sentence_bleu import SMOOTHING_ID, pool_bleu
from maxbench.benchmark.metrics.stats import PromptStats
from maxbench.benchmark.metrics.tokenize import TOKENIZER_ID
from maxbench.errors import MaxbenchError
from maxbench.provenance import package_version


class SacreBLEU(Metric):
    name = "sacrebleu"
    needs_references = True
    variant = "corpus BLEU of all texts, each against its own prompt's reference (sacreBLEU defaults), 0-100"

    @property
    def score_info(self):
        return {"sacrebleu": info("sacreBLEU", "higher", percent=False, column=70)}

    def __init__(self):
        from sacrebleu.metrics import BLEU

        self._bleu = BLEU()
        self._bleu.corpus_score(["a"], [["a"]])  # fixes nrefs:1 so the signature can be read

    @property
    def signature(self) -> str:
        return f"sacrebleu|{self._bleu.get_signature()}|refs:prompt-reference|scale:0-100"

    @property
    def score_ranges(self):
        return {"sacrebleu": (0.0, 100.0)}

    def _compute(self, batch: TextBatch):
        from sacrebleu.metrics import BLEU

        rows = []
        for text, ref in zip(batch.texts, batch.reference_per_text):
            s = self._bleu.corpus_score([text], [[ref]])
            rows.append(list(s.counts) + list(s.totals) + [s.sys_len, s.ref_len])
        order = self._bleu.max_ngram_order
        rows = np.array(rows, dtype=np.float64).reshape(len(batch.texts), 2 * order + 2)
        per_prompt = np.zeros((len(batch.prompt_order), 2 * order + 2))
        np.add.at(per_prompt, batch.prompt_index, rows)

        def finalize(agg):
            a = np.rint(agg[0]).astype(np.int64)  # sums of counts are integers; resampling weights too
            return np.array(
                [
                    BLEU.compute_bleu(
                        r[:order].tolist(),
                        r[order : 2 * order].tolist(),
                        int(r[2 * order]),
                        int(r[2 * order + 1]),
                        smooth_method=self._bleu.smooth_method,
                        smooth_value=self._bleu.smooth_value,
                        effective_order=self._bleu.effective_order,
                        max_ngram_order=order,
                    ).score
                    for r in a
                ]
            )

        stats = PromptStats(tuple(batch.prompt_order), (per_prompt,), finalize)
        return self.result([stats_score("sacrebleu", stats)])


class PoolBLEU(Metric):
    name = "bleu-n"
    needs_references = True
    variant = (
        "Texygen BLEU-n: each text against the whole reference set (all prompts' references) "
        "with nltk sentence_bleu, averaged over texts"
    )

    @property
    def score_info(self):
        own = type(self).name == "bleu-n"  # the subclasses' scores (held-out, Texygen) follow in run order
        return {
            s: info(
                s.replace("bleu", "BLEU"),
                "higher",
                column=10 * int(s.rsplit("-", 1)[1]) + 10 if own else None,
                compact=1 if own and s == "bleu-4" else None,
            )
            for s in self.score_ranges
        }

    score_prefix = "bleu"  # the scores are <score_prefix>-<n>
    sample_size: int | None = None  # the first this many references (None: all)
    refs_id = "whole-reference-set"  # the references, as the signature names them

    def __init__(self, orders: tuple[int, ...] = (2, 3, 4, 5)):
        self.orders = tuple(orders)

    @property
    def signature(self) -> str:
        return signature(
            self.name,
            tok=TOKENIZER_ID,
            n=",".join(map(str, self.orders)),
            weights="uniform(1/n)",
            smooth=SMOOTHING_ID,
            refs=self.refs_id,
            avg="mean-over-texts",
            nltk=package_version("nltk"),
        )

    @property
    def score_ranges(self):
        return {f"{self.score_prefix}-{n}": UNIT for n in self.orders}

    def references(self, batch: TextBatch) -> tuple[list[list[str]], str]:
        """The tokenised references every text is compared with, and a note on them."""
        return first_items(batch.reference_tokens, self.sample_size, "references")

    def _compute(self, batch: TextBatch):
        refs, note = self.references(batch)
        values = pool_bleu(batch.tokens, refs, self.orders)
        scores = [mean_score(batch, name, values[n]) for n, name in zip(self.orders, self.score_ranges)]
        return self.result(scores, notes=note)


class HeldoutBLEU(PoolBLEU):
    name = "heldout-bleu"
    needs_references = False  # not the prompts' references: the held-out split (``unavailable``)
    score_prefix = "heldout-bleu"
    variant = (
        "BLEU-n of each text against every text of the held-out split its prompt was drawn from (the "
        "suite's 'heldout' corpus or fold: the graphmax papers' comparison with the original corpus) with "
        "nltk sentence_bleu, averaged over texts"
    )

    def human_row(self) -> str | None:
        return "the references are texts of the held-out split it compares with"

    refs_id = "every-text-of-the-suite's-heldout-split"

    def unavailable(self, batch: TextBatch) -> str | None:
        if batch.reference_pool is None:
            return (
                "needs the held-out split the suite's prompts came from, and this suite names none (a suite "
                "manifest's 'heldout' key, which maxbench reproduce writes into its fold suites)"
            )
        return None

    def references(self, batch: TextBatch) -> tuple[list[list[str]], str]:
        from maxbench.benchmark.metrics.tokenize import word_tokens

        pool = batch.reference_pool
        note = f"references: the {len(pool.texts)} texts of {pool.name} (sha256 {pool.sha256[:12]})"
        return [word_tokens(t) for t in pool.texts], note


class RougeL(Metric):
    name = "rouge-l"
    needs_references = True
    variant = "ROUGE-L (sentence-level LCS) F/P/R of each text against its prompt's reference, mean over texts"

    @property
    def score_info(self):
        return {
            "rouge-l-f": info("ROUGE-L F", "higher", column=80, compact=2),
            "rouge-l-p": info("ROUGE-L P", "higher"),
            "rouge-l-r": info("ROUGE-L R", "higher"),
        }

    def __init__(self, use_stemmer: bool = False):
        self.use_stemmer = use_stemmer

    @property
    def signature(self) -> str:
        return signature(
            "rouge-l",
            tok="rouge-score-default(lowercase,[a-z0-9]+)",
            stemmer="porter" if self.use_stemmer else "no",
            refs="prompt-reference",
            avg="mean-over-texts",
            rouge_score=package_version("rouge-score"),
        )

    @property
    def score_ranges(self):
        return {"rouge-l-f": UNIT, "rouge-l-p": UNIT, "rouge-l-r": UNIT}

    def _compute(self, batch: TextBatch):
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=self.use_stemmer)
        got = [scorer.score(ref, text)["rougeL"] for text, ref in zip(batch.texts, batch.reference_per_text)]
        return self.result(
            [
                mean_score(batch, "rouge-l-f", [g.fmeasure for g in got]),
                mean_score(batch, "rouge-l-p", [g.precision for g in got]),
                mean_score(batch, "rouge-l-r", [g.recall for g in got]),
            ]
        )


class Meteor(Metric):
    name = "meteor"
    needs_references = True
    variant = "METEOR (nltk, WordNet 3.0 synonyms, Porter stems) of each text against its prompt's reference"
    # nltk's meteor_score parameters (its defaults); the signature and the call both read these
    lowercase = True
    alpha = 0.9
    beta = 3
    gamma = 0.5

    @property
    def score_info(self):
        return {"meteor": info("METEOR", "higher", column=90, compact=3)}

    @property
    def signature(self) -> str:
        from maxbench.systems.assets import ASSETS

        return signature(
            "meteor",
            tok=TOKENIZER_ID,
            lowercase="yes" if self.lowercase else "no",
            alpha=self.alpha,
            beta=self.beta,
            gamma=self.gamma,
            wordnet=f"3.0({ASSETS['wordnet'].spec})",
            refs="prompt-reference",
            avg="mean-over-texts",
            nltk=package_version("nltk"),
        )

    def _compute(self, batch: TextBatch):
        from maxbench.systems.assets import wordnet_ready

        data = "the WordNet cache"
        try:
            data = wordnet_ready()
            from nltk.translate.meteor_score import meteor_score

            settings = {
                "preprocess": str.lower if self.lowercase else str,
                "alpha": self.alpha,
                "beta": self.beta,
                "gamma": self.gamma,
            }
            ref_tokens = dict(zip(batch.prompt_order, batch.reference_tokens))
            values = [
                meteor_score([ref_tokens[p]], toks, **settings) for toks, p in zip(batch.tokens, batch.prompt_ids)
            ]
        except MaxbenchError as exc:
            raise MaxbenchError(f"metric 'meteor' needs WordNet: {exc}") from None
        except (LookupError, OSError) as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and set(ln.strip()) != {"*"}]
            raise MaxbenchError(
                f"metric 'meteor': NLTK cannot read the WordNet in {data} "
                f"({lines[0] if lines else exc!r}); the WordNet asset is incomplete or damaged: "
                f"delete it to refetch, or leave meteor out of --metrics"
            ) from None
        return self.result([mean_score(batch, "meteor", values)])


class BERTScore(Metric):
    name = "bertscore"
    needs_references = True
    variant = (
        "BERTScore F1/P/R (bert-score) of each text against its prompt's reference with the local "
        "all-MiniLM-L6-v2 encoder; an empty text or reference scores 0, as bert-score intends"
    )
    MODEL_ASSET = "minilm"
    MODEL_NAME = "all-MiniLM-L6-v2"
    # BERTScorer's settings; the signature and the scorer both read these
    num_layers = 6
    idf = False
    rescale_with_baseline = False

    @property
    def score_info(self):
        return {
            "bertscore-f1": info("BERTScore F1", "higher", column=100),
            "bertscore-p": info("BERTScore P", "higher"),
            "bertscore-r": info("BERTScore R", "higher"),
        }

    def __init__(self, batch_size: int = 32):
        self.batch_size = batch_size
        self._scorer = None  # loaded once, reused for every system of a run

    @property
    def signature(self) -> str:
        from maxbench.systems.assets import ASSETS

        asset = ASSETS[self.MODEL_ASSET]
        return signature(
            "bertscore",
            model=f"{self.MODEL_NAME}({asset.spec},sha256:{asset.sha256[:12]})",
            layers=self.num_layers,
            idf="yes" if self.idf else "no",
            rescale="yes" if self.rescale_with_baseline else "no",
            refs="prompt-reference",
            avg="mean-over-texts",
            bert_score=package_version("bert-score"),
            transformers=package_version("transformers"),
        )

    @property
    def score_ranges(self):
        # cosine similarities: without baseline rescaling they stay in [-1, 1]
        return {"bertscore-f1": (-1.0, 1.0), "bertscore-p": (-1.0, 1.0), "bertscore-r": (-1.0, 1.0)}

    def _compute(self, batch: TextBatch):
        from maxbench.systems.assets import fetch

        try:
            model_dir = fetch(self.MODEL_ASSET)
        except MaxbenchError as exc:
            raise MaxbenchError(f"metric 'bertscore' needs its encoder model: {exc}") from None
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from bert_score import BERTScorer

        refs = batch.reference_per_text
        # bert-score defines an empty side as 0 but crashes on it with transformers 5; skip those
        scorable = [i for i, (t, r) in enumerate(zip(batch.texts, refs)) if t.strip() and r.strip()]
        p = np.zeros(len(batch.texts))
        r = np.zeros(len(batch.texts))
        f = np.zeros(len(batch.texts))
        if scorable:
            if self._scorer is None:
                self._scorer = BERTScorer(
                    model_type=str(model_dir),
                    num_layers=self.num_layers,
                    idf=self.idf,
                    rescale_with_baseline=self.rescale_with_baseline,
                    lang="en",
                    batch_size=self.batch_size,
                )
            got = self._scorer.score([batch.texts[i] for i in scorable], [refs[i] for i in scorable])
            p[scorable], r[scorable], f[scorable] = (x.double().numpy() for x in got)
        return self.result(
            [
                mean_score(batch, "bertscore-f1", f),
                mean_score(batch, "bertscore-p", p),
                mean_score(batch, "bertscore-r", r),
            ]
        )


def text_and_reference_counts(
    batch: TextBatch, orders: Iterable[int], count: Callable[[Sequence[Sequence[str]], int], list] = hashed_counts
) -> tuple[list, list]:
    """For each order k, the k-gram counts (``count``) of the texts, summed per prompt, and of the
    references (one per prompt), over one key space: the blocks [texts_k, references_k, ...] and
    their keys, for ``PromptStats``."""
    n_prompts = len(batch.prompt_order)
    blocks, keys = [], []
    for k in orders:
        key, pair = count_blocks(
            [(batch.prompt_index, count(batch.tokens, k)), (np.arange(n_prompts), count(batch.reference_tokens, k))],
            n_prompts,
        )
        blocks += pair
        keys += [key, key]
    return blocks, keys


class UnigramKL(Metric):
    name = "kld"
    needs_references = True
    higher_is_better = False
    variant = (
        "KL(P_ref || P_gen) in nats between the unigram distributions of all references and all texts, "
        "add-alpha smoothing of both over the union vocabulary"
    )

    @property
    def score_info(self):
        return {"kld": info("KLD", "lower", percent=False, column=160)}

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    @property
    def signature(self) -> str:
        return signature(
            "kld",
            tok=TOKENIZER_ID,
            direction="KL(ref||gen)",
            unit="nats",
            smooth=f"add-{self.alpha:g}(union-vocab)",
            refs="whole-reference-set",
        )

    @property
    def score_ranges(self):
        return {"kld": NONNEGATIVE}

    def _compute(self, batch: TextBatch):
        (gen, ref), (keys, _) = text_and_reference_counts(batch, (1,))
        alpha = self.alpha

        def finalize(agg):
            g, f = agg
            present = (g + f) > 0
            v = present.sum(axis=1, keepdims=True)
            pg = (g + alpha) / (g.sum(axis=1, keepdims=True) + alpha * v)
            pf = (f + alpha) / (f.sum(axis=1, keepdims=True) + alpha * v)
            return np.where(present, pf * np.log(pf / pg), 0.0).sum(axis=1)

        stats = PromptStats(tuple(batch.prompt_order), (gen, ref), finalize, (keys, keys), bootstrap_ok=False)
        return self.result([stats_score("kld", stats)])


def ms_jaccard_from_counts(
    gen: list[np.ndarray], ref: list[np.ndarray], n_gen: np.ndarray, n_ref: np.ndarray
) -> np.ndarray:
    """MS-Jaccard-N for rows of aggregated counts: ``gen[k]``/``ref[k]`` are (R, V_k) counts of
    (k+1)-grams, ``n_gen``/``n_ref`` the number of texts behind them; geometric mean over n = 1..N."""
    log_sum = 0.0
    for g, f in zip(gen, ref):
        g = g / n_gen[:, None]
        f = f / n_ref[:, None]
        log_sum = log_sum + np.log(np.minimum(g, f).sum(axis=1) / np.maximum(g, f).sum(axis=1))
    return np.exp(log_sum / len(gen))


class MSJaccard(Metric):
    name = "ms-jaccard"
    needs_references = True
    variant = (
        "MS-Jaccard-n (Montahaei et al. 2019): per order k, n-gram counts of all texts and of all "
        "references divided by their number of texts, sum of minima over sum of maxima; "
        "geometric mean over k = 1..n"
    )

    @property
    def score_info(self):
        column = {"ms-jaccard-2": 130, "ms-jaccard-3": 140, "ms-jaccard-4": 150}
        return {
            s: info(
                f"MS-Jaccard-{s.rsplit('-', 1)[1]}",
                "higher",
                column=column.get(s),
                compact=7 if s == "ms-jaccard-3" else None,
            )
            for s in self.score_ranges
        }

    def __init__(self, max_n: int = 3):
        self.max_n = max_n

    @property
    def signature(self) -> str:
        return signature(
            "ms-jaccard",
            tok=TOKENIZER_ID,
            n=f"1..{self.max_n}",
            norm="per-text",
            mean="geometric(1..n)",
            refs="whole-reference-set",
        )

    @property
    def score_ranges(self):
        return {f"ms-jaccard-{n}": UNIT for n in range(1, self.max_n + 1)}

    def _compute(self, batch: TextBatch):
        n_prompts = len(batch.prompt_order)
        blocks, keys = text_and_reference_counts(batch, range(1, self.max_n + 1))
        sizes = np.column_stack([np.bincount(batch.prompt_index, minlength=n_prompts), np.ones(n_prompts)])
        scores = []
        for n, name in enumerate(self.score_ranges, 1):

            def finalize(agg, n=n):
                sizes_agg = agg[-1]
                return ms_jaccard_from_counts(agg[0 : 2 * n : 2], agg[1 : 2 * n : 2], sizes_agg[:, 0], sizes_agg[:, 1])

            stats = PromptStats(
                tuple(batch.prompt_order),
                tuple(blocks[: 2 * n]) + (sizes,),
                finalize,
                tuple(keys[: 2 * n]) + (None,),
                bootstrap_ok=False,
            )
            scores.append(stats_score(name, stats))
        return self.result(scores)
