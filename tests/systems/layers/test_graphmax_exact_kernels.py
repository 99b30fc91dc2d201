"""graphmax's exact solver on the CPU: the numba kernels (maxbench.systems.layers.graphmax.kernels.exact) against
the torch path that CUDA runs, their exponentials against float64, threads, the layout kernels'
bits and the solver's schedule.

tests/systems/layers/test_graphmax.py checks the solver itself (certificates, references, pins) through the
kernels, the CPU's default for float32 scores."""

import numba
import numpy as np
import pytest
import torch

from maxbench.systems.layers.graphmax import evaluation as graphmax_evaluation
from maxbench.systems.layers.graphmax import exact as graphmax_exact
from maxbench.systems.layers.graphmax import isolated as graphmax_isolated
from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
from maxbench.systems.layers.graphmax.kernels import loader as cpu_kernels
from maxbench.systems.layers.graphmax.operator import graphmax
from tests.support.graphs import dual_certificate, peaked_scores, random_graph, sparse_graph

K = cpu_kernels.load("exact")


@numba.njit
def _apply(x, out, expm1):
    for i in range(x.size):
        out[i] = K.expm1_32(x[i]) if expm1 else K.exp32(x[i])


def _ulps(got, want):
    return np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)


def test_exp32_is_within_2_ulp_of_the_exact_exponential():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-103.0, 88.72, 300_000), rng.uniform(-1, 1, 100_000), [0.0, -87.3, 88.72]])
    x = x.astype(np.float32)
    got = np.empty_like(x)
    _apply(x, got, False)
    want = np.exp(x.astype(np.float64))
    normal = want >= np.finfo(np.float32).tiny
    assert _ulps(got[normal], want[normal]).max() <= 2.0
    # subnormal results: within the smallest subnormal
    assert np.abs(got[~normal] - want[~normal]).max() <= 2.0**-149
    assert got[x == 0.0][0] == 1.0
    below = np.array([-104.0, -120.0, -1e30, -np.inf], dtype=np.float32)
    out = np.empty_like(below)
    _apply(below, out, False)
    assert (out <= 2.0**-149).all() and (out >= 0).all()
    # the top of float32's range: finite and within 2 ulp up to ln(max float32), inf above it
    top = np.float32(88.72) + np.arange(200, dtype=np.float32) * np.spacing(np.float32(88.72))
    top = top[top <= np.log(np.float64(np.finfo(np.float32).max))]
    got = np.empty_like(top)
    _apply(top, got, False)
    assert np.isfinite(got).all() and _ulps(got, np.exp(top.astype(np.float64))).max() <= 2.0
    above = np.array([88.723, 89.0, 100.0, 1e30, np.inf], dtype=np.float32)
    out = np.empty_like(above)
    _apply(above, out, False)
    assert np.isposinf(out).all()


def test_expm1_32_keeps_its_relative_accuracy_near_zero():
    rng = np.random.default_rng(1)
    tiny = np.sign(rng.standard_normal(200_000)) * 10.0 ** rng.uniform(-30, -0.5, 200_000)
    x = np.concatenate([tiny, rng.uniform(-103.0, 80.0, 200_000), [0.0, 0.3465, -0.3466, 0.35, -0.35]])
    x = x.astype(np.float32)
    got = np.empty_like(x)
    _apply(x, got, True)
    want = np.expm1(x.astype(np.float64))
    assert _ulps(got, want).max() <= 2.0
    assert got[x == 0.0][0] == 0.0


