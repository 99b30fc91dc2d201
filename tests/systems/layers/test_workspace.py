"""Reused buffers and torch's log-sum-exp written into them: the same bits as the allocating code,
for the reduction itself and for the two head preparations that use it (POSG's class log-masses,
KerBS's frozen-tail normaliser)."""

import math

import numpy as np
import pytest
import torch

from maxbench.systems import hidden_cache as hc
from maxbench.systems.layers.kerbs.fit import to_train_data
from maxbench.systems.layers.posg.fit import positions
from maxbench.systems.layers.posg.head import CATCH_ALL, POSGHead
from maxbench.systems.layers.workspace import Workspace, logsumexp_rows


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN where the other has NaN, infinities of the same sign."""
    return (
        a.dtype == b.dtype and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_logsumexp_rows_is_torch_logsumexp_bit_for_bit(dtype):
    """Rows of many lengths (1 to a SmolLM2 vocabulary), contiguous and column slices of a wider block,
    with rows all -inf, holding +inf, holding NaN: each the bits of ``torch.logsumexp(x, -1)``, through
    one workspace reused from call to call."""
    g = torch.Generator().manual_seed(3)
    work = Workspace()
    block = (torch.randn(9, 49_152 + 40, generator=g) * 8).to(dtype)
    block[1] = -math.inf
    block[2, 7] = math.inf
    block[3, 100] = math.nan
    block[4, ::3] = -math.inf
    for n in (1, 2, 15, 16, 17, 1000, 49_152):
        for x in (block[:, :n].contiguous(), block[:, 20 : 20 + n]):
            out = torch.empty(x.shape[0], dtype=dtype)
            assert logsumexp_rows(x, out, work) is out
            assert same_bits(out, torch.logsumexp(x, -1)), (n, x.is_contiguous())


def test_workspace_reuses_a_buffer_per_name_and_grows_it_when_asked_for_more():
    work, like = Workspace(), torch.zeros(1)
    a = work.take("x", (4, 5), like)
    b = work.take("x", (2, 3), like)
    assert a.shape == (4, 5) and b.shape == (2, 3) and b.is_contiguous() and a.data_ptr() == b.data_ptr()
    assert work.take("y", (2, 3), like).data_ptr() != a.data_ptr()
    bigger = work.take("x", (10, 10), like)
    assert bigger.shape == (10, 10) and work.take("x", (3,), like).data_ptr() == bigger.data_ptr()
    assert work.take("x", (3,), torch.zeros(1, dtype=torch.float64)).dtype == torch.float64


def cached_part(n: int, hidden: int, vocab: int, seed: int) -> hc.CachePart:
    """A hidden-state cache part as the cache stores it: fp16 states and int32 targets."""
    rng = np.random.default_rng(seed)
    return hc.CachePart(
        hidden=(rng.standard_normal((n, hidden)) * 2).astype(np.float16),
        target=rng.integers(0, vocab, n).astype(np.int32),
        doc=np.zeros(n, np.int32),
        span=np.zeros((n, 2), np.int32),
        base_logprob=np.full(n, np.nan, np.float32),
        docs=[""],
    )


def chunked_logits(part: hc.CachePart, weight: torch.Tensor, chunk: int) -> torch.Tensor:
    """``h @ W^T`` of a part's positions, ``chunk`` rows at a time (a product's rows can differ in their
    last bits with the number of rows, so the reference multiplies the same blocks)."""
    h = torch.from_numpy(part.hidden).float()
    return torch.cat([h[s : s + chunk] @ weight.T for s in range(0, len(h), chunk)])


@pytest.mark.parametrize("chunk", [7, 512])
def test_posg_positions_are_the_allocating_formulas_bit_for_bit(chunk):
    """POSG's prepared positions (class terms and priors) through the workspace: the bits of gathering
    each class's logits and reducing them with torch.logsumexp, from the same chunks' logits."""
    vocab, hidden, n = 3000, 16, 60
    g = torch.Generator().manual_seed(11)
    classes = [torch.randperm(vocab, generator=g)[:k].sort().values for k in (1, 40, 700, 0, 1900)]
    pairs = [(int(w), c) for c, ws in enumerate(classes) for w in ws] + [(w, len(classes)) for w in range(vocab)]
    head = POSGHead(vocab, ["A", "B", "C", "D", "E", CATCH_ALL], torch.tensor(pairs), hidden, lm_prior=True)
    weight = torch.randn(vocab, hidden, generator=g)
    part = cached_part(n, hidden, vocab, seed=2)
    got = positions(head, part, weight, chunk=chunk)
    logits = chunked_logits(part, weight, chunk)
    lse = torch.stack(
        [torch.logsumexp(logits[:, m], -1) if len(m) else torch.full((n,), -math.inf) for m in head.class_members], 1
    )
    target = torch.from_numpy(part.target).long()
    own = logits.gather(1, target[:, None])
    terms = torch.where(head.membership[target], own - lse, torch.full_like(lse, -math.inf))
    prior = (lse - torch.logsumexp(logits, -1, keepdim=True)).clamp_min(head.PRIOR_FLOOR)
    assert same_bits(got.terms, terms) and same_bits(got.prior, prior)


def test_kerbs_tail_normaliser_is_torch_logsumexp_of_the_frozen_words_logits_bit_for_bit():
    """KerBS's frozen-tail log-sum-exp through the workspace, chunk by chunk: the bits of
    ``torch.logsumexp(h @ W_tail^T, -1)`` of the same chunks."""
    vocab, hidden, n = 2000, 16, 50
    g = torch.Generator().manual_seed(4)
    weight = torch.randn(vocab, hidden, generator=g)
    active = torch.randperm(vocab, generator=g)[:300].sort().values
    part = cached_part(n, hidden, vocab, seed=5)
    data = to_train_data(part, weight, active, chunk=16)
    tail = torch.ones(vocab, dtype=torch.bool)
    tail[active] = False
    expect = torch.logsumexp(chunked_logits(part, weight[tail], 16), -1)
    assert same_bits(data.tail_lse, expect)
