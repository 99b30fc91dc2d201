"""A PEFT adapter the user already has (trained elsewhere), loaded with ``peft``: no training.

``peft(path=/data/my-lora)``: the folder that ``PeftModel.save_pretrained`` writes
(``adapter_config.json`` and ``adapter_model.safetensors`` or ``.bin``), loaded onto the base model
by ``PeftModel.from_pretrained``. How it is decoded depends on its ``peft_type``:

- a type that changes the weights (LoRA, LoHa, LoKr, IA3, ...): merged into them with peft's
  ``merge_and_unload``, as ``lora`` does, so decoding runs a plain model of the base architecture;
  a type whose tuner has no merge (``ADAPTION_PROMPT``'s gated prompts inside attention) is refused by
  name before loading, and one whose merge fails, when it is merged;
- ``PREFIX_TUNING``: decoded by maxbench's loop through ``prefix.PrefixLM``, as ``prefix`` is;
- every other prompt-learning type (prompt tuning, p-tuning, ...), whose virtual tokens maxbench's
  loop cannot put in front faithfully, is refused in one line.

Identity: one sha256 over every file directly in the folder (name, size and content), so a changed
config or weight file gives another adapted model (no shared rows, caches or heads); where the
folder lies does not count. ``base_model_name_or_path`` in the config is recorded, not checked: an
adapter whose shapes do not fit the base model is refused when it is loaded, before any token.
The path is written in the system string as given (a trailing '/' dropped); it cannot hold ',', '(',
')' or leading or trailing spaces (docs/models.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import warnings
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters.base import Adapter, adapted_model

CONFIG = "adapter_config.json"
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def adapter_folder_files(folder: Path) -> list[Path]:
    """Every file directly in ``folder`` (what ``from_pretrained`` reads lies there; subfolders, such
    as a trainer's ``checkpoint-*`` or another saved adapter, are not loaded), sorted by name."""
    return sorted((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.name)


@functools.lru_cache(maxsize=64)
def _files_sha256(files: tuple) -> str:
    # files: ((name, path, size, mtime_ns), ...); the stat fields make a changed file a new key
    h = hashlib.sha256(b"maxbench-peft-adapter-1\0")
    for name, path, size, _ in files:
        h.update(f"{name}\0{size}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def folder_sha256(folder: Path) -> str:
    """The adapter folder's identity: one sha256 over every file's name, size and content
    (hashed once per process for unchanged files)."""
    files = adapter_folder_files(folder)
    stats = [(p, p.stat()) for p in files]
    return _files_sha256(tuple((p.name, str(p), st.st_size, st.st_mtime_ns) for p, st in stats))


def _one_line(exc, limit: int = 240) -> str:
    """``exc`` as one short line; of torch's list of size mismatches, the first one."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    mismatch = re.search(r"size mismatch for \S+ .*?current model is (?:torch\.Size\([^)]*\)|[^.]+)", text)
    text = mismatch.group(0) if mismatch else text
    return text if len(text) <= limit else text[: limit - 3] + "..."


class PeftAdapter(Adapter):
    """``peft(path=DIR)``: a PEFT adapter saved by ``save_pretrained``, loaded (and merged where peft can)."""

    name = "peft"
    OPTIONS = {"path": ""}
    version = "1"
    trains = False

    def __init__(self, **options):
        path = options.get("path")
        if isinstance(path, os.PathLike):
            options["path"] = os.fspath(path)
        elif path is not None and not isinstance(path, str):
            # the system string's reader took it for a number or a boolean: its text is lost
            raise MaxbenchError(
                f"adapter 'peft': path={path} reads as a {type(path).__name__}; write a folder whose name reads as "
                "a number or true/false with './' in front"
            )
        super().__init__(**options)

    def check(self) -> None:
        path = self.options["path"].strip()
        if not path:
            raise MaxbenchError("adapter 'peft' needs the adapter's folder: +peft(path=/data/my-lora)")
        if any(c in path for c in ",()") or path != self.options["path"]:
            raise MaxbenchError(
                f"adapter 'peft': path '{self.options['path']}' holds ',', '(', ')' or surrounding spaces, which a "
                "system string cannot hold; link the folder from a path without them"
            )
        self.options["path"] = path.rstrip("/") or "/"

    # ------------------------------------------------------------------ the folder
    @property
    def folder(self) -> Path:
        return Path(self.options["path"]).expanduser()

    def read_config(self) -> dict:
        """adapter_config.json, checked: a folder, a readable JSON object, a peft_type peft knows, a type
        maxbench can decode, a weight file. One line (``MaxbenchError``) otherwise."""
        from peft import PeftType

        where = f"adapter 'peft': {self.options['path']}"
        folder = self.folder
        if not folder.exists():
            raise MaxbenchError(f"{where} does not exist")
        if not folder.is_dir():
            raise MaxbenchError(f"{where} is not a folder (give the folder save_pretrained wrote)")
        path = folder / CONFIG
        if not path.is_file():
            raise MaxbenchError(f"{where} has no {CONFIG} (is it a PEFT adapter saved by save_pretrained?)")
        try:
            config = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MaxbenchError(f"{where}/{CONFIG} cannot be read as JSON: {_one_line(exc)}") from None
        if not isinstance(config, dict):
            raise MaxbenchError(f"{where}/{CONFIG} is not a JSON object")
        kind = config.get("peft_type")
        known = [t.value for t in PeftType]
        if kind not in known:
            from maxbench.registry import closest

            near = closest(str(kind), known)
            raise MaxbenchError(
                f"{where}/{CONFIG}: unknown peft_type {kind!r}"
                + (f": did you mean '{near}'?" if near else "")
                + f" (peft {_peft_version()} knows {len(known)} types)"
            )
        if kind != "PREFIX_TUNING" and self._prompt_learning(kind):
            raise MaxbenchError(
                f"{where}: peft_type {kind} puts virtual tokens in front of the input, which maxbench's decoding "
                "loop cannot reproduce faithfully; supported: weight adapters that peft merges (LORA, ...) and "
                "PREFIX_TUNING"
            )
        tuner = self._unmergeable_tuner(kind)
        if kind != "PREFIX_TUNING" and tuner is not None:
            raise MaxbenchError(
                f"{where}: peft_type {kind} is not supported: its tuner ({tuner}) cannot be merged into the weights, "
                "so maxbench's decoding loop cannot reproduce it faithfully; supported: weight adapters that peft "
                "merges (LORA, ...) and PREFIX_TUNING"
            )
        if not any((folder / w).is_file() for w in WEIGHTS):
            raise MaxbenchError(f"{where} has no {' or '.join(WEIGHTS)}")
        return config

    @staticmethod
    def _unmergeable_tuner(kind: str) -> str | None:
        """The name of the peft tuner of ``kind`` when it has no ``merge_and_unload`` (it adds learned
        prompts inside the model instead of changing weights, e.g. ADAPTION_PROMPT), else None."""
        from peft import PeftType
        from peft.mapping import PEFT_TYPE_TO_TUNER_MAPPING

        tuner = PEFT_TYPE_TO_TUNER_MAPPING.get(PeftType(kind))
        return tuner.__name__ if tuner is not None and not hasattr(tuner, "merge_and_unload") else None

    @staticmethod
    def _prompt_learning(kind: str) -> bool:
        from peft import PeftType
        from peft.config import PromptLearningConfig
        from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

        cls = PEFT_TYPE_TO_CONFIG_MAPPING.get(PeftType(kind))
        return cls is not None and issubclass(cls, PromptLearningConfig)

    def check_inputs(self) -> None:
        self.read_config()

    # ------------------------------------------------------------------ identity and loading
    def identity(self, lm, data: dict, code: dict) -> dict:
        """The base model's identity and the folder's content; not where the folder lies."""
        try:
            sha = folder_sha256(self.folder)
        except OSError as exc:
            raise MaxbenchError(f"adapter 'peft': cannot read {self.options['path']}: {_one_line(exc)}") from None
        return {
            "adapter": self.name,
            "version": self.version,
            "model_hash": lm.hash,
            "tokenizer_hash": lm.tokenizer_hash,
            "sha256": sha,
            "code": dict(code),
        }

    def prepare(self, ctx, code: dict | None = None):
        """The base model with the adapter loaded (merged, or a prefix for maxbench's loop); nothing
        is trained or cached: the folder is the adapter."""
        config = self.read_config()
        lm = ctx.model
        ident = self.identity(lm, ctx.data, code or {})
        key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]
        module = self.load(lm, config)
        files = [p.name for p in adapter_folder_files(self.folder)]
        self.meta = {
            **ident,
            "key": key,
            "peft_type": config["peft_type"],
            "base_model_name_or_path": config.get("base_model_name_or_path"),
            "files": files,
            "loaded_from_cache": False,
        }
        extra = {"peft_type": config["peft_type"], "files": files}
        return adapted_model(lm, self, module, key, ident["sha256"], extra=extra)

    def load(self, lm, config: dict):
        from peft import PeftModel

        where = f"adapter 'peft': the adapter in {self.options['path']}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                model = PeftModel.from_pretrained(lm.model, str(self.folder), is_trainable=False)
            except Exception as exc:  # peft's size mismatches, missing target modules, bad weight files
                text = _one_line(exc)
                fit = "size mismatch" in text or "not found in the base model" in text
                verb = "does not fit" if fit else "cannot be loaded onto"
                raise MaxbenchError(f"{where} {verb} model '{lm.name}': {text}") from None
        for w in caught:
            if "missing adapter keys" in str(w.message).lower():
                raise MaxbenchError(f"{where} does not fit model '{lm.name}': {_one_line(w.message)}")
        model = model.to(lm.device).eval()
        if config["peft_type"] == "PREFIX_TUNING":
            from maxbench.systems.adapters.prefix import PrefixLM

            n = int(model.peft_config[model.active_adapter].num_virtual_tokens)
            return PrefixLM(model, n).eval()
        untie_adapted_embeddings(model)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                return model.merge_and_unload().eval()
        except Exception as exc:
            raise MaxbenchError(
                f"adapter 'peft': peft_type {config['peft_type']} in {self.options['path']} cannot be merged into "
                f"the weights by peft ({_one_line(exc, 120)}), so maxbench cannot decode it faithfully"
            ) from None


def untie_adapted_embeddings(peft_model) -> None:
    """Give the output embeddings a weight of their own when the base model ties them to the input
    embeddings and the adapter changes one of the two. Unmerged, peft's adapter changes only the module
    it wraps (its ``generate`` reads the other through the untouched base weight); merging into a tied
    weight would change both, and the tokens would differ from peft's own. Untied, the merged model
    computes what peft's unmerged one does."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    base = peft_model.get_base_model()
    inp, out = base.get_input_embeddings(), base.get_output_embeddings()
    if inp is None or out is None:
        return
    w_in = getattr(getattr(inp, "base_layer", inp), "weight", None)
    w_out = getattr(getattr(out, "base_layer", out), "weight", None)
    if w_in is None or w_in is not w_out:
        return
    if not (isinstance(inp, BaseTunerLayer) or isinstance(out, BaseTunerLayer)):
        return
    holder = getattr(out, "base_layer", out)
    holder.weight = torch.nn.Parameter(w_out.detach().clone(), requires_grad=False)
    if hasattr(base.config, "tie_word_embeddings"):
        base.config.tie_word_embeddings = False  # a later tie_weights() must not join them again


def _peft_version() -> str:
    import peft

    return peft.__version__
