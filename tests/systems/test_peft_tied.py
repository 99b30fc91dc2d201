"""A LoRA on the input embeddings of a tied-embedding model (tiny-random and SmolLM2 tie them): peft's
own ``generate`` leaves the output embeddings as they were, so maxbench's merged model must too, and
its tokens are then those of peft's ``generate``, token for token."""

from __future__ import annotations

import pytest
import torch

from maxbench import plugins
from maxbench.systems.adapters import AdapterFitContext
from maxbench.systems.adapters.pretrained import PeftAdapter
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.models import load_model

PROMPTS = ["I have bought these cookies twice and", "The soup", "My dog loves this food because"]


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _fresh():
    return load_model("tiny-random", device="cpu")


def _save(folder, targets):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets)
    torch.manual_seed(0)
    model = get_peft_model(_fresh().model, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, 0.5)
    model.save_pretrained(str(folder))
    return folder


def _peft_generate(path, tok, prompt, seed, **kw):
    from peft import PeftModel

    model = PeftModel.from_pretrained(_fresh().model, str(path)).eval()
    enc = tok([prompt], return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(seed)
    out = model.generate(**enc, max_new_tokens=16, pad_token_id=tok.pad_token_id, **kw)
    ids = out[0, enc["input_ids"].shape[1] :].tolist()
    return ids[: ids.index(tok.eos_token_id)] if tok.eos_token_id in ids else ids


@pytest.mark.parametrize(
    "targets", [["embed_tokens"], ["embed_tokens", "q_proj", "v_proj"], ["lm_head"], ["embed_tokens", "lm_head"]]
)
def test_lora_on_the_tied_input_embeddings_is_token_exact_with_peft_generate(tmp_path, targets):
    path = _save(tmp_path / "lora", targets)
    alm = PeftAdapter(path=str(path)).prepare(AdapterFitContext(model=_fresh(), examples=[], data={}))
    tok = alm.tokenizer
    greedy = decode(alm, SoftmaxLayer(), PROMPTS, DecodingSetting(do_sample=False, max_new_tokens=16), [0] * 3)
    for prompt, row in zip(PROMPTS, greedy):
        assert row["token_ids"] == _peft_generate(path, tok, prompt, 0, do_sample=False, top_k=None, top_p=None)
    sampled = decode(alm, SoftmaxLayer(), PROMPTS, DecodingSetting(top_k=40, max_new_tokens=16), [11, 12, 13])
    for prompt, seed, row in zip(PROMPTS, [11, 12, 13], sampled):
        assert row["token_ids"] == _peft_generate(path, tok, prompt, seed, do_sample=True, top_k=40, top_p=1.0)
    base = _fresh().model
    # the embeddings the adapter did not target are the base model's, the targeted ones the adapter's
    out_same = torch.equal(alm.model.get_output_embeddings().weight, base.get_output_embeddings().weight)
    in_same = torch.equal(alm.model.get_input_embeddings().weight, base.get_input_embeddings().weight)
    assert out_same == ("lm_head" not in targets) and in_same == ("embed_tokens" not in targets)
