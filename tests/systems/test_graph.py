"""Corpus graph: counts, normalisation, mixture, CSR transpose, cache, corruption, mismatches."""

import dataclasses
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from maxbench.errors import MaxbenchError
from maxbench.systems.graph import (
    DEFAULT_EPS,
    GraphCacheError,
    bigram_counts,
    build_graph,
    cache_path,
    get_graph,
    load_graph,
    save_graph,
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    return tmp_path


@dataclasses.dataclass
class FakeCorpus:
    name: str
    fit: list
    sha256: str


def test_bigram_counts_within_texts_only():
    # Texts: 0 1 2 1 | 1 2 | 3   -> no edge 1->1 (end of text 1 to start of text 2), nothing from 3
    C = bigram_counts([[0, 1, 2, 1], [1, 2], [3]], vocab_size=5).toarray()
    expected = np.zeros((5, 5))
    expected[0, 1] = 1
    expected[1, 2] = 2
    expected[2, 1] = 1
    assert np.array_equal(C, expected)


def test_row_normalisation_with_eps_and_empty_rows():
    g = build_graph([[0, 1, 2, 1], [1, 2], [0, 2]], vocab_size=4, eps=0.5)
    A = g.A.toarray()
    # Row 0 has counts (0, 1, 1, 0): D = 2 + eps.
    assert np.allclose(A[0], [0, 1 / 2.5, 1 / 2.5, 0])
    assert np.allclose(A[1], [0, 0, 2 / 2.5, 0])
    assert np.allclose(A[2], [0, 1 / 1.5, 0, 0])
    assert np.array_equal(A[3], np.zeros(4))  # token 3 never occurs: an empty row, no NaN
    g = build_graph([[0, 1, 2, 1], [1, 2], [0, 2]], vocab_size=4)
    sums = np.asarray(g.A.sum(1)).ravel()
    assert np.allclose(sums[:3], 1, atol=DEFAULT_EPS) and (sums[:3] < 1).all() and sums[3] == 0


def test_transpose_is_csr_and_exact():
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 30, size=rng.integers(1, 40)) for _ in range(50)]
    g = build_graph(seqs, vocab_size=30)
    assert isinstance(g.A, sp.csr_matrix) and isinstance(g.AT, sp.csr_matrix)
    assert np.array_equal(g.AT.toarray(), g.A.toarray().T)
    assert g.nnz == g.A.nnz == np.count_nonzero(g.A.toarray())
    assert g.stats["texts"] == 50 and g.stats["bigrams"] == sum(max(len(s) - 1, 0) for s in seqs)


def test_ngram_mixture_is_a_plus_a_squared_not_renormalised():
    seqs = [[0, 1, 2, 0, 2, 1]]
    A1 = build_graph(seqs, vocab_size=3).A.toarray()
    A2 = build_graph(seqs, vocab_size=3, ngram=2).A.toarray()
    assert np.allclose(A2, A1 + A1 @ A1)
    assert np.asarray(A2.sum(1)).max() > 1.9  # the paper does not renormalise A + A^2


@pytest.mark.parametrize("kw", [{"eps": 0}, {"eps": -1.0}, {"ngram": 0}, {"ngram": 1.5}])
def test_bad_options(kw):
    with pytest.raises(MaxbenchError):
        build_graph([[0, 1]], vocab_size=2, **kw)


def test_token_id_outside_vocabulary():
    with pytest.raises(MaxbenchError, match="outside the vocabulary of 3"):
        build_graph([[0, 1, 5]], vocab_size=3)


def test_cache_round_trip(home):
    g = build_graph(
        [[0, 1, 2, 1], [2, 0]], vocab_size=3, tokenizer_hash="t" * 64, corpus_sha256="c" * 64, corpus_name="toy"
    )
    path = save_graph(g, home / "graphs" / "x.npz")
    h = load_graph(path)
    assert (h.A != g.A).nnz == 0 and (h.AT != g.AT).nnz == 0
    assert (h.sha256, h.tokenizer_hash, h.corpus_sha256, h.options, h.vocab_size, h.corpus_name) == (
        g.sha256,
        g.tokenizer_hash,
        g.corpus_sha256,
        g.options,
        g.vocab_size,
        "toy",
    )
    assert not list((home / "graphs").glob(".*"))  # no temporary file left behind


