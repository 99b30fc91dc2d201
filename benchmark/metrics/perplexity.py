"""Perplexity, both ways round.

- ``ppl``: how likely an evaluator language model (default: the embedded smollm2-135m; any
  model by ``--evaluator``, e.g. gemma3-270m, named with its weights hash in the signature) finds
  the generated texts, each conditioned on its prompt. Corpus perplexity:
  exp(total negative log-likelihood / total scored tokens), tokens of the evaluator's tokeniser.
  Texts of several base models are comparable only under one evaluator. A prompt + text longer
  than the evaluator's context is scored with strided (sliding-window) perplexity, as ref-ppl
  scores long references (``text_windows``): every text token is scored, none cut, and the
  signature then names the stride; a batch whose texts all fit keeps its signature and values.
- ``ppl-smollm2-135m``, ``ppl-gemma3-270m``: ``ppl`` under that evaluator, whatever ``--evaluator``
  says, kept under its own score name beside ``ppl``: cross-evaluation, one base model's texts scored
  by another's perplexity (a model finds its own samples likely: perplexity under the generating
  model alone favours it), without replacing the run's ``ppl``.
- ``ref-ppl`` (``reference_perplexity`` in systems/layers/perplexity.py): how likely a *system* finds the human references,
  from the probabilities its own output layer gave each reference token (what KerBS reports).
  A sparse layer (sparsemax, POSG) gives some reference tokens probability 0, so plain
  perplexity is infinite; epsilon-perplexity (Martins et al. 2020) adds epsilon to every
  probability and renormalises, p' = (p + eps) / (1 + eps |V|), which is a mixture with
  the uniform distribution of weight eps|V| / (1 + eps|V|); the number of zero-probability
  tokens is reported beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from maxbench.benchmark.metrics.base import (
    PERPLEXITY,
    UNIT,
    Metric,
    Score,
    TextBatch,
    finite_or_none,
    info,
    signature,
    stats_score,
)
from maxbench.benchmark.metrics.stats import PromptStats
from maxbench.errors import MaxbenchError
from maxbench.provenance import package_version
from maxbench.systems.layers.perplexity import DEFAULT_EPSILON, reference_perplexity

DEFAULT_EVALUATOR = "smollm2-135m"


def evaluator_context(model) -> int:
    """How many positions an evaluator (a Hugging Face causal LM) reads at once: its config's
    maximum positions (no limit when the config does not say)."""
    n = getattr(model.config, "max_position_embeddings", None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1 << 30


def text_stride(context: int) -> int:
    """The stride of the sliding windows over a prompt + text longer than the evaluator's context:
    half the context, as ref-ppl's (``maxbench.systems.decoding.reference_stride``) and Hugging
    Face's "Perplexity of fixed-length models"."""
    return max(1, context // 2)


def text_windows(n_context: int, n_total: int, context: int, stride: int | None = None) -> list[tuple[int, int, int]]:
    """The windows ``(start, end, first)`` that score the text of a sequence of ``n_total`` tokens
    whose first ``n_context`` are its prompt: the evaluator reads tokens ``start:end`` and tokens
    ``first:end`` are scored, each once (a first token with nothing before it is not scored).

    One window when the sequence fits ``context``: the whole of it. Otherwise the field's strided
    (sliding-window) perplexity, as ref-ppl scores references: windows of ``context`` tokens whose
    ends move by ``stride`` (default half the context), so every text token is scored with at least
    ``context - stride`` tokens before it. The first window is the context's first positions (the whole
    prompt before the text) or, when the prompt alone fills the context, the prompt's last tokens and
    ``stride`` text tokens. A context of under 2 positions cannot score a token that does not fit it
    (ValueError)."""
    first = max(n_context, 1)
    if n_total <= context:
        return [(0, n_total, first)]
    if context < 2:
        raise ValueError(f"a context of {context} position leaves no token before the one scored")
    stride = min(stride or text_stride(context), context - 1)
    end = context if first < context else min(first + stride, n_total)
    windows = [(end - context, end, first)]
    while end < n_total:
        new_end = min(end + stride, n_total)
        windows.append((new_end - context, new_end, end))
        end = new_end
    return windows


def token_nll(
    model,
    contexts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    batch_size: int = 8,
    max_length: int | None = None,
    stride: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Summed negative log-likelihood (nats) of each continuation given its context, and how
    many of its tokens were scored, under a Hugging Face causal LM.

    A continuation token is scored only when something precedes it, so with an empty context
    the first token is not counted. A context + continuation longer than ``max_length`` (default:
    the model's maximum positions) is scored in sliding windows (:func:`text_windows`, moving by
    ``stride``, default half of ``max_length``): every token of the continuation is scored, none is cut.
    """
    import torch

    if max_length is None:
        max_length = evaluator_context(model)
    seqs, starts, windows = [], [], {}
    for i, (ctx, cont) in enumerate(zip(contexts, continuations)):
        seq = list(ctx) + list(cont)
        seqs.append(seq)
        starts.append(max(len(ctx), 1))  # first position whose token is predicted and belongs to cont
        if len(seq) > max_length and len(seq) > starts[i]:
            windows[i] = text_windows(len(ctx), len(seq), max_length, stride)
    nll = np.zeros(len(seqs))
    counts = np.array([len(s) - st if len(s) > st else 0 for s, st in zip(seqs, starts)], dtype=np.int64)
    device = next(model.parameters()).device

    def picked_logprobs(rows: list[list[int]]):
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for row, seq in enumerate(rows):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, :-1].float()
        target = ids[:, 1:].to(device)
        # log-softmax at the target only: no second (batch, length, vocabulary) tensor
        picked = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        return picked.cpu().double().numpy()

    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    todo = [i for i in order if counts[i] > 0 and i not in windows]
    # the windows of the sequences that do not fit, each of max_length tokens: (sequence, start, end, first)
    parts = [(i, start, end, first) for i in sorted(windows) for start, end, first in windows[i]]
    with torch.inference_mode():
        for b in range(0, len(todo), batch_size):
            chunk = todo[b : b + batch_size]
            picked = picked_logprobs([seqs[i] for i in chunk])
            for row, i in enumerate(chunk):
                # logits at position t predict token t + 1
                nll[i] = -picked[row, starts[i] - 1 : len(seqs[i]) - 1].sum()
        for b in range(0, len(parts), batch_size):
            chunk = parts[b : b + batch_size]
            picked = picked_logprobs([seqs[i][start:end] for i, start, end, _ in chunk])
            for row, (i, start, end, first) in enumerate(chunk):
                nll[i] -= picked[row, first - 1 - start : end - 1 - start].sum()
    return nll, counts


class Perplexity(Metric):
    name = "ppl"
    higher_is_better = False
    variant = (
        "perplexity of the generated texts under an evaluator LM, each conditioned on its prompt: "
        "exp(total NLL / total tokens) over all texts"
    )

    @property
    def score_info(self):
        return {"ppl": info("PPL", "human", percent=False, column=170, compact=4)}

    def __init__(
        self, model: str = DEFAULT_EVALUATOR, device: str | None = None, threads: int | None = None, batch_size: int = 8
    ):
        self.model = model
        self.device = device
        self.threads = threads
        self.batch_size = batch_size
        self._loaded = None
        self.stride: int | None = None  # of the batch being scored, when a prompt + text was strided

    @property
    def signature(self) -> str:
        weights = getattr(self._loaded, "hash", None)
        # a prompt + text longer than the evaluator's context is scored in sliding windows moving by this
        # stride (text_windows); a batch in which every text fits keeps the signature it always had
        stride = {} if self.stride is None else {"stride": str(self.stride)}
        return signature(
            self.name,
            model=self.model,
            weights=(weights or "not-loaded")[:16],
            context="prompt",
            tok="evaluator",
            agg="exp(sum-NLL/sum-tokens)",
            torch=package_version("torch"),
            transformers=package_version("transformers"),
            **stride,
        )

    @property
    def score_ranges(self):
        return {"ppl": PERPLEXITY}

    def cache_signature(self) -> str:
        self.load()  # the signature names the evaluator's weights hash
        return self.signature

    def load(self):
        if self._loaded is None:
            try:
                from maxbench.systems.models import load_model
            except ImportError as exc:
                raise MaxbenchError(
                    f"metric 'ppl' needs maxbench.systems.models.load_model, which is missing ({exc})"
                ) from None
            try:
                self._loaded = load_model(self.model, device=self.device, threads=self.threads)
            except MaxbenchError as exc:
                raise MaxbenchError(f"metric 'ppl' cannot load evaluator model '{self.model}': {exc}") from None
        return self._loaded

    def _compute(self, batch: TextBatch):
        loaded = self.load()
        tok = loaded.tokenizer
        prompts = batch.prompts or {}
        # with the tokenizer's own prefix, as the text was generated: Gemma's BOS (also before a text
        # without prompt, so its first token is scored too); SmolLM2 adds none
        contexts = [tok(prompts.get(p, ""))["input_ids"] for p in batch.prompt_ids]
        conts = [tok(t, add_special_tokens=False)["input_ids"] if t else [] for t in batch.texts]
        context = evaluator_context(loaded.model)
        longest = max((len(c) + len(t) for c, t in zip(contexts, conts) if t), default=0)
        if longest > context and context < 2:
            raise MaxbenchError(
                f"metric 'ppl': evaluator '{self.model}' reads {context} position at a time, too few to score a text "
                "longer than that; choose another evaluator (--evaluator)"
            )
        self.stride = text_stride(context) if longest > context else None
        try:
            nll, counts = token_nll(loaded.model, contexts, conts, self.batch_size, context, self.stride)
            return self._scores(batch, nll, counts)
        finally:
            self.stride = None  # the metric object scores other systems' batches too

    def _scores(self, batch: TextBatch, nll: np.ndarray, counts: np.ndarray):
        with np.errstate(divide="ignore", invalid="ignore"):
            per_text = np.exp(nll / counts)
        n_prompts = len(batch.prompt_order)
        rows = np.zeros((n_prompts, 2))
        np.add.at(rows, batch.prompt_index, np.column_stack([nll, counts]))
        stats = PromptStats(tuple(batch.prompt_order), (rows,), lambda agg: np.exp(agg[0][:, 0] / agg[0][:, 1]))
        return self.result(
            [stats_score(self.name, stats, per_text, "no evaluator token was scored (every text is empty)")],
            notes=f"{int(counts.sum())} evaluator tokens scored",
        )


class EvaluatorPerplexity(Perplexity):
    """``ppl`` under one fixed evaluator (``evaluator``), its score named as the metric (module
    docstring): a subclass per evaluator, registered under its name; ``--evaluator`` does not apply."""

    evaluator: str = ""
    label: str = ""

    @property
    def variant(self) -> str:
        return f"{Perplexity.variant}; evaluator {self.evaluator}, whatever --evaluator says"

    @property
    def score_info(self):
        return {self.name: info(f"PPL ({self.label})", "human", percent=False, column=175)}

    @property
    def score_ranges(self):
        return {self.name: PERPLEXITY}

    def __init__(self, device: str | None = None, threads: int | None = None, batch_size: int = 8):
        super().__init__(self.evaluator, device, threads, batch_size)


class SmolLM2Perplexity(EvaluatorPerplexity):
    name = "ppl-smollm2-135m"
    evaluator = "smollm2-135m"
    label = "SmolLM2-135M"


class GemmaPerplexity(EvaluatorPerplexity):
    name = "ppl-gemma3-270m"
    evaluator = "gemma3-270m"
    label = "Gemma 3 270M"


class ReferencePPL(Metric):
    name = "ref-ppl"
    higher_is_better = False
    variant = (
        "perplexity of the references under the system's own output distribution (teacher-forced), "
        "plain and epsilon-perplexity (Martins et al. 2020), with the share of zero-probability tokens"
    )

    @property
    def score_info(self):
        return {
            "ref-eps-ppl": info("ref eps-PPL", "lower", percent=False, column=180),
            "ref-ppl": info("ref PPL", "lower", percent=False),
            "ref-zero-frac": info("ref zero-prob share", "lower"),
        }

    def human_row(self) -> str | None:
        return "the generating system's own likelihood of the references; the references have no such system"

    def __init__(self, epsilon: float = DEFAULT_EPSILON):
        self.epsilon = epsilon
        self.stride: int | None = None  # of the batch being scored, when a reference was strided

    @property
    def signature(self) -> str:
        # a reference longer than the model's context is scored in sliding windows of the context moving
        # by this stride (each token once, with at least context - stride tokens of left context); a run
        # in which every reference fits keeps the signature it always had
        stride = {} if self.stride is None else {"stride": str(self.stride)}
        return signature(
            "ref-ppl",
            tok="system",
            eps=f"{self.epsilon:g}",
            eps_form="(p+eps)/(1+eps*V)",
            agg="exp(-sum-log-p/sum-tokens)",
            refs="prompt-reference",
            **stride,
        )

    @property
    def score_ranges(self):
        return {"ref-eps-ppl": PERPLEXITY, "ref-ppl": PERPLEXITY, "ref-zero-frac": UNIT}

    def _logprob_rows(self, batch: TextBatch) -> list:
        # the runner records none for an empty reference, which has no token to score
        return [
            batch.reference_logprobs.get(p, [] if batch.references and not batch.references[p].strip() else None)
            for p in batch.prompt_order
        ]

    def unavailable(self, batch: TextBatch) -> str | None:
        if not batch.reference_logprobs or batch.vocab_size is None:
            return (
                "needs the system's log-probabilities of each reference token ('reference_logprobs' in "
                "the run rows) and the vocabulary size; this input has none"
            )
        rows = self._logprob_rows(batch)
        missing = [p for p, row in zip(batch.prompt_order, rows) if row is None]
        if missing:
            return (
                f"has no reference log-probabilities for {len(missing)} of {len(rows)} prompts "
                f"(e.g. '{missing[0]}'); generate them again"
            )
        return None

    def _compute(self, batch: TextBatch):
        stride = getattr(batch, "reference_stride", None)
        if stride is not None and (not isinstance(stride, int) or isinstance(stride, bool) or stride < 1):
            raise MaxbenchError(
                f"metric 'ref-ppl': the rows' reference_stride {stride!r} is not a positive integer; "
                f"the run file is damaged: generate the run again"
            )
        self.stride = stride
        try:
            return self._scores(batch)
        finally:
            self.stride = None  # the metric object scores other systems' batches too

    def _scores(self, batch: TextBatch):
        try:
            result = reference_perplexity(self._logprob_rows(batch), int(batch.vocab_size), self.epsilon)
        except (TypeError, ValueError) as exc:
            raise MaxbenchError(
                f"metric 'ref-ppl': the rows' reference log-probabilities or vocabulary size are not valid ({exc}); "
                f"the run file is damaged: generate the run again"
            ) from None
        ids = tuple(batch.prompt_order)
        rows = result.rows
        eps = PromptStats(ids, (rows,), lambda agg: np.exp(-agg[0][:, 0] / agg[0][:, 1]))
        plain = PromptStats(
            ids, (rows,), lambda agg: np.where(agg[0][:, 2] > 0, np.inf, np.exp(-agg[0][:, 3] / agg[0][:, 1]))
        )
        zero = PromptStats(ids, (rows,), lambda agg: agg[0][:, 2] / agg[0][:, 1])
        none_tokens = "no reference token to score (every reference is empty)" if not result.n_tokens else None
        infinite = "infinite: some reference tokens had probability 0" if result.n_zero else None
        return self.result(
            [
                # the values as reference_perplexity sums them, to the last bit
                Score("ref-eps-ppl", finite_or_none(result.eps_ppl), eps, reason=none_tokens),
                Score("ref-ppl", finite_or_none(result.ppl), plain, reason=none_tokens or infinite),
                stats_score("ref-zero-frac", zero, undefined=none_tokens),
            ],
            notes=f"{result.n_zero} of {result.n_tokens} reference tokens had probability 0",
        )
