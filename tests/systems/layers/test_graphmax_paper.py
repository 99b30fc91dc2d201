"""graphmax's paper solver on the CPU: the fused kernels (maxbench.systems.layers.graphmax.kernels.paper) against
the torch path that CUDA runs, the graph product's bits, threads and the rare paths.

tests/systems/layers/test_graphmax.py checks the solver itself against a plain float64 reimplementation of
Algorithm 1 (through the kernels, the CPU's default)."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from maxbench.systems.layers.graphmax import paper as graphmax_paper
from maxbench.systems.layers.graphmax.exact import certify
from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
from maxbench.systems.layers.graphmax.kernels import paper as paper_kernels
from maxbench.systems.layers.graphmax.operator import graphmax
from tests.support.graphs import random_graph


def partly_touched_graph(n, touched, seed):
    """A random graph whose edges lie among the first ``touched`` of n tokens: the others are
    isolated, as most of a real vocabulary is on a corpus graph."""
    inner = random_graph(touched, density=0.05, seed=seed)
    return sp.block_diag([inner, sp.csr_matrix((n - touched, n - touched))], format="csr")


def scores(batch, n, seed, dtype=torch.float32):
    z = torch.randn(batch, n, generator=torch.Generator().manual_seed(seed), dtype=dtype) * 3
    return z - z.amax(1, keepdim=True)


# From the third update on, the iteration amplifies a difference in rounding about 100-fold per
# update on these scores (the float32 paths differ by 5e-7 of max x after 2 updates, 6e-4
# after 3, 7e-2 after 19; float64 by 4e-16, 1e-14, 1e-9), so float32 is compared over 2 updates.
@pytest.mark.parametrize("dtype,T,tiny", [(torch.float32, 3, 2e-6), (torch.float64, 20, 1e-8)])
@pytest.mark.parametrize("touched", [300, 1200])
def test_kernels_give_the_torch_path_iterates(dtype, T, tiny, touched):
    """The same updates to rounding (the sums run in another order), the same support and the
    same certificate, on a graph touching a quarter of the tokens and on one touching all."""
    n = 1200
    op = GraphOperator(partly_touched_graph(n, touched, seed=3) if touched < n else random_graph(n, 0.01, seed=3))
    Z = scores(7, n, seed=3, dtype=dtype)
    X, steps, done, (log_X, gap, f) = graphmax_paper.solve(Z, op, 1.0, 1e-4, T, 1e-4, 1e-10)
    X_t, steps_t, done_t, none = graphmax_paper.solve(Z, op, 1.0, 1e-4, T, 1e-4, 1e-10, kernels=False)
    assert none is None
    assert torch.equal(steps, steps_t) and torch.equal(done, done_t) and (steps == T - 1).all()
    assert torch.allclose(X, X_t, atol=tiny * X_t.max().item(), rtol=0)
    assert torch.equal(X > 0, X_t > 0) and (X == 0).any()
    assert torch.allclose(X.sum(1), torch.ones(7, dtype=dtype), atol=10 * tiny)
    gap_t, f_t = certify(X, Z, op, 1.0)
    assert torch.allclose(gap, gap_t, rtol=10 * tiny) and torch.allclose(f, f_t, rtol=10 * tiny)
    assert torch.equal(torch.isinf(log_X), X == 0)
    assert torch.allclose(log_X[X > 0], X[X > 0].log(), rtol=10 * tiny, atol=0)


def test_graphmax_takes_the_kernels_on_the_cpu_and_torch_elsewhere(monkeypatch):
    n = 800
    A = partly_touched_graph(n, 200, seed=4)
    z = scores(5, n, seed=4, dtype=torch.float64)
    calls = []
    for name in ("_solve_cpu", "_solve_torch"):
        real = getattr(graphmax_paper, name)
        monkeypatch.setattr(graphmax_paper, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    x, info = graphmax(z, A, solver="paper", return_info=True)
    x_t, info_t = graphmax(z, GraphOperator(A, backend="torch"), solver="paper", return_info=True)
    assert calls == ["_solve_cpu", "_solve_torch"]
    assert torch.allclose(x, x_t, atol=1e-10) and torch.equal(info.iterations, info_t.iterations)
    assert torch.allclose(info.gap, info_t.gap, rtol=1e-8) and torch.allclose(
        info.objective, info_t.objective, rtol=1e-8
    )
    assert torch.allclose(x, info.log_probs.exp(), rtol=1e-14, atol=0)  # log x of the same x


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("touched", [1000, 3000])
def test_the_graph_product_has_scipy_bits(touched, kernel):
    """Both ways to the product (the kernel for graphs of short rows, GraphOperator's products
    for the others) give scipy's M x on the touched tokens, and x on the others."""
    n = 3000
    op = GraphOperator(partly_touched_graph(n, touched, seed=5) if touched < n else random_graph(n, 0.01, seed=5))
    X = torch.rand(n, 17, generator=torch.Generator().manual_seed(5))
    product = graphmax_paper._Product(op, torch.float32)
    assert product.kernel == (op.matrices(torch.float32)[0].nnz <= 16 * product.n_touched)
    product.kernel = kernel
    blocks = graphmax_paper._Blocks(n, product.n_touched, 17, np.float32)
    MX, norm = product(paper_kernels, X.numpy(), blocks, norm=True)
    want, want_norm = op.m_product_columns(X)  # scipy's kernel on all tokens
    rows = op.touched().numpy()
    assert np.array_equal(MX, want.numpy()[rows])
    assert np.array_equal(np.delete(want.numpy(), rows, axis=0), np.delete(X.numpy(), rows, axis=0))
    BX = X.numpy() - op.matrices(torch.float32)[0] @ X.numpy()
    if kernel:
        assert np.array_equal(blocks.bx, BX[rows])
    untouched = np.delete(BX, rows, axis=0)
    assert np.allclose(norm + (untouched * untouched).sum(0), want_norm.numpy(), rtol=1e-5)


