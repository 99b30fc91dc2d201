"""The output-layer contract shared by every layer and by the decoding loop.

Per decoding step the loop calls ``layer.scores(logits, hidden)`` with the base model's
last-position logits (B, V) and, when ``needs_hidden``, its final hidden state (B, H).
A layer returns *scores*: log-probabilities up to a per-row constant, with ``-inf`` for
tokens given exactly zero probability. The loop then applies the decoding setting
(temperature, top-k, top-p: Hugging Face's own logits warpers) to the scores, takes the
softmax, and samples one token per row with that row's own generator. Softmax returns
the logits untouched, which keeps it token-exact with ``transformers``' ``generate``.

A layer whose method is itself a sampling procedure (POSG's two-stage sampling)
overrides ``sample``. ``step_stats`` returns per-row extras for the current step
(e.g. graphmax's solver iterations and certified duality gap) that are written with
the generations; entropy, support size and top-1 mass are computed by the loop for
every layer from the final distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from maxbench.errors import MaxbenchError


@dataclass
class FitContext:
    """What a layer may need to prepare itself: the loaded base model and a corpus."""

    model: Any  # maxbench.systems.models.LoadedModel
    corpus: Any = None  # maxbench.benchmark.data.corpora.Corpus (fitting split used)
    options: dict = field(default_factory=dict)


class OutputLayer:
    #: registry name used in system strings, e.g. "graphmax"
    name: str = "base"
    #: the layer needs the final hidden state (KerBS, POSG)
    needs_hidden: bool = False
    #: the layer may give exactly zero probability to some tokens
    can_be_sparse: bool = False
    #: fit() must run before decoding
    needs_fit: bool = False
    #: the layer generates from a conditional suite's attributes: a suite without them is refused
    #: before anything runs (``maxbench.benchmark.data.suites.require_attributes``, docs/conditional.md)
    needs_attributes: bool = False
    #: options of fitting that the system string may set, name -> default (KerBS's ``seed``, POSG's
    #: ``lm_prior``): each is a keyword of ``__init__``, and one given at its default is dropped from
    #: the canonical name (``parse_system``) and leaves a trained head's cache key as it was
    fit_options: dict = {}

    def params(self) -> dict:
        """Parameters that define the layer, as written in the system string."""
        return {}

    def fit(self, ctx: FitContext) -> None:  # pragma: no cover - trivial default
        """Build or load whatever the layer needs (graph, trained head). Default: nothing."""

    def fit_busy(self, ctx: FitContext) -> bool:
        """Whether ``fit(ctx)`` would now wait on something another process is building: a cache that
        several layers share (the hidden states KerBS and POSG train on, graphmax's graph) or this
        layer's own, built under a lock (``maxbench.locks.exclusive``; ``maxbench.locks.held`` says
        whether another process holds one). A run's worker then decodes other systems' batches first
        and fits this layer once it answers False, or when nothing else is left (then ``fit`` waits).
        Only the order of work depends on it, never a row: it may be stale the moment it is read, and
        must be quick and write nothing the fit depends on. Default: never busy."""
        return False

    def resource_hashes(self) -> dict:
        """Hashes of the artefacts the layer was fitted with, recorded in run manifests (with what a
        report must know of them, e.g. a trained head's ``untrained_best``)."""
        return {}

    def non_default_fit_options(self) -> dict:
        """The ``fit_options`` this layer was given away from their defaults, in declaration order."""
        return {k: getattr(self, k) for k, d in self.fit_options.items() if not same_value(getattr(self, k), d)}

    def scores(self, logits: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def sample(self, scores: torch.Tensor, warp, generators) -> torch.Tensor:
        """Default sampling: warp scores, softmax, one multinomial draw per row.

        ``warp`` is a callable (scores) -> scores applying the decoding setting; ``generators``
        are the rows' generators, to draw with through :func:`sample_rows`.
        Returns the chosen token ids (B,) and leaves the final probabilities in
        ``self.last_probs`` for the statistics.
        """
        probs = torch.softmax(warp(scores), dim=-1)
        self.last_probs = probs
        return sample_rows(probs, generators)

    def step_stats(self) -> dict[str, torch.Tensor]:
        return {}


def same_value(value, default) -> bool:
    """Whether an option's value is its default: equal, and a bool only where the default is one
    (``lm_prior=1`` is not ``lm_prior=true``; ``lr=0.00005`` is ``lr=5e-5``)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and isinstance(default, bool) and value == default
    return value == default


def sample_rows(probs: torch.Tensor, generators) -> torch.Tensor:
    """One draw per row, each from its own generator, so a row's tokens do not depend on
    which other rows share its batch (this is what makes resumed and sharded runs equal).

    ``generators`` is what the decoding loop passes to ``sample``: with the CPU generator (the
    CPU's default) a list of CPU ``torch.Generator``, one per row, and the draw is
    ``torch.multinomial(probs[i:i+1], 1, generator=generators[i])``, computed by
    :func:`maxbench.systems.multinomial.multinomial_rows` (the same draws; half the time after
    top-p truncation), returned on the CPU; with the device generator (CUDA's default) a
    :class:`maxbench.systems.counter_sampling.CounterGenerator`, whose draw stays on the
    probabilities' device. A layer that draws should call this, not index ``generators``."""
    from maxbench.systems.counter_sampling import CounterGenerator

    if isinstance(generators, CounterGenerator):
        return generators.draw(probs)
    from maxbench.systems.multinomial import multinomial_rows

    return multinomial_rows(probs, generators)


def draws_on_device(generators) -> bool:
    """Whether ``generators`` (what ``sample`` is given) draw on the probabilities' device (the device
    generator) rather than on the host (CPU ``torch.Generator``s): a layer then keeps its
    probabilities where they are."""
    from maxbench.systems.counter_sampling import CounterGenerator

    return isinstance(generators, CounterGenerator)


def all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite. A NaN or an infinity anywhere makes the sum NaN or
    infinite, and the sum is one pass with no temporary (isfinite's mask and its ``all`` take 12x
    as long on a decoding step's logits: ``benchmarks/finite_check.py``); only a sum that is not
    finite (finite entries can overflow it, and -inf scores make it so) takes the exact check."""
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


#: how many decoding steps pass between two reads of :class:`ScoreCheck`'s device-side flag
CHECK_EVERY = 16


def check_scores_form(scores, logits: torch.Tensor, what: str, where: str) -> None:
    """A layer's ``scores`` must be a floating tensor of the logits' shape on the logits' device:
    one line naming the layer (``what``) and the call (``where``) otherwise. Metadata only, so it
    costs no synchronisation with the device."""
    if not isinstance(scores, torch.Tensor):
        raise MaxbenchError(f"{what}: scores() {where} returned {type(scores).__name__}, not a tensor")
    if tuple(scores.shape) != tuple(logits.shape):
        raise MaxbenchError(
            f"{what}: scores() {where} returned shape {tuple(scores.shape)} for logits of shape {tuple(logits.shape)}; "
            "return one score per token of each row"
        )
    if not scores.dtype.is_floating_point:
        raise MaxbenchError(f"{what}: scores() {where} returned {scores.dtype}; return floating-point scores")
    if scores.device != logits.device:
        raise MaxbenchError(
            f"{what}: scores() {where} returned a tensor on {scores.device}, not on the logits' device {logits.device}"
        )


def bad_rows(scores: torch.Tensor) -> torch.Tensor:
    """Per row, on the device: whether it holds a NaN or +inf, or no finite score at all. One
    reduction: a row's maximum is NaN when any entry is, +inf when one is, -inf when all are."""
    return ~torch.isfinite(scores.detach().amax(-1))


class ScoreCheck:
    """The per-step check of a layer's scores in the decoding loop: finite where they must be
    (no NaN, no +inf, at least one finite score per row), kept as one device-side flag per step
    and read every ``every`` steps and at the end (``read``), so that decoding never waits for the
    device to check a step. A bad step stops decoding with one line naming the layer and the first
    bad step."""

    def __init__(self, what: str, every: int = CHECK_EVERY):
        self.what, self.every = what, every
        self.flags: list[torch.Tensor] = []
        self.read_upto = 0

    def add(self, scores: torch.Tensor, logits: torch.Tensor, step: int) -> None:
        check_scores_form(scores, logits, self.what, f"at decoding step {step}")
        self.flags.append(bad_rows(scores).any())
        if len(self.flags) - self.read_upto >= self.every:
            self.read()

    def read(self) -> None:
        """Refuse the first bad step recorded since the last read (one synchronisation)."""
        if len(self.flags) == self.read_upto:
            return
        fresh = torch.stack(self.flags[self.read_upto :]).cpu()
        if bool(fresh.any()):
            step = self.read_upto + int(fresh.int().argmax())
            raise MaxbenchError(
                f"{self.what}: scores() at decoding step {step} gave NaN or +inf, or a row with no finite score "
                "(every token -inf); fix the layer (nothing of this batch was written, earlier rows are kept: "
                "run the command again once it is fixed)"
            )
        self.read_upto = len(self.flags)


def require_finite_logits(logits: torch.Tensor, layer: str, cause: str = "") -> None:
    """A non-finite logit has no meaning for an output layer; say which rows carry one, and what to
    check (``cause``: by default the model's weights and dtype)."""
    if not all_finite(logits):
        finite = torch.isfinite(logits)
        rows = (~finite).any(-1).nonzero().flatten().tolist()
        kinds = " and ".join(
            k for k, bad in (("NaN", torch.isnan(logits).any()), ("infinite", torch.isinf(logits).any())) if bool(bad)
        )
        raise MaxbenchError(
            f"{layer}: the model's logits contain {kinds} values (batch rows {rows[:8]}); "
            f"{cause or 'check the model weights and dtype (fp16 overflows: use fp32 on CPU)'}"
        )
