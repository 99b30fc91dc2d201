"""The corpus graph of graphmax (graphmax-jair, sections 2.4 and 5): bigram counts over the
base model's token ids, row-normalised.

Nodes are the model's token ids (so the graph lines up with the logits), ``C[i, j]`` counts
how often token j directly follows token i inside one text of the corpus's fitting split
(no edge joins the last token of one text to the first of the next; no special tokens are
added). The normalised graph is ``A = D^-1 C`` with ``D_ii = sum_j C_ij + eps`` as in the
paper: ``eps`` (default 1e-6, in units of counts) only keeps tokens that never occur with a
successor from dividing by zero; their rows stay zero, and every other row sums to
``n_i / (n_i + eps)``, within 1e-6 of 1.

``ngram=n`` gives the paper's n-gram mixture ``A + A^2 + ... + A^n`` (section 5.3; Table 8
compares ``A`` with ``A + A^2``). The paper replaces A with that sum and does not
renormalise it, so neither does this module: rows of ``A + A^2`` sum to about 2.

A graph is stored as CSR for both A and A^T (graphmax multiplies by both) and cached under
``$MAXBENCH_HOME/graphs/<key>.npz``, the key being a hash of (corpus sha256, tokenizer
hash, vocabulary size, eps, ngram). The file is written atomically (``maxbench.fileio.atomic_open``:
temporary file, then ``os.replace``) and carries the sha256 of its content, which is verified on
every load: a corrupt or truncated cache is reported on one line of stderr and rebuilt, never used.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_open, maxbench_home
from maxbench.locks import exclusive, held

GRAPH_FORMAT = 1
DEFAULT_EPS = 1e-6


@dataclass
class CorpusGraph:
    A: sp.csr_matrix  # row-normalised graph (N x N, float64)
    AT: sp.csr_matrix  # its transpose, also CSR
    vocab_size: int
    tokenizer_hash: str
    corpus_sha256: str
    options: dict  # {"eps": ..., "ngram": ...}
    sha256: str  # content hash: arrays of A plus the metadata above
    corpus_name: str = ""
    path: Path | None = None
    build_seconds: float | None = None  # None when loaded from the cache
    stats: dict = field(default_factory=dict)  # texts, tokens, bigrams counted

    @property
    def nnz(self) -> int:
        return int(self.A.nnz)

    def metadata(self) -> dict:
        return {
            "format": GRAPH_FORMAT,
            "vocab_size": self.vocab_size,
            "tokenizer_hash": self.tokenizer_hash,
            "corpus_sha256": self.corpus_sha256,
            "corpus_name": self.corpus_name,
            "options": self.options,
            "stats": self.stats,
        }

    def check_model(self, lm) -> None:
        """Refuse a graph whose token ids do not mean what the model's token ids mean."""
        where = f"graph {self.path}" if self.path else "the graph"
        if self.tokenizer_hash != lm.tokenizer_hash:
            raise MaxbenchError(
                f"{where} was built with tokenizer {self.tokenizer_hash[:12]} but model '{lm.name}' uses tokenizer "
                f"{lm.tokenizer_hash[:12]}; build a graph for this model: maxbench graph build --model {lm.name} "
                f"--corpus {self.corpus_name or 'CORPUS'}"
            )
        if self.vocab_size != lm.vocab_size:
            raise MaxbenchError(
                f"{where} has {self.vocab_size} nodes but model '{lm.name}' has {lm.vocab_size} "
                f"output tokens; rebuild the graph for this model"
            )


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------


def bigram_counts(token_id_seqs, vocab_size: int) -> sp.csr_matrix:
    """C[i, j] = number of times j directly follows i within a sequence (float64 CSR)."""
    seqs = [np.asarray(s, dtype=np.int64).ravel() for s in token_id_seqs]
    seqs = [s for s in seqs if s.size >= 2]
    if not seqs:
        return sp.csr_matrix((vocab_size, vocab_size), dtype=np.float64)
    src = np.concatenate([s[:-1] for s in seqs])
    dst = np.concatenate([s[1:] for s in seqs])
    for ids in (src, dst):
        if ids.min() < 0 or ids.max() >= vocab_size:
            raise MaxbenchError(
                f"token id {int(ids.max() if ids.max() >= vocab_size else ids.min())} is outside the "
                f"vocabulary of {vocab_size}; the tokenizer does not match the model"
            )
    counts = sp.coo_matrix((np.ones(src.size), (src, dst)), shape=(vocab_size, vocab_size)).tocsr()
    counts.sum_duplicates()
    return counts


