"""graphmax operator: reference values of small graphs solved independently, optimality
conditions, the paper's claims and Algorithm 1, checked against dense numpy/scipy computations
that share no code with the solver; the output layer and its validation."""

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
import torch
from scipy.special import logsumexp, softmax

from maxbench.errors import MaxbenchError
from maxbench.systems.layers.graphmax import graph_operator
from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
from maxbench.systems.layers.graphmax.operator import graphmax
from maxbench.systems.layers.sparsemax.operator import sparsemax
from tests.support.graphs import F64, dual_certificate, objective, peaked_scores, random_graph, sparse_graph


def dense_M(A):
    B = np.eye(A.shape[0]) - A.toarray()
    return B.T @ B


def dual_lbfgs_reference(z, A, lam):
    """Independent solution: minimise g(u) = logsumexp(z - B^T u) + ||u||^2 / (4 lam) by L-BFGS,
    x = softmax(z - B^T u*)."""
    B = np.eye(len(z)) - A.toarray()

    def g(u):
        v = z - B.T @ u
        x = softmax(v)
        return logsumexp(v) + u @ u / (4 * lam), -B @ x + u / (2 * lam)

    res = scipy.optimize.minimize(
        g, np.zeros(len(z)), jac=True, method="L-BFGS-B", options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 10000}
    )
    return softmax(z - B.T @ res.x)


def tight(**kw):
    return dict(tol=0.0, max_iter=300, **kw)


# ---- reference values -----------------------------------------------------------------


def test_lam_zero_and_identity_graph_give_softmax():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(3, 40, generator=gen, dtype=F64) * 3
    A = random_graph(40)
    assert torch.allclose(graphmax(z, A, lam=0.0), torch.softmax(z, -1), atol=1e-15, rtol=0)
    probs, info = graphmax(z, sp.identity(40, format="csr"), lam=5.0, return_info=True)
    assert torch.allclose(probs, torch.softmax(z, -1), atol=1e-15, rtol=0)
    assert (info.iterations == 0).all()


def test_two_tokens_reference_value():
    A = sp.csr_matrix([[0.5, 0.5], [0.5, 0.5]])
    x = graphmax(torch.tensor([1.0, 0.0], dtype=F64), A, lam=1.0, **tight())
    assert abs(x[0].item() - 0.623689978420) < 1e-11


def test_proposition_2_counterexample():
    # Every row of A is e_1 (with tokens numbered 0, 1, 2: all successors are token 1).
    A = sp.csr_matrix(np.tile([0.0, 1.0, 0.0], (3, 1)))
    z = torch.tensor([0.0, 0.2, -3.0], dtype=F64)
    x, info = graphmax(z, A, lam=1.0, return_info=True, **tight())
    expected = [0.5116199065, 0.4258436821, 0.0625364114]
    assert np.allclose(x.numpy(), expected, atol=1e-10)
    assert abs(info.objective.item() - (-0.637970584533)) < 1e-11
    # The paper's Proposition 2 claims z_0 <= z_1 implies x_1 >= x_0; here it fails.
    assert z[0] < z[1] and x[0] > x[1]


def test_empty_row_reference_value():
    A = sp.csr_matrix([[0.0, 0.0, 0.0], [0.5, 0.0, 0.5], [0.0, 1.0, 0.0]])
    x = graphmax(torch.tensor([0.3, 0.1, 0.2], dtype=F64), A, lam=1.0, **tight())
    assert np.allclose(x.numpy(), [0.2639083192, 0.3537620350, 0.3823296458], atol=1e-10)


# ---- optimality on random graphs -------------------------------------------------------


@pytest.mark.parametrize("lam", [0.3, 1.0, 5.0])
def test_optimality_conditions_and_certificate(lam):
    n = 60
    A = random_graph(n, seed=1, empty_rows=(3, 7))
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(4, n, generator=gen, dtype=F64) * 2
    # The gap is quadratic in the error of x: a residual of 1e-10 needs a gap near 1e-20.
    x, info = graphmax(z, A, lam=lam, tol=1e-24, max_iter=500, return_info=True)
    M = dense_M(A)
    for zi, xi, gap in zip(z.numpy(), x.numpy(), info.gap):
        assert (xi > 0).all()
        assert abs(xi.sum() - 1) < 1e-14
        assert np.abs(xi - softmax(zi - 2 * lam * M @ xi)).max() <= 1e-10
        assert gap <= 1e-10
        assert np.abs(xi - dual_lbfgs_reference(zi, A, lam)).max() < 1e-7
    assert info.converged.all()


def test_gap_bounds_the_suboptimality_of_a_loose_solve():
    n, lam = 80, 3.0
    A = random_graph(n, seed=2)
    z = torch.randn(n, generator=torch.Generator().manual_seed(2), dtype=F64) * 3
    x_loose, info = graphmax(z, A, lam=lam, tol=1e-3, return_info=True)
    x_star = graphmax(z, A, lam=lam, **tight())
    f_loose = objective(x_loose.numpy(), z.numpy(), A, lam)
    f_star = objective(x_star.numpy(), z.numpy(), A, lam)
    assert abs(info.objective.item() - f_loose) < 1e-12
    assert 0 <= f_loose - f_star <= info.gap.item()
    assert info.relative_gap.item() <= 1e-3
    # The certificate is f(x) + g(u) with u = 2 lam (I - A) x, as stated in the docstring.
    B = np.eye(n) - A.toarray()
    u = 2 * lam * B @ x_loose.numpy()
    g = logsumexp(z.numpy() - B.T @ u) + u @ u / (4 * lam)
    assert abs(info.gap.item() - (f_loose + g)) < 1e-10


