"""NRP rebuilt (systems/adapters/nrp.py): the text's own (green) states never see the prompt, the
KV-cache loop agrees with one forward, training moves only the prompt model and is deterministic,
and it trains and generates in a run on a conditional suite. Tiny-random model only."""

from __future__ import annotations

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters import ADAPTERS
from maxbench.systems.adapters.nrp import NrpAdapter
from maxbench.systems.system_strings import parse_system
from tests.support.fctg import ctx, examples, fresh, generate_on_tiny_attrs

PROMPTS = ["Rating: 5 stars. Review:", "Rating: 1 to 4 stars. Review:", "Rating: 5 stars. Review:"]
SMALL = {"r": 2, "steps": 3, "batch": 4, "max_len": 40}

pytestmark = pytest.mark.usefixtures("no_plugins")  # home and no_plugins: tests/conftest.py


def trained(scale=50.0):
    """An NRP model whose prompt model differs visibly from the base (its LoRA scaled up)."""
    tensors, _ = NrpAdapter(**SMALL).train(fresh(), ctx(fresh()))
    tensors = {k: (v * scale if k.startswith("lora.") else v) for k, v in tensors.items()}
    return NrpAdapter(**SMALL).apply(fresh(), tensors)


def test_nrp_is_a_built_in_conditional_adapter():
    assert ADAPTERS.get("nrp") is NrpAdapter and NrpAdapter.needs_attributes
    assert parse_system("tiny-random+nrp(r=8)/softmax/top_k=40").name == "tiny-random+nrp/softmax/top_k=40"
    with pytest.raises(MaxbenchError, match="did you mean 'steps'"):
        parse_system("tiny-random+nrp(step=3)/softmax/greedy")


def test_decoding_with_the_kv_cache_equals_one_forward_and_the_text_cache_ignores_the_prompt(home):
    model = trained()
    tok = fresh().tokenizer
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    extra = torch.tensor([[5, 9, 12]] * len(PROMPTS))
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        cache, steps = out.past_key_values, [out.logits[:, -1]]
        for j in range(extra.shape[1]):
            mask = torch.cat([mask, torch.ones((len(PROMPTS), 1), dtype=mask.dtype)], 1)
            out = model(input_ids=extra[:, j : j + 1], attention_mask=mask, past_key_values=cache, logits_to_keep=1)
            cache = out.past_key_values
            steps.append(out.logits[:, -1])
        full = model(input_ids=torch.cat([ids, extra], 1), attention_mask=mask, use_cache=False).logits
    assert torch.allclose(torch.stack(steps, 1), full[:, ids.shape[1] - 1 :], atol=1e-5)
    # rows 0 and 2 have the same prompt and text: the same logits; row 1 another prompt: others
    got = torch.stack(steps, 1)
    assert torch.allclose(got[0], got[2], atol=1e-6) and not torch.allclose(got[0], got[1], atol=1e-3)
    # the green (text) cache is the same for both prompts: the prompt never enters the text's states
    for layer in cache.layers:
        assert torch.allclose(layer.keys[0], layer.keys[1], atol=1e-6)


def test_training_moves_only_the_prompt_model_and_is_deterministic(home):
    lm = fresh()
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    impl = lm.model.config._attn_implementation
    a, ma = NrpAdapter(**SMALL).train(lm, ctx(lm))
    assert lm.model.config._attn_implementation == impl
    assert all(torch.equal(before[k], v) for k, v in lm.model.state_dict().items())
    b, mb = NrpAdapter(**SMALL).train(fresh(), ctx(fresh()))
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a) and ma["loss_last"] == mb["loss_last"]
    assert ma["train_cpu_seconds"] >= 0 and ma["marker"] == " stars. Review:"
    assert any(k.startswith("lora.") and v.abs().sum() > 0 for k, v in a.items() if "lora_B" in k)
    c, _ = NrpAdapter(**SMALL, seed=1).train(fresh(), ctx(fresh()))
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_nrp_needs_training_text_with_attributes(home):
    plain = [e.__class__(e.prompt, e.text, None) for e in examples()]
    with pytest.raises(MaxbenchError, match="no training text with attributes"):
        NrpAdapter(**SMALL).train(fresh(), ctx(fresh(), plain))


def test_nrp_trains_generates_and_records_its_training_time_in_a_run(cli, tmp_path, home, monkeypatch):
    """In a run: trained, decoded by the loop, named in the manifest, and its training time in
    timings.jsonl (what the FCTG reproduction's training-time claim reads)."""
    import json

    system = "tiny-random+nrp(r=2,steps=2,batch=4,max_len=40)/softmax/greedy"
    run, manifest, rows = generate_on_tiny_attrs(cli, tmp_path, monkeypatch, system)
    assert manifest["models"]["tiny-random+nrp(r=2,steps=2,batch=4,max_len=40)"]["options"]["adapter"]["name"] == "nrp"
    assert len(rows) == 2 and {r["system"] for r in rows} == set(manifest["systems"])
    timings = [json.loads(x) for x in (run / "timings.jsonl").read_text().splitlines()]
    (train,) = [t for t in timings if t["phase"] == "train tiny-random+nrp(r=2,steps=2,batch=4,max_len=40)"]
    assert train["steps"] == 2 and train["cpu_seconds"] >= 0
