import numpy as np
import pytest
import torch

from maxbench.systems.layers.sparsemax.operator import sparsemax


def simplex_projection_by_bisection(v: np.ndarray) -> np.ndarray:
    """Reference: the Euclidean projection onto the simplex is max(v - tau, 0) with tau the
    root of sum(max(v - tau, 0)) = 1, a decreasing function of tau; bisect it in float64."""
    lo, hi = v.max() - 1.0, v.max()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.maximum(v - mid, 0).sum() > 1:
            lo = mid
        else:
            hi = mid
    return np.maximum(v - 0.5 * (lo + hi), 0)


def test_equals_simplex_projection():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(20, 37, generator=gen, dtype=torch.float64) * 3
    p = sparsemax(z)
    for row, prow in zip(z.numpy(), p.numpy()):
        np.testing.assert_allclose(prow, simplex_projection_by_bisection(row), atol=1e-12)
    assert torch.allclose(p.sum(-1), torch.ones(20, dtype=torch.float64))
    assert (p == 0).any()  # the scale chosen makes the output sparse, so zeros are exercised


def test_projection_is_a_minimiser_not_just_feasible():
    # Perturbing the output within the simplex must not get closer to z.
    z = torch.tensor([0.9, 0.5, 0.45, -1.0], dtype=torch.float64)
    p = sparsemax(z)
    d0 = torch.sum((p - z) ** 2)
    for i in range(4):
        for j in range(4):
            if i != j and p[j] > 1e-3:
                q = p.clone()
                q[i] += 1e-3
                q[j] -= 1e-3
                assert torch.sum((q - z) ** 2) > d0


def test_known_values():
    p = sparsemax(torch.tensor([1.0, 0.0]))
    assert torch.equal(p, torch.tensor([1.0, 0.0]))
    p = sparsemax(torch.tensor([0.5, 0.0, -2.0], dtype=torch.float64))
    assert torch.allclose(p, torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64))


def test_other_dim():
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(5, 7, 3, generator=gen, dtype=torch.float64)
    assert torch.allclose(sparsemax(z, dim=1), sparsemax(z.transpose(1, 2), dim=-1).transpose(1, 2))


def test_shift_invariance_and_large_logits_in_float32():
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(8, 1000, generator=gen)
    ref = sparsemax(z.double())
    for shift in (0.0, 1e4, -3e4):
        p = sparsemax(z + shift)
        assert torch.allclose(p.double(), ref, atol=2e-3 if shift else 1e-6)
        assert torch.allclose(p.sum(-1), torch.ones(8), atol=1e-5)


def test_half_precision_is_computed_in_float32():
    gen = torch.Generator().manual_seed(3)
    z = (torch.randn(4, 500, generator=gen) * 4 + 20).half()
    p = sparsemax(z)
    assert p.dtype == torch.float16
    ref = sparsemax(z.float())
    assert torch.allclose(p.float(), ref, atol=1e-3)
    assert torch.allclose(p.float().sum(-1), torch.ones(4), atol=1e-2)


def test_bfloat16_with_gradient():
    z = torch.tensor([[1.0, 0.5, -1.0]], dtype=torch.bfloat16, requires_grad=True)
    p = sparsemax(z)
    assert p.dtype == torch.bfloat16
    p[0, 0].backward()
    assert z.grad.dtype == torch.bfloat16
    assert torch.allclose(z.grad.float(), torch.tensor([[0.5, -0.5, 0.0]]))


def test_all_neg_inf_row_is_uniform_and_neg_inf_entries_get_zero():
    z = torch.tensor([[float("-inf")] * 4, [0.0, float("-inf"), 1.0, float("-inf")]])
    p = sparsemax(z)
    assert torch.equal(p[0], torch.full((4,), 0.25))
    assert torch.equal(p[1], torch.tensor([0.0, 0.0, 1.0, 0.0]))
    assert not torch.isnan(p).any()


@pytest.mark.parametrize("dim", [-3, -2, -1, 0, 1, 2])
def test_gradcheck_along_every_dim(dim):
    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        z = (torch.randn(3, 4, 6, generator=gen, dtype=torch.float64) * 2).requires_grad_()
        p = sparsemax(z, dim=dim)
        assert (p == 0).any() and (p.sum(dim) - 1).abs().max() < 1e-12  # zeros exercised, slices along dim
        assert torch.autograd.gradcheck(lambda t: sparsemax(t, dim=dim), (z,), eps=1e-6, atol=1e-8)


def test_backward_matches_dense_jacobian():
    # J = diag(s) - s s^T / |S| with s the support indicator (Martins & Astudillo, eq. 11).
    z = torch.tensor([0.9, 0.5, 0.45, -1.0], dtype=torch.float64, requires_grad=True)
    jac = torch.autograd.functional.jacobian(sparsemax, z)
    s = (sparsemax(z) > 0).double()
    assert torch.allclose(jac, torch.diag(s) - torch.outer(s, s) / s.sum())


def test_integer_and_list_inputs():
    assert torch.allclose(sparsemax(torch.tensor([2, 0])), torch.tensor([1.0, 0.0]))


# ---- the output layer ------------------------------------------------------------------


