"""A PEFT adapter for tiny-random saved by ``save_pretrained`` (the ``peft`` adapter's tests, an adapted judge)."""

from __future__ import annotations

import torch


def fresh_tiny():
    """A copy of the tiny model of its own: loading an adapter changes the model it is loaded onto."""
    from maxbench.systems.models import load_model

    return load_model("tiny-random", device="cpu")


def save_adapter(folder, kind: str = "lora", seed: int = 0):
    """A PEFT adapter for the tiny model saved by ``save_pretrained``; LoRA's B random and non-zero,
    so that it changes the logits."""
    from peft import LoraConfig, PrefixTuningConfig, get_peft_model

    if kind == "lora":
        config = LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8, lora_dropout=0.0)
    else:
        config = PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    torch.manual_seed(seed)
    model = get_peft_model(fresh_tiny().model, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "prompt_encoder" in name:
                p.normal_(0.0, 0.5)
    model.save_pretrained(str(folder))
    return folder
