"""Perplexity, both ways round.

- ``ppl``: how likely an evaluator language model (default: the embedded smollm2-135m) finds
  the generated texts, each conditioned on its prompt. Corpus perplexity:
  exp(total negative log-likelihood / total scored tokens), tokens of the evaluator's tokeniser.
- ``reference_perplexity`` / ``ref-ppl``: how likely a *system* finds the human references,
  from the probabilities its own output layer gave each reference token (what KerBS reports).
  A sparse layer (sparsemax, POSG) gives some reference tokens probability 0, so plain
  perplexity is infinite; epsilon-perplexity (Martins et al. 2020) adds epsilon to every
  probability and renormalises, p' = (p + eps) / (1 + eps |V|), which is a mixture with
  the uniform distribution of weight eps|V| / (1 + eps|V|); the number of zero-probability
  tokens is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import MaxbenchError
from core.provenance import package_version

from .base import Metric, Score, TextBatch, finite_or_none, register_metric, signature
from .stats import PromptStats

DEFAULT_EVALUATOR = "smollm2-135m"
DEFAULT_EPSILON = 1e-6


def token_nll(
    model,
    contexts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    batch_size: int = 8,
    max_length: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Summed negative log-likelihood (nats) of each continuation given its context, and how
    many of its tokens were scored, under a Hugging Face causal LM.

    A continuation token is scored only when something precedes it, so with an empty context
    the first token is not counted. Contexts are cut from the left to fit ``max_length``
    (default: the model's maximum positions); a continuation longer than that is cut too.
    """
    import torch

    if max_length is None:
        max_length = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
    seqs, starts = [], []
    for ctx, cont in zip(contexts, continuations):
        cont = list(cont)[:max_length]
        ctx = list(ctx)[max(0, len(ctx) - (max_length - len(cont))) :]
        seqs.append(ctx + cont)
        starts.append(max(len(ctx), 1))  # first position whose token is predicted and belongs to cont
    nll = np.zeros(len(seqs))
    counts = np.array([len(s) - st if len(s) > st else 0 for s, st in zip(seqs, starts)], dtype=np.int64)
    device = next(model.parameters()).device
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    todo = [i for i in order if counts[i] > 0]
    with torch.inference_mode():
        for b in range(0, len(todo), batch_size):
            chunk = todo[b : b + batch_size]
            width = max(len(seqs[i]) for i in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                ids[row, : len(seqs[i])] = torch.tensor(seqs[i])
                mask[row, : len(seqs[i])] = 1
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, :-1].float()
            target = ids[:, 1:].to(device)
            # log-softmax at the target only: no second (batch, length, vocabulary) tensor
            picked = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
            picked = picked.cpu().double().numpy()
            for row, i in enumerate(chunk):
                # logits at position t predict token t + 1
                nll[i] = -picked[row, starts[i] - 1 : len(seqs[i]) - 1].sum()
    return nll, counts


@register_metric("ppl")
class Perplexity(Metric):
    higher_is_better = False
    variant = (
        "perplexity of the generated texts under an evaluator LM, each conditioned on its prompt: "
        "exp(total NLL / total tokens) over all texts"
    )

    def __init__(
        self, model: str = DEFAULT_EVALUATOR, device: str | None = None, threads: int | None = None, batch_size: int = 8
    ):
        self.model = model
        self.device = device
        self.threads = threads
        self.batch_size = batch_size
        self._loaded = None

    @property
    def signature(self) -> str:
        weights = getattr(self._loaded, "hash", None)
        return signature(
            "ppl",
            model=self.model,
            weights=(weights or "not-loaded")[:16],
            context="prompt",
            tok="evaluator",
            agg="exp(sum-NLL/sum-tokens)",
            torch=package_version("torch"),
            transformers=package_version("transformers"),
        )

    def load(self):
        if self._loaded is None:
            try:
                from systems.models import load_model
            except ImportError as exc:
                raise MaxbenchError(f"metric 'ppl' needs systems.models.load_model, which is missing ({exc})") from None
            try:
                self._loaded = load_model(self.model, device=self.device, threads=self.threads)
            except MaxbenchError as exc:
                raise MaxbenchError(f"metric 'ppl' cannot load evaluator model '{self.model}': {exc}") from None
        return self._loaded

    def compute(self, batch: TextBatch):
        loaded = self.load()
        tok = loaded.tokenizer
        prompts = batch.prompts or {}
        contexts = [tok(prompts.get(p, ""))["input_ids"] if prompts.get(p) else [] for p in batch.prompt_ids]
        conts = [tok(t, add_special_tokens=False)["input_ids"] if t else [] for t in batch.texts]
        nll, counts = token_nll(loaded.model, contexts, conts, self.batch_size)
        with np.errstate(divide="ignore", invalid="ignore"):
            per_text = np.exp(nll / counts)
        n_prompts = len(batch.prompt_order)
        rows = np.zeros((n_prompts, 2))
        np.add.at(rows, batch.prompt_index, np.column_stack([nll, counts]))
        stats = PromptStats(tuple(batch.prompt_order), (rows,), lambda agg: np.exp(agg[0][:, 0] / agg[0][:, 1]))
        return self.result(
            [Score("ppl", finite_or_none(stats.value()), stats, per_text)],
            notes=f"{int(counts.sum())} evaluator tokens scored",
        )


