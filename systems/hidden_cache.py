"""Final hidden states of a frozen base model over a corpus, computed once and kept on disk.

Trained output layers (KerBS, POSG) learn on top of a frozen base model, so the expensive
part, the forward pass through the transformer, is done once per (model, corpus, budget)
and every head trains on the stored states. The cache holds three parts:

- ``train``: whole fitting-split documents, in a fixed pseudo-random order (sorted by the
  sha256 of their text), until ``budget_tokens`` predicted positions are reached;
- ``valid``: the next fitting-split documents, about a tenth of the budget, for early stopping;
- ``test``: test-split documents (never seen by any head), about a tenth of the budget, for
  the perplexities reported.

Each document is tokenised without special tokens, cut at ``MAX_DOC_TOKENS`` and, when it
was not cut, followed by EOS, so heads also learn where a text ends. Position t holds the
hidden state after the final norm (the vector the LM head multiplies) for prefix tokens
0..t and the id of token t+1. Documents are encoded as prompts are, with the tokenizer's own
prefix: Gemma's BOS comes first, so every word of a Gemma document is a target; SmolLM2 adds
none, so the first token of a SmolLM2 document is never a target. Stored per part: ``hidden`` (N, H) fp16, ``target`` (N,) int32, ``doc``
(N,) int32 (index into the part's documents), ``span`` (N, 2) int32 (character span of
the target token in its document, -1 for EOS) and ``base_logprob`` (N,) float32, the base
model's own fp32 log-probability of the target, for the softmax reference (valid and test
parts only; NaN in the train part, where it would cost a full LM-head pass for nothing).

The directory is ``maxbench_home()/hidden/<key>/`` with the key a hash of the model's
identity (``LoadedModel.hash``: every weight shard, config and tokenizer file, and the non-default
model options such as revision and dtype; maxbench.systems.models), tokenizer, corpus sha256,
budget and cache format. It is written into a
temporary sibling directory, completed with ``complete.json`` (the sha256 of every file)
and moved into place with ``os.replace``, so a half-written cache is never read: an
interrupted build leaves only a temporary directory that the next build ignores and
removes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_dir, maxbench_home
from maxbench.locks import exclusive, held
from maxbench.systems.assets import sha256_file

CACHE_VERSION = "2"  # 2: the test part is budget // 10 positions (was // 5)
#: Sized for the main command's 15-minute cold budget on 2 CPU cores (smollm2-135m,
#: food-reviews): 60k training positions + 6k validation + 6k test, about 72k tokens through the
#: body; the forward pass and both heads' training then take a few minutes of that budget
#: (measured times in benchmarks/head_training.py).
DEFAULT_BUDGET_TOKENS = 60_000
MAX_DOC_TOKENS = 256
#: fewer predicted positions than this in the training part is not worth training a head on
MIN_TRAIN_POSITIONS = 1_000
BATCH_TOKENS = 4096
PARTS = ("train", "valid", "test")
ARRAYS = ("hidden", "target", "doc", "span", "base_logprob")


# --------------------------------------------------------------------------- atomic dirs
@contextlib.contextmanager
def atomic_directory(final: Path):
    """Yield a temporary directory next to ``final``; on success it becomes ``final``.

    The caller writes every file, then :func:`write_complete_marker` last. On an error or
    interrupt the temporary directory is removed and ``final`` is untouched."""
    with atomic_dir(final) as tmp:
        yield tmp
        if not (tmp / "complete.json").exists():
            raise RuntimeError("atomic_directory: complete.json was not written")


def write_complete_marker(directory: Path) -> dict:
    """Record the sha256 of every file in ``directory``; written last, it marks completion."""
    digests = {p.name: sha256_file(p) for p in sorted(directory.iterdir()) if p.is_file()}
    (directory / "complete.json").write_text(json.dumps(digests, indent=1))
    return digests


def verify_complete(directory: Path, check_hashes: bool = True) -> dict | None:
    """The recorded digests if ``directory`` is complete and intact, else None."""
    marker = directory / "complete.json"
    if not marker.exists():
        return None
    try:
        digests = json.loads(marker.read_text())
    except ValueError:
        return None
    for name, digest in digests.items():
        path = directory / name
        if not path.exists() or (check_hashes and sha256_file(path) != digest):
            return None
    return digests


def remove_stale_temporaries(parent: Path, max_age_s: float = 6 * 3600) -> None:
    """Remove temporary directories left by interrupted writes (old enough not to be live)."""
    if not parent.exists():
        return
    now = time.time()
    for p in parent.glob(".tmp-*"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > max_age_s:
                shutil.rmtree(p, ignore_errors=True)


# --------------------------------------------------------------------------- the cache
@dataclass
class CachePart:
    hidden: np.ndarray  # (N, H) float16, memory-mapped
    target: np.ndarray  # (N,) int32
    doc: np.ndarray  # (N,) int32
    span: np.ndarray  # (N, 2) int32
    base_logprob: np.ndarray  # (N,) float32
    docs: list[str]

    def __len__(self) -> int:
        return int(self.target.shape[0])


@dataclass
class HiddenCache:
    path: Path
    key: str
    meta: dict
    parts: dict[str, CachePart] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        """One hash for the whole cache: of its completion marker (which lists every file's hash)."""
        return hashlib.sha256((self.path / "complete.json").read_bytes()).hexdigest()

    def __getitem__(self, part: str) -> CachePart:
        return self.parts[part]


def cache_key(lm, corpus, budget_tokens: int) -> tuple[str, dict]:
    """The cache's key (its folder name) and identity; ``lm.hash`` carries the model's identity with
    its non-default options, so two models that differ in a shard, their config or an option never
    share a cache, and a model loaded with default options keeps the key it always had."""
    ident = {
        "version": CACHE_VERSION,
        "model_hash": lm.hash,
        "tokenizer_hash": lm.tokenizer_hash,
        "corpus": corpus.name,
        "corpus_sha256": corpus.sha256,
        "budget_tokens": int(budget_tokens),
        "max_doc_tokens": MAX_DOC_TOKENS,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24], ident


def _doc_order(texts: list[str]) -> list[int]:
    return sorted(range(len(texts)), key=lambda i: hashlib.sha256(texts[i].encode()).hexdigest())


def _tokenise(tokenizer, texts: list[str]):
    # As decode() encodes a prompt: with the tokenizer's own prefix (Gemma's BOS, at offsets (0, 0)).
    enc = tokenizer(texts, add_special_tokens=True, return_offsets_mapping=True)
    return enc["input_ids"], enc["offset_mapping"]


def _select(tokenizer, texts: list[str], budget: int, skip: int = 0):
    """Documents in hash order from index ``skip`` on, until ``budget`` positions are filled.

    Returns the selected (text, ids, offsets, ends_with_eos) and how many docs were used."""
    order = _doc_order(texts)[skip:]
    chosen, n_pos, used = [], 0, 0
    step = 256
    for start in range(0, len(order), step):
        batch = [texts[i] for i in order[start : start + step]]
        ids, offs = _tokenise(tokenizer, batch)
        for text, d_ids, d_offs in zip(batch, ids, offs):
            if n_pos >= budget:
                return chosen, used
            used += 1
            complete = len(d_ids) <= MAX_DOC_TOKENS
            d_ids, d_offs = d_ids[:MAX_DOC_TOKENS], d_offs[:MAX_DOC_TOKENS]
            positions = len(d_ids) - 1 + (1 if complete else 0)
            if positions < 1:
                continue
            chosen.append((text, list(d_ids), [tuple(o) for o in d_offs], complete))
            n_pos += positions
    return chosen, used


def _check_linear_head(lm) -> None:
    """Heads replace ``h @ W^T``; refuse models whose logits are not that (bias, soft-capping)."""
    import torch

    head = lm.model.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise MaxbenchError(
            f"model '{lm.name}' has a bias in its LM head; trained heads (KerBS, POSG) "
            f"support bias-free linear heads only"
        )
    with torch.inference_mode():
        ids = torch.arange(min(8, lm.vocab_size), device=lm.device)[None]
        out = lm.model(input_ids=ids, output_hidden_states=True)
        h = out.hidden_states[-1][0].float()
        direct = h @ head.weight.float().T
        if not torch.allclose(direct, out.logits[0].float(), atol=1e-3, rtol=1e-4):
            raise MaxbenchError(
                f"model '{lm.name}' computes logits other than hidden @ embedding^T "
                f"(soft-capping or scaling); trained heads do not support it"
            )


def _forward_part(lm, chosen, arrays: dict, progress, with_logprob: bool) -> None:
    """Run the model over ``chosen`` documents, filling the memory-mapped ``arrays``."""
    import torch

    eos = lm.tokenizer.eos_token_id
    head_w = lm.model.get_output_embeddings().weight
    # Sort by length so each batch wastes little padding; positions are written back in doc order.
    lengths = [len(c[1]) for c in chosen]
    starts = np.concatenate([[0], np.cumsum([n - 1 + int(c[3]) for n, c in zip(lengths, chosen)])])
    by_len = sorted(range(len(chosen)), key=lambda i: lengths[i])
    batches, cur, cur_max = [], [], 0
    for i in by_len:
        new_max = max(cur_max, lengths[i])
        if cur and new_max * (len(cur) + 1) > BATCH_TOKENS:
            batches.append(cur)
            cur, new_max = [], lengths[i]
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    with torch.inference_mode():
        for batch in batches:
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), eos, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                ids[r, : lengths[i]] = torch.tensor(chosen[i][1])
                mask[r, : lengths[i]] = 1
            # Right padding: a causal model's real positions never see the padding after them.
            hid = lm.model.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).last_hidden_state
            for r, i in enumerate(batch):
                text, d_ids, d_offs, complete = chosen[i]
                n = lengths[i]
                npos = n - 1 + int(complete)
                h = hid[r, :npos].float()
                tgt = d_ids[1:] + ([eos] if complete else [])
                s, e = int(starts[i]), int(starts[i]) + npos
                arrays["hidden"][s:e] = h.to(torch.float16).cpu().numpy()
                arrays["target"][s:e] = np.asarray(tgt, dtype=np.int32)
                arrays["doc"][s:e] = i
                span = np.asarray(d_offs[1:] + ([(-1, -1)] if complete else []), dtype=np.int32).reshape(-1, 2)
                arrays["span"][s:e] = span
                if with_logprob:
                    logp = torch.log_softmax(h @ head_w.float().T, dim=-1)
                    tgt_t = torch.tensor(tgt, device=h.device)
                    arrays["base_logprob"][s:e] = logp.gather(1, tgt_t[:, None])[:, 0].cpu().numpy()
                else:
                    arrays["base_logprob"][s:e] = np.nan
            progress(sum(lengths[i] for i in batch))


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "tok"):
    """A tqdm bar on stderr (stdout carries the commands' results), shown only when ``enabled``."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, dynamic_ncols=True)


def load_or_build(
    lm,
    corpus,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    progress: bool = True,
    min_train_positions: int = MIN_TRAIN_POSITIONS,
) -> HiddenCache:
    """The hidden-state cache for (model, corpus, budget): loaded when complete, built otherwise."""
    if budget_tokens < min_train_positions:
        raise MaxbenchError(
            f"--budget-tokens {budget_tokens} is too small; heads need at least "
            f"{min_train_positions} training positions"
        )
    key, ident = cache_key(lm, corpus, budget_tokens)
    root = maxbench_home() / "hidden"
    final = root / key
    with exclusive(final):  # a second process waits for the first one's cache instead of building it too
        return _load_or_build(lm, corpus, budget_tokens, progress, min_train_positions, key, ident, final)


def busy(lm, corpus, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> bool:
    """Whether :func:`load_or_build` for (model, corpus, budget) would now wait on another process's
    build: the cache is not complete and a live process holds its lock. A complete cache is only
    opened under the lock, which takes moments, so it never counts as busy. A hint that can be stale
    the moment it is read (a build may start or end just after): a caller orders its work by it
    (``OutputLayer.fit_busy``) and still gets the right cache from :func:`load_or_build` either way."""
    final = maxbench_home() / "hidden" / cache_key(lm, corpus, budget_tokens)[0]
    return verify_complete(final, check_hashes=False) is None and held(final)


def _load_or_build(lm, corpus, budget_tokens, progress, min_train_positions, key, ident, final) -> HiddenCache:
    root = final.parent
    if verify_complete(final, check_hashes=False) is not None:
        cache = _open(final, key)
        if cache is not None:
            return cache
    remove_stale_temporaries(root)
    _check_linear_head(lm)
    import torch

    t0 = time.time()
    tok = lm.tokenizer
    if not corpus.fit or not corpus.test:
        raise MaxbenchError(f"corpus '{corpus.name}' has an empty fitting or test split; heads need both")
    train, used = _select(tok, corpus.fit, budget_tokens)
    valid, _ = _select(tok, corpus.fit, max(budget_tokens // 10, 1), skip=used)
    test, _ = _select(tok, corpus.test, max(budget_tokens // 10, 1))
    n_train = sum(len(c[1]) - 1 + int(c[3]) for c in train)
    if n_train < min_train_positions or not valid or not test:
        raise MaxbenchError(
            f"corpus '{corpus.name}' is too small to train a head: {n_train} training positions "
            f"(need {min_train_positions}), {len(valid)} validation and {len(test)} test documents "
            f"(need at least one each); use a larger corpus"
        )
    hidden_size = lm.model.get_output_embeddings().weight.shape[1]
    total_tokens = sum(len(c[1]) for part in (train, valid, test) for c in part)
    meta = dict(
        ident,
        model=lm.name,
        hidden_size=hidden_size,
        torch_threads=torch.get_num_threads(),
        device=str(lm.device),
        torch_version=torch.__version__,
        parts={},
    )
    with atomic_directory(final) as tmp, progress_bar(total_tokens, "hidden states", progress) as bar:
        for part, chosen in zip(PARTS, (train, valid, test)):
            n = sum(len(c[1]) - 1 + int(c[3]) for c in chosen)
            arrays = {
                "hidden": np.lib.format.open_memmap(tmp / f"{part}.hidden.npy", "w+", np.float16, (n, hidden_size)),
                "target": np.lib.format.open_memmap(tmp / f"{part}.target.npy", "w+", np.int32, (n,)),
                "doc": np.lib.format.open_memmap(tmp / f"{part}.doc.npy", "w+", np.int32, (n,)),
                "span": np.lib.format.open_memmap(tmp / f"{part}.span.npy", "w+", np.int32, (n, 2)),
                "base_logprob": np.lib.format.open_memmap(tmp / f"{part}.base_logprob.npy", "w+", np.float32, (n,)),
            }
            _forward_part(lm, chosen, arrays, bar.update, with_logprob=part != "train")
            for a in arrays.values():
                a.flush()
            del arrays
            (tmp / f"{part}.docs.json").write_text(json.dumps([c[0] for c in chosen], ensure_ascii=False))
            meta["parts"][part] = {"documents": len(chosen), "positions": n}
        meta["build_seconds"] = round(time.time() - t0, 1)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        write_complete_marker(tmp)
    cache = _open(final, key)
    if cache is None:  # pragma: no cover - only if the disk lost what was just written
        raise MaxbenchError(f"hidden-state cache {final} could not be read back; delete it and rerun")
    return cache


def _open(path: Path, key: str) -> HiddenCache | None:
    try:
        meta = json.loads((path / "meta.json").read_text())
        parts = {}
        for part in PARTS:
            arrs = {a: np.load(path / f"{part}.{a}.npy", mmap_mode="r") for a in ARRAYS}
            docs = json.loads((path / f"{part}.docs.json").read_text())
            parts[part] = CachePart(docs=docs, **arrs)
    except (OSError, ValueError, KeyError):
        return None
    return HiddenCache(path=path, key=key, meta=meta, parts=parts)


# --------------------------------------------------------------------------- trained heads
def head_directory(layer: str, ident: dict) -> Path:
    """Where the head trained with ``ident`` (model, tokenizer, corpus, options) is kept."""
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]
    return maxbench_home() / "heads" / layer / key


def save_head(directory: Path, tensors: dict, meta: dict) -> dict:
    """Write ``head.safetensors`` + ``meta.json`` atomically; returns meta with the head's sha256."""
    from safetensors.torch import save_file

    remove_stale_temporaries(directory.parent)
    with atomic_directory(directory) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / "head.safetensors"))
        meta = dict(meta, sha256=sha256_file(tmp / "head.safetensors"))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        write_complete_marker(tmp)
    return dict(meta, path=str(directory), loaded_from_cache=False)


