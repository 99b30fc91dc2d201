"""KerBS: the kernel and its theta -> 0 limit, Bayesian composition, equality with softmax at
initialisation, reallocation (Algorithm 1), training, caching, bad input."""

import dataclasses
import math

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.base import FitContext
from maxbench.systems.layers.kerbs.fit import KerBSConfig, Reallocator, TrainData, fit_kerbs, train_head
from maxbench.systems.layers.kerbs.head import KerBSHead, grouped_logsumexp, kernel, normalisation_a
from maxbench.systems.layers.kerbs.layer import KerBSLayer
from maxbench.systems.layers.softmax import SoftmaxLayer
from tests.support.corpora import tiny_corpus


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    return tmp_path


def paper_kernel(h, w, theta):
    """Eq. 9 exactly as printed, in float64: |h||e|(a exp(-theta cos) - a)."""
    h, w, theta = h.double(), w.double(), theta.double()
    cos = (h @ w.T) / (h.norm(dim=-1)[:, None] * w.norm(dim=-1)[None, :])
    a = -theta / (2 * (torch.exp(-theta) + theta - 1))
    return h.norm(dim=-1)[:, None] * w.norm(dim=-1)[None, :] * (a * torch.exp(-theta * cos) - a)


# --------------------------------------------------------------------------- the kernel
def test_kernel_at_zero_is_exactly_the_inner_product():
    g = torch.Generator().manual_seed(0)
    h, w = torch.randn(5, 16, generator=g) * 10, torch.randn(7, 16, generator=g)
    assert torch.equal(kernel(h, w, torch.zeros(7)), h @ w.T)


@pytest.mark.parametrize("theta", [1e-12, 1e-8, 1e-6, 1e-4, 1e-3])
def test_kernel_tends_to_the_inner_product(theta):
    g = torch.Generator().manual_seed(1)
    h, w = torch.randn(5, 16, generator=g).double() * 10, torch.randn(7, 16, generator=g).double()
    k = kernel(h, w, torch.full((7,), theta, dtype=torch.float64))
    dot = h @ w.T
    # K = dot * (1 + theta (1/3 - cos/2) + O(theta^2)): the error shrinks linearly with theta.
    assert torch.all((k - dot).abs() <= theta * dot.abs() + 1e-13)


@pytest.mark.parametrize("theta", [-2.0, -0.5, -0.05, 0.02, 0.15, 0.5, 1.0, 3.0, 8.0])
def test_kernel_equals_the_paper_formula(theta):
    g = torch.Generator().manual_seed(2)
    h, w = torch.randn(4, 8, generator=g).double(), torch.randn(6, 8, generator=g).double()
    t = torch.full((6,), theta, dtype=torch.float64)
    torch.testing.assert_close(kernel(h, w, t), paper_kernel(h, w, t), rtol=1e-9, atol=1e-12)
    # float32 stays close too
    torch.testing.assert_close(
        kernel(h.float(), w.float(), t.float()).double(), paper_kernel(h, w, t), rtol=2e-5, atol=2e-5
    )


def test_normalisation_a_limits():
    t = torch.tensor([1e-3, 1.0, 5.0], dtype=torch.float64)
    a = normalisation_a(t)
    assert math.isclose(float(a[0]), -1 / 1e-3 - 1 / 3, rel_tol=1e-5)  # a ~ -1/theta - 1/3
    assert math.isclose(float(a[1]), -1 / (2 * math.exp(-1)), rel_tol=1e-12)


@pytest.mark.parametrize("theta", [0.0, 1e-8, 1e-3, 0.05, 0.099, 0.101, 0.7, -0.3])
def test_kernel_gradients_are_finite_and_correct(theta):
    g = torch.Generator().manual_seed(3)
    h = torch.randn(3, 6, generator=g, dtype=torch.float64)
    w = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.full((4,), theta, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda w_, t_: kernel(h, w_, t_), (w, t), eps=1e-7, atol=1e-6)
    kernel(h.float(), w.detach().float().requires_grad_(), t.detach().float().requires_grad_()).sum().backward()