@pytest.mark.parametrize("lam", [1.0, 4.0])
@pytest.mark.parametrize("touched", [150, 600])
def test_kernels_solve_the_problem_the_torch_path_solves(lam, touched):
    """float32 scores on the CPU: the kernels and torch's operations (CUDA's path, on the CPU
    with ``backend="torch"``) take the same steps to the same certified optimum; with 150 of 600
    tokens touched and lam 1 the light isolated tokens are in closed form (at lam 4 too many are
    heavy, and all tokens iterate)."""
    n = 600
    A = sparse_graph(n, touched, density=0.05, seed=11) if touched < n else random_graph(n, 0.02, seed=11)
    z = peaked_scores(9, n, touched, seed=11, dtype=torch.float32)
    if touched < n:
        ZT = (z - z.amax(-1, keepdim=True)).T.contiguous()
        assert (graphmax_isolated.split(ZT, GraphOperator(A), lam) is not None) == (lam == 1.0)
    x, info = graphmax(z, GraphOperator(A), lam=lam, return_info=True)
    x_t, info_t = graphmax(z, GraphOperator(A, backend="torch"), lam=lam, return_info=True)
    assert info.converged.all() and info_t.converged.all()
    assert (info.relative_gap <= 1e-6).all()
    assert (info.iterations - info_t.iterations).abs().max() <= 1
    assert torch.allclose(x, x_t, atol=2e-6, rtol=0)
    assert torch.allclose(info.log_probs, info_t.log_probs, atol=2e-4, rtol=0)
    assert torch.allclose(info.objective, info_t.objective, rtol=1e-5, atol=0)
    # the reported gap is the full problem's certificate of the returned x (float64, dense)
    x64 = info.log_probs.double().exp()
    for xi, zi, gap in zip(x64.numpy(), z.double().numpy(), info.gap.tolist()):
        assert abs(dual_certificate(xi / xi.sum(), zi, A, lam) - gap) < 2e-6


def test_graphmax_takes_the_kernels_for_float32_on_the_cpu_only(monkeypatch):
    n = 300
    A = sparse_graph(n, 80, density=0.05, seed=12)
    calls = []
    real = graphmax_evaluation.evaluate_kernels
    monkeypatch.setattr(graphmax_evaluation, "evaluate_kernels", lambda *a, **k: calls.append(1) or real(*a, **k))
    z = peaked_scores(3, n, 80, seed=12, dtype=torch.float32)
    graphmax(z, A)
    assert calls
    calls.clear()
    graphmax(z, GraphOperator(A, backend="torch"))
    graphmax(z.double(), A)  # float64: torch's operations
    graphmax(z, A, safeguard=False)
    assert not calls


@pytest.mark.parametrize("max_iter", [0, 1, 2])
def test_rows_stopped_by_max_iter_carry_their_own_gap(max_iter, monkeypatch):
    """Far from the optimum (large lam, few steps) some centred residual exceeds the kernels'
    clamp of the exponential; the gap returned is still that of the x returned. (graphmax()
    would solve these rows again in float64, on torch's operations: the solver is called here.)"""
    n, lam = 400, 30.0
    A = sparse_graph(n, 100, density=0.05, seed=13)
    z = peaked_scores(6, n, 100, seed=13, dtype=torch.float32) * 4
    shift = z.amax(-1)
    ZT = (z - shift[:, None]).T.contiguous()
    clamped = []
    real = graphmax_evaluation.evaluate_kernels

    def spy(*a, **k):
        out = real(*a, **k)
        clamped.append(not bool(out.exact.all()))
        return out

    monkeypatch.setattr(graphmax_evaluation, "evaluate_kernels", spy)
    log_x, gap, _, steps, conv = graphmax_exact.solve(
        ZT, GraphOperator(A), lam, 0.0, max_iter, 0.7, True, True, (z, shift), K
    )
    assert clamped[0]  # the first evaluation met the clamp
    assert (steps == max_iter).all() and not conv.any()
    x64 = log_x.double().exp()
    for xi, zi, g in zip(x64.numpy(), z.double().numpy(), gap.tolist()):
        assert g == pytest.approx(dual_certificate(xi / xi.sum(), zi, A, lam), rel=1e-4, abs=2e-5)


def test_the_results_do_not_depend_on_the_number_of_threads():
    n = 5 * K.CHUNK + 77  # several chunks, the last one short
    A = sparse_graph(n, 1500, density=0.004, seed=14)
    z = peaked_scores(10, n, 1500, seed=14, dtype=torch.float32)
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba's pool has one thread (NUMBA_NUM_THREADS)")
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            _, info = graphmax(z, A, return_info=True, probs=False)
            assert numba.get_num_threads() == threads
            results.append((info.log_probs, info.gap, info.objective, info.iterations))
    finally:
        torch.set_num_threads(before)
    for one, two in zip(*results):
        assert torch.equal(one, two)