def load_head(directory: Path, lm) -> tuple[dict, dict] | None:
    """The tensors and meta of a complete head in ``directory``, or None when there is none.

    A head trained for another model or tokenizer is refused with a MaxbenchError; a
    directory without its completion marker or with a file whose hash changed is not a head."""
    from safetensors.torch import load_file

    directory = Path(directory)
    if verify_complete(directory) is None:
        return None
    meta = json.loads((directory / "meta.json").read_text())
    for field_name, have in (("model_hash", lm.hash), ("tokenizer_hash", lm.tokenizer_hash)):
        if meta.get(field_name) != have:
            raise MaxbenchError(
                f"the {meta.get('layer', 'trained')} head in {directory} was trained for another model "
                f"({field_name} {str(meta.get(field_name))[:12]}..., this model has {str(have)[:12]}...); "
                f"train one for this model with: maxbench fit --model {lm.name} --layer {meta.get('layer', 'LAYER')}"
            )
    return load_file(str(directory / "head.safetensors")), dict(meta, path=str(directory), loaded_from_cache=True)


def load_head_from(path, lm) -> tuple[dict, dict]:
    """Like :func:`load_head` for a directory the user named: a missing or partial head is an error."""
    loaded = load_head(Path(path).expanduser(), lm)
    if loaded is None:
        raise MaxbenchError(
            f"{path} holds no complete trained head (missing files or an interrupted write); "
            f"train one with: maxbench fit --model {lm.name} --layer LAYER --corpus CORPUS"
        )
    return loaded