@pytest.mark.parametrize("max_iter", [0, 1, 2, 3, 5])
def test_every_returned_row_carries_its_own_computed_gap(max_iter):
    # The solver computes the exact gap only where a lower bound allows convergence; rows
    # that stop on max_iter (tol=0: none converges) must still report the gap of the x returned.
    n, lam = 60, 2.0
    A = random_graph(n, seed=5)
    z = torch.randn(6, n, generator=torch.Generator().manual_seed(5), dtype=F64) * 4
    x, info = graphmax(z, A, lam=lam, tol=0.0, max_iter=max_iter, return_info=True)
    assert (info.iterations == max_iter).all() and not info.converged.any()
    for xi, zi, gap in zip(x.numpy(), z.numpy(), info.gap.tolist()):
        assert gap == pytest.approx(dual_certificate(xi, zi, A, lam), rel=1e-8, abs=1e-12)


def test_certificate_lower_bound_never_exceeds_the_gap():
    from maxbench.systems.layers.graphmax.evaluation import evaluate

    n, lam = 70, 3.0
    op = GraphOperator(random_graph(n, seed=6))
    gen = torch.Generator().manual_seed(6)
    ZT = (torch.randn(n, 40, generator=gen, dtype=F64) * 3).contiguous()
    YT = (ZT + torch.randn(n, 40, generator=gen, dtype=F64) * torch.logspace(-6, 0, 40, dtype=F64)).contiguous()
    curvature = ((2 * lam) * op.diag_m(F64))[:, None]
    shift = YT.amax(0)
    at = evaluate(YT, ZT, op, lam, curvature, shift)
    exact_gap, all_exact = at.gap, at.exact
    assert all_exact.all()
    seen = set()
    for tol in (0.0, 1e-8, 1e-4, 1e-2):
        at = evaluate(YT, ZT, op, lam, curvature, shift, tol)
        gap, exact = at.gap, at.exact
        seen.update(exact.tolist())
        assert torch.equal(gap[exact], exact_gap[exact])
        assert (gap[~exact] <= exact_gap[~exact] * (1 + 1e-12)).all()
        # only columns whose gap is above tol are left without the exact value
        assert (exact_gap[~exact] > tol * 2 * 0.999).all()
    assert seen == {True, False}  # both branches are exercised


def test_shift_invariance():
    n, lam = 50, 2.0
    A = random_graph(n, seed=3)
    z = torch.randn(2, n, generator=torch.Generator().manual_seed(3), dtype=F64)
    x0, i0 = graphmax(z, A, lam=lam, tol=1e-12, return_info=True)
    x1, i1 = graphmax(z + torch.tensor([[100.0], [-7.5]], dtype=F64), A, lam=lam, tol=1e-12, return_info=True)
    assert torch.allclose(x0, x1, atol=1e-12)
    assert torch.equal(i0.iterations, i1.iterations)
    assert torch.allclose(i1.objective, i0.objective - torch.tensor([100.0, -7.5], dtype=F64), atol=1e-9)


def test_safeguard_converges_at_lam_30_where_plain_fixed_point_diverges():
    n, lam = 60, 30.0
    A = random_graph(n, seed=4)
    z = torch.randn(3, n, generator=torch.Generator().manual_seed(4), dtype=F64) * 2
    x_plain, plain = graphmax(z, A, lam=lam, theta0=1.0, safeguard=False, tol=1e-10, max_iter=200, return_info=True)
    assert not plain.converged.any()
    assert (plain.gap > 1e-2).all()
    x_safe, safe = graphmax(z, A, lam=lam, tol=1e-24, max_iter=2000, return_info=True)
    assert safe.converged.all() and (safe.gap <= 1e-10).all()
    M = dense_M(A)
    for zi, xi in zip(z.numpy(), x_safe.numpy()):
        assert np.abs(xi - softmax(zi - 2 * lam * M @ xi)).max() <= 1e-9


def test_batched_equals_row_by_row_and_shapes():
    n = 30
    A = random_graph(n, seed=5)
    z = torch.randn(5, n, generator=torch.Generator().manual_seed(5), dtype=F64)
    xb, ib = graphmax(z, A, return_info=True)
    for i in range(5):
        xi, ii = graphmax(z[i], A, return_info=True)
        assert xi.shape == (n,) and ii.iterations.dim() == 0
        assert torch.allclose(xb[i], xi, atol=1e-15)
        assert ii.iterations == ib.iterations[i]


def test_dtypes_follow_the_input():
    A = random_graph(20, seed=6)
    z = torch.randn(2, 20, generator=torch.Generator().manual_seed(6))
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        x = graphmax(z.to(dtype), A)
        assert x.dtype == dtype and x.device == z.device
        assert torch.allclose(
            x.double(), graphmax(z.double(), A), atol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        )


# ---- top-k support restriction ---------------------------------------------------------