def test_content_hash_covers_arrays_and_options():
    seqs = [[0, 1, 2, 1]]
    base = build_graph(seqs, vocab_size=3)
    assert build_graph(seqs, vocab_size=3).sha256 == base.sha256
    assert build_graph([[0, 1, 2, 2]], vocab_size=3).sha256 != base.sha256
    assert build_graph(seqs, vocab_size=3, eps=1e-3).sha256 != base.sha256
    assert build_graph(seqs, vocab_size=3, tokenizer_hash="other").sha256 != base.sha256


def test_cache_path_depends_on_every_key_part(home):
    args = ("c", "t", 10, 1e-6, 1)
    paths = {cache_path(*args)}
    for i, other in enumerate(("c2", "t2", 11, 1e-5, 2)):
        paths.add(cache_path(*args[:i], other, *args[i + 1 :]))
    assert len(paths) == 6 and all(p.parent == home / "graphs" for p in paths)


CORPUS = FakeCorpus("toy", ["the cat sat", "the mat", "a cat"], "f" * 64)


def test_get_graph_builds_then_loads(home, tiny):
    g = get_graph(tiny, CORPUS)
    assert g.build_seconds is not None and g.path.exists() and g.vocab_size == tiny.vocab_size
    ids = tiny.tokenizer(["the cat sat", "the mat", "a cat"], add_special_tokens=False)["input_ids"]
    assert (g.A != build_graph(ids, tiny.vocab_size).A).nnz == 0
    h, e = ids[0][1], ids[0][2]  # "h" occurs twice ("the"), followed by "e" both times
    assert g.A[h, e] == pytest.approx(2 / (2 + DEFAULT_EPS), rel=1e-12)
    again = get_graph(tiny, CORPUS)
    assert again.build_seconds is None and again.sha256 == g.sha256
    assert get_graph(tiny, CORPUS, ngram=2).path != g.path


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_cache_is_reported_and_rebuilt(home, tiny, capsys, damage):
    g = get_graph(tiny, CORPUS)
    raw = g.path.read_bytes()
    if damage == "truncate":
        g.path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        i = len(raw) // 3
        g.path.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1 :])
    elif damage == "garbage":
        g.path.write_bytes(b"not a graph")
    else:
        g.path.write_bytes(b"")
    with pytest.raises(GraphCacheError):
        load_graph(g.path)
    capsys.readouterr()
    rebuilt = get_graph(tiny, CORPUS)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rebuilding" in err and str(g.path) in err
    assert rebuilt.build_seconds is not None and rebuilt.sha256 == g.sha256
    assert load_graph(g.path).sha256 == g.sha256  # the rebuilt file is sound again


def test_tampered_content_with_valid_zip_fails_the_hash(home):
    g = build_graph([[0, 1, 2, 1]], vocab_size=3)
    path = save_graph(g, home / "g.npz")
    with np.load(path) as npz:
        arrays = dict(npz)
    arrays["data"] = arrays["data"] * 1.5
    np.savez(path, **arrays)
    with pytest.raises(GraphCacheError, match="content check"):
        load_graph(path)


def test_tokenizer_mismatch_is_refused(home, tiny):
    g = build_graph([[0, 1]], vocab_size=tiny.vocab_size, tokenizer_hash="0" * 64, corpus_name="toy")
    with pytest.raises(MaxbenchError, match="built with tokenizer 000000000000 but model 'tiny-random'"):
        g.check_model(tiny)
    g = build_graph([[0, 1]], vocab_size=tiny.vocab_size + 1, tokenizer_hash=tiny.tokenizer_hash)
    with pytest.raises(MaxbenchError, match="output tokens"):
        g.check_model(tiny)


# ---- maxbench graph build ----------------------------------------------------------------


@pytest.fixture
def toy_corpus(monkeypatch):
    import maxbench.benchmark.data.corpora

    monkeypatch.setattr(
        maxbench.benchmark.data.corpora, "load_corpus", lambda name: FakeCorpus(name, CORPUS.fit, CORPUS.sha256)
    )


