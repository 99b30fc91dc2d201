"""Training options of the KerBS and POSG heads in the system string (issue 39): in the name and in
the head's cache key, defaults leaving both as they were; seeds; the fine-tuned softmax control
(``ft-softmax``); a head whose best epoch is the untrained one is flagged."""

import json
from types import SimpleNamespace

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc
from maxbench.systems.layers.base import FitContext
from maxbench.systems.layers.head_cache import best_epoch, find_head, head_identity, with_best_epoch
from maxbench.systems.layers.kerbs.fit import KERBS_VERSION, KerBSConfig, fit_kerbs
from maxbench.systems.layers.kerbs.layer import FineTunedSoftmaxLayer, KerBSLayer
from maxbench.systems.layers.posg.fit import POSG_VERSION
from maxbench.systems.layers.posg.head import CATCH_ALL
from maxbench.systems.layers.posg.layer import POSGLayer
from maxbench.systems.system_strings import parse_system
from tests.support.corpora import rule_tagger, tagged_corpus, tiny_corpus

# The identity of the committed default lineup's heads (SmolLM2-135M on food-reviews), as their
# meta.json files record it, and the cache directories they live in: these keys must never move.
SMOLLM2 = SimpleNamespace(
    hash="a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd",
    tokenizer_hash="7e0b8f35ca7f836d92d824d9e3db5747c22d9a1e2753ccf2ec9af24a8614e979",
)
FOOD = SimpleNamespace(name="food-reviews", sha256="cc313c5d2ba4f7817721993edf25167e1a432a563d7a3314848d15d6555b68fb")
TAGGER = "spacy 3.6.1 core_web_sm 3.6.0"
COMMITTED_KEYS = {
    "smollm2-135m/kerbs/top_p=0.9": "9022907347374f34e75f0114",
    "smollm2-135m/posg/top_p=0.9": "7ee7678ecb07e81a763ef614",
}
CFG = dict(active_vocab=48, epochs=2, lr=5e-3, budget_tokens=1500, progress=False)


def head_key(system: str) -> str:
    """The cache key of the head a system string's layer fits on SmolLM2 / food-reviews."""
    spec = parse_system(system)
    cfg, budget = spec.build_layer().config({})
    extra = {"tagger": TAGGER} if spec.layer == "posg" else {}
    version = POSG_VERSION if spec.layer == "posg" else KERBS_VERSION
    ident = head_identity(spec.layer, version, SMOLLM2, FOOD, budget or hc.DEFAULT_BUDGET_TOKENS, cfg, **extra)
    return hc.head_directory(spec.layer, ident).name


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    return tmp_path


# --------------------------------------------------------------------------- names and keys
def test_defaults_leave_the_committed_lineup_names_and_keys():
    import tomllib

    from tests.support.paths import ROOT

    listed = tomllib.loads((ROOT / "benchmark" / "lineups" / "default.toml").read_text())["systems"]
    assert [parse_system(s).name for s in listed] == listed  # every name reads back as itself
    for system, key in COMMITTED_KEYS.items():
        assert system in listed
        assert head_key(system) == key
    # Options written at their defaults are dropped: the same name, the same head.
    for system, same in [
        ("smollm2-135m/kerbs(seed=0)/top_p=0.9", "smollm2-135m/kerbs/top_p=0.9"),
        ("smollm2-135m/kerbs(epochs=2,lr=0.00005,active_vocab=8192,budget_tokens=60000)/top_p=0.9", None),
        ("smollm2-135m/posg(lm_prior=true,catch_all=true,tag_vocab=0,seed=0)/top_p=0.9", None),
        ("smollm2-135m/posg(epochs=10,lr=1e-3)/top_p=0.9", "smollm2-135m/posg/top_p=0.9"),
    ]:
        spec = parse_system(system)
        default = same or f"smollm2-135m/{spec.layer}/top_p=0.9"
        assert spec.name == default
        assert head_key(system) == COMMITTED_KEYS[default]
        assert spec.build_layer().non_default_fit_options() == {}
    # Parameters that are not training options keep their form (senses, graphmax's lam).
    assert parse_system("m/kerbs(senses=1024)/greedy").name == "m/kerbs(senses=1024)/greedy"
    assert parse_system("m/graphmax(lam=1.0,solver=exact)/greedy").name == "m/graphmax(lam=1.0,solver=exact)/greedy"