def test_topk_restriction_equals_full_solve_when_it_covers_the_mass():
    n, k, lam = 300, 12, 1.0
    A = random_graph(n, density=0.05, seed=7)
    gen = torch.Generator().manual_seed(7)
    z = torch.full((2, n), -80.0, dtype=F64)
    z[0, :k] = torch.randn(k, generator=gen, dtype=F64)
    z[1, 5 : 5 + k] = torch.randn(k, generator=gen, dtype=F64)
    x_full = graphmax(z, A, lam=lam, **tight())
    x_top, info = graphmax(z, A, lam=lam, topk=k, return_info=True, **tight())
    assert torch.allclose(x_top, x_full, atol=1e-12)
    assert info.support.tolist() == list(range(k + 5))  # union of both rows' top-k
    assert (x_top[:, k + 5 :] == 0).all() and torch.isinf(info.log_probs[:, k + 5 :]).all()
    assert (info.gap < 1e-12).all()  # certificate of the full problem
    # The square block A[S, S] drops the rows of tokens outside S that point into S: wrong.
    S = info.support.numpy()
    x_square = graphmax(z[:, S], A[S][:, S], lam=lam, **tight())
    assert (x_square - x_full[:, S]).abs().max() > 1e-3


def test_topk_gap_is_the_full_problem_certificate():
    n, lam = 200, 1.0
    A = random_graph(n, seed=8)
    z = torch.randn(n, generator=torch.Generator().manual_seed(8), dtype=F64) * 2
    x_top, info = graphmax(z, A, lam=lam, topk=20, return_info=True, **tight())
    x_star = graphmax(z, A, lam=lam, **tight())
    f_top = objective(x_top.numpy(), z.numpy(), A, lam)
    f_star = objective(x_star.numpy(), z.numpy(), A, lam)
    assert f_top - f_star > 1e-4  # 20 of 200 tokens do not hold all the mass here
    assert f_top - f_star <= info.gap.item()


# ---- the paper's Algorithm 1 -----------------------------------------------------------


def test_paper_first_step_is_sparsemax_of_alpha_z():
    n = 500
    A = random_graph(n, seed=9)
    z = torch.randn(2, n, generator=torch.Generator().manual_seed(9), dtype=F64) * 3
    x1, info = graphmax(z, A, lam=1.0, solver="paper", T=2, return_info=True)
    assert (info.iterations == 1).all()
    assert torch.allclose(x1, sparsemax(1e-4 * z), atol=1e-15)


def paper_algorithm_reference(z, A, lam, alpha, T, stop=1e-4, log_floor=1e-10):
    """Algorithm 1 row by row in numpy float64, projecting by sorting (Held et al.'s rule)."""
    M = dense_M(A)
    out, steps = [], []
    for row in np.atleast_2d(z):
        row = row - row.max()
        x, t, n_steps = np.zeros_like(row), 1, 0
        while t < T:
            a = x - alpha * (-row + np.log(np.maximum(x, log_floor)) + 1 + 2 * lam * M @ x)
            u = np.sort(a)[::-1]
            css = np.cumsum(u)
            k = np.nonzero(u * np.arange(1, len(u) + 1) > css - 1)[0][-1] + 1
            x_next = np.maximum(a - (css[k - 1] - 1) / k, 0)
            n_steps += 1
            done = np.linalg.norm(x_next - x) < stop
            x, t = x_next, t + 1
            if done:
                break
        out.append(x)
        steps.append(n_steps)
    return np.array(out), np.array(steps)


@pytest.mark.parametrize("alpha,T,stop", [(1e-4, 20, 1e-4), (1e-4, 21, 1e-4), (1e-2, 40, 1e-2)])
def test_paper_solver_equals_a_plain_reimplementation(alpha, T, stop):
    """Every step, including rows that meet the stop rule before the others (the last case)."""
    n = 300
    A = random_graph(n, density=0.03, seed=11)
    gen = torch.Generator().manual_seed(11)
    z = torch.cat([torch.randn(3, n, generator=gen, dtype=F64) * 3, torch.randn(2, n, generator=gen, dtype=F64) * 0.01])
    x, info = graphmax(z, A, lam=1.0, solver="paper", alpha=alpha, T=T, paper_stop=stop, return_info=True)
    want, steps = paper_algorithm_reference(z.numpy(), A, 1.0, alpha, T, stop)
    np.testing.assert_allclose(x.numpy(), want, atol=1e-9)
    assert info.iterations.tolist() == steps.tolist()
    if stop == 1e-2:
        assert len(set(steps.tolist())) > 1  # some rows stopped early: the partial-batch path ran


def test_paper_algorithm_does_not_reach_the_optimum():
    n, lam = 2000, 1.0
    A = random_graph(n, density=0.01, seed=10)
    z = torch.randn(n, generator=torch.Generator().manual_seed(10), dtype=F64) * 3
    x_paper, paper = graphmax(z, A, lam=lam, solver="paper", return_info=True)
    x_exact, exact = graphmax(z, A, lam=lam, tol=1e-10, return_info=True)
    assert paper.iterations.item() == 19 and not paper.converged.item()  # T - 1 updates, stop rule unmet
    assert paper.gap.item() > 1.0 > 1e-8 > exact.gap.item()
    f = lambda x: objective(x.numpy(), z.numpy(), A, lam)  # noqa: E731
    assert f(x_paper) - f(x_exact) > 1.0
    assert (x_paper == 0).any()
    # Nearly uniform over many tokens, and sensitive to the parity of T (the period-2 cycle).
    x_paper_odd = graphmax(z, A, lam=lam, solver="paper", T=21)
    assert (x_paper - x_paper_odd).abs().sum() > 0.1


# ---- gradient --------------------------------------------------------------------------


def test_implicit_gradient_matches_finite_differences():
    n, lam = 8, 1.5
    A = random_graph(n, density=0.4, seed=11, empty_rows=(2,))
    z = torch.randn(2, n, generator=torch.Generator().manual_seed(11), dtype=F64).requires_grad_()
    fn = lambda t: graphmax(t, A, lam=lam, tol=0.0, max_iter=400)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (z,), eps=1e-6, atol=1e-9)


