"""What fitting a KerBS or a POSG head shares: the head's identity, the load-or-train skeleton,
log lines that keep clear of progress bars, and held-out log-probabilities.

A trained head lives in ``maxbench_home()/heads/<layer>/<key>``, the key a hash of its identity
(maxbench.systems.hidden_cache.head_directory). The identity names everything the head depends on, so
a change of model, tokenizer, corpus, budget, hidden-cache format or option trains a new head,
and anything else finds the one already trained. Its fields are fixed here once for both
layers: adding, renaming or dropping one would move every cached head. A training option added
later is declared with ``metadata=WHEN_SET`` on its config field: it enters the identity only away
from its default, so the heads trained before it existed keep their keys.

Every head's meta says which validation epoch it kept (``best_epoch``; epoch 0 is the untrained
head) and flags ``untrained_best`` when that is epoch 0: training never beat the starting point, so
the head is its initialisation, not a trained head; ``still_improving`` says whether the last epoch
trained lowered the validation perplexity, so more epochs might have gained (:func:`with_best_epoch`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from maxbench.errors import MaxbenchError
from maxbench.locks import exclusive, held
from maxbench.systems import hidden_cache as hc

#: field metadata of a training option that is part of a head's identity only away from its default
WHEN_SET = {"identity": "when-set"}


def config_identity(cfg) -> dict:
    """A training config's fields as the identity records them: all of them, except those declared
    ``WHEN_SET`` that are at their defaults."""
    out = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.metadata.get("identity") == "when-set" and value == f.default:
            continue
        out[f.name] = value
    return out


def head_identity(layer: str, version: str, lm, corpus, budget_tokens: int, cfg, **extra) -> dict:
    """What a trained head depends on, as stored in its meta.json and hashed into its path.

    Parameters
    ----------
    layer : str
        The layer's name ("kerbs", "posg").
    version : str
        The layer's head format version; raising it retrains every head of that layer.
    lm : maxbench.systems.models.LoadedModel
        The frozen base model (its identity and tokenizer hashes are recorded; the identity
        covers every weight shard, the config, and non-default options such as revision and dtype).
    corpus
        The corpus whose fitting split trains the head (its ``name`` and ``sha256`` are recorded).
    budget_tokens : int
        Training positions taken from the fitting split.
    cfg : dataclass
        The layer's training options, recorded field by field (:func:`config_identity`).
    **extra
        Further dependencies of the layer (POSG: its tagger's version), recorded before ``config``.

    Returns
    -------
    dict
        The identity, JSON-serialisable.
    """
    return {
        "layer": layer,
        "version": version,
        "hidden_cache": hc.CACHE_VERSION,
        "model_hash": lm.hash,
        "tokenizer_hash": lm.tokenizer_hash,
        "corpus": corpus.name,
        "corpus_sha256": corpus.sha256,
        "budget_tokens": int(budget_tokens),
        **extra,
        "config": config_identity(cfg),
    }


#: the smallest value of each integer training option a system string may set (others: 0)
_MINIMUM = {"epochs": 1, "active_vocab": 1, "budget_tokens": hc.MIN_TRAIN_POSITIONS}


def check_fit_options(layer: str, values: dict, defaults: dict) -> dict:
    """Training options from a system string (``kerbs(seed=2)``), checked against the type of their
    defaults: a bool is ``true``/``false``, an integer a whole number at least its minimum, a float a
    number > 0 (a learning rate). Returns them with floats as floats; a bad one is one line."""
    out = {}
    for name, value in values.items():
        default = defaults[name]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(default, bool):
            ok, want = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            low = _MINIMUM.get(name, 0)
            ok, want = number and isinstance(value, int) and value >= low, f"a whole number >= {low}"
        else:
            ok, want = number and math.isfinite(value) and value > 0, "a number > 0"
            value = float(value) if ok else value
        if not ok:
            raise MaxbenchError(f"{layer} option {name} must be {want}, got {value!r}")
        out[name] = value
    return out


def head_perplexity_key(layer: str) -> str:
    """The meta key of a head's held-out perplexity: test_ppl_kerbs, test_ppl_ft_softmax, test_ppl_posg."""
    return "test_ppl_" + layer.replace("-", "_")


def best_epoch(history: list[dict]) -> int:
    """The epoch a head keeps: the first with the lowest validation perplexity (training replaces
    its best only on a strictly lower one); epoch 0 is the untrained head."""
    best = min(range(len(history)), key=lambda i: (history[i]["valid_ppl"], i))
    return int(history[best]["epoch"])


def still_improving(history: list[dict]) -> bool:
    """Whether the last epoch trained lowered the validation perplexity below the epoch before it
    (False for a history without a trained epoch)."""
    return len(history) >= 2 and history[-1]["valid_ppl"] < history[-2]["valid_ppl"]


def with_best_epoch(meta: dict) -> dict:
    """``meta`` with ``best_epoch``, ``untrained_best`` (best epoch 0) and ``still_improving`` from its
    validation history; heads cached before these were recorded get them on loading."""
    history = (meta.get("training") or {}).get("history")
    if not history:
        return meta
    epoch = best_epoch(history)
    return dict(meta, best_epoch=epoch, untrained_best=epoch == 0, still_improving=still_improving(history))


def untrained_best_warning(layer: str, meta: dict) -> str:
    """The one line that says a head's best epoch is the untrained one."""
    hist = meta["training"]["history"]
    later = min((h["valid_ppl"] for h in hist[1:]), default=float("nan"))
    return (
        f"warning: the {layer} head's best validation epoch is epoch 0, the untrained head (validation perplexity "
        f"{hist[0]['valid_ppl']:.3f} before training, {later:.3f} at best after {len(hist) - 1} epochs): "
        f"it is its starting point, not a trained head ({meta.get('path', '')})"
    )


def find_head(layer: str, sha256: str) -> dict | None:
    """The meta of the cached ``layer`` head whose weights have this sha256 (as a run manifest records
    it), with ``path``, ``best_epoch`` and ``untrained_best``; None when no cached head has it."""
    import json

    from maxbench.fileio import maxbench_home

    for meta_file in sorted((maxbench_home() / "heads" / layer).glob("*/meta.json")):
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("sha256") == sha256:
            return with_best_epoch(dict(meta, path=str(meta_file.parent)))
    return None


def load_or_train(
    layer: str,
    lm,
    restore: Callable[[dict, dict], torch.nn.Module],
    identity: Callable[[], dict],
    train: Callable[[dict], tuple[Any, dict]],
    retrain: bool = False,
    head_path=None,
) -> tuple[Any, dict]:
    """The trained head of ``layer`` for ``lm``: named, cached or trained now and cached.

    Parameters
    ----------
    layer : str
        The layer's name; a named head of another layer is refused.
    lm : maxbench.systems.models.LoadedModel
        The frozen base model; a head trained for another model or tokenizer is refused.
    restore : callable
        ``restore(tensors, meta)`` rebuilds the head from its saved tensors.
    identity : callable
        ``identity()`` gives the head's identity (:func:`head_identity`). It is called only
        when no ``head_path`` is given, so what it needs (POSG's tagger) is never loaded for a
        named head.
    train : callable
        ``train(identity)`` trains the head and returns (head, meta), meta holding the identity
        and what training measured; the head must have ``state_tensors()``.
    retrain : bool
        Train even when a complete head with this identity is cached (it is replaced).
    head_path : path-like, optional
        A head directory to use instead of the cache; it must hold a complete head.

    Returns
    -------
    (head, meta)
        The head on ``lm.device`` and its meta with ``path``, ``sha256``, ``loaded_from_cache``,
        ``best_epoch`` and ``untrained_best``. A trained head is written atomically before it is returned, so
        an interrupted training leaves no head behind. Loading and training hold the head's lock
        (``maxbench.locks``), so parallel workers train each head once.
    """
    if head_path is not None:
        tensors, meta = hc.load_head_from(head_path, lm)
        if meta.get("layer") != layer:
            raise MaxbenchError(f"{head_path} holds a {meta.get('layer')} head, not a {layer} head")
        return restore(tensors, meta).to(lm.device), with_best_epoch(meta)
    ident = identity()
    directory = hc.head_directory(layer, ident)
    with exclusive(directory):  # a second process waits for the first one's head instead of training it too
        if not retrain:
            loaded = hc.load_head(directory, lm)
            if loaded is not None:
                tensors, meta = loaded
                return restore(tensors, meta).to(lm.device), with_best_epoch(meta)
        head, meta = train(ident)
        return head, hc.save_head(directory, head.state_tensors(), with_best_epoch(meta))


def fit_busy(
    layer: str,
    lm,
    corpus,
    budget_tokens: int,
    identity: Callable[[], dict],
    retrain: bool = False,
    head_path=None,
) -> bool:
    """Whether :func:`load_or_train` with these arguments would now wait on another process: no head
    with this identity is cached (or ``retrain``) and another process holds the head's lock (it is
    training that head), or the head would be trained now and the hidden-state cache it trains on is
    being built by another process (:func:`maxbench.systems.hidden_cache.busy`, e.g. for another
    layer's head of the same model and corpus). A named head (``head_path``) and a cached one load
    at once. The hint behind ``OutputLayer.fit_busy`` for the trained heads; it writes nothing."""
    if head_path is not None or corpus is None:
        return False
    directory = hc.head_directory(layer, identity())
    if not retrain and hc.verify_complete(directory, check_hashes=False) is not None:
        return False
    return held(directory) or hc.busy(lm, corpus, budget_tokens)


def progress_log(msg: str) -> None:
    """One line on stderr, written above the progress bars (through tqdm) instead of into them."""
    from tqdm import tqdm

    tqdm.write(f"maxbench: {msg}", file=sys.stderr)


@torch.no_grad()
def part_logprobs(part, weight: torch.Tensor, scores=None, chunk: int = 1024) -> np.ndarray:
    """log P(target) of every position of a cached part.

    Parameters
    ----------
    part : maxbench.systems.hidden_cache.CachePart
        Cached positions (fp16 hidden states and next-token targets).
    weight : torch.Tensor
        (V, H) the base model's output embedding; its device is where the work is done.
    scores : callable, optional
        ``scores(hidden, logits)`` -> (B, V) log-probabilities up to a per-row constant, e.g. a
        head's ``word_scores``. None: the base softmax of ``hidden @ weight.T``.
    chunk : int
        Positions per batch.

    Returns
    -------
    numpy.ndarray
        (N,) float64 natural-log probabilities of the targets.
    """
    return part_logprobs_each(part, weight, [scores], chunk)[0]


@torch.no_grad()
def part_logprobs_each(part, weight: torch.Tensor, scorers: list, chunk: int = 1024) -> list[np.ndarray]:
    """:func:`part_logprobs` under each of ``scorers`` (callables or None, as its ``scores``), in one
    pass: each chunk's logits are computed once and given to every scorer, which must not change
    them. Each array has the bits :func:`part_logprobs` gives for its scorer alone."""
    dev = weight.device
    hidden = np.asarray(part.hidden)
    target = torch.from_numpy(np.array(part.target)).long()
    out = [np.empty(len(target), dtype=np.float64) for _ in scorers]
    for s in range(0, len(target), chunk):
        h = torch.from_numpy(np.array(hidden[s : s + chunk])).to(dev).float()
        logits = h @ weight.T
        t = target[s : s + chunk, None].to(dev)
        for scores, lp_out in zip(scorers, out):
            row_scores = logits if scores is None else scores(h, logits)
            lp = torch.log_softmax(row_scores, dim=-1).gather(1, t)[:, 0]
            lp_out[s : s + len(lp)] = lp.double().cpu().numpy()
    return out
