"""A complete run generated again after its local model folder or its peft adapter folder changed is
refused, naming the folder: its texts are of the old files."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from maxbench import plugins
from maxbench.systems.models import tiny_random_model


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _generate(cli, tmp_path, model):
    rows = [{"id": f"p{i}", "prompt": f"Review number {i}: the soup was"} for i in range(2)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "two"\nfile = "p.jsonl"\n')
    return cli(
        "generate", "--model", model, "--suite", tmp_path / "s.toml", "--decoding", "greedy,max_new_tokens=3",
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress", "--threads", "1",
    )  # fmt: skip


def _save_tiny(folder, scale=1.0):
    model, tok, _ = tiny_random_model()
    with torch.no_grad():
        model.model.norm.weight.mul_(scale)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_complete_run_whose_local_model_folder_changed_is_refused(cli, tmp_path):
    folder = _save_tiny(tmp_path / "model")
    assert _generate(cli, tmp_path, str(folder))[0] == 0
    assert _generate(cli, tmp_path, str(folder))[0] == 0  # unchanged and complete: nothing to do
    before = (tmp_path / "runs" / "r" / "generations.jsonl").read_bytes()
    shutil.rmtree(folder)
    _save_tiny(folder, scale=2.0)
    rc, _, err = _generate(cli, tmp_path, str(folder))
    assert rc == 2 and err.count("\n") == 1 and f"model folder {folder}" in err and "changed" in err, err
    assert (tmp_path / "runs" / "r" / "generations.jsonl").read_bytes() == before


def test_a_complete_run_whose_peft_folder_changed_is_refused(cli, tmp_path):
    from peft import LoraConfig, get_peft_model

    def save(seed):
        torch.manual_seed(seed)
        model = get_peft_model(tiny_random_model()[0], LoraConfig(task_type="CAUSAL_LM", r=2, lora_alpha=4))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.5)
        model.save_pretrained(str(tmp_path / "lora"))

    save(0)
    model = f"tiny-random+peft(path={tmp_path / 'lora'})"
    assert _generate(cli, tmp_path, model)[0] == 0
    assert _generate(cli, tmp_path, model)[0] == 0
    save(1)
    rc, _, err = _generate(cli, tmp_path, model)
    assert rc == 2 and err.count("\n") == 1 and f"peft adapter folder {tmp_path / 'lora'}" in err, err
