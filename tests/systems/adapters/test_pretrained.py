"""The ``peft`` adapter (systems/adapters/pretrained.py): a PEFT adapter trained elsewhere, loaded by
path without training. Decoded by maxbench it is token-exact with peft's own ``generate``; its identity
is the content of its folder; bad input is one line, exit 2, before anything is generated."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from maxbench import plugins
from maxbench.errors import MaxbenchError
from maxbench.systems.adapters import ADAPTERS, AdapterFitContext
from maxbench.systems.adapters.pretrained import PeftAdapter
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.system_strings import parse_system
from tests.support.peft import fresh_tiny, save_adapter

PROMPTS = ["I have bought these cookies twice and", "The soup", "My dog loves this food because"]


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


@pytest.fixture(scope="module")
def lora_dir(tmp_path_factory):
    return save_adapter(tmp_path_factory.mktemp("peft") / "my-lora")


def prepare(path):
    adapter = PeftAdapter(path=str(path))
    return adapter, adapter.prepare(AdapterFitContext(model=fresh_tiny(), examples=[], data={}))


def peft_generate(path, tok, prompt, seed, **kw):
    from peft import PeftModel

    model = PeftModel.from_pretrained(fresh_tiny().model, str(path)).eval()
    enc = tok([prompt], return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(seed)
    ids = model.generate(**enc, max_new_tokens=16, pad_token_id=tok.pad_token_id, **kw)[0, enc["input_ids"].shape[1] :]
    ids = ids.tolist()
    return ids[: ids.index(tok.eos_token_id)] if tok.eos_token_id in ids else ids


@pytest.mark.parametrize("kind", ["lora", "prefix"])
def test_peft_adapter_decoded_by_maxbench_is_token_exact_with_peft_generate(tmp_path, kind):
    path = save_adapter(tmp_path / kind, kind)
    adapter, alm = prepare(path)
    assert adapter.meta["peft_type"] == ("LORA" if kind == "lora" else "PREFIX_TUNING")
    if kind == "lora":
        assert type(alm.model).__name__ == "LlamaForCausalLM"  # merged: a plain model
    tok = alm.tokenizer
    greedy = decode(alm, SoftmaxLayer(), PROMPTS, DecodingSetting(do_sample=False, max_new_tokens=16), [0] * 3)
    for prompt, row in zip(PROMPTS, greedy):
        assert row["token_ids"] == peft_generate(path, tok, prompt, 0, do_sample=False, top_k=None, top_p=None)
    seeds = [11, 12, 13]
    sampled = decode(alm, SoftmaxLayer(), PROMPTS, DecodingSetting(top_k=40, max_new_tokens=16), seeds)
    for prompt, seed, row in zip(PROMPTS, seeds, sampled):
        assert row["token_ids"] == peft_generate(path, tok, prompt, seed, do_sample=True, top_k=40, top_p=1.0)
    base = fresh_tiny()
    ids = torch.tensor([tok(PROMPTS[0], add_special_tokens=False)["input_ids"]])
    with torch.no_grad():  # the adapter is not a no-op
        assert not torch.allclose(alm.model(input_ids=ids).logits, base.model(input_ids=ids).logits, atol=1e-3)


def test_identity_is_the_folders_content(tmp_path, lora_dir):
    first, a = prepare(lora_dir)
    _, again = prepare(lora_dir)
    copy = shutil.copytree(lora_dir, tmp_path / "elsewhere")
    _, moved = prepare(copy)
    assert a.hash == again.hash == moved.hash != fresh_tiny().hash  # where it lies does not count
    assert a.options["adapter"]["sha256"] == first.meta["sha256"] and a.options["adapter"]["peft_type"] == "LORA"
    # another weight file: another identity
    weights = save_adapter(tmp_path / "other", seed=1) / "adapter_model.safetensors"
    shutil.copyfile(weights, copy / "adapter_model.safetensors")
    _, changed = prepare(copy)
    assert changed.hash != a.hash
    # another config (same weights): another identity
    shutil.rmtree(copy)
    shutil.copytree(lora_dir, copy)
    config = json.loads((copy / "adapter_config.json").read_text())
    config["lora_alpha"] = 16
    (copy / "adapter_config.json").write_text(json.dumps(config))
    _, scaled = prepare(copy)
    assert scaled.hash not in (a.hash, changed.hash)
    # a subfolder (a trainer's checkpoint) is not loaded and not hashed
    (copy / "checkpoint-10").mkdir()
    (copy / "checkpoint-10" / "optimizer.pt").write_bytes(b"x")
    assert prepare(copy)[1].hash == scaled.hash


def test_the_path_in_a_system_string(lora_dir):
    assert ADAPTERS.get("peft") is PeftAdapter
    spec = parse_system(f"tiny-random+peft(path={lora_dir}/)/softmax/top_p=0.9")
    assert spec.adapter == "peft" and spec.adapter_params == (("path", str(lora_dir)),)
    assert spec.name == f"tiny-random+peft(path={lora_dir})/softmax/top_p=0.9" and parse_system(spec.name) == spec
    assert parse_system("org/name@v1+peft(path=rel/my+lora)/softmax/greedy").adapter_params == (
        ("path", "rel/my+lora"),
    )
    # the name is read without the folder: a recorded run's names still read where it is gone
    assert parse_system("tiny-random+peft(path=/gone)/softmax/greedy").model_key == "tiny-random+peft(path=/gone)"
    with pytest.raises(MaxbenchError, match="needs the adapter's folder"):
        parse_system("tiny-random+peft/softmax/greedy")
    with pytest.raises(MaxbenchError, match="path=1000.0 reads as a float; .* with './' in front"):
        parse_system("tiny-random+peft(path=1e3)/softmax/greedy")
    assert parse_system("tiny-random+peft(path=./1e3)/softmax/greedy").adapter_params == (("path", "./1e3"),)
    assert PeftAdapter(path=lora_dir).options["path"] == str(lora_dir)  # a Path is taken too
    with pytest.raises(MaxbenchError, match="system string cannot hold"):
        PeftAdapter(path="/data/a,b")


def _suite(tmp_path):
    rows = [{"id": f"p{i}", "prompt": p, "reference": "good food"} for i, p in enumerate(PROMPTS)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "three"\nfile = "p.jsonl"\n')
    return tmp_path / "s.toml"


def _generate(cli, tmp_path, *systems, run_id="r"):
    return cli(
        "generate",
        *(a for system in systems for a in ("--system", system)),
        "--suite",
        _suite(tmp_path),
        "--runs-dir",
        tmp_path / "runs",
        "--run-id",
        run_id,
        "--no-progress",
        "--threads",
        "1",
    )


def test_a_run_needs_no_corpus_records_the_identity_and_refuses_a_changed_adapter(cli, tmp_path, lora_dir):
    folder = shutil.copytree(lora_dir, tmp_path / "mine")
    model_key = f"tiny-random+peft(path={folder})"
    rc, _, err = _generate(cli, tmp_path, f"{model_key}/softmax/greedy,max_new_tokens=6")
    assert rc == 0, err
    run = tmp_path / "runs" / "r"
    manifest = json.loads((run / "manifest.json").read_text())
    entry = manifest["models"][model_key]
    assert entry["options"]["adapter"]["name"] == "peft" and entry["options"]["adapter"]["peft_type"] == "LORA"
    assert entry["options"]["adapter"]["files"] == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert len(entry["options"]["adapter"]["sha256"]) == 64
    rows = [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    # the same name over a changed adapter: its rows are not mixed with the old ones
    shutil.copyfile(
        save_adapter(tmp_path / "x", seed=2) / "adapter_model.safetensors", folder / "adapter_model.safetensors"
    )
    rc, _, err = _generate(
        cli, tmp_path, f"{model_key}/softmax/greedy,max_new_tokens=6", f"{model_key}/sparsemax/greedy,max_new_tokens=6"
    )
    assert rc == 2 and "rows of two weight files must not be mixed" in err and len(err.strip().splitlines()) == 1, err


def _bad(tmp_path, lora_dir, case):
    folder = tmp_path / "bad"
    if case == "missing":
        return tmp_path / "nowhere", "does not exist"
    if case == "file":
        (tmp_path / "a-file").write_text("x")
        return tmp_path / "a-file", "is not a folder"
    shutil.copytree(lora_dir, folder)
    config = folder / "adapter_config.json"
    data = json.loads(config.read_text())
    if case == "no-config":
        config.unlink()
        return folder, "has no adapter_config.json"
    if case == "invalid-config":
        config.write_text("{not json")
        return folder, "cannot be read as JSON"
    if case == "not-an-object":
        config.write_text("[1, 2]")
        return folder, "is not a JSON object"
    if case == "unknown-type":
        config.write_text(json.dumps(data | {"peft_type": "LORAA"}))
        return folder, "unknown peft_type 'LORAA': did you mean 'LORA'?"
    if case == "prompt-tuning":
        config.write_text(json.dumps({"peft_type": "PROMPT_TUNING", "task_type": "CAUSAL_LM", "num_virtual_tokens": 4}))
        return folder, "PROMPT_TUNING puts virtual tokens in front of the input"
    if case == "relabelled-adaption-prompt":  # a LoRA config relabelled: refused by its type, before peft reads it
        config.write_text(json.dumps(data | {"peft_type": "ADAPTION_PROMPT"}))
        return folder, "peft_type ADAPTION_PROMPT is not supported: its tuner (AdaptionPromptModel) cannot be merged"
    if case == "no-weights":
        (folder / "adapter_model.safetensors").unlink()
        return folder, "has no adapter_model.safetensors or adapter_model.bin"
    if case == "shapes":
        config.write_text(json.dumps(data | {"r": 8, "lora_alpha": 16}))  # the weights are rank 4
        return folder, "does not fit model 'tiny-random'"
    if case == "modules":
        config.write_text(json.dumps(data | {"target_modules": ["no_such_proj"]}))
        return folder, "does not fit model 'tiny-random'"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "file",
        "no-config",
        "invalid-config",
        "not-an-object",
        "unknown-type",
        "prompt-tuning",
        "relabelled-adaption-prompt",
        "no-weights",
        "shapes",
        "modules",
    ],
)
def test_bad_peft_adapters_are_one_line_exit_2_before_generation(cli, tmp_path, lora_dir, case):
    path, message = _bad(tmp_path, lora_dir, case)
    rc, _, err = _generate(cli, tmp_path, f"tiny-random+peft(path={path})/softmax/greedy,max_new_tokens=4")
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert str(path) in err
    assert not (tmp_path / "runs" / "r" / "generations.jsonl").exists()