def test_implicit_gradient_equals_dense_formula():
    n, lam = 25, 2.0
    A = random_graph(n, seed=12)
    z = torch.randn(n, generator=torch.Generator().manual_seed(12), dtype=F64).requires_grad_()
    g = torch.randn(n, generator=torch.Generator().manual_seed(13), dtype=F64)
    x = graphmax(z, A, lam=lam, **tight())
    (x @ g).backward()
    xs = x.detach().numpy()
    S = np.diag(xs) - np.outer(xs, xs)
    expected = S @ np.linalg.solve(np.eye(n) + 2 * lam * dense_M(A) @ S, g.numpy())
    assert np.abs(z.grad.numpy() - expected).max() < 1e-10


def test_topk_gradient_is_zero_outside_the_support():
    n = 40
    A = random_graph(n, seed=14)
    z = torch.randn(n, generator=torch.Generator().manual_seed(14), dtype=F64).requires_grad_()
    x, info = graphmax(z, A, topk=5, return_info=True, **tight())
    x[0:20].sum().backward()
    outside = torch.ones(n, dtype=torch.bool)
    outside[info.support] = False
    assert (z.grad[outside] == 0).all() and (z.grad[~outside] != 0).any()


# ---- graph inputs and backends ---------------------------------------------------------


def test_torch_backend_equals_scipy_backend():
    # The torch sparse path is what runs on CUDA; check it on the CPU.
    n = 120
    A = random_graph(n, seed=15)
    z = torch.randn(3, n, generator=torch.Generator().manual_seed(15), dtype=F64) * 2
    for kw in ({}, {"topk": 10}, {"solver": "paper"}):
        x_sp, i_sp = graphmax(z, A, return_info=True, **kw)
        x_t, i_t = graphmax(z, A, backend="torch", return_info=True, **kw)
        assert torch.allclose(x_sp, x_t, atol=1e-13), kw
        assert torch.equal(i_sp.iterations, i_t.iterations)


def test_threaded_products_give_the_single_thread_bits(monkeypatch):
    # With more than one torch thread the CPU products go through numba's row-parallel CSR
    # kernel; the solver's results must keep every bit of scipy's single-threaded ones, on every
    # CPU (torch's CSR kernel, MKL's, did not on an Intel Xeon: tests/end_to_end/test_cpu_independence.py).
    n = 4000
    A = random_graph(n, seed=17)
    z = torch.randn(24, n, generator=torch.Generator().manual_seed(17)) * 3
    op = GraphOperator.prepare(A, "cpu")
    x = z.T.softmax(0).contiguous()
    threads = torch.get_num_threads()
    results, calls = {}, []
    real = graph_operator._cpu_times
    monkeypatch.setattr(graph_operator, "_cpu_times", lambda *a: calls.append(torch.get_num_threads()) or real(*a))
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            results[t] = graphmax(z, op, return_info=True, probs=False)[1]
            calls.clear()
            results[t, "product"] = op.m_product_columns(x)
            results[t, "kernel"] = list(calls)
    finally:
        torch.set_num_threads(threads)
    for key in ("log_probs", "gap", "iterations"):
        assert torch.equal(getattr(results[1], key), getattr(results[2], key)), key
    assert all(torch.equal(a, b) for a, b in zip(results[1, "product"], results[2, "product"]))
    assert results[1, "kernel"] == [] and results[2, "kernel"] == [2, 2]  # scipy's kernel, then numba's


def test_graph_given_as_torch_sparse_dense_or_prepared_operator():
    n = 30
    A = random_graph(n, seed=16)
    z = torch.randn(n, generator=torch.Generator().manual_seed(16), dtype=F64)
    ref = graphmax(z, A)
    dense = torch.from_numpy(A.toarray())
    for graph in (dense.to_sparse_csr(), dense.to_sparse(), dense, GraphOperator.prepare(A, "cpu")):
        assert torch.allclose(graphmax(z, graph), ref, atol=1e-15)


# ---- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lam": -1.0}, "lam must be"),
        ({"lam": float("nan")}, "lam must be"),
        ({"solver": "fast"}, "unknown solver"),
        ({"topk": 0}, "topk"),
        ({"solver": "paper", "topk": 3}, "exact"),
        ({"max_iter": -1}, "max_iter"),
    ],
)
def test_bad_arguments(kwargs, message):
    A = random_graph(10)
    with pytest.raises(MaxbenchError, match=message):
        graphmax(torch.zeros(10), A, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lam": -1.0},
        {"lam": float("inf")},
        {"lam": True},
        {"solver": "fast"},
        {"tol": -1.0},
        {"max_iter": -1},
        {"max_iter": 2.5},
        {"topk": 0},
        {"solver": "paper", "topk": 3},
    ],
)
def test_layer_refuses_what_the_operator_refuses_in_the_same_words(kwargs):
    from maxbench.systems.layers.graphmax.layer import GraphmaxLayer

    with pytest.raises(MaxbenchError) as by_operator:
        graphmax(torch.zeros(10), random_graph(10), **kwargs)
    with pytest.raises(MaxbenchError) as by_layer:
        GraphmaxLayer(**kwargs)
    assert str(by_layer.value) == str(by_operator.value)