def normalise_rows(C: sp.csr_matrix, eps: float) -> sp.csr_matrix:
    """A = D^-1 C with D_ii = sum_j C_ij + eps (paper section 2.4); empty rows stay zero."""
    row_sums = np.asarray(C.sum(axis=1)).ravel()
    return sp.csr_matrix(sp.diags(1.0 / (row_sums + eps)) @ C)


def build_graph(
    token_id_seqs,
    vocab_size: int,
    eps: float = DEFAULT_EPS,
    ngram: int = 1,
    *,
    tokenizer_hash: str = "",
    corpus_sha256: str = "",
    corpus_name: str = "",
) -> CorpusGraph:
    """Build the normalised graph (and its n-gram mixture for ngram > 1) from token id sequences."""
    _check_options(eps, ngram)
    t0 = time.perf_counter()
    seqs = list(token_id_seqs)
    C = bigram_counts(seqs, vocab_size)
    A1 = normalise_rows(C, eps)
    A, power = A1, A1
    for _ in range(ngram - 1):
        power = sp.csr_matrix(power @ A1)
        A = A + power
    A = _canonical(A)
    AT = _canonical(A.T)
    stats = {
        "texts": len(seqs),
        "tokens": int(sum(len(s) for s in seqs)),
        "bigrams": int(C.sum()),
        "distinct_bigrams": int(C.nnz),
    }
    graph = CorpusGraph(
        A=A,
        AT=AT,
        vocab_size=vocab_size,
        tokenizer_hash=tokenizer_hash,
        corpus_sha256=corpus_sha256,
        corpus_name=corpus_name,
        options={"eps": float(eps), "ngram": int(ngram)},
        sha256="",
        stats=stats,
    )
    graph.sha256 = _content_sha256(graph.A, graph.metadata())
    graph.build_seconds = time.perf_counter() - t0
    return graph


def _check_options(eps, ngram):
    if not (isinstance(eps, (int, float)) and np.isfinite(eps) and eps > 0):
        raise MaxbenchError(f"graph eps must be a positive number, got {eps!r}")
    if not (isinstance(ngram, int) and 1 <= ngram <= 4):
        raise MaxbenchError(f"graph ngram must be an integer from 1 to 4 (1: A, 2: A + A^2, ...), got {ngram!r}")


def _canonical(M) -> sp.csr_matrix:
    """CSR with sorted indices and no explicit zeros, so equal graphs have equal arrays."""
    M = sp.csr_matrix(M, dtype=np.float64)
    M.eliminate_zeros()
    M.sort_indices()
    return M


