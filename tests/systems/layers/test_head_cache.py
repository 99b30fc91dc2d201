"""What KerBS and POSG fitting share (systems/layers/head_cache.py): head identities and paths
that stay those of heads already cached, load-or-train, named heads, held-out log-probabilities."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc
from maxbench.systems.layers.head_cache import head_identity, load_or_train, part_logprobs, part_logprobs_each
from maxbench.systems.layers.kerbs import fit as kerbs_fit
from maxbench.systems.layers.posg import fit as posg_fit

LM = SimpleNamespace(hash="a" * 64, tokenizer_hash="b" * 64, device=torch.device("cpu"))
CORPUS = SimpleNamespace(name="food-reviews", sha256="c" * 64)
TAGGER = "spacy 3.6.1 core_web_sm 3.6.0"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    return tmp_path


def test_default_heads_keep_the_cache_paths_they_had_before_the_split():
    # Keys computed by the single-module kerbs.py / posg.py of commit 48b018e: a head trained
    # then is found again, and no option silently joins or leaves the identity.
    kerbs = head_identity("kerbs", kerbs_fit.KERBS_VERSION, LM, CORPUS, 60_000, kerbs_fit.KerBSConfig())
    posg = head_identity("posg", posg_fit.POSG_VERSION, LM, CORPUS, 60_000, posg_fit.POSGConfig(), tagger=TAGGER)
    assert hc.head_directory("kerbs", kerbs).name == "d848d3aeb81881f5e6776aa8"
    assert hc.head_directory("posg", posg).name == "e90f4547e8eeb0df37610741"
    assert list(posg) == [
        "layer",
        "version",
        "hidden_cache",
        "model_hash",
        "tokenizer_hash",
        "corpus",
        "corpus_sha256",
        "budget_tokens",
        "tagger",
        "config",
    ]


class _Head(nn.Module):
    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def state_tensors(self) -> dict:
        return {"w": self.w.detach().cpu()}


def _fit(layer="toy", seed=0, retrain=False, head_path=None, trained=None, identity=None):
    def train(ident):
        trained.append(ident)
        return _Head(torch.randn(3, generator=torch.Generator().manual_seed(seed))), dict(ident, note="trained")

    return load_or_train(
        layer,
        LM,
        restore=lambda tensors, meta: _Head(tensors["w"]),
        identity=identity or (lambda: {"layer": layer, "model_hash": LM.hash, "tokenizer_hash": LM.tokenizer_hash}),
        train=train,
        retrain=retrain,
        head_path=head_path,
    )


def test_a_head_is_trained_once_then_loaded_until_retrain_is_asked(home):
    trained: list = []
    head, meta = _fit(trained=trained)
    assert len(trained) == 1 and not meta["loaded_from_cache"] and meta["note"] == "trained"
    again, meta2 = _fit(seed=1, trained=trained)
    assert len(trained) == 1 and meta2["loaded_from_cache"] and meta2["sha256"] == meta["sha256"]
    assert torch.equal(again.w, head.w)
    _, meta3 = _fit(seed=1, retrain=True, trained=trained)
    assert len(trained) == 2 and not meta3["loaded_from_cache"] and meta3["sha256"] != meta["sha256"]
    assert meta3["path"] == meta["path"]  # the retrained head replaced the cached one


def test_a_named_head_needs_no_identity_and_must_be_of_the_layer(home):
    _, meta = _fit(trained=[])

    def no_identity():
        raise AssertionError("a named head must not compute an identity (POSG would load spaCy)")

    head, named = _fit(head_path=meta["path"], trained=[], identity=no_identity)
    assert named["sha256"] == meta["sha256"] and named["loaded_from_cache"]
    with pytest.raises(MaxbenchError, match="holds a toy head, not a kerbs head"):
        _fit(layer="kerbs", head_path=meta["path"], trained=[], identity=no_identity)


def test_held_out_logprobs_are_the_softmax_or_the_given_scores():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(11, 4, generator=g)
    hidden = torch.randn(7, 4, generator=g).half()
    part = SimpleNamespace(hidden=hidden.numpy(), target=np.array([0, 3, 10, 2, 2, 5, 9], dtype=np.int32))
    target = torch.from_numpy(part.target).long()
    logits = hidden.float() @ weight.T
    want = torch.log_softmax(logits, -1).gather(1, target[:, None])[:, 0].double().numpy()
    np.testing.assert_allclose(part_logprobs(part, weight, chunk=3), want, rtol=0, atol=1e-6)
    half = part_logprobs(part, weight, scores=lambda h, z: z / 2, chunk=3)
    want_half = torch.log_softmax(logits / 2, -1).gather(1, target[:, None])[:, 0].double().numpy()
    np.testing.assert_allclose(half, want_half, rtol=0, atol=1e-6)


def test_held_out_logprobs_of_several_scorers_in_one_pass_are_each_scorers_own_bits():
    """One pass over the part for a head's scores and the softmax (KerBS's evaluation): each array is
    bit for bit what a pass of its own gives."""
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(300, 8, generator=g)
    part = SimpleNamespace(
        hidden=torch.randn(50, 8, generator=g).half().numpy(),
        target=torch.randint(0, 300, (50,), generator=g).int().numpy(),
    )

    def sharpened(h, logits):
        return logits.clone().mul_(1.5).add_(h[:, :1])

    both = part_logprobs_each(part, weight, [sharpened, None], chunk=16)
    assert np.array_equal(both[0], part_logprobs(part, weight, sharpened, chunk=16))
    assert np.array_equal(both[1], part_logprobs(part, weight, chunk=16))


def test_still_improving_reads_whether_the_last_epoch_lowered_validation_perplexity():
    from maxbench.systems.layers.head_cache import with_best_epoch

    def meta(*ppl):
        return {"training": {"history": [{"epoch": i, "valid_ppl": v} for i, v in enumerate(ppl)]}}

    assert with_best_epoch(meta(50.0, 48.0, 47.0))["still_improving"] is True
    assert with_best_epoch(meta(50.0, 47.0, 47.5))["still_improving"] is False
    flat = with_best_epoch(meta(50.0, 50.0))
    assert flat["still_improving"] is False and flat["untrained_best"] is True
    assert with_best_epoch(meta(50.0))["still_improving"] is False