def test_non_finite_scores_and_size_mismatch():
    A = random_graph(10)
    z = torch.zeros(2, 10)
    z[1, 3] = float("nan")
    with pytest.raises(MaxbenchError, match=r"NaN or infinite values \(rows \[1\]\)"):
        graphmax(z, A)
    with pytest.raises(MaxbenchError, match="11 entries but the graph has 10"):
        graphmax(torch.zeros(11), A)
    with pytest.raises(MaxbenchError, match="not differentiable"):
        graphmax(torch.zeros(10, requires_grad=True), A, solver="paper")


def test_lazy_reexports():
    from maxbench import systems

    assert systems.graphmax is graphmax
    assert systems.sparsemax is sparsemax


# ---- the output layer ------------------------------------------------------------------


class _Corpus:
    name, sha256 = "toy", "e" * 64
    fit = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"]


@pytest.fixture
def fitted(tmp_path, monkeypatch, tiny):
    from maxbench.systems.layers.base import FitContext
    from maxbench.systems.layers.graphmax.layer import GraphmaxLayer

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))

    def make(**params):
        layer = GraphmaxLayer(**params)
        layer.fit(FitContext(model=tiny, corpus=_Corpus()))
        return layer

    return make


def test_layer_scores_are_graphmax_log_probabilities(fitted):
    layer = fitted(lam=2.0)
    logits = torch.randn(3, 257, generator=torch.Generator().manual_seed(20))
    scores = layer.scores(logits, None)
    assert scores.dtype == torch.float32 and torch.isfinite(scores).all()
    expected = graphmax(logits.double(), layer.graph, lam=2.0)
    assert torch.allclose(torch.softmax(scores.double(), -1), expected, atol=1e-6)
    stats = layer.step_stats()
    assert stats["iterations"].shape == (3,) and (stats["iterations"] > 0).all()
    assert stats["gap"].shape == (3,) and (stats["gap"] <= 1e-6 * 50).all()
    assert not layer.can_be_sparse and layer.resource_hashes()["graph_sha256"] == layer.graph.sha256


def test_layer_paper_mode_and_topk_are_sparse(fitted):
    logits = torch.randn(2, 257, generator=torch.Generator().manual_seed(21)) * 3
    for layer in (fitted(solver="paper"), fitted(topk=8)):
        scores = layer.scores(logits, None)
        assert layer.can_be_sparse and torch.isinf(scores).any() and torch.isfinite(scores).any(-1).all()


def test_layer_decodes_with_stats(fitted, tiny):
    from maxbench.systems.decoding import DecodingSetting, decode

    layer = fitted()
    out = decode(tiny, layer, ["the cat", "a dog"], DecodingSetting(max_new_tokens=5), seeds=[3, 4])
    for row in out:
        steps = row["n_tokens"] + (row["finish"] == "eos")
        assert len(row["stats"]["iterations"]) == len(row["stats"]["gap"]) == steps


def test_layer_bad_input(fitted, tiny):
    from maxbench.systems.graph import build_graph
    from maxbench.systems.layers.graphmax.layer import GraphmaxLayer
    from maxbench.systems.system_strings import parse_system

    with pytest.raises(MaxbenchError, match="lam must be"):
        parse_system("tiny-random/graphmax(lam=-0.5)/greedy").build_layer()
    with pytest.raises(MaxbenchError, match="unknown solver"):
        GraphmaxLayer(solver="fast")
    layer = fitted()
    with pytest.raises(MaxbenchError, match=r"graphmax: the model's logits contain NaN"):
        layer.scores(torch.full((1, 257), float("nan")), None)
    with pytest.raises(MaxbenchError, match="258 logits but the graph has 257"):
        layer.scores(torch.zeros(1, 258), None)
    other = build_graph([[1, 2]], vocab_size=257, tokenizer_hash="1" * 64)
    with pytest.raises(MaxbenchError, match="built with tokenizer 111111111111"):
        layer.use_graph(other, tiny)
    with pytest.raises(MaxbenchError, match="no graph yet"):
        GraphmaxLayer().scores(torch.zeros(1, 257), None)


def test_float32_solve_is_certified_like_float64():
    n, lam = 400, 10.0
    A = random_graph(n, density=0.02, seed=30)
    z = torch.randn(4, n, generator=torch.Generator().manual_seed(30)) * 4
    x32, info32 = graphmax(z, A, lam=lam, return_info=True)
    assert x32.dtype == torch.float32 and info32.converged.all()
    x64 = info32.log_probs.double().exp()
    x64 /= x64.sum(-1, keepdim=True)
    B = np.eye(n) - A.toarray()
    for zi, xi, gap in zip(z.double().numpy(), x64.numpy(), info32.gap.tolist()):
        u = 2 * lam * B @ xi
        certified = objective(xi, zi, A, lam) + logsumexp(zi - B.T @ u) + u @ u / (4 * lam)
        assert abs(certified - gap) < 1e-6 * max(1.0, gap) + 1e-9
        assert certified <= 1e-6 * max(1.0, abs(objective(xi, zi, A, lam)))


# ---- tokens outside the graph in closed form (systems/layers/graphmax/isolated.py) -----------


def full_width(monkeypatch):
    from maxbench.systems.layers.graphmax import isolated as graphmax_isolated

    monkeypatch.setattr(graphmax_isolated, "split", lambda *a: None)