def _content_sha256(A: sp.csr_matrix, metadata: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(metadata, sort_keys=True).encode())
    # Fixed dtypes: scipy may store indices as int32 or int64, the hash must not care.
    for arr, dtype in ((A.indptr, np.int64), (A.indices, np.int64), (A.data, np.float64)):
        h.update(np.ascontiguousarray(arr, dtype=dtype).tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------


class GraphCacheError(MaxbenchError):
    """A graph file that cannot be trusted (unreadable, truncated, or content hash mismatch)."""


def cache_path(corpus_sha256: str, tokenizer_hash: str, vocab_size: int, eps: float, ngram: int) -> Path:
    key = json.dumps(
        {
            "format": GRAPH_FORMAT,
            "corpus_sha256": corpus_sha256,
            "tokenizer_hash": tokenizer_hash,
            "vocab_size": int(vocab_size),
            "eps": float(eps),
            "ngram": int(ngram),
        },
        sort_keys=True,
    )
    return maxbench_home() / "graphs" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.npz"


def save_graph(graph: CorpusGraph, path: Path) -> Path:
    """Write atomically: a reader sees the old file or the complete new one, never a part."""
    path = Path(path)
    meta = dict(graph.metadata(), sha256=graph.sha256)
    # Serialised in memory first: a write error (a full disk) inside np.savez would leave its zip
    # object half-closed, and its destructor would print an "Exception ignored" traceback after the
    # one-line error. The file gets one plain write.
    buf = io.BytesIO()
    np.savez(
        buf,
        indptr=graph.A.indptr,
        indices=graph.A.indices,
        data=graph.A.data,
        metadata=np.array(json.dumps(meta, sort_keys=True)),
    )
    with atomic_open(path) as f:
        f.write(buf.getbuffer())
    del buf
    graph.path = path
    return path


def load_graph(path: Path) -> CorpusGraph:
    """Read a graph file and verify its content hash; GraphCacheError if it cannot be trusted."""
    path = Path(path)
    try:
        with np.load(io.BytesIO(path.read_bytes()), allow_pickle=False) as npz:
            meta = json.loads(str(npz["metadata"]))
            indptr, indices, data = npz["indptr"], npz["indices"], npz["data"]
        n = int(meta["vocab_size"])
        A = sp.csr_matrix((data, indices, indptr), shape=(n, n))
        stored = meta.pop("sha256")
    except FileNotFoundError:
        raise
    except Exception as exc:  # zip, npy, JSON or shape errors all mean the same thing here
        raise GraphCacheError(f"graph file {path} is unreadable ({type(exc).__name__}: {exc})") from None
    if meta.get("format") != GRAPH_FORMAT:
        raise GraphCacheError(f"graph file {path} has format {meta.get('format')}, expected {GRAPH_FORMAT}")
    actual = _content_sha256(A, meta)
    if actual != stored:
        raise GraphCacheError(
            f"graph file {path} fails its content check (sha256 {actual[:12]} != stored {stored[:12]})"
        )
    return CorpusGraph(
        A=A,
        AT=_canonical(A.T),
        vocab_size=n,
        tokenizer_hash=meta["tokenizer_hash"],
        corpus_sha256=meta["corpus_sha256"],
        corpus_name=meta.get("corpus_name", ""),
        options=meta["options"],
        sha256=stored,
        path=path,
        stats=meta.get("stats", {}),
    )


def tokenize_corpus(tokenizer, texts, batch_size: int = 1000) -> list[list[int]]:
    """Token ids of each text as the model sees it in a prompt: no special tokens added."""
    ids: list[list[int]] = []
    for start in range(0, len(texts), batch_size):
        ids.extend(tokenizer(list(texts[start : start + batch_size]), add_special_tokens=False)["input_ids"])
    return ids


def get_graph(lm, corpus, eps: float = DEFAULT_EPS, ngram: int = 1, rebuild: bool = False) -> CorpusGraph:
    """The graph of ``corpus.fit`` for model ``lm`` (a maxbench.systems.models.LoadedModel): loaded from
    the cache when a trustworthy copy exists, otherwise built and cached. Under the cache file's
    lock (``maxbench.locks``): a second process waits for the first one's graph instead of building it too."""
    _check_options(eps, ngram)
    path = cache_path(corpus.sha256, lm.tokenizer_hash, lm.vocab_size, eps, ngram)
    with exclusive(path):
        return _load_or_build(lm, corpus, path, eps, ngram, rebuild)


def busy(lm, corpus, eps: float = DEFAULT_EPS, ngram: int = 1) -> bool:
    """Whether :func:`get_graph` would now wait on another process's build: no graph file yet and a
    live process holds its lock (graphmax's exact and paper solvers share one graph). A file there is
    only loaded under the lock, which takes moments. A hint that may be stale once read
    (``OutputLayer.fit_busy``)."""
    path = cache_path(corpus.sha256, lm.tokenizer_hash, lm.vocab_size, eps, ngram)
    return not path.exists() and held(path)


def _load_or_build(lm, corpus, path: Path, eps: float, ngram: int, rebuild: bool) -> CorpusGraph:
    if path.exists() and not rebuild:
        try:
            graph = load_graph(path)
            expected = {
                "tokenizer_hash": lm.tokenizer_hash,
                "corpus_sha256": corpus.sha256,
                "vocab_size": lm.vocab_size,
                "options": {"eps": float(eps), "ngram": int(ngram)},
            }
            found = {k: getattr(graph, k) for k in expected}
            if found != expected:
                raise GraphCacheError(f"graph file {path} holds a different graph than its name promises")
            graph.check_model(lm)
            return graph
        except GraphCacheError as exc:
            print(f"maxbench: {exc}; rebuilding it", file=sys.stderr)
    t0 = time.perf_counter()
    seqs = tokenize_corpus(lm.tokenizer, corpus.fit)
    graph = build_graph(
        seqs,
        lm.vocab_size,
        eps=eps,
        ngram=ngram,
        tokenizer_hash=lm.tokenizer_hash,
        corpus_sha256=corpus.sha256,
        corpus_name=corpus.name,
    )
    graph.build_seconds = time.perf_counter() - t0  # tokenising included
    save_graph(graph, path)
    return graph