def test_grouped_logsumexp():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 6, generator=g) * 30
    group = torch.tensor([2, 0, 2, 1, 2, 0])
    out = grouped_logsumexp(x, group, 3)
    for c in range(3):
        torch.testing.assert_close(out[:, c], torch.logsumexp(x[:, group == c], dim=1))


# --------------------------------------------------------------------------- composition
def test_bayesian_composition_sums_sense_probabilities():
    g = torch.Generator().manual_seed(5)
    V, H = 6, 4
    base = torch.randn(V, H, generator=g)
    head = KerBSHead.initial(base, torch.arange(V), torch.tensor([2, 2, 4]))
    with torch.no_grad():
        head.anchor_theta.copy_(torch.tensor([0.0, 0.3, -0.2, 1.0, 0.0, 0.5]))
        head.extra_theta.copy_(torch.tensor([0.7, 1e-8, 2.0]))
    h = torch.randn(2, H, generator=g)
    scores = head.word_scores(h, h @ base.T)
    # Eq. 5 over all V + 3 senses, then Eq. 4 sums each word's senses.
    sense_w = torch.cat([head.anchor_w, head.extra_w])
    sense_t = torch.cat([head.anchor_theta, head.extra_theta])
    p_sense = torch.softmax(kernel(h, sense_w, sense_t), dim=-1)
    owner = torch.cat([torch.arange(V), torch.tensor([2, 2, 4])])
    p_word = torch.zeros(2, V).index_add_(1, owner, p_sense)
    torch.testing.assert_close(torch.softmax(scores, -1), p_word.detach(), atol=1e-6, rtol=1e-5)
    assert head.senses_per_word().tolist() == [1, 1, 3, 1, 2, 1]


def test_train_terms_match_the_full_distribution():
    g = torch.Generator().manual_seed(6)
    V, H = 12, 5
    base = torch.randn(V, H, generator=g)
    active = torch.tensor([1, 3, 4, 7, 8])
    head = KerBSHead.initial(base, active, torch.tensor([3, 3, 8]))
    with torch.no_grad():
        head.anchor_theta.uniform_(-0.5, 1.0, generator=g)
        head.extra_theta.uniform_(-0.5, 1.0, generator=g)
        head.anchor_w.add_(0.3 * torch.randn(head.anchor_w.shape, generator=g))
    h = torch.randn(9, H, generator=g) * 3
    target = torch.tensor([0, 1, 3, 3, 8, 11, 7, 4, 2])
    full = torch.log_softmax(head.word_scores(h, h @ base.T), -1).gather(1, target[:, None])[:, 0]
    tail = torch.ones(V, dtype=torch.bool)
    tail[active] = False
    lookup = torch.full((V,), -1)
    lookup[active] = torch.arange(len(active))
    logp, _, _ = head.train_terms(h, lookup[target], (h * base[target]).sum(-1), torch.logsumexp(h @ base[tail].T, -1))
    torch.testing.assert_close(logp, full.detach(), atol=1e-5, rtol=1e-5)