def test_the_transpose_kernel():
    for shape in ((2 * paper_kernels.CHUNK + 5, 7), (7, 2 * paper_kernels.CHUNK + 5), (3, 3)):
        X = np.random.default_rng(0).random(shape, dtype=np.float32)
        assert np.array_equal(graphmax_paper._transposed(paper_kernels, X), X.T)


def test_the_results_do_not_depend_on_the_number_of_threads():
    """Every sum runs over fixed chunks of rows added in chunk order, whatever the threads."""
    n = 5 * paper_kernels.CHUNK + 77  # several chunks, the last one short
    op = GraphOperator(partly_touched_graph(n, 2000, seed=6))
    Z = scores(9, n, seed=6)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            X, steps, _, (log_X, gap, f) = graphmax_paper.solve(Z, op, 1.0, 1e-4, 20, 1e-4, 1e-10)
            results.append((X, steps, log_X, gap, f))
    finally:
        torch.set_num_threads(before)
    for one, two in zip(*results):
        assert torch.equal(one, two)


def test_a_threshold_still_moving_after_the_passes_is_found_by_sorting(monkeypatch):
    n = 600
    op = GraphOperator(partly_touched_graph(n, 300, seed=7))
    Z = scores(4, n, seed=7, dtype=torch.float64)
    want, steps, _, _ = graphmax_paper.solve(Z, op, 1.0, 1e-4, 20, 1e-4, 1e-10)
    monkeypatch.setattr(graphmax_paper, "MAX_PASSES", 1)
    got, steps_1, _, _ = graphmax_paper.solve(Z, op, 1.0, 1e-4, 20, 1e-4, 1e-10)
    assert torch.equal(steps, steps_1)
    assert torch.allclose(got, want, atol=1e-13, rtol=0)


def test_either_graph_product_gives_the_same_iterates(monkeypatch):
    n = 900
    op = GraphOperator(partly_touched_graph(n, 400, seed=8))
    Z = scores(6, n, seed=8)
    results = []
    for short_rows in (0, 10**9):  # GraphOperator's products everywhere, then the kernel everywhere
        monkeypatch.setattr(graphmax_paper._Product, "SHORT_ROWS", short_rows)
        X, steps, _, (log_X, gap, f) = graphmax_paper.solve(Z, op, 1.0, 1e-4, 20, 1e-4, 1e-10)
        results.append((X, steps, log_X, gap, f))
    (X, steps, log_X, gap, f), (X2, steps2, log_X2, gap2, f2) = results
    assert torch.equal(X, X2) and torch.equal(steps, steps2) and torch.equal(log_X, log_X2)
    assert torch.allclose(gap, gap2, rtol=1e-6) and torch.allclose(f, f2, rtol=1e-6)


def test_a_graph_without_edges():
    """No touched token: the product has no rows and every (M x)_i is x_i."""
    A = sp.csr_matrix((50, 50))
    z = scores(3, 50, seed=9, dtype=torch.float64)
    x, info = graphmax(z, A, solver="paper", return_info=True)
    x_t, info_t = graphmax(z, GraphOperator(A, backend="torch"), solver="paper", return_info=True)
    assert torch.allclose(x, x_t, atol=1e-12) and torch.allclose(info.gap, info_t.gap, rtol=1e-10)