@pytest.mark.parametrize("backend", ["scipy", "torch"])
def test_finished_problems_leaving_the_block_late_change_nothing(backend, monkeypatch):
    """Finished problems leave the block in groups (graphmax_exact.COMPACT); leaving at once or
    never gives the same bits, on the kernels and on the torch path."""
    n = 500
    A = GraphOperator(sparse_graph(n, 150, density=0.05, seed=15), backend=backend)
    z = peaked_scores(12, n, 150, seed=15, dtype=torch.float32)
    results = []
    for compact in (1, 8, 10**9):
        monkeypatch.setattr(graphmax_exact, "COMPACT", compact)
        _, info = graphmax(z, A, lam=2.0, return_info=True)
        results.append(info)
    assert len(set(results[0].iterations.tolist())) > 1  # problems finish at different steps
    for info in results[1:]:
        for key in ("log_probs", "gap", "objective", "iterations", "converged"):
            assert torch.equal(getattr(info, key), getattr(results[0], key)), key


def test_the_split_and_the_light_tokens_agree_with_torch():
    n, lam = 3000, 1.0
    A = sparse_graph(n, 700, density=0.01, seed=16)
    op = GraphOperator(A)
    z = peaked_scores(7, n, 700, seed=16, dtype=torch.float32)
    ZT = (z - z.amax(-1, keepdim=True)).T.contiguous()
    block, _, light = graphmax_isolated.split(ZT, op, lam, K)
    block_t, _, light_t = graphmax_isolated.split(ZT, op, lam)
    assert torch.equal(block, block_t) and block.numel() > 700  # some isolated tokens are heavy
    assert torch.allclose(light.c_lo, light_t.c_lo, rtol=1e-6, atol=0)
    assert torch.allclose(light.mass_coef, light_t.mass_coef, rtol=2e-6, atol=0)
    assert torch.allclose(light.square_coef, light_t.square_coef, rtol=2e-6, atol=0)
    # at the normaliser's bound c_lo (in the max-shifted scores), where the light tokens' t <= 0.01
    zs = ZT.T.contiguous()
    got, want = light.log_probs(zs, light.c_lo, K), light_t.log_probs(zs, light.c_lo)
    light_ids = np.setdiff1d(np.arange(n), block.numpy())
    assert torch.allclose(got[:, light_ids], want[:, light_ids], atol=2e-6, rtol=0)


def test_the_layout_kernels_move_the_bits_unchanged():
    gen = torch.Generator().manual_seed(17)
    n = 3 * K.CHUNK + 5
    Z = torch.randn(6, n, generator=gen) * 5
    shift = Z.amax(1)
    out = torch.empty(n, 6)
    K.shifted_transpose(Z.numpy(), shift.numpy(), out.numpy())
    assert torch.equal(out, Z.T - shift)
    cols = torch.randperm(n, generator=gen)[: 2 * K.CHUNK + 3]
    src = torch.randn(cols.numel(), 6, generator=gen)
    got, want = torch.zeros(6, n), torch.zeros(6, n)
    K.scatter_transpose(src.numpy(), cols.numpy(), got.numpy())
    want.index_copy_(1, cols, src.T.contiguous())
    assert torch.equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
