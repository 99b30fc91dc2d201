"""Truncation samplers (min-p, typical, epsilon, eta): token-exact with transformers' generate on
SmolLM2, combinable with every output layer, written in the system string, refused when out of range."""

import pytest
import torch

from maxbench.systems.decoding import DecodingSetting, decode, warp_rows
from maxbench.systems.layers.posg.head import POSGHead
from maxbench.systems.layers.posg.layer import POSGLayer
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.layers.sparsemax.layer import SparsemaxLayer
from maxbench.systems.system_strings import parse_system

PROMPTS = [  # those of the other parity tests (tests/systems/test_decoding.py)
    "I have bought these cookies twice and",
    "The soup arrived cold, but the",
    "My dog loves this food because",
    "After three weeks of using it,",
]

# label -> generate()'s keyword for the same sampler (generate's eta/epsilon are *_cutoff)
SAMPLERS = {
    "min_p=0.1": {"min_p": 0.1},
    "typical_p=0.95": {"typical_p": 0.95},
    "epsilon=0.0009": {"epsilon_cutoff": 0.0009},
    "eta=0.0009": {"eta_cutoff": 0.0009},
}


@pytest.mark.slow
@pytest.mark.parametrize("label", list(SAMPLERS))
def test_each_truncation_sampler_is_token_exact_with_generate(smollm2, label):
    seeds = [21, 22, 23, 24]
    setting = DecodingSetting.parse(f"{label},max_new_tokens=16")
    res = decode(smollm2, SoftmaxLayer(), PROMPTS, setting, seeds)
    for prompt, seed, row in zip(PROMPTS, seeds, res):
        enc = smollm2.tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
        torch.manual_seed(seed)
        ids = smollm2.model.generate(
            **enc,
            max_new_tokens=16,
            pad_token_id=smollm2.tokenizer.pad_token_id,
            do_sample=True,
            top_k=0,
            top_p=1.0,
            temperature=1.0,
            **SAMPLERS[label],
        )[0, enc["input_ids"].shape[1] :].tolist()
        eos = smollm2.tokenizer.eos_token_id
        assert row["token_ids"] == (ids[: ids.index(eos)] if eos in ids else ids), (label, prompt)


def test_labels_read_back_and_old_labels_do_not_change():
    for old in ("top_p=0.9", "greedy", "sample", "temp=0.7,top_k=40", "top_p=0.9,max_new_tokens=32"):
        assert DecodingSetting.parse(old).label == old
    spec = parse_system("smollm2-135m/sparsemax/min_p=0.1")
    assert spec.decoding.min_p == 0.1 and spec.name == "smollm2-135m/sparsemax/min_p=0.1"
    both = DecodingSetting.parse("eta=0.0009,temp=0.8,typical_p=0.95,top_p=0.9,epsilon=3e-4,min_p=0.05")
    assert both.label == "temp=0.8,top_p=0.9,min_p=0.05,typical_p=0.95,epsilon=0.0003,eta=0.0009"
    assert DecodingSetting.parse(both.label) == both
    # the "off" values leave the label as it was
    assert DecodingSetting.parse("top_p=0.9,min_p=0,typical_p=1,epsilon=0,eta=0").label == "top_p=0.9"


def test_warpers_follow_generates_order():
    setting = DecodingSetting.parse("temp=0.9,top_k=50,top_p=0.9,min_p=0.1,typical_p=0.9,epsilon=0.001,eta=0.001")
    names = [type(w).__name__ for w in setting.warpers()]
    assert names == [
        "TemperatureLogitsWarper",
        "TopKLogitsWarper",
        "TopPLogitsWarper",
        "MinPLogitsWarper",
        "TypicalLogitsWarper",
        "EpsilonLogitsWarper",
        "EtaLogitsWarper",
    ]
    assert DecodingSetting.parse("greedy,min_p=0.1").warpers() == []


def test_min_p_keeps_exactly_the_tokens_above_min_p_times_the_top_probability():
    probs = torch.tensor([[0.5, 0.3, 0.11, 0.05, 0.04]])
    out = DecodingSetting(min_p=0.2).warpers()(None, probs.log())
    assert torch.isfinite(out).tolist() == [[True, True, True, False, False]]  # cut at 0.2 * 0.5 = 0.1


@pytest.mark.parametrize(
    "label, words",
    [
        ("typical_p=0", "typical_p must be in (0, 1]"),
        ("typical_p=1.2", "typical_p must be in (0, 1]"),
        ("min_p=-0.1", "min_p must be in [0, 1]"),
        ("min_p=1.5", "min_p must be in [0, 1]"),
        ("eta=1", "eta must be in [0, 1)"),
        ("eta=-0.001", "eta must be in [0, 1)"),
        ("epsilon=2", "epsilon must be in [0, 1)"),
        ("epsilon=nan", "epsilon must be a finite number"),
        ("typcal_p=0.9", "did you mean 'typical_p'"),
    ],
)
def test_bad_settings_are_one_line_exit_2_before_any_model_loads(cli, tmp_path, monkeypatch, label, words):
    import maxbench.systems.models

    def no_load(*a, **k):
        raise AssertionError("a model was loaded before the setting was checked")

    monkeypatch.setattr(maxbench.systems.models, "load_model", no_load)
    rc, out, err = cli(
        "generate", "--suite", "smoke", "--model", "smollm2-135m", "--decoding", label, "--runs-dir", tmp_path
    )
    assert rc == 2 and err.startswith("maxbench: error: ") and err.count("\n") == 1, err
    assert words in err and "Traceback" not in err


@pytest.mark.parametrize("label", list(SAMPLERS))
def test_every_sampler_combines_with_a_sparse_layer(tiny, label):
    setting = DecodingSetting.parse(f"{label},max_new_tokens=6")
    a = decode(tiny, SparsemaxLayer(), ["the tea ", "a cup of "], setting, [1, 2])
    b = decode(tiny, SparsemaxLayer(), ["a cup of "], setting, [2])
    assert a[1]["token_ids"] == b[0]["token_ids"] and all(r["n_tokens"] for r in a)


@pytest.mark.parametrize("label", list(SAMPLERS))
def test_every_sampler_combines_with_posg_and_its_empty_classes(label):
    # class 3 has no member: its restricted row is all -inf, which eta's entropy cannot take
    g = torch.Generator().manual_seed(7)
    classes = [range(0, 15), range(10, 30), range(25, 40), []]
    pairs = torch.tensor([(w, c) for c, ws in enumerate(classes) for w in ws])
    head = POSGHead(40, ["JJ", "NN", "VB", "RB"], pairs, 8, torch.randn(4, 8, generator=g), torch.randn(4, generator=g))
    layer = POSGLayer(tag_topk=0)
    layer.set_head(head)
    scores = layer.scores(torch.randn(2, 40, generator=g) * 3, torch.randn(2, 8, generator=g))
    warp = DecodingSetting.parse(label).warpers()
    tokens = layer.sample(
        scores, lambda s: warp_rows(warp, None, s), [torch.Generator().manual_seed(i) for i in (0, 1)]
    )
    assert tokens.shape == (2,) and torch.isfinite(layer.last_probs).all()