@pytest.mark.parametrize("lam", [0.3, 1.0])
def test_isolated_tokens_in_closed_form_give_the_full_problem_optimum(lam, monkeypatch):
    from maxbench.systems.layers.graphmax import isolated as graphmax_isolated

    n = 300
    A = sparse_graph(n, 60, seed=40)
    z = peaked_scores(5, n, 60, seed=40)
    ZT = (z - z.amax(-1, keepdim=True)).T.contiguous()
    block, _, light = graphmax_isolated.split(ZT, GraphOperator(A), lam)
    assert 60 <= block.numel() < 0.7 * n and (light.mass_coef[0] > 0).all()  # the closed form is used
    # without the Newton first step, whose K likeliest tokens differ between the block and all
    # tokens: both solves then take the same steps
    x, info = graphmax(z, A, lam=lam, tol=1e-12, return_info=True, presolve=False)
    assert info.converged.all()
    for xi, zi, gap in zip(x.numpy(), z.numpy(), info.gap.tolist()):
        # the reported gap is the full problem's certificate, computed densely here
        assert gap == pytest.approx(dual_certificate(xi, zi, A, lam), rel=1e-6, abs=1e-9)
        assert abs(xi.sum() - 1) < 1e-9  # the truncated series: W(t) e^W(t) = t to ~t^5
    x_ref = torch.from_numpy(np.stack([dual_lbfgs_reference(zi, A, lam) for zi in z.numpy()]))
    assert torch.allclose(x, x_ref, atol=1e-7)
    full_width(monkeypatch)
    x_full, info_full = graphmax(z, A, lam=lam, tol=1e-12, return_info=True, presolve=False)
    # the series of W to t^4 is exact to 5.2 t^4 relative (t <= 0.014 here)
    assert ((x - x_full).abs() / x_full).max() < 1e-6
    # the light tokens' series is exact to ~t^5: about the same steps as the full iteration
    assert (info.iterations - info_full.iterations).abs().max() <= 1


def test_isolated_tokens_in_float32_are_certified(monkeypatch):
    n, lam = 2000, 1.0
    A = sparse_graph(n, 300, density=0.05, seed=41)
    z = peaked_scores(8, n, 300, seed=41, dtype=torch.float32)
    x, info = graphmax(z, A, lam=lam, return_info=True, presolve=False)  # same steps as full width
    assert info.converged.all() and (info.relative_gap <= 1e-6).all()
    x64 = info.log_probs.double().exp()
    assert (x64.sum(-1) - 1).abs().max() < 1e-5
    for xi, zi, gap in zip(x64.numpy(), z.double().numpy(), info.gap.tolist()):
        assert abs(dual_certificate(xi / xi.sum(), zi, A, lam) - gap) < 2e-6
    full_width(monkeypatch)
    _, info_full = graphmax(z, A, lam=lam, return_info=True, presolve=False)
    assert (info_full.log_probs - info.log_probs).abs().max() < 1e-4


def test_isolated_tokens_in_closed_form_on_the_torch_backend():
    # the CUDA code path (torch sparse CSR, index tensors on the device), run on the CPU
    n, lam = 300, 1.0
    A = sparse_graph(n, 60, seed=44)
    z = peaked_scores(4, n, 60, seed=44)
    x_scipy = graphmax(z, GraphOperator(A), lam=lam)
    x_torch = graphmax(z, GraphOperator(A, backend="torch"), lam=lam)
    assert torch.allclose(x_scipy, x_torch, rtol=1e-9, atol=1e-15)


def test_a_problem_outside_the_series_reach_is_solved_on_all_tokens(monkeypatch):
    from maxbench.systems.layers.graphmax import isolated as graphmax_isolated

    n, lam = 300, 1.0
    A = sparse_graph(n, 60, seed=42)
    z = peaked_scores(4, n, 60, seed=42)
    normalise = graphmax_isolated.LightTokens.normalise

    def column_1_out_of_reach(self, S, shift):
        v, c, mass, squares, ok = normalise(self, S, shift)
        if ok.numel() == 4:  # the first evaluation, all four columns: report column 1 out of reach
            ok = ok.clone()
            ok[1] = False
        return v, c, mass, squares, ok

    monkeypatch.setattr(graphmax_isolated.LightTokens, "normalise", column_1_out_of_reach)
    _, info = graphmax(z, A, lam=lam, return_info=True)
    full_width(monkeypatch)
    _, alone = graphmax(z[1], A, lam=lam, return_info=True)
    # solved again on all tokens: the bits of that problem solved alone at full width
    assert torch.equal(info.log_probs[1], alone.log_probs)
    assert info.iterations[1] == alone.iterations and info.gap[1] == alone.gap
    _, info_full = graphmax(z, A, lam=lam, return_info=True)
    assert not torch.equal(info.log_probs[0], info_full.log_probs[0])  # the others kept the closed form


def test_the_closed_form_is_used_only_where_it_pays():
    from maxbench.systems.layers.graphmax import isolated as graphmax_isolated

    n = 300
    z = peaked_scores(3, n, 60, seed=43)
    ZT = (z - z.amax(-1, keepdim=True)).T.contiguous()
    sparse = GraphOperator(sparse_graph(n, 60, seed=43))
    assert graphmax_isolated.split(ZT, sparse, 1.0) is not None
    assert graphmax_isolated.split(ZT, sparse, 0.0) is None  # softmax: nothing to solve
    assert graphmax_isolated.split(ZT, sparse, 30.0) is None  # the bound on c puts every token in the block
    assert graphmax_isolated.split(ZT, GraphOperator(sparse_graph(n, 200, seed=43)), 1.0) is None  # 67% touched


# ---- the Newton first step (systems/layers/graphmax/presolve.py) ------------------------------