def test_either_graph_product_gives_the_same_bits(threads, monkeypatch):
    """The kernel's product (wide blocks) and scipy's (one thread) or numba's ``product`` (more)
    add each row's terms in the same order, on every CPU (tests/end_to_end/test_cpu_independence.py). (A fifth of the tokens touched, so that the block
    is the touched and heavy tokens, where the product is chosen by width.)"""
    n = 3000
    A = sparse_graph(n, 600, density=0.01, seed=18)
    z = peaked_scores(40, n, 600, seed=18, dtype=torch.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    kernel_products = []
    real = graphmax_isolated.IsolatedBlock.touched_product

    def spy(self, XT, kernels, short_product=True):
        kernel_products.append(
            short_product
            and self.touched_op.matrices(XT.dtype)[0].nnz <= graphmax_isolated._SHORT_ROWS * self.n_touched
        )
        return real(self, XT, kernels, short_product)

    monkeypatch.setattr(graphmax_isolated.IsolatedBlock, "touched_product", spy)
    try:
        results, used = [], []
        for width in (0, 10**9):  # the kernel's product everywhere, then nowhere
            monkeypatch.setattr(graphmax_evaluation, "_KERNEL_PRODUCT_WIDTH", width)
            kernel_products.clear()
            _, info = graphmax(z, A, return_info=True, probs=False)
            results.append(info)
            used.append(set(kernel_products))
    finally:
        torch.set_num_threads(before)
    assert used == [{True}, {False}]
    for key in ("log_probs", "gap", "objective", "iterations"):
        assert torch.equal(getattr(results[0], key), getattr(results[1], key)), key


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("step", [False, True])
def test_one_evaluation_in_the_kernels_equals_torch_s(split, step):
    """``evaluate_kernels`` against ``evaluate`` on the same iterate: the direction, gap, f,
    its error bound, the log-sum-exp and the residual that the first (Newton) step uses, on all
    tokens and with the light isolated tokens in closed form."""
    n, lam, b = 2500, 1.0, 6
    A = sparse_graph(n, 600, density=0.01, seed=19)
    op = GraphOperator(A)
    z = peaked_scores(b, n, 600, seed=19, dtype=torch.float32)
    ZT = (z - z.amax(-1, keepdim=True)).T.contiguous()
    light = None
    if split:
        parts = graphmax_isolated.split(ZT, op, lam, K)
        assert parts is not None
        block, op, light = parts
        ZT = torch.index_select(ZT, 0, block)
    curvature = ((2.0 * lam) * op.diag_m(torch.float32))[:, None]
    gen = torch.Generator().manual_seed(19)
    YT = ZT + 0.1 * torch.randn(ZT.shape, generator=gen)
    shift = YT.amax(0) - 0.5
    if step:
        direction, theta = 0.3 * torch.randn(ZT.shape, generator=gen), torch.full((b,), 0.7)
        got = graphmax_evaluation.evaluate_kernels(
            K, YT, (direction, theta), ZT, op, lam, curvature, shift, 1e-6, light, residual=True
        )
        Y = got.y
        # (torch's addcmul may fuse the multiply-add: the kernels do not)
        assert torch.allclose(Y, torch.addcmul(YT, direction, theta), rtol=1e-6, atol=0)
    else:
        got = graphmax_evaluation.evaluate_kernels(
            K, YT, None, ZT, op, lam, curvature, shift, 1e-6, light, residual=True
        )
        Y = got.y
        assert Y is YT
    # without tol torch's operations compute every column's exact gap, as the kernels do
    want = graphmax_evaluation.evaluate(Y, ZT, op, lam, curvature, shift, None, light, residual=True)
    names = ("direction", "gap", "exact", "f", "lse", "f_error", "ok", "residual")
    for name in names:
        g, w = getattr(got, name), getattr(want, name)
        if name in ("exact", "ok"):
            assert w is None if g is None else torch.equal(g, w), name
        elif name == "gap":
            assert torch.allclose(g, w, rtol=1e-3, atol=1e-6), name
        else:
            assert torch.allclose(g.double(), w.double(), rtol=1e-5, atol=1e-5), name


def test_chunk_partials_add_in_chunk_order_for_any_batch_width():
    """paper_kernels.total adds the chunks' partials one after the other, also for a block of
    one column (NumPy's sum(0) adds a contiguous column pairwise: other bits)."""
    rng = np.random.default_rng(20)
    part = rng.standard_normal((15, 3)) * 10.0 ** rng.uniform(-3, 3, (15, 3))
    want = np.zeros(3)
    for row in part:
        want += row
    assert np.array_equal(K.total(part), want)
    for c in range(3):
        assert K.total(part[:, c : c + 1].copy())[0] == want[c]
    assert np.array_equal(K.total(np.empty((0, 4, 2))), np.zeros((4, 2)))
