"""maxbench's one-draw sampler gives torch.multinomial's index and generator state (systems/multinomial.py)."""

import pytest
import torch

from maxbench.systems.decoding import DecodingSetting, warp_rows
from maxbench.systems.multinomial import multinomial_rows


def _torch(probs, seeds):
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    out = torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g)[0] for i, g in enumerate(gens)])
    return out, [g.get_state() for g in gens]


def _ours(probs, seeds):
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    return multinomial_rows(probs, gens), [g.get_state() for g in gens]


def _check(probs, seeds):
    (a, sa), (b, sb) = _torch(probs, seeds), _ours(probs, seeds)
    assert torch.equal(a, b)
    assert all(torch.equal(x, y) for x, y in zip(sa, sb))


def _distributions(g, rows=24, vocab=5000):
    logits = torch.randn(rows, vocab, generator=g) * 3
    dense = torch.softmax(logits, -1)
    nucleus = torch.softmax(warp_rows(DecodingSetting.parse("top_p=0.9").warpers(), None, logits), -1)
    flat = torch.softmax(logits * 0.01, -1)  # near-uniform, as graphmax's paper solver gives
    one = torch.zeros(rows, vocab)
    one[:, 7] = 1.0
    ties = torch.zeros(rows, vocab)
    ties[:, ::50] = 1.0 / 100  # equal probabilities
    return {"dense": dense, "nucleus": nucleus, "flat": flat, "one token": one, "ties": ties}


@pytest.mark.parametrize("kind", ["dense", "nucleus", "flat", "one token", "ties"])
def test_same_draws_and_generator_states_as_torch(kind):
    probs = _distributions(torch.Generator().manual_seed(0))[kind]
    for start in range(0, 400, 24):  # 400 seeds per kind
        _check(probs, list(range(start, start + 24)))


def test_a_generator_used_again_stays_in_step_with_torch():
    probs = _distributions(torch.Generator().manual_seed(1))["nucleus"][:4]
    gens_t = [torch.Generator().manual_seed(s) for s in range(4)]
    gens_o = [torch.Generator().manual_seed(s) for s in range(4)]
    for _ in range(20):
        a = torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g)[0] for i, g in enumerate(gens_t)])
        assert torch.equal(multinomial_rows(probs, gens_o), a)


def test_a_draw_of_zero_is_left_to_torch(monkeypatch):
    """u = 0 (chance 2^-53) makes q = 0: torch decides from the state before the draws."""
    probs = _distributions(torch.Generator().manual_seed(2))["nucleus"][:3]
    real_random = torch.Tensor.random_

    def with_a_zero(self, *a, **k):
        out = real_random(self, *a, **k)
        out[11] = 0
        return out

    monkeypatch.setattr(torch.Tensor, "random_", with_a_zero)
    calls = []
    real = torch.multinomial
    monkeypatch.setattr(torch, "multinomial", lambda *a, **k: calls.append(1) or real(*a, **k))
    gens = [torch.Generator().manual_seed(s) for s in range(3)]
    got = multinomial_rows(probs, gens)
    assert len(calls) == 3
    monkeypatch.undo()
    _check(probs, [0, 1, 2])
    assert torch.equal(got, _torch(probs, [0, 1, 2])[0])


@pytest.mark.parametrize("bad", [float("nan"), -0.1, float("inf")])
def test_rows_torch_refuses_get_torchs_error(bad):
    probs = torch.zeros(2, 100)
    probs[:, :10] = 0.1  # a narrow support: the rows this module draws itself when they are valid
    probs[1, 3] = bad
    gens = [torch.Generator().manual_seed(s) for s in range(2)]
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        multinomial_rows(probs, gens)
    with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
        multinomial_rows(torch.zeros(2, 100), gens)


def test_other_dtypes_and_shapes_take_torchs_path():
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(3, 50, generator=g), -1)
    for p in (probs.double(), probs[:, :1] * 0 + 1):
        seeds = [5, 6, 7]
        a, _ = _torch(p, seeds)
        assert torch.equal(multinomial_rows(p, [torch.Generator().manual_seed(s) for s in seeds]), a)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (scripts/gpu_check.sh runs it on a GPU)")
def test_probabilities_on_a_gpu_are_drawn_with_the_cpu_generators():
    probs = torch.softmax(torch.randn(3, 500, generator=torch.Generator().manual_seed(5)), -1)
    cpu = multinomial_rows(probs, [torch.Generator().manual_seed(s) for s in (1, 2, 3)])
    gpu = multinomial_rows(probs.cuda(), [torch.Generator().manual_seed(s) for s in (1, 2, 3)])
    assert torch.equal(cpu, gpu.cpu())