def test_initial_head_gives_softmax_distribution_on_the_model(tiny):
    weight = tiny.model.get_output_embeddings().weight.detach()
    ids = tiny.tokenizer(["the good coffee was", "a dog"], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = tiny.model(**ids, output_hidden_states=True)
    logits, hidden = out.logits[:, -1].float(), out.hidden_states[-1][:, -1].float()
    for active in (torch.arange(tiny.vocab_size), torch.tensor([5, 17, 100, 200])):
        head = KerBSHead.initial(weight, active, torch.zeros(0, dtype=torch.long))
        scores = head.word_scores(hidden, logits)
        torch.testing.assert_close(torch.softmax(scores, -1), torch.softmax(logits, -1), atol=1e-7, rtol=1e-6)
    # Through the decoding loop: the same tokens as softmax for the same seeds.
    layer = KerBSLayer(senses=0)
    layer.head = KerBSHead.initial(weight, torch.arange(tiny.vocab_size), torch.zeros(0, dtype=torch.long))
    for setting in (DecodingSetting(top_p=0.9, max_new_tokens=12), DecodingSetting(do_sample=False, max_new_tokens=12)):
        a = decode(tiny, layer, ["the good coffee", "a dog is"], setting, seeds=[3, 4])
        b = decode(tiny, SoftmaxLayer(), ["the good coffee", "a dog is"], setting, seeds=[3, 4])
        assert [r["token_ids"] for r in a] == [r["token_ids"] for r in b]


# --------------------------------------------------------------------------- reallocation
def _two_cluster_data(n=600, seed=0):
    """Word 0 follows contexts in two opposite clusters (+x and -x); words 1-3 follow +y, -y and +z.
    Word 4 never occurs. One anchor cannot serve both of word 0's clusters."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[4.0, 0, 0], [-4.0, 0, 0], [0, 4.0, 0], [0, -4.0, 0], [0, 0, 4.0]])
    words = torch.tensor([0, 0, 1, 2, 3])
    pick = torch.randint(0, 5, (n,), generator=g)
    h = centres[pick] + 0.3 * torch.randn(n, 3, generator=g)
    return h, words[pick]


def test_reallocation_moves_a_sense_to_a_poorly_predicted_word():
    V = 5
    base = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0], [0, 0, 1.0], [0.1, 0.1, 0.1]])
    head = KerBSHead.initial(base, torch.arange(V), torch.tensor([4]), noise=0.0)  # the extra sits on word 4
    h, target = _two_cluster_data()
    data = TrainData(
        hidden=h, target_active=target, target_base_logit=torch.zeros(len(h)), tail_lse=torch.full((len(h),), -math.inf)
    )
    with torch.no_grad():
        before = float(head.train_terms(h, target, data.target_base_logit, data.tail_lse)[0].mean())
    cfg = KerBSConfig(
        senses=1, active_vocab=V, epochs=3, batch_size=50, lr=0.05, realloc_every=4, realloc_share=0.3, beta=0.1
    )
    result = train_head(head, data, data, cfg, progress=False)
    assert result["moves"] >= 1
    assert int(head.extra_owner[0]) == 0  # word 0 now has two senses, word 4 none extra
    with torch.no_grad():
        after = float(head.train_terms(h, target, data.target_base_logit, data.tail_lse)[0].mean())
    assert after > before
    # The new sense covers word 0's -x cluster, which its anchor (+x) could not.
    assert float(head.extra_w[0, 0].detach()) < 0 and float(head.anchor_w[0, 0].detach()) > 0


def test_reallocation_follows_algorithm_1_bookkeeping():
    V = 5
    base = torch.eye(V)[:, :3] + 0.1
    head = KerBSHead.initial(base, torch.arange(V), torch.tensor([1, 4]), noise=0.0)
    cfg = KerBSConfig(senses=2, active_vocab=V, realloc_share=0.5, realloc_max=1)
    r = Reallocator(head, cfg)
    r.log_p = torch.tensor([-50.0, -1.0, -1.0, -1.0, -1.0], dtype=torch.float64)  # word 0 is poor
    r.usage_anchor = torch.tensor([0.5, 0.3, 0.2, 0.2, 0.1], dtype=torch.float64)
    r.usage_extra = torch.tensor([0.2, 0.01], dtype=torch.float64)  # the sense on word 4 is least used
    opt = torch.optim.Adam(head.parameters())
    assert r.reallocate(opt) == 1
    assert head.extra_owner.tolist() == [1, 0]
    assert float(head.extra_theta[1]) == pytest.approx(1e-8)
    assert float(r.usage_extra[1]) == pytest.approx(float(torch.tensor([0.5, 0.3, 0.2, 0.2, 0.1, 0.2, 0.01]).mean()))
    assert r.moves == [(1, 4, 0)]
    # No word below the threshold: nothing moves.
    r.log_p = torch.full((V,), -1.0, dtype=torch.float64)
    assert r.reallocate(opt) == 0


# --------------------------------------------------------------------------- fit and cache
CFG = dict(senses=8, active_vocab=48, epochs=2, lr=5e-3)


def test_fit_trains_caches_and_loads_bit_identically(tiny, home):
    corpus = tiny_corpus()
    head, meta = fit_kerbs(tiny, corpus, 1500, KerBSConfig(**CFG), progress=False)
    assert not meta["loaded_from_cache"]
    assert meta["test_ppl_kerbs"] < meta["test_ppl_softmax"]
    assert meta["training"]["best_valid_ppl"] <= meta["training"]["history"][0]["valid_ppl"]
    again, meta2 = fit_kerbs(tiny, corpus, 1500, KerBSConfig(**CFG), progress=False)
    assert meta2["loaded_from_cache"] and meta2["sha256"] == meta["sha256"]
    for (k, a), (_, b) in zip(head.state_tensors().items(), again.state_tensors().items()):
        assert torch.equal(a, b), k
    h = torch.randn(3, 32)
    w = tiny.model.get_output_embeddings().weight.detach()
    assert torch.equal(head.word_scores(h, h @ w.T), again.word_scores(h, h @ w.T))
    # The layer API: fit(ctx) loads the same head; params and resource hash are reported.
    layer = KerBSLayer(senses=8)
    layer.fit(FitContext(model=tiny, corpus=corpus, options=dict(CFG, budget_tokens=1500, progress=False)))
    assert layer.params() == {"senses": 8} and layer.resource_hashes() == {"kerbs_head": meta["sha256"]}
    out = decode(tiny, layer, ["the good"], DecodingSetting(top_p=0.9, max_new_tokens=5), seeds=[1])
    assert out[0]["n_tokens"] >= 1


def test_every_trained_epoch_records_its_training_loss_and_the_meta_whether_validation_still_improved(tiny, home):
    """The fit meta's history gives each trained epoch its mean training loss (nats per position) beside
    its validation perplexity, and ``still_improving`` says whether the last epoch lowered the latter."""
    _, meta = fit_kerbs(tiny, tiny_corpus(), 1500, KerBSConfig(**CFG), progress=False)
    hist = meta["training"]["history"]
    assert "train_loss" not in hist[0] and len(hist) == 3
    for h in hist[1:]:
        assert math.isfinite(h["train_loss"]) and 0 < h["train_loss"] < math.log(tiny.vocab_size) + 5
    assert meta["still_improving"] == (hist[-1]["valid_ppl"] < hist[-2]["valid_ppl"])


def test_head_for_another_model_is_refused(tiny, home):
    _, meta = fit_kerbs(tiny, tiny_corpus(), 1500, KerBSConfig(**CFG), progress=False)
    other = dataclasses.replace(tiny, hash="f" * 64)
    with pytest.raises(MaxbenchError, match="another model"):
        fit_kerbs(other, None, head_path=meta["path"])
    layer = KerBSLayer(senses=8)
    with pytest.raises(MaxbenchError, match="another model"):
        layer.fit(FitContext(model=other, options={"head_path": meta["path"]}))


def test_half_written_head_is_never_loaded(tiny, home, monkeypatch):
    corpus = tiny_corpus()
    import maxbench.systems.layers.kerbs.fit as kerbs_mod

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # (monkeypatch.undo() would also undo the home fixture)
        m.setattr(kerbs_mod, "train_head", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fit_kerbs(tiny, corpus, 1500, KerBSConfig(**CFG), progress=False)
    assert not [p for p in home.rglob("*") if p.is_file() and "heads" in p.parts and p.suffix != ".lock"]
    _, meta = fit_kerbs(tiny, corpus, 1500, KerBSConfig(**CFG), progress=False)
    # Damage the saved head: it is no longer a head, so the next fit trains again.
    path = hc.Path(meta["path"])
    with open(path / "head.safetensors", "r+b") as f:
        f.seek(-8, 2)
        f.write(b"\xff" * 8)
    assert hc.load_head(path, tiny) is None
    with pytest.raises(MaxbenchError, match="no complete trained head"):
        fit_kerbs(tiny, None, head_path=path)
    _, meta3 = fit_kerbs(tiny, corpus, 1500, KerBSConfig(**CFG), progress=False)
    assert not meta3["loaded_from_cache"] and meta3["sha256"] == meta["sha256"]  # retrained, deterministic


def test_fit_is_busy_while_another_process_builds_its_hidden_states_or_trains_its_head(tiny, home):
    """``fit_busy`` says fit would wait on another process: one building the hidden states (shared with
    POSG's head) while the head is not cached, or one training this head; a cached or named head
    loads at once."""
    from pathlib import Path

    from tests.support.locks import held_by_another_process

    corpus = tiny_corpus()
    layer = KerBSLayer(senses=8)
    ctx = FitContext(model=tiny, corpus=corpus, options=dict(CFG, budget_tokens=1500, progress=False))
    hidden = home / "hidden" / hc.cache_key(tiny, corpus, 1500)[0]
    assert not layer.fit_busy(ctx)
    with held_by_another_process(hidden):
        assert layer.fit_busy(ctx)
        assert not KerBSLayer(senses=8, budget_tokens=1600).fit_busy(ctx)  # other hidden states
    assert not layer.fit_busy(ctx)
    layer.fit(ctx)
    head = Path(layer.meta["path"])
    with held_by_another_process(hidden):
        assert not layer.fit_busy(ctx)  # the head is cached: fitting loads it
    (head / "complete.json").rename(head / "was-complete.json")  # as while another process trains it
    with held_by_another_process(head):
        assert layer.fit_busy(ctx)
        named = FitContext(model=tiny, corpus=corpus, options={"head_path": str(head), "progress": False})
        assert not layer.fit_busy(named)
    assert not layer.fit_busy(ctx)  # nobody trains it: this process would


def test_too_many_senses_is_a_clear_error(tiny, home):
    with pytest.raises(MaxbenchError, match="senses"):
        fit_kerbs(tiny, tiny_corpus(), 1500, KerBSConfig(senses=500, active_vocab=10), progress=False)
    with pytest.raises(MaxbenchError):
        KerBSLayer(senses=-1)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fit", "--layer", "kerbs", "--corpus", "no-such-corpus"], "unknown corpus"),
        (["fit", "--layer", "kerbs", "--corpus", "tiny", "--budget-tokens", "10"], "too small"),
        (["fit", "--layer", "kerbs", "--corpus", "tiny", "--model", "tiny-random", "--threads", "0"], "threads"),
        (["fit", "--layer", "kerbs", "--corpus", "tiny", "--senses", "-3"], "senses"),
        (
            ["fit", "--layer", "kerbs", "--corpus", "tiny", "--model", "tiny-random", "--budget-tokens", "100000"],
            "too small to train",
        ),
    ],
)
def test_cli_bad_input_exits_2(cli, home, monkeypatch, argv, message):
    import maxbench.benchmark.data.corpora

    real = maxbench.benchmark.data.corpora.load_corpus
    monkeypatch.setattr(
        maxbench.benchmark.data.corpora,
        "load_corpus",
        lambda name: tiny_corpus(n_fit=30, n_test=5) if name == "tiny" else real(name),
    )
    rc, out, err = cli(*argv)
    assert rc == 2, err
    assert err.startswith("maxbench: error: ") and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_fit_prints_perplexities_and_path(cli, home, monkeypatch):
    import maxbench.benchmark.data.corpora

    monkeypatch.setattr(maxbench.benchmark.data.corpora, "load_corpus", lambda name: tiny_corpus())
    argv = [
        "fit",
        "--model",
        "tiny-random",
        "--layer",
        "kerbs",
        "--corpus",
        "tiny",
        "--budget-tokens",
        "1500",
        "--senses",
        "8",
        "--active-vocab",
        "48",
        "--epochs",
        "2",
        "--threads",
        "1",
        "--quiet",
    ]
    rc, out, err = cli(*argv)
    assert rc == 0, err
    assert "held-out perplexity" in out and "softmax" in out and "cache path:" in out and "trained in" in out
    rc, out2, _ = cli(*argv)
    assert rc == 0 and "loaded from cache" in out2
    assert out.splitlines()[1] == out2.splitlines()[1]  # the same perplexities


@pytest.mark.slow
def test_initial_head_gives_softmax_distribution_on_smollm2(smollm2):
    weight = smollm2.model.get_output_embeddings().weight.detach()
    ids = smollm2.tokenizer(["this coffee is", "i bought these for my"], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = smollm2.model(**ids, output_hidden_states=True)
    logits, hidden = out.logits[:, -1].float(), out.hidden_states[-1][:, -1].float()
    head = KerBSHead.initial(weight, torch.arange(8192), torch.zeros(0, dtype=torch.long))
    scores = head.word_scores(hidden, logits)
    torch.testing.assert_close(torch.softmax(scores, -1), torch.softmax(logits, -1), atol=1e-7, rtol=1e-5)
