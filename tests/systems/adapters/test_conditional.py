"""The conditional-adapter base (systems/adapters/conditional.py): FCTG and NRP are conditional
adapters that install their attention through one helper, which refuses a second conditional
attention on a model whichever came first and leaves the model as it was when undone. Tiny-random
model only."""

from __future__ import annotations

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters import AdapterFitContext, TrainingExample
from maxbench.systems.adapters.conditional import (
    ConditionalAdapter,
    attention_modules,
    install_attention,
    own_attention,
)
from maxbench.systems.adapters.fctg import FctgAdapter
from maxbench.systems.adapters.nrp import NrpAdapter
from maxbench.systems.models import load_model

PROMPTS = ["Rating: 5 stars. Review: good tea", "Rating: 1 to 4 stars. Review:"]
EXAMPLES = [TrainingExample(f"Rating: {v}. Review:", "good tea", {"score": v}) for v in ("5 stars", "1 to 4 stars")]

pytestmark = pytest.mark.usefixtures("no_plugins")  # no_plugins: tests/conftest.py


def trained(adapter) -> dict:
    """``adapter``'s tensors, untrained (no steps), on tiny-random."""
    lm = load_model("tiny-random")
    return adapter.train(lm, AdapterFitContext(model=lm, examples=EXAMPLES, data={}, options={"progress": False}))[0]


def test_fctg_and_nrp_are_conditional_adapters():
    for cls in (FctgAdapter, NrpAdapter):
        assert issubclass(cls, ConditionalAdapter) and cls.needs_attributes
        assert cls.check_attribute_values is ConditionalAdapter.check_attribute_values


def test_fctg_and_nrp_install_their_attention_through_one_helper():
    """Either one applied to a model refuses the other with the helper's one line (before the helper,
    FCTG stacked its attention on NRP's), and each, undone, leaves the model computing what it did."""
    adapters = {"fctg": FctgAdapter(r=0, steps=0), "nrp": NrpAdapter(r=1, steps=0)}
    tensors = {name: trained(adapter) for name, adapter in adapters.items()}
    lm = load_model("tiny-random")  # its own copy: the session's ``tiny`` is never touched
    base = lm.model
    enc = lm.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    impl = base.config._attn_implementation
    with torch.no_grad():
        want = base(**enc).logits
    refusals = {}
    for first, second in (("fctg", "nrp"), ("nrp", "fctg")):
        model = adapters[first].apply(lm, tensors[first])
        assert model.base is base
        installed = base.config._attn_implementation
        assert installed != impl and installed.endswith(impl)
        layers = attention_modules(base)
        assert len(layers) == base.config.num_hidden_layers and all(callable(own_attention(m)) for m in layers)
        with pytest.raises(MaxbenchError) as refused:
            adapters[second].apply(lm, tensors[second])
        refusals[second] = str(refused.value)
        assert base.config._attn_implementation == installed  # the refusal changed nothing
        model.uninstall()
        assert base.config._attn_implementation == impl
        for m in layers:
            with pytest.raises(AttributeError):
                own_attention(m)
        with torch.no_grad():
            assert torch.equal(base(**enc).logits, want), first
    assert refusals == {
        "nrp": f"adapter 'nrp': this model carries a conditional adapter's attention already ('fctg_mva_{impl}'); "
        "give each conditional adapter its own base model",
        "fctg": f"adapter 'fctg': this model carries a conditional adapter's attention already ('nrp_{impl}'); "
        "give each conditional adapter its own base model",
    }
    # a plugin's conditional attention goes through the same door, and is refused on FCTG's as well
    model = adapters["fctg"].apply(lm, tensors["fctg"])
    with pytest.raises(MaxbenchError, match="adapter 'mine': this model carries a conditional adapter's attention"):
        install_attention(base, "mine", "mine_", lambda module, *a, **k: None)
    model.uninstall()


def test_fctg_and_nrp_record_each_steps_cpu_seconds_at_the_same_batch():
    """The training-time claim's replicates: every step's CPU seconds (FCTG's validation outside them)
    and their median, in each adapter's meta, for the same steps and batch."""
    examples = EXAMPLES * 12
    for adapter in (FctgAdapter(steps=3, batch=4, max_len=40), NrpAdapter(r=1, steps=3, batch=4, max_len=40)):
        lm = load_model("tiny-random")
        ctx = AdapterFitContext(model=lm, examples=examples, data={}, options={"progress": False})
        meta = adapter.train(lm, ctx)[1]
        steps = meta["step_cpu_seconds"]
        assert len(steps) == 3 and all(s >= 0 for s in steps), adapter.name
        assert meta["step_cpu_median"] == sorted(steps)[1] and meta["train_cpu_seconds"] >= 0