def test_options_enter_the_name_and_the_key():
    systems = [
        "smollm2-135m/kerbs(seed=2)/top_p=0.9",
        "smollm2-135m/kerbs(lr=0.0001,epochs=4)/top_p=0.9",
        "smollm2-135m/ft-softmax/top_p=0.9",
        "smollm2-135m/ft-softmax(seed=2)/top_p=0.9",
        "smollm2-135m/posg(lm_prior=false)/top_p=0.9",
        "smollm2-135m/posg(catch_all=false)/top_p=0.9",
        "smollm2-135m/posg(tag_vocab=500)/top_p=0.9",
        "smollm2-135m/posg(seed=2)/top_p=0.9",
    ]
    for system in systems:
        assert parse_system(system).name == system  # written as given, read back the same
    keys = [head_key(s) for s in systems]
    assert len(set(keys) | set(COMMITTED_KEYS.values())) == len(systems) + 2
    assert parse_system(systems[0]).build_layer().params() == {"senses": 1024, "seed": 2}
    assert parse_system(systems[6]).build_layer().params() == {"tag_topk": 5, "tag_vocab": 500}
    cfg, _ = parse_system(systems[4]).build_layer().config({"epochs": 3})
    assert (cfg.lm_prior, cfg.catch_all, cfg.epochs) == (False, True, 3)
    # The system string wins over a caller's option only where it sets one.
    cfg, budget = parse_system("m/kerbs(seed=2,budget_tokens=2000)/greedy").build_layer().config({"seed": 5, "lr": 1.0})
    assert (cfg.seed, cfg.lr, budget) == (2, 1.0, 2000)
    # Two heads fitted with different options share one lineup.
    names = {parse_system(s).name for s in systems}
    assert len(names) == len(systems)


@pytest.mark.parametrize(
    "system, message",
    [
        ("tiny-random/kerbs(sed=2)/greedy", "has no parameter 'sed': did you mean 'seed'?"),
        ("tiny-random/posg(lm_priors=false)/greedy", "did you mean 'lm_prior'?"),
        ("tiny-random/posg(lm_prior=maybe)/greedy", "posg option lm_prior must be true or false"),
        ("tiny-random/kerbs(seed=1.5)/greedy", "kerbs option seed must be a whole number >= 0"),
        ("tiny-random/ft-softmax(lr=0)/greedy", "ft-softmax option lr must be a number > 0"),
        ("tiny-random/posg(budget_tokens=10)/greedy", "budget_tokens must be a whole number >= 1000"),
    ],
)
def test_bad_option_is_one_line_exit_2(cli, tmp_path, system, message):
    lineup = tmp_path / "bad.toml"
    lineup.write_text(f'name = "bad"\nsuite = "smoke"\nsystems = ["{system}"]\n')
    rc, out, err = cli("run", "--lineup", lineup, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "out")
    assert rc == 2, err
    assert err.startswith("maxbench: error: ") and message in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- seeds and the control
def _fit(layer, corpus, tiny, **extra):
    layer.fit(FitContext(model=tiny, corpus=corpus, options=dict(CFG, **extra)))
    return layer


