"""What fitting a KerBS or a POSG head shares: the head's identity, the load-or-train skeleton,
log lines that keep clear of progress bars, and held-out log-probabilities.

A trained head lives in ``maxbench_home()/heads/<layer>/<key>``, the key a hash of its identity
(maxbench.systems.hidden_cache.head_directory). The identity names everything the head depends on, so
a change of model, tokenizer, corpus, budget, hidden-cache format or option trains a new head,
and anything else finds the one already trained. Its fields are fixed here once for both
layers: adding, renaming or dropping one would move every cached head.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from maxbench.errors import MaxbenchError
from maxbench.locks import exclusive
from maxbench.systems import hidden_cache as hc


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
        The layer's training options, recorded field by field.
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
        "config": asdict(cfg),
    }


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
        The head on ``lm.device`` and its meta with ``path``, ``sha256`` and
        ``loaded_from_cache``. A trained head is written atomically before it is returned, so
        an interrupted training leaves no head behind. Loading and training hold the head's lock
        (``maxbench.locks``), so parallel workers train each head once.
    """
    if head_path is not None:
        tensors, meta = hc.load_head_from(head_path, lm)
        if meta.get("layer") != layer:
            raise MaxbenchError(f"{head_path} holds a {meta.get('layer')} head, not a {layer} head")
        return restore(tensors, meta).to(lm.device), meta
    ident = identity()
    directory = hc.head_directory(layer, ident)
    with exclusive(directory):  # a second process waits for the first one's head instead of training it too
        if not retrain:
            loaded = hc.load_head(directory, lm)
            if loaded is not None:
                tensors, meta = loaded
                return restore(tensors, meta).to(lm.device), meta
        head, meta = train(ident)
        return head, hc.save_head(directory, head.state_tensors(), meta)


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
    dev = weight.device
    hidden = np.asarray(part.hidden)
    target = torch.from_numpy(np.array(part.target)).long()
    out = np.empty(len(target), dtype=np.float64)
    for s in range(0, len(target), chunk):
        h = torch.from_numpy(np.array(hidden[s : s + chunk])).to(dev).float()
        logits = h @ weight.T
        row_scores = logits if scores is None else scores(h, logits)
        lp = torch.log_softmax(row_scores, dim=-1).gather(1, target[s : s + chunk, None].to(dev))[:, 0]
        out[s : s + len(lp)] = lp.double().cpu().numpy()
    return out