def test_hub_block_is_M_among_the_hubs_and_its_diagonal_elsewhere(monkeypatch):
    from maxbench.systems.layers.graphmax import presolve as graphmax_presolve

    n = 80
    A = random_graph(n, density=0.15, seed=50)
    M = torch.from_numpy(dense_M(A))
    H = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(s))[:12] for s in range(3)], 1)
    # a graph smaller than HUB_TOKENS: every token is a hub and the block is M's, exactly
    block = GraphOperator(A).hub_block(H, F64)
    for b in range(3):
        assert torch.allclose(block[b], M[H[:, b]][:, H[:, b]], rtol=1e-12, atol=1e-14)
    # 20 hubs: the tokens with the most predecessors; an entry with a non-hub is 0 off the diagonal
    monkeypatch.setattr(graphmax_presolve, "HUB_TOKENS", 20)
    hubs = set(np.argsort(-np.diff(A.T.tocsr().indptr), kind="stable")[:20].tolist())
    block = GraphOperator(A).hub_block(H, F64)
    for b in range(3):
        ids = H[:, b].tolist()
        for i, p in enumerate(ids):
            for j, q in enumerate(ids):
                expected = M[p, q] if i == j or (p in hubs and q in hubs) else 0.0
                assert float(block[b, i, j]) == pytest.approx(float(expected), rel=1e-12, abs=1e-14)


def test_hub_block_of_the_closed_form_block_maps_to_the_touched_tokens():
    from maxbench.systems.layers.graphmax import isolated as graphmax_isolated

    n, lam = 300, 1.0
    A = sparse_graph(n, 60, seed=51)
    z = peaked_scores(3, n, 60, seed=51)
    ZT = (z - z.amax(-1, keepdim=True)).T.contiguous()
    block, block_op, _ = graphmax_isolated.split(ZT, GraphOperator(A), lam)
    assert block.numel() > 60  # some heavy isolated tokens follow the 60 touched ones
    M = torch.from_numpy(dense_M(A))
    H = torch.topk(torch.index_select(ZT, 0, block), 16, dim=0).indices  # positions in the block
    got = block_op.hub_block(H, F64)
    for b in range(3):
        ids = block[H[:, b]]
        assert torch.allclose(got[b], M[ids][:, ids], rtol=1e-12, atol=1e-14)  # isolated: 1 on the diagonal


@pytest.mark.parametrize("lam, scale, share", [(1.0, 4.0, 0.7), (3.0, 6.0, 0.8)])
def test_newton_first_step_reaches_the_same_certified_optimum_in_fewer_steps(lam, scale, share):
    n = 400
    A = random_graph(n, density=0.02, seed=52)
    z = torch.randn(12, n, generator=torch.Generator().manual_seed(52), dtype=F64) * scale
    x, info = graphmax(z, A, lam=lam, tol=1e-10, return_info=True)
    x_plain, plain = graphmax(z, A, lam=lam, tol=1e-10, return_info=True, presolve=False)
    assert info.converged.all() and plain.converged.all()
    for xi, zi, gap in zip(x.numpy(), z.numpy(), info.gap.tolist()):
        assert gap == pytest.approx(dual_certificate(xi, zi, A, lam), rel=1e-6, abs=1e-12)
    assert torch.allclose(x, x_plain, atol=1e-5)  # both within the tolerance of the one optimum
    # the point of the first step (measured: 44 steps in place of 69 at lam 1, 54 of 76 at lam 3)
    assert info.iterations.sum() < share * plain.iterations.sum()


def test_a_first_step_that_increases_f_is_taken_back_for_the_plain_one(monkeypatch):
    from maxbench.systems.layers.graphmax import presolve as graphmax_presolve

    n, lam = 400, 3.0
    A = random_graph(n, density=0.02, seed=53)
    z = torch.randn(5, n, generator=torch.Generator().manual_seed(53), dtype=F64) * 4
    x_plain, plain = graphmax(z, A, lam=lam, return_info=True, presolve=False)
    # a step far uphill: every row takes it back and goes on exactly as without the first step
    monkeypatch.setattr(graphmax_presolve, "first_step", lambda ZT, R, lse, op, lam: -50.0 * R)
    x, info = graphmax(z, A, lam=lam, return_info=True)
    assert torch.equal(x, x_plain) and torch.equal(info.gap, plain.gap)
    assert torch.equal(info.iterations, plain.iterations + 1)  # the step taken back counts


def test_a_float32_problem_that_does_not_converge_is_solved_again_in_float64(monkeypatch):
    from maxbench.systems.layers.graphmax import exact as graphmax_exact

    n, lam = 400, 1.0
    A = random_graph(n, density=0.02, seed=54)
    z = torch.randn(4, n, generator=torch.Generator().manual_seed(54)) * 4
    _, before = graphmax(z, A, lam=lam, return_info=True)
    solve = graphmax_exact.solve

    def row_2_stalls_in_float32(ZT, *args):
        logX, gap, f, steps, conv = solve(ZT, *args)
        if ZT.dtype == torch.float32:  # as a crawling row would end: out of steps, not converged
            conv = conv.clone()
            conv[2] = False
        return logX, gap, f, steps, conv

    monkeypatch.setattr(graphmax_exact, "solve", row_2_stalls_in_float32)
    x, info = graphmax(z, A, lam=lam, return_info=True)
    _, alone = graphmax(z[2].double(), A, lam=lam, return_info=True)
    assert info.converged.all() and x.dtype == torch.float32
    assert torch.equal(info.log_probs[2], alone.log_probs.float())  # the float64 solve's result
    assert info.iterations[2] == before.iterations[2] + alone.iterations  # both solves' steps
    assert torch.equal(info.log_probs[[0, 1, 3]], before.log_probs[[0, 1, 3]])  # the others untouched