def test_same_seed_same_bits_other_seed_other_bits(tiny, home):
    corpus = tiny_corpus()
    first = _fit(parse_system("tiny-random/kerbs(senses=8,seed=1)/greedy").build_layer(), corpus, tiny)
    assert first.meta["config"]["seed"] == 1 and not first.meta["loaded_from_cache"]
    again = _fit(KerBSLayer(senses=8, seed=1), corpus, tiny, retrain=True)  # trained again, not loaded
    assert not again.meta["loaded_from_cache"] and again.meta["sha256"] == first.meta["sha256"]
    for (k, a), (_, b) in zip(first.head.state_tensors().items(), again.head.state_tensors().items()):
        assert torch.equal(a, b), k
    other = _fit(KerBSLayer(senses=8, seed=2), corpus, tiny)
    assert other.meta["sha256"] != first.meta["sha256"] and other.meta["path"] != first.meta["path"]
    default = _fit(KerBSLayer(senses=8), corpus, tiny)
    assert len({default.meta["sha256"], first.meta["sha256"], other.meta["sha256"]}) == 3
    # The caller's seed (maxbench fit --seed) names the same head as the system string's.
    _, meta = fit_kerbs(tiny, corpus, 1500, KerBSConfig(senses=8, active_vocab=48, lr=5e-3, seed=2), progress=False)
    assert meta["loaded_from_cache"] and meta["sha256"] == other.meta["sha256"]


def test_the_control_is_kerbs_training_with_one_sense_per_word_and_no_kernel(tiny, home, cli, monkeypatch):
    import maxbench.benchmark.data.corpora

    corpus = tiny_corpus()
    kerbs = _fit(KerBSLayer(senses=8, seed=3), corpus, tiny)
    control = _fit(parse_system("tiny-random/ft-softmax(seed=3)/greedy").build_layer(), corpus, tiny)
    assert isinstance(control, FineTunedSoftmaxLayer) and control.params() == {"seed": 3}
    head, meta = control.head, control.meta
    # One sense per word, theta held at 0: a plain softmax over fine-tuned output embeddings.
    assert len(head.extra_owner) == 0 and int(head.senses_per_word().max()) == 1
    assert bool((head.anchor_theta == 0).all())
    weight = tiny.model.get_output_embeddings().weight.detach().float()
    assert not torch.equal(head.anchor_w, weight[head.active])  # fine-tuned
    h = torch.randn(4, weight.shape[1], generator=torch.Generator().manual_seed(0))
    tuned = weight.clone()
    tuned[head.active] = head.anchor_w.detach()
    assert torch.allclose(head.word_scores(h, h @ weight.T), h @ tuned.T, atol=1e-5)
    # The same anchors, data, learning rate, epochs and seed as KerBS: only senses and kernel differ.
    assert torch.equal(head.active, kerbs.head.active)
    differ = {k for k in meta["config"] if meta["config"][k] != kerbs.meta["config"].get(k)}
    assert differ == {"senses", "kernel"} and meta["config"]["kernel"] is False
    assert "kernel" not in kerbs.meta["config"]  # KerBS's identity (and key) as before
    assert meta["layer"] == "ft-softmax" and "/heads/ft-softmax/" in meta["path"]
    assert "test_ppl_ft_softmax" in meta and control.resource_hashes() == {"ft_softmax_head": meta["sha256"]}
    # Cached by identity, as the KerBS head.
    again = _fit(FineTunedSoftmaxLayer(seed=3), corpus, tiny)
    assert again.meta["loaded_from_cache"] and again.meta["sha256"] == meta["sha256"]
    with pytest.raises(MaxbenchError, match="one sense per word"):
        fit_kerbs(tiny, corpus, 1500, KerBSConfig(senses=8), progress=False, layer="ft-softmax")
    # maxbench fit --layer ft-softmax with the same options finds the same head.
    monkeypatch.setattr(maxbench.benchmark.data.corpora, "load_corpus", lambda name: corpus)
    argv = ["fit", "--model", "tiny-random", "--layer", "ft-softmax", "--corpus", "tiny", "--budget-tokens", "1500"]
    argv += ["--active-vocab", "48", "--epochs", "2", "--lr", "5e-3", "--seed", "3", "--threads", "1", "--quiet"]
    rc, out, err = cli(*argv)
    assert rc == 0, err
    assert "loaded from cache" in out and meta["sha256"] in out and "one per word" in out and "ft-softmax" in out
    rc, _, err = cli(*argv, "--senses", "8")
    assert rc == 2 and "one sense per word" in err


