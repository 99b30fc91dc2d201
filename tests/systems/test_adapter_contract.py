"""The adapter contract held at its seams (``Adapter.prepare``, ``check_adapters``): a plugin adapter that
raises or returns the wrong thing is one line naming it; a prefix past the model's context is refused
as a too-long prompt is; a NaN from an adapted model is blamed on the adapter, not the base model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import maxbench
from maxbench import plugins
from maxbench.errors import MaxbenchError
from maxbench.systems.adapters import Adapter, AdapterFitContext, TrainingExample
from maxbench.systems.adapters.base import adapted_model
from maxbench.systems.adapters.prefix import PrefixAdapter
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _ctx(tiny, examples=1):
    texts = [TrainingExample("", "the soup was warm and the bread was fresh")] * examples
    return AdapterFitContext(model=tiny, examples=texts, data={"corpus": "t", "sha256": "0"}, options={})


def _plugin(train=None, apply=None, check_inputs=None):
    class Odd(Adapter):
        name = "odd"
        trains = False

        def train(self, lm, ctx):
            return train() if train else ({"w": torch.zeros(2)}, {"loss": 0.5})

        def apply(self, lm, tensors):
            return apply() if apply else lm.model

        def check_inputs(self):
            if check_inputs:
                check_inputs()

    maxbench.register_adapter(Odd)
    return Odd()


def _raise(exc):
    def go():
        raise exc

    return go


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"train": lambda: 0.5}, "train returned float; return (tensors, measurements)"),
        ({"train": lambda: ({"w": 1.0}, {})}, "train's tensors hold 'w', which is not a tensor"),
        ({"train": _raise(RuntimeError("out of memory"))}, "train failed: RuntimeError: out of memory"),
        ({"apply": lambda: None}, "apply returned NoneType"),
        ({"apply": _raise(KeyError("w"))}, "apply failed: KeyError"),
    ],
)
def test_a_plugin_adapter_breaking_the_contract_is_one_line_naming_it(tiny, home, kw, said):
    adapter = _plugin(**kw)
    with pytest.raises(MaxbenchError) as exc:
        adapter.prepare(_ctx(tiny))
    assert said in str(exc.value) and "plugin adapter 'odd' from a session" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_measurements_json_cannot_hold_are_refused_and_the_trained_tensors_kept(tiny, home):
    adapter = _plugin(train=lambda: ({"w": torch.ones(2)}, {"loss": 0.5, "curve": torch.ones(3)}))
    with pytest.raises(MaxbenchError, match="measurements curve are not JSON") as exc:
        adapter.prepare(_ctx(tiny))
    kept = str(exc.value).split("kept in ")[1].split(" ")[0]
    meta = json.loads((home / kept.split(str(home) + "/")[1] / "meta.json").read_text())
    assert meta["loss"] == 0.5 and "curve" not in meta
    calls = []
    adapter2 = _plugin(train=lambda: calls.append(1) or ({"w": torch.ones(2)}, {}))
    adapted = adapter2.prepare(_ctx(tiny))  # the kept state: no training again
    assert calls == [] and adapted.name == "tiny-random+odd"


def test_a_plugin_adapters_check_inputs_raising_value_error_is_one_line():
    from maxbench.benchmark.run.runner import check_adapters

    adapter = _plugin(check_inputs=_raise(ValueError("no such folder")))
    plan = SimpleNamespace(corpus="c", systems=[])
    with pytest.raises(
        MaxbenchError, match=r"plugin adapter 'odd' from a session .*: check_inputs failed: ValueError: no such folder"
    ):
        check_adapters(plan, {"tiny-random+odd": adapter})


@pytest.mark.parametrize("n", [512, 600])
def test_a_prefix_past_the_model_s_context_is_refused(tiny, home, n):
    with pytest.raises(MaxbenchError, match=f"n={n} takes {n} positions, and the model's context is 512"):
        PrefixAdapter(n=n, init="random", steps=0).prepare(_ctx(tiny))


def test_a_nan_from_an_adapted_model_is_blamed_on_the_adapter(tiny, home):
    adapter = PrefixAdapter(n=2, init="random", steps=0)
    tensors, _ = adapter.train(tiny, _ctx(tiny))
    broken = {k: v * float("nan") for k, v in tensors.items()}
    alm = adapted_model(tiny, adapter, adapter.apply(tiny, broken), "k", "")
    with pytest.raises(MaxbenchError) as exc:
        decode(alm, SoftmaxLayer(), ["the soup"], DecodingSetting(do_sample=False, max_new_tokens=2), [0])
    message = str(exc.value)
    assert "the adapted model tiny-random+prefix(n=2,init=random,steps=0)" in message
    assert "the adapter is the cause" in message and "lower its lr" in message and "fp16" not in message


def test_a_nan_from_a_peft_folder_names_its_weights(tiny):
    from maxbench.systems.decoding import model_nan_cause

    alm = SimpleNamespace(name="tiny-random+peft(path=/a)", options={"adapter": {"name": "peft"}})
    who, why = model_nan_cause(alm)
    assert who == "the adapted model tiny-random+peft(path=/a)" and "adapter folder's weights" in why
    assert model_nan_cause(tiny) == ("the base model", "")