@dataclass(frozen=True)
class ReferencePerplexity:
    """Perplexity of references under a system's own distribution."""

    ppl: float  # exp(mean NLL); infinite when some reference token had probability 0
    eps_ppl: float  # the same with p' = (p + epsilon) / (1 + epsilon * vocab_size)
    epsilon: float
    vocab_size: int
    n_tokens: int
    n_zero: int  # reference tokens the system gave probability exactly 0
    rows: np.ndarray  # per reference: [sum log p', tokens, zero tokens, sum log p over nonzero tokens]


def _row_stats(logprobs, epsilon: float, vocab_size: int) -> list[float]:
    lp = np.array([-np.inf if v is None else v for v in logprobs], dtype=np.float64)
    if np.any(lp > 1e-9) or np.any(np.isnan(lp)):
        raise ValueError("log-probabilities must be <= 0 (use None or -inf for probability 0)")
    # log((p + eps) / (1 + eps V)) computed without leaving log space
    mixed = np.logaddexp(lp, math.log(epsilon)) - math.log1p(epsilon * vocab_size)
    zero = np.isneginf(lp)
    return [float(mixed.sum()), float(lp.size), float(zero.sum()), float(lp[~zero].sum())]


def reference_perplexity(
    logprob_rows: Sequence[Sequence[float | None]], vocab_size: int, epsilon: float = DEFAULT_EPSILON
) -> ReferencePerplexity:
    """Perplexity and epsilon-perplexity of references from the system's per-token log-probabilities.

    ``logprob_rows`` holds, for each reference text, the natural-log probability the system
    gave each of its tokens (teacher-forced); probability 0 is None or -inf.
    """
    if vocab_size < 1 or not epsilon > 0:
        raise ValueError("vocab_size must be >= 1 and epsilon > 0")
    rows = np.array([_row_stats(r, epsilon, vocab_size) for r in logprob_rows], dtype=np.float64).reshape(-1, 4)
    total = rows.sum(axis=0)
    n, zeros = int(total[1]), int(total[2])
    ppl = math.inf if zeros else (math.exp(-total[3] / n) if n else math.nan)
    eps_ppl = math.exp(-total[0] / n) if n else math.nan
    return ReferencePerplexity(ppl, eps_ppl, epsilon, vocab_size, n, zeros, rows)


@register_metric("ref-ppl")
class ReferencePPL(Metric):
    higher_is_better = False
    variant = (
        "perplexity of the references under the system's own output distribution (teacher-forced), "
        "plain and epsilon-perplexity (Martins et al. 2020), with the share of zero-probability tokens"
    )

    def __init__(self, epsilon: float = DEFAULT_EPSILON):
        self.epsilon = epsilon

    @property
    def signature(self) -> str:
        return signature(
            "ref-ppl",
            tok="system",
            eps=f"{self.epsilon:g}",
            eps_form="(p+eps)/(1+eps*V)",
            agg="exp(-sum-log-p/sum-tokens)",
            refs="prompt-reference",
        )

    def compute(self, batch: TextBatch):
        if not batch.reference_logprobs or batch.vocab_size is None:
            raise MaxbenchError(
                "metric 'ref-ppl' needs the system's log-probabilities of each reference token "
                "('reference_logprobs' in the run rows) and the vocabulary size; this input has none"
            )
        missing = [p for p in batch.prompt_order if p not in batch.reference_logprobs]
        if missing:
            raise MaxbenchError(f"metric 'ref-ppl': no reference log-probabilities for prompt '{missing[0]}'")
        result = reference_perplexity(
            [batch.reference_logprobs[p] for p in batch.prompt_order], batch.vocab_size, self.epsilon
        )
        ids = tuple(batch.prompt_order)
        rows = result.rows
        eps = PromptStats(ids, (rows,), lambda agg: np.exp(-agg[0][:, 0] / agg[0][:, 1]))
        plain = PromptStats(
            ids, (rows,), lambda agg: np.where(agg[0][:, 2] > 0, np.inf, np.exp(-agg[0][:, 3] / agg[0][:, 1]))
        )
        zero = PromptStats(ids, (rows,), lambda agg: agg[0][:, 2] / agg[0][:, 1])
        return self.result(
            [
                Score("ref-eps-ppl", finite_or_none(result.eps_ppl), eps),
                Score("ref-ppl", finite_or_none(result.ppl), plain),
                Score("ref-zero-frac", finite_or_none(zero.value()), zero),
            ],
            notes=f"{result.n_zero} of {result.n_tokens} reference tokens had probability 0",
        )
