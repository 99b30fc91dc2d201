"""FCTG (systems/adapters/fctg.py): multi-view attention through transformers' attention interface
(closed gate = the base model, bit for bit; the KV-cache loop agrees with one forward), the ALM
losses on constructed cases, options and canonical names, unseen categorical values refused,
deterministic training, the frozen base model by default, the gate chosen on the fitting split and
opening where the attribute matters, MAM leaving the LM's input intact, and the inert flags.
Tiny-random model only."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters import ADAPTERS, TrainingExample
from maxbench.systems.adapters.conditional import attribute_positions, common_suffix
from maxbench.systems.adapters.fctg import GATE_GRID, INERT, FctgAdapter, FctgLM, alm_loss, split_validation
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.system_strings import parse_system
from tests.support.fctg import LABEL, ctx, examples, fresh, generate_on_tiny_attrs

PROMPTS = ["Rating: 5 stars. Review:", "Rating: 1 to 4 stars. Review: the tea", "Rating: 5 stars. Review: good"]
SMALL = {"r": 0, "steps": 3, "batch": 4, "max_len": 40}

pytestmark = pytest.mark.usefixtures("no_plugins")  # home and no_plugins: tests/conftest.py


# --------------------------------------------------------------------------- names and options
def test_fctg_is_a_built_in_conditional_adapter_with_canonical_names():
    assert ADAPTERS.get("fctg") is FctgAdapter and FctgAdapter.needs_attributes
    spec = parse_system("tiny-random+fctg(mu=0,mam=ce,alm=tr)/softmax/top_k=40")
    assert spec.name == "tiny-random+fctg/softmax/top_k=40"
    spec = parse_system("tiny-random+fctg(alm=mtr,r=8,mva=false,mu=0.5,mam=none)/softmax/greedy")
    assert spec.name == "tiny-random+fctg(mu=0.5,mam=none,alm=mtr,mva=false,r=8)/softmax/greedy"
    assert dict(spec.adapter_params) == {"mu": 0.5, "mam": "none", "alm": "mtr", "mva": False, "r": 8}


@pytest.mark.parametrize(
    "system, message",
    [
        ("tiny-random+fctg(alm=mt)/softmax/greedy", "adapter 'fctg': unknown alm 'mt': did you mean 'mtr'?"),
        ("tiny-random+fctg(mam=cee)/softmax/greedy", "unknown mam 'cee': did you mean 'ce'?"),
        ("tiny-random+fctg(muu=0.5)/softmax/greedy", "adapter 'fctg' has no option 'muu': did you mean 'mu'?"),
        ("tiny-random+fctg(mu=1.5)/softmax/greedy", "mu must be in [0, 1]"),
        ("tiny-random+fctg(mva=false)/softmax/greedy", "leaves nothing to train (it is the base model)"),
        ("tiny-random+fctg(gate_lr=0.1)/softmax/greedy", "chosen on the fitting split when select=true"),
    ],
)
def test_bad_fctg_variants_are_one_line_exit_2(cli, tmp_path, system, message):
    rc, _, err = cli("generate", "--system", system, "--suite", "food-attrs", "--runs-dir", tmp_path / "runs")
    assert rc == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- MVA
def test_the_attribute_part_ends_at_the_templates_common_end(tiny):
    tok = tiny.tokenizer
    marker = common_suffix([tok(e.prompt)["input_ids"] for e in examples()])
    assert tok.decode(marker) == " stars. Review:"
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    attr = attribute_positions(enc["input_ids"], enc["attention_mask"], marker)
    n = [len(tok(p.split("Review:")[0] + "Review:")["input_ids"]) for p in PROMPTS]
    assert attr.sum(1).tolist() == n
    assert not (attr & ~enc["attention_mask"].bool()).any()  # padding is never an attribute


def test_mva_with_its_gate_closed_is_the_base_model_exactly(home):
    base = fresh()
    enc = base.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        want = base.model(**enc).logits
    trained = FctgAdapter(**SMALL).train(fresh(), ctx(fresh()))[0]
    assert trained["gate.0.weight"].abs().sum() > 0  # the gates learnt something
    for closed in ({"mu": 1.0}, {"mva": False, "r": 1}):
        lm = fresh()
        opts = dict(SMALL, **closed)
        tensors = {k: v for k, v in trained.items() if not k.startswith("lora.")}
        model = FctgAdapter(**opts).apply(lm, tensors)
        with torch.no_grad():
            assert torch.equal(model(**enc).logits, want), closed
    # decoded through maxbench's own loop: the base model's tokens and statistics
    lm = fresh()
    model = FctgAdapter(**dict(SMALL, mu=1.0)).apply(lm, trained)
    adapted = dataclasses.replace(lm, model=model)
    setting = DecodingSetting(top_k=40, max_new_tokens=8)
    assert decode(adapted, SoftmaxLayer(), PROMPTS, setting, [1, 2, 3]) == decode(
        base, SoftmaxLayer(), PROMPTS, setting, [1, 2, 3]
    )
    # and open, it is not the base model
    lm = fresh()
    model = FctgAdapter(**SMALL).apply(lm, trained)
    with torch.no_grad():
        got = model(**enc).logits
    assert model.last_state.open_gates > 0 and not torch.equal(got, want)


def test_mva_decoded_with_the_kv_cache_equals_one_forward(home):
    """Open gates: the loop's incremental calls (the cache remembers the attribute tokens and their
    pooled states) give the logits one forward over the whole sequence gives."""
    lm = fresh()
    tensors = FctgAdapter(**SMALL).train(fresh(), ctx(fresh()))[0]
    tensors = {k: (v + 2.0 if k.endswith("bias") and k.startswith("gate") else v) for k, v in tensors.items()}
    model = FctgAdapter(**SMALL).apply(lm, tensors)
    enc = lm.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    extra = torch.tensor([[5, 9, 12]] * len(PROMPTS))
    with torch.no_grad():
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        cache, steps = out.past_key_values, [out.logits[:, -1]]
        for j in range(extra.shape[1]):
            mask = torch.cat([mask, torch.ones((len(PROMPTS), 1), dtype=mask.dtype)], 1)
            pos = pos[:, -1:] + 1
            out = model(input_ids=extra[:, j : j + 1], attention_mask=mask, position_ids=pos, past_key_values=cache)
            cache = out.past_key_values
            steps.append(out.logits[:, -1])
        full_ids = torch.cat([ids, extra], 1)
        full = model(
            input_ids=full_ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0), use_cache=False
        ).logits
    want = full[:, ids.shape[1] - 1 :]
    assert torch.allclose(torch.stack(steps, 1), want, atol=1e-5)


# --------------------------------------------------------------------------- ALM
def test_alm_losses_on_constructed_cases():
    torch.manual_seed(0)
    va = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1)
    groups = torch.tensor([0, 1, 2, 0, 1, 2])
    shuffled = va[[1, 2, 0, 4, 5, 3]]  # every text is another group's
    for kind in ("cn", "tr", "mtr"):
        aligned, wrong = alm_loss(kind, va, va, groups), alm_loss(kind, va, shuffled, groups)
        assert torch.isfinite(aligned) and torch.isfinite(wrong) and aligned >= 0
        assert aligned < wrong, kind
    # triplet: positives identical, negatives orthogonal (distance sqrt 2 > margin): no loss
    eye = torch.eye(4)
    g4 = torch.tensor([0, 1, 2, 3])
    assert alm_loss("tr", eye, eye, g4) == 0 and alm_loss("mtr", eye, eye, g4) == 0
    # the minimum triplet takes the nearest negative: at least the triplet averaged over all
    vt = torch.randn(6, 8)
    assert alm_loss("mtr", va, vt, groups) >= alm_loss("tr", va, vt, groups)
    # contrastive: the positive alone in its row's denominator (others share its attributes) is no anchor
    same = torch.zeros(6, dtype=torch.long)
    for kind in ("cn", "tr", "mtr"):
        zero = alm_loss(kind, va, vt, same)
        assert zero == 0 and torch.isfinite(zero)
    # gradients are finite (no NaN from a zero distance)
    x = va.clone().requires_grad_(True)
    alm_loss("mtr", x, va, groups).backward()
    assert torch.isfinite(x.grad).all()


# --------------------------------------------------------------------------- training
def test_training_is_deterministic_and_every_loss_is_used(home):
    a, ma = FctgAdapter(steps=3, batch=4, max_len=40, r=2, alm="cn").train(fresh(), ctx(fresh()))
    b, mb = FctgAdapter(steps=3, batch=4, max_len=40, r=2, alm="cn").train(fresh(), ctx(fresh()))
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert ma["loss_last"] == mb["loss_last"] and ma["mam_loss_last"] is not None and ma["alm_loss_last"] is not None
    assert ma["attribute_values"] == {"score": ["great", "other"]} and ma["marker"] == " stars. Review:"
    c, _ = FctgAdapter(steps=3, batch=4, max_len=40, r=2, alm="cn", seed=1).train(fresh(), ctx(fresh()))
    assert any(not torch.equal(a[k], c[k]) for k in a)
    # the base model is left as it was (LoRA unloaded, its own attention back)
    lm = fresh()
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    impl = lm.model.config._attn_implementation
    FctgAdapter(steps=2, batch=4, max_len=40, r=2).train(lm, ctx(lm))
    assert lm.model.config._attn_implementation == impl
    after = lm.model.state_dict()
    assert sorted(after) == sorted(before) and all(torch.equal(before[k], after[k]) for k in before)


def test_prepared_fctg_is_cached_by_identity_and_records_what_it_saw(home):
    a = FctgAdapter(**SMALL)
    lm = a.prepare(ctx(fresh()))
    assert lm.name == "tiny-random+fctg(steps=3,batch=4,max_len=40)"
    assert a.meta["attribute_values"] == {"score": ["great", "other"]} and not a.meta["loaded_from_cache"]
    b = FctgAdapter(**SMALL)
    assert b.prepare(ctx(fresh())).hash == lm.hash and b.meta["loaded_from_cache"]


# --------------------------------------------------------------------------- unseen values
def test_a_categorical_value_the_adapter_never_saw_is_refused_in_one_line(cli, tmp_path, home, monkeypatch):
    import maxbench.benchmark.data.corpora as corpora
    from maxbench.benchmark.data.corpora import Corpus

    fit = [e.text for e in examples()]
    corpus = Corpus("food-reviews", fit, fit[:2], {"sha256": "0" * 64})
    only_great = {t: corpora.AttributedText(t, t, {"score": "great"}) for t in fit}
    monkeypatch.setattr(corpora, "load_corpus", lambda name: corpus)
    monkeypatch.setattr(corpora, "load_attributes", lambda name: only_great)
    monkeypatch.setattr(corpora, "check_corpus", lambda name: name)
    argv = ["generate", "--system", "tiny-random+fctg(r=0,steps=1)/softmax/greedy", "--suite", "food-attrs"]
    rc, _, err = cli(*argv, "--corpus", "food-reviews", "--runs-dir", tmp_path / "runs")
    assert rc == 2 and "adapter 'fctg' never saw score='other'" in err and "great" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "runs").exists() and not home.exists()


def test_free_text_attributes_are_open():
    from types import SimpleNamespace

    from maxbench.benchmark.data.suites import AttributeSpec, SuiteItem

    suite = SimpleNamespace(
        name="s",
        attributes={"category": AttributeSpec("category", ("tech", "sport")), "headline": AttributeSpec("headline")},
        items=[SuiteItem("a", "p", "r", {"category": "tech", "headline": "never seen before"})],
    )
    seen = [TrainingExample("p", "t", {"category": "tech", "headline": "another"})]
    FctgAdapter().check_attribute_values(suite, seen)
    suite.items.append(SuiteItem("b", "p", "r", {"category": "sport", "headline": "x"}))
    with pytest.raises(MaxbenchError, match="never saw category='sport'"):
        FctgAdapter().check_attribute_values(suite, seen)


# --------------------------------------------------------------------------- in a run


def test_fctg_trains_and_generates_in_a_run_on_a_conditional_suite(cli, tmp_path, home, monkeypatch):
    system = "tiny-random+fctg(r=2,steps=2,batch=4,max_len=40)/softmax/greedy"
    run, manifest, rows = generate_on_tiny_attrs(cli, tmp_path, monkeypatch, system)
    model = manifest["models"]["tiny-random+fctg(r=2,steps=2,batch=4,max_len=40)"]
    assert model["options"]["adapter"]["name"] == "fctg"
    assert len(rows) == 2 and {r["system"] for r in rows} == set(manifest["systems"])
    assert all(r["system"].startswith("tiny-random+fctg(r=2,steps=2,batch=4,max_len=40)/softmax/") for r in rows)


# --------------------------------------------------------------------------- issue 51: the slides' FCTG
def toy(n=48, seed=0):
    """A task where the attribute matters: each text's words come from its rating's own vocabulary."""
    rng = random.Random(seed)
    words = {"great": "good tasty lovely fine".split(), "other": "bad not stale awful".split()}
    values = [("great", "other")[i % 2] for i in range(n)]
    return [
        TrainingExample(f"Rating: {LABEL[v]}. Review:", " ".join(rng.choice(words[v]) for _ in range(10)), {"score": v})
        for v in values
    ]


def test_fctg_keeps_the_base_model_frozen_by_default_and_its_lora_is_a_named_variant(home):
    assert FctgAdapter().options["r"] == 0
    assert parse_system("tiny-random+fctg(r=0)/softmax/greedy").name == "tiny-random+fctg/softmax/greedy"
    assert parse_system("tiny-random+fctg(r=8)/softmax/greedy").name == "tiny-random+fctg(r=8)/softmax/greedy"
    lm = fresh()
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    tensors, meta = FctgAdapter(steps=3, batch=4, max_len=40).train(lm, ctx(lm))
    assert not any(k.startswith("lora.") for k in tensors) and "lora" not in meta["moved"]
    d = lm.model.config.hidden_size  # the gates, ALM's two maps into 128 dimensions and MAM's map
    gates = sum(v.numel() for k, v in tensors.items() if k.startswith("gate."))
    assert meta["trainable_parameters"] == gates + 2 * (d * 128 + 128) + d * d + d
    applied = FctgAdapter(steps=3, batch=4, max_len=40).apply(lm, tensors)
    assert all(torch.equal(before[k], v) for k, v in applied.base.state_dict().items())
    tensors, meta = FctgAdapter(steps=3, batch=4, max_len=40, r=2).train(fresh(), ctx(fresh()))
    assert any(k.startswith("lora.") for k in tensors) and "lora" in meta["inert"]


def test_the_validation_rows_are_the_last_tenth_of_the_fitting_rows_and_never_trained_on():
    rows = list(range(400))
    train, val = split_validation(rows)
    assert val == rows[-32:] and train == rows[:-32]
    assert split_validation(list(range(50))) == (list(range(42)), list(range(42, 50)))
    assert split_validation(list(range(5))) == ([0], [1, 2, 3, 4]) and split_validation([7]) == ([7], [])


def test_the_gate_is_chosen_on_the_fitting_split_and_opens_where_the_attribute_matters(home):
    lm = fresh()
    tensors, meta = FctgAdapter(steps=20, batch=4, max_len=40).train(lm, ctx(lm, toy()))
    gate = meta["gate"]
    # every pair of the grid probed on the training rows, the one of lowest validation loss chosen
    assert [(g["gate_bias"], g["gate_lr"]) for g in gate["grid"]] == list(GATE_GRID) and gate["probe_steps"] == 4
    best = min(gate["grid"], key=lambda g: g["val_loss"])
    assert (gate["gate_bias"], gate["gate_lr"]) == (best["gate_bias"], best["gate_lr"]) and gate["selected"]
    # the budget: the checkpoint of lowest validation loss
    assert meta["validation_rows"] == 8 and list(meta["validation_loss"]) == ["4", "8", "12", "16", "20"]
    assert meta["validation_loss"][str(meta["best_step"])] == min(meta["validation_loss"].values())
    # the trained gate's distribution over the validation rows' text tokens: it moved from its start
    q = gate["quantiles"]
    assert list(q) == ["q0", "q1", "q10", "q25", "q50", "q75", "q90", "q99", "q100"] and gate["values"] > 0
    assert q["q100"] >= gate["start"] + INERT and q["q0"] <= q["q50"] <= q["q100"]
    assert not meta["inert"]["mva"] and meta["moved"]["mva"] >= INERT
    # the tensors are the best checkpoint's: applied, the gates are open on the text
    model = FctgAdapter(steps=20, batch=4, max_len=40).apply(fresh(), tensors)
    enc = fresh().tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        model(**enc)
    assert model.last_state.open_gates > 0


def test_mam_never_masks_the_input_the_text_is_conditioned_on(home, monkeypatch):
    calls = []
    forward = FctgLM.forward

    def spy(self, input_ids, attention_mask=None, labels=None, attributes=None, **kw):
        calls.append((input_ids.clone(), labels.clone() if labels is not None else None, attributes))
        return forward(self, input_ids, attention_mask=attention_mask, labels=labels, attributes=attributes, **kw)

    monkeypatch.setattr(FctgLM, "forward", spy)
    lm = fresh()
    mask_id = lm.tokenizer.pad_token_id  # tiny-random has no mask token
    FctgAdapter(steps=3, batch=4, max_len=40, select=False).train(lm, ctx(lm))
    training = [c for c in calls if c[1] is not None and c[0].shape[0] == 8]
    assert len(training) == 3  # each step: the batch, then its masked copy, in one call
    for ids, labels, attr in training:
        text, copy = ids[:4], ids[4:]
        targets = (labels[:4] != -100).any(1)
        assert targets.all() and not (labels[4:] != -100).any()  # only the intact rows carry the LM loss
        assert not (text[attr[:4]] == mask_id).any()  # the LM's input keeps every attribute token
        differs = text != copy
        assert differs.any(1).all() and not (differs & ~attr[:4]).any()  # MAM masks attribute tokens only
        assert (copy[differs] == mask_id).all()


def test_a_component_that_does_not_move_is_marked_inert(home):
    lm = fresh()
    _, meta = FctgAdapter(steps=3, batch=4, max_len=40, mu=1.0).train(lm, ctx(lm))
    assert meta["inert"]["mva"] and meta["moved"]["mva"] == 0.0 and meta["gate"]["quantiles"]["q100"] == 0.0
    assert sorted(meta["inert"]) == ["alm", "mam", "mva"]
    assert meta["inert"]["mam"] == (meta["moved"]["mam"] < INERT)
    _, meta = FctgAdapter(steps=0, mam="none", alm="none").train(fresh(), ctx(fresh()))
    assert meta["inert"] == {"mva": True} and meta["moved"] == {"mva": 0.0}
    assert not meta["gate"]["selected"] and "grid" not in meta["gate"]  # no step: nothing was chosen