# ---- golden values: the solvers' results before their speed-ups (main at 68c8820) -----------
# The speed-ups (column gathers, in-place steps, no final exponential) must not change a single
# step; these pin iterations and values of batches whose rows finish at different steps and take
# rejected steps (lam 30), and a decode through the layer. The Newton first step changes the path
# (not the optimum, within the tolerance): the plain path keeps main's pins, and it has its own.


def test_solver_results_are_pinned():
    A = random_graph(400, density=0.02, seed=31)
    z = torch.randn(6, 400, generator=torch.Generator().manual_seed(31)) * 4
    pinned = {
        10.0: ([7, 4, 7, 4, 4, 8], [-12.87608, -8.340576, -11.34916, -11.05166, -9.107502, -7.333806]),
        30.0: ([12, 9, 12, 8, 8, 9], [-11.76024, -7.509281, -10.13253, -10.15990, -8.061301, -6.331875]),
    }
    # with the Newton first step (graphmax_presolve, 2026-11-25): fewer steps, the same optimum
    # within the tolerance; the two rows at lam 30 that take one more step take it back
    with_first_step = {
        10.0: ([8, 3, 4, 3, 3, 4], [-12.87608, -8.342340, -11.35057, -11.05132, -9.106968, -7.333192]),
        30.0: ([13, 6, 13, 6, 6, 10], [-11.76024, -7.509257, -10.13253, -10.15911, -8.060884, -6.331875]),
    }
    for presolve, pins in ((False, pinned), (True, with_first_step)):
        for lam, (iterations, log_x7) in pins.items():
            x, info = graphmax(z, A, lam=lam, return_info=True, presolve=presolve)
            assert info.iterations.tolist() == iterations and info.converged.all()
            assert torch.allclose(info.log_probs[:, 7].double(), torch.tensor(log_x7, dtype=F64), rtol=2e-6, atol=0)
            none, again = graphmax(z, A, lam=lam, return_info=True, probs=False, presolve=presolve)
            assert none is None and torch.equal(again.log_probs, info.log_probs)
            assert torch.equal(x, info.log_probs.exp())
    # the paper solver's torch path (CUDA's) keeps main's pins; the CPU kernels
    # (maxbench.systems.layers.graphmax.kernels.paper, 2026-11-25) add in another order, and the iteration
    # amplifies that rounding (tests/systems/layers/test_graphmax_paper.py): their own pins
    torch_path = [1.024287e-04, 6.136093e-04, 4.167585e-03, 1.025247e-02, 7.991735e-04, 7.390603e-05]
    torch_path += [6.166585e-04, 9.864960e-04, 3.642140e-03, 1.462642e-04, 7.300936e-04, 3.372871e-03]
    torch_path += [4.780304e-03, 1.113206e-03, 8.842996e-03, 3.494214e-03, 4.331265e-04, 0.0]
    kernels = [1.024269e-04, 6.136093e-04, 4.167581e-03, 1.025247e-02, 7.991754e-04, 7.390603e-05]
    kernels += [6.166585e-04, 9.864978e-04, 3.642140e-03, 1.461701e-04, 7.298989e-04, 3.372675e-03]
    kernels += [4.780303e-03, 1.113206e-03, 8.842994e-03, 3.494229e-03, 4.331432e-04, 0.0]
    for backend, expected in (("torch", torch_path), ("scipy", kernels)):
        x, info = graphmax(z, GraphOperator(A, backend=backend), lam=1.0, solver="paper", return_info=True)
        assert info.iterations.tolist() == [19] * 6
        want = torch.tensor(expected, dtype=F64)
        assert torch.allclose(x[:, :3].flatten().double(), want, rtol=2e-6, atol=1e-12), backend


def test_layer_decode_is_pinned(fitted, tiny):
    from maxbench.systems.decoding import DecodingSetting, decode

    prompts, seeds = ["the cat", "a dog sat", "the", "on the mat"], [1, 2, 3, 4]
    exact = decode(tiny, fitted(lam=5.0), prompts, DecodingSetting(max_new_tokens=12), seeds)
    assert [r["token_ids"] for r in exact] == [
        [189, 253, 41, 106, 136, 86, 106, 69, 62, 100, 38, 94],
        [107, 183, 166, 117, 242, 44, 120, 89, 115, 67, 134, 171],
        [246, 217, 234, 200, 42, 172, 54, 230, 184, 228, 67, 124],
        [168, 29, 19, 176, 5, 220, 167, 12, 170, 10, 47, 164],
    ]
    # one step per token since the Newton first step (two before, with the same tokens)
    assert [r["stats"]["iterations"] for r in exact] == [[1.0] * 12] * 4
    paper = decode(tiny, fitted(solver="paper"), prompts, DecodingSetting(max_new_tokens=12), seeds)
    paper_ids = [r["token_ids"] for r in paper]
    assert paper_ids[1][10] == 212  # the only token where the paper's solver samples another one
    assert [ids[:10] + ids[11:] for ids in paper_ids] == [r["token_ids"][:10] + r["token_ids"][11:] for r in exact]
    assert [r["token_ids"][10] for r in exact] == [38, 134, 67, 47]
