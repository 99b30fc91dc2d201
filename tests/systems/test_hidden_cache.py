"""The hidden-state cache: contents, reuse, atomic writes, refusal of a too-small corpus."""

import hashlib
import random

import numpy as np
import pytest
import torch

from maxbench.benchmark.data.corpora import Corpus
from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc

WORDS = "the a good bad tasty coffee tea dog food is was very not really".split()


def tiny_corpus(n_fit=120, n_test=20, seed=0, name="tiny"):
    rng = random.Random(seed)

    def doc():
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))

    fit, test = [doc() for _ in range(n_fit)], [doc() for _ in range(n_test)]
    return Corpus(name, fit, test, {"sha256": hashlib.sha256("\n".join(fit + test).encode()).hexdigest()})


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    return tmp_path


def test_cache_holds_post_norm_states_and_next_tokens(tiny, home):
    corpus = tiny_corpus()
    cache = hc.load_or_build(tiny, corpus, budget_tokens=2000, progress=False)
    train = cache["train"]
    assert len(train) >= 2000 and len(cache["valid"]) > 0 and len(cache["test"]) > 0
    assert train.hidden.dtype == np.float16 and train.hidden.shape[1] == 32
    # Every position of one document: the model's own final-norm state and the next token.
    d = int(train.doc[0])
    rows = np.nonzero(np.asarray(train.doc) == d)[0]
    text = train.docs[d]
    ids = tiny.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert list(train.target[rows]) == ids[1:] + [tiny.tokenizer.eos_token_id]
    with torch.no_grad():
        h = tiny.model.model(input_ids=torch.tensor([ids])).last_hidden_state[0, : len(ids)].float()
    np.testing.assert_allclose(train.hidden[rows].astype(np.float32), h.numpy(), atol=2e-3, rtol=2e-3)
    # Spans locate each target in its text; EOS has none.
    for r in rows[:-1]:
        s, e = train.span[r]
        assert text[s:e] == tiny.tokenizer.decode([int(train.target[r])])
    assert tuple(train.span[rows[-1]]) == (-1, -1)
    # Test documents come from the test split only, training ones from the fitting split.
    assert set(cache["test"].docs) <= set(corpus.test) and set(train.docs) <= set(corpus.fit)
    assert not set(train.docs) & set(cache["valid"].docs)
    # The fp32 log-probability stored for the held-out parts is the model's own.
    t = cache["test"]
    with torch.no_grad():
        tid = tiny.tokenizer(t.docs[int(t.doc[0])], add_special_tokens=False)["input_ids"]
        logp = torch.log_softmax(tiny.model(input_ids=torch.tensor([tid])).logits[0].float(), -1)
    assert abs(float(logp[0, tid[1]]) - float(t.base_logprob[0])) < 1e-4
    assert np.isnan(train.base_logprob).all()


def test_cache_is_reused_not_rebuilt(tiny, home, monkeypatch):
    corpus = tiny_corpus()
    first = hc.load_or_build(tiny, corpus, budget_tokens=1500, progress=False)

    def boom(*a, **k):
        raise AssertionError("rebuilt a complete cache")

    monkeypatch.setattr(hc, "_forward_part", boom)
    again = hc.load_or_build(tiny, corpus, budget_tokens=1500, progress=False)
    assert again.path == first.path and again.sha256 == first.sha256
    np.testing.assert_array_equal(again["train"].hidden, first["train"].hidden)
    # Another budget is another cache.
    with pytest.raises(AssertionError):
        hc.load_or_build(tiny, corpus, budget_tokens=1600, progress=False)


def test_interrupted_build_leaves_nothing_and_restarts(tiny, home, monkeypatch):
    corpus = tiny_corpus()
    real = hc._forward_part
    calls = []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:  # after the training part was written
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(hc, "_forward_part", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hc.load_or_build(tiny, corpus, budget_tokens=1500, progress=False)
    root = home / "hidden"
    # no cache, no temporary directory left behind (the build's lock file may stay: it holds nothing)
    assert not [p for p in root.iterdir() if p.suffix != ".lock"]
    monkeypatch.setattr(hc, "_forward_part", real)
    cache = hc.load_or_build(tiny, corpus, budget_tokens=1500, progress=False)
    assert hc.verify_complete(cache.path) is not None


def test_incomplete_cache_is_rebuilt(tiny, home):
    corpus = tiny_corpus()
    cache = hc.load_or_build(tiny, corpus, budget_tokens=1500, progress=False)
    (cache.path / "complete.json").unlink()
    rebuilt = hc.load_or_build(tiny, corpus, budget_tokens=1500, progress=False)
    assert (rebuilt.path / "complete.json").exists()
    # A file changed after completion fails the hash check.
    with open(rebuilt.path / "train.target.npy", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x00\x00\x01")
    assert hc.verify_complete(rebuilt.path) is None


def test_too_small_corpus_is_refused(tiny, home):
    small = tiny_corpus(n_fit=3, n_test=2)
    with pytest.raises(MaxbenchError, match="too small"):
        hc.load_or_build(tiny, small, budget_tokens=2000, progress=False)
    with pytest.raises(MaxbenchError, match="budget"):
        hc.load_or_build(tiny, tiny_corpus(), budget_tokens=10, progress=False)
    no_test = Corpus("no-test", tiny_corpus().fit, [], {"sha256": "0" * 64})
    with pytest.raises(MaxbenchError, match="empty"):
        hc.load_or_build(tiny, no_test, budget_tokens=1500, progress=False)


def test_busy_only_while_another_process_holds_the_build_of_a_cache_not_yet_complete(tiny, home):
    """``busy`` says load_or_build would wait: true while another process holds the cache's lock and the
    cache is not complete (load_or_build then blocks until it lets go), false without a holder, and
    false for a complete cache (it is only opened under the lock)."""
    import threading

    from tests.support.locks import held_by_another_process

    corpus = tiny_corpus()
    final = home / "hidden" / hc.cache_key(tiny, corpus, 1500)[0]
    assert not hc.busy(tiny, corpus, 1500)
    built = []
    with held_by_another_process(final) as other:
        assert hc.busy(tiny, corpus, 1500)
        assert not hc.busy(tiny, corpus, 1600)  # another budget is another cache, nobody builds it
        waiter = threading.Thread(target=lambda: built.append(hc.load_or_build(tiny, corpus, 1500, progress=False)))
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and not built  # load_or_build waits on the same lock
        other.release()
        waiter.join(timeout=120)
    assert built and hc.verify_complete(built[0].path) is not None
    assert not hc.busy(tiny, corpus, 1500)
    with held_by_another_process(final):
        assert not hc.busy(tiny, corpus, 1500)  # complete: whoever holds the lock is opening it