def test_posg_options_reach_the_head(tiny, home):
    corpus = tagged_corpus()
    opts = {"budget_tokens": 1500, "epochs": 1, "lr": 1e-2, "tagger": rule_tagger, "progress": False}
    layer = parse_system("tiny-random/posg(lm_prior=false,tag_vocab=2)/greedy").build_layer()
    layer.fit(FitContext(model=tiny, corpus=corpus, options=opts))
    meta = layer.meta
    assert meta["config"]["lm_prior"] is False and meta["config"]["tag_vocab"] == 2 and not layer.head.lm_prior
    assert all(n <= 2 for t, n in meta["class_sizes"].items() if t != CATCH_ALL)
    assert meta["class_sizes"][CATCH_ALL] == tiny.vocab_size and meta["pairs_kept"] < meta["pairs"]
    default = POSGLayer()
    default.fit(FitContext(model=tiny, corpus=corpus, options=opts))
    assert "tag_vocab" not in default.meta["config"] and default.meta["path"] != meta["path"]
    assert max(n for t, n in default.meta["class_sizes"].items() if t != CATCH_ALL) > 2


# --------------------------------------------------------------------------- the untrained best epoch
def test_best_epoch_follows_training():
    hist = [{"epoch": 0, "valid_ppl": 10.0}, {"epoch": 1, "valid_ppl": 9.0}, {"epoch": 2, "valid_ppl": 9.0}]
    assert best_epoch(hist) == 1  # the first of equals: training replaces its best only on a lower one
    assert best_epoch([{"epoch": 0, "valid_ppl": 10.0}, {"epoch": 1, "valid_ppl": 10.0}]) == 0
    meta = with_best_epoch({"training": {"history": hist}})
    assert meta["best_epoch"] == 1 and meta["untrained_best"] is False
    worse = with_best_epoch({"training": {"history": [{"epoch": 0, "valid_ppl": 5.0}, {"epoch": 1, "valid_ppl": 6.0}]}})
    assert worse["best_epoch"] == 0 and worse["untrained_best"] is True


def test_a_head_whose_best_epoch_is_the_untrained_one_is_flagged(tiny, home, cli, capsys, monkeypatch):
    import maxbench.benchmark.data.corpora

    corpus = tiny_corpus()
    # A learning rate far too high: every epoch ends worse than the untrained head.
    layer = _fit(KerBSLayer(senses=8, lr=3.0, epochs=1), corpus, tiny)
    assert "best validation epoch is epoch 0" in capsys.readouterr().err  # said when a run fits it too
    meta = layer.meta
    hist = meta["training"]["history"]
    assert all(h["valid_ppl"] > hist[0]["valid_ppl"] for h in hist[1:])
    assert meta["best_epoch"] == 0 and meta["untrained_best"] is True
    # In the head's meta.json, in the run manifest's record of the system, and found by its sha256.
    assert json.loads((hc.Path(meta["path"]) / "meta.json").read_text())["untrained_best"] is True
    assert layer.resource_hashes() == {"kerbs_head": meta["sha256"], "untrained_best": True}
    found = find_head("kerbs", meta["sha256"])
    assert found["untrained_best"] is True and found["path"] == meta["path"]
    trained = _fit(KerBSLayer(senses=8), corpus, tiny)
    assert trained.meta["untrained_best"] is False and "untrained_best" not in trained.resource_hashes()
    # maxbench fit prints a warning line.
    monkeypatch.setattr(maxbench.benchmark.data.corpora, "load_corpus", lambda name: corpus)
    argv = ["fit", "--model", "tiny-random", "--layer", "kerbs", "--corpus", "tiny", "--budget-tokens", "1500"]
    argv += ["--senses", "8", "--active-vocab", "48", "--epochs", "1", "--lr", "3.0", "--threads", "1", "--quiet"]
    rc, out, err = cli(*argv)
    assert rc == 0, err
    assert "at epoch 0" in out and "loaded from cache" in out
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "best validation epoch is epoch 0, the untrained head" in warning[0]