def test_layer_scores_give_back_sparsemax_through_the_loops_softmax():
    from maxbench.systems.layers.sparsemax.layer import SparsemaxLayer

    layer = SparsemaxLayer()
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(5)) * 3
    scores = layer.scores(logits, None)
    p = sparsemax(logits)
    assert torch.equal(torch.isinf(scores), p == 0) and (p == 0).any()
    assert torch.allclose(torch.softmax(scores, -1), p, atol=1e-6)
    assert layer.can_be_sparse and layer.name == "sparsemax"


@pytest.mark.parametrize("bad, word", [(float("nan"), "NaN"), (float("inf"), "infinite"), (float("-inf"), "infinite")])
def test_layer_rejects_non_finite_logits(bad, word):
    from maxbench.errors import MaxbenchError
    from maxbench.systems.layers.sparsemax.layer import SparsemaxLayer

    logits = torch.zeros(3, 5)
    logits[2, 1] = bad
    with pytest.raises(
        MaxbenchError, match=rf"sparsemax: the model's logits contain {word} values \(batch rows \[2\]\)"
    ):
        SparsemaxLayer().scores(logits, None)


def test_layer_decodes_with_the_tiny_model(tiny):
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.layers.sparsemax.layer import SparsemaxLayer

    setting = DecodingSetting(max_new_tokens=6)
    out = decode(tiny, SparsemaxLayer(), ["hello", "a longer prompt"], setting, seeds=[1, 2])
    again = decode(tiny, SparsemaxLayer(), ["a longer prompt"], setting, seeds=[2])
    assert out[1]["token_ids"] == again[0]["token_ids"]  # a row does not depend on its batch
    assert all(len(r["stats"]["support"]) == r["n_tokens"] + (r["finish"] == "eos") for r in out)


def _cases():
    gen = torch.Generator().manual_seed(7)
    yield "lm-like logits", torch.randn(6, 4096, generator=gen) * 2.5
    yield "near-uniform (graphmax paper steps)", torch.randn(6, 4096, generator=gen) * 1e-3
    yield "ties", torch.tensor([[1.0, 1.0, 1.0, 0.0], [2.0, 2.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    yield "-inf entries", torch.tensor([[0.5, float("-inf"), 0.2, float("-inf")], [float("-inf")] * 3 + [4.0]])
    yield "float64 heavy tail", torch.distributions.Gumbel(0.0, 1.0).sample((5, 3000)).double() * 3


@pytest.mark.parametrize("name,z", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_michelot_threshold_equals_sorting(name, z):
    from maxbench.systems.layers.sparsemax.operator import threshold, threshold_by_sorting

    shifted = z - z.amax(-1, keepdim=True)
    fast, slow = threshold(shifted), threshold_by_sorting(shifted)
    assert torch.allclose(fast, slow, rtol=1e-6, atol=1e-9), name
    assert torch.equal(shifted > fast, shifted > slow), name  # the same support


def test_rows_still_moving_after_the_pass_limit_are_finished_by_sorting(monkeypatch):
    import maxbench.systems.layers.sparsemax.operator as sm

    gen = torch.Generator().manual_seed(8)
    z = torch.randn(7, 2000, generator=gen, dtype=torch.float64) * 1e-3  # needs several passes
    full = sparsemax(z)
    sorted_rows = []
    by_sorting = sm.threshold_by_sorting
    monkeypatch.setattr(sm, "threshold_by_sorting", lambda rows: sorted_rows.append(len(rows)) or by_sorting(rows))
    monkeypatch.setattr(sm, "MAX_PASSES", 1)
    assert torch.allclose(sparsemax(z), full, atol=1e-12)
    assert sorted_rows and 0 < sorted_rows[0] <= 7
    columns, _ = sm.project_to_simplex(z.T.contiguous(), dim=0)  # the graphmax paper solver's layout
    assert torch.allclose(columns.T, full, atol=1e-12) and len(sorted_rows) == 2


def test_a_start_on_either_side_of_the_threshold_gives_the_same_projection():
    from maxbench.systems.layers.sparsemax.operator import project_to_simplex, threshold_by_sorting

    gen = torch.Generator().manual_seed(9)
    a = torch.randn(6, 3000, generator=gen, dtype=torch.float64) * 1e-2 + 5.0
    z = a - a.amax(-1, keepdim=True)
    tau = threshold_by_sorting(z) + a.amax(-1, keepdim=True)
    want, got_tau = project_to_simplex(a)
    assert torch.allclose(got_tau, tau, rtol=0, atol=1e-12)
    top = a.amax(-1, keepdim=True)
    for start in (
        tau - 1e-3,
        tau - 10.0,
        tau,
        (tau + top) / 2,
        top - 1e-12,
        top,
        top + 3.0,
        torch.full_like(tau, float("nan")),
    ):
        p, t = project_to_simplex(a, start)
        assert torch.allclose(p, want, rtol=0, atol=1e-12) and torch.allclose(t, tau, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape, dim", [((4097, 48), 0), ((3, 4, 5), 1), ((7, 5, 3), 0), ((1, 9), 0), ((6, 2), -1)])
def test_pairwise_maximum_equals_amax(shape, dim):
    # project_to_simplex takes each slice's maximum by halving (faster off the innermost
    # dimension); the values must be amax's, -inf entries and odd lengths included.
    from maxbench.systems.layers.sparsemax.operator import amax

    a = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    a.view(-1)[::7] = float("-inf")
    assert torch.equal(amax(a, dim), a.amax(dim=dim, keepdim=True))