def test_cli_build_then_cached_then_corrupt(home, toy_corpus, cli):
    rc, out, err = cli("graph", "build", "--model", "tiny-random", "--corpus", "toy")
    assert rc == 0, err
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert lines["vocabulary size"] == "257" and int(lines["nnz"]) > 0
    assert lines["build time"].endswith(" s") and "cache" not in lines["build time"]
    path = lines["cache path"]
    assert path.startswith(str(home / "graphs"))
    rc, out, err = cli("graph", "build", "--model", "tiny-random", "--corpus", "toy")
    assert rc == 0 and "loaded from cache" in out and err == ""
    with open(path, "r+b") as f:
        f.truncate(100)
    rc, out, err = cli("graph", "build", "--model", "tiny-random", "--corpus", "toy")
    assert rc == 0 and "rebuilding" in err and err.count("\n") == 1 and "loaded from cache" not in out


def test_cli_bad_eps_is_a_one_line_error(home, toy_corpus, cli):
    rc, out, err = cli("graph", "build", "--model", "tiny-random", "--corpus", "toy", "--eps", "-1")
    assert rc == 2 and err.startswith("maxbench: error: graph eps must be a positive number") and err.count("\n") == 1


@pytest.mark.slow
def test_food_reviews_graph_of_the_real_model(smollm2):
    from maxbench.benchmark.data.corpora import load_corpus

    graph = get_graph(smollm2, load_corpus("food-reviews"))
    assert graph.vocab_size == 49152 and graph.nnz > 100_000
    sums = np.asarray(graph.A.sum(1)).ravel()
    used = sums > 0
    assert np.allclose(sums[used], 1, atol=1e-6) and 1000 < used.sum() < 49152
    graph.check_model(smollm2)


# ---------------------------------------------------------------- a full disk under the graph cache
def test_a_full_disk_while_the_graph_cache_is_written_is_one_line(tmp_path):
    script = textwrap.dedent(
        """
        import contextlib, errno, gc, sys
        from pathlib import Path
        import maxbench.systems.graph as g
        from maxbench.cli import run_guarded

        real = g.atomic_open

        class Full:
            def __init__(self, f):
                self.f, self.n = f, 0
            def write(self, b):
                self.n += len(b)
                if self.n > 100:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return self.f.write(b)
            def __getattr__(self, k):
                return getattr(self.f, k)

        @contextlib.contextmanager
        def full_open(path, mode=None):
            with real(path, mode) as f:
                yield Full(f)

        g.atomic_open = full_open
        graph = g.build_graph([[1, 2, 3, 4, 2, 1] * 50], 10)
        rc = run_guarded("maxbench", g.save_graph, graph, Path(sys.argv[1]) / "g.npz")
        gc.collect()
        sys.exit(rc)
        """
    )
    out = tmp_path / "graphs"
    res = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("maxbench: error: disk full") and res.stderr.count("\n") == 1, res.stderr
    assert "Exception ignored" not in res.stderr and "Traceback" not in res.stderr
    assert list(out.iterdir()) == []  # no half-written graph, no temporary file left


def test_busy_only_while_another_process_holds_the_lock_of_a_graph_not_yet_built(home, tiny):
    """graphmax's exact and paper systems share one graph: ``busy`` says get_graph would wait on another
    process building it, and is false once the file is there."""
    from maxbench.systems.graph import busy
    from maxbench.systems.layers.base import FitContext
    from maxbench.systems.layers.graphmax.layer import GraphmaxLayer
    from tests.support.locks import held_by_another_process

    path = cache_path(CORPUS.sha256, tiny.tokenizer_hash, tiny.vocab_size, DEFAULT_EPS, 1)
    assert not busy(tiny, CORPUS)
    with held_by_another_process(path):
        assert busy(tiny, CORPUS) and not busy(tiny, CORPUS, ngram=2)
        ctx = FitContext(model=tiny, corpus=CORPUS)
        assert GraphmaxLayer(solver="paper").fit_busy(ctx) and not GraphmaxLayer(ngram=2).fit_busy(ctx)
    assert not busy(tiny, CORPUS)
    get_graph(tiny, CORPUS)
    with held_by_another_process(path):
        assert not busy(tiny, CORPUS)
