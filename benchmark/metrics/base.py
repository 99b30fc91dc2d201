"""What a metric is, what it is given, what it returns, and the registry of metric names.

A metric (as in sacreBLEU) is an object with a ``name`` (the command-line name), a ``variant``
(which of the definitions in circulation it computes), a ``signature`` string that says
exactly what was computed (tokenisation, n, smoothing, references, model, library
versions), and ``higher_is_better``. ``compute(batch)`` returns a ``MetricResult`` carrying
that signature and one or more named ``Score`` s (BLEU-2..5 come from one computation); each
score keeps its per-prompt statistics for bootstrap intervals and paired tests, and its
per-text values where the metric has them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from core.errors import MaxbenchError

from .stats import PromptStats, mean_stats
from .tokenize import word_tokens


@dataclass
class TextBatch:
    """The texts of one system, with the prompt each came from and that prompt's reference.

    ``prompt_ids`` has one entry per text; several texts (samples) may share a prompt.
    ``references`` and ``prompts`` map a prompt id to its reference / prompt text (None when
    scoring outputs that have none). Bootstrap resampling is over prompts.
    """

    texts: list[str]
    prompt_ids: list[str]
    references: dict[str, str] | None = None
    prompts: dict[str, str] | None = None
    reference_logprobs: dict[str, list[float | None]] | None = None
    vocab_size: int | None = None  # of the system, for ref-ppl's epsilon-perplexity

    def __post_init__(self):
        if len(self.texts) != len(self.prompt_ids):
            raise ValueError("one prompt id per text is needed")
        if self.references is not None:
            missing = [p for p in self.prompt_order if p not in self.references]
            if missing:
                raise MaxbenchError(f"no reference for prompt '{missing[0]}'")

    @cached_property
    def prompt_order(self) -> list[str]:
        """Distinct prompt ids in order of first appearance."""
        return list(dict.fromkeys(self.prompt_ids))

    @cached_property
    def prompt_index(self) -> np.ndarray:
        where = {p: i for i, p in enumerate(self.prompt_order)}
        return np.array([where[p] for p in self.prompt_ids], dtype=np.int64)

    @cached_property
    def tokens(self) -> list[list[str]]:
        return [word_tokens(t) for t in self.texts]

    @cached_property
    def reference_list(self) -> list[str]:
        """One reference per prompt, in prompt order (the whole reference set)."""
        if self.references is None:
            raise MaxbenchError("this metric needs references")
        return [self.references[p] for p in self.prompt_order]

    @cached_property
    def reference_tokens(self) -> list[list[str]]:
        return [word_tokens(r) for r in self.reference_list]

    @cached_property
    def reference_per_text(self) -> list[str]:
        """Each text's own prompt's reference."""
        return [self.references[p] for p in self.prompt_ids]


@dataclass(frozen=True)
class Score:
    """One number of a metric, with what is needed for intervals and tests."""

    name: str
    value: float | None
    stats: PromptStats
    per_text: np.ndarray | None = None


def finite_or_none(x: float) -> float | None:
    """JSON has no NaN or infinity: an undefined score is None."""
    return float(x) if np.isfinite(x) else None


def mean_score(batch: TextBatch, name: str, per_text) -> Score:
    """A score that is the mean of per-text values (NaN marks a text where it is undefined)."""
    per_text = np.asarray(per_text, dtype=np.float64)
    stats = mean_stats(batch.prompt_order, batch.prompt_index, per_text)
    return Score(name, finite_or_none(stats.value()), stats, per_text)


@dataclass(frozen=True)
class MetricResult:
    metric: str
    variant: str
    signature: str
    higher_is_better: bool
    scores: dict[str, Score]
    notes: str = ""


class Metric:
    """Base class: subclasses set the class attributes and implement ``compute``."""

    name: str = ""
    higher_is_better: bool = True
    needs_references: bool = False
    needs_prompts: bool = False

    @property
    def variant(self) -> str:
        raise NotImplementedError

    @property
    def signature(self) -> str:
        raise NotImplementedError

    def compute(self, batch: TextBatch) -> MetricResult:
        raise NotImplementedError

    def check(self, batch: TextBatch) -> None:
        if self.needs_references and batch.references is None:
            raise MaxbenchError(
                f"metric '{self.name}' needs references: give --references FILE (or score a run, whose rows carry them)"
            )

    def result(self, scores: Sequence[Score], notes: str = "") -> MetricResult:
        return MetricResult(
            self.name, self.variant, self.signature, self.higher_is_better, {s.name: s for s in scores}, notes
        )


# name -> metric class; filled by @register_metric in the modules listed below
METRICS: dict[str, type[Metric]] = {}
_METRIC_MODULES = ("benchmark.metrics.reference", "benchmark.metrics.diversity", "benchmark.metrics.perplexity")


def register_metric(name: str) -> Callable[[type[Metric]], type[Metric]]:
    def add(cls: type[Metric]) -> type[Metric]:
        if name in METRICS and METRICS[name] is not cls:
            raise ValueError(f"metric name '{name}' registered twice")
        cls.name = name
        METRICS[name] = cls
        return cls

    return add


def _load_builtin() -> None:
    import importlib

    for module in _METRIC_MODULES:
        importlib.import_module(module)


def metric_names() -> list[str]:
    _load_builtin()
    return list(METRICS)


def get_metric(name: str, **options) -> Metric:
    """The metric registered as ``name``, built with the options it accepts (others ignored)."""
    _load_builtin()
    if name not in METRICS:
        raise MaxbenchError(f"unknown metric '{name}'; known metrics: {', '.join(METRICS)}")
    cls = METRICS[name]
    import inspect

    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in options.items() if k in accepted and v is not None})


def parse_metric_list(text: str | None) -> list[str]:
    """Comma-separated metric names; unknown names are an error naming the metric."""
    known = metric_names()
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    if not names:
        raise MaxbenchError("--metrics is empty; give metric names separated by commas")
    for n in names:
        if n not in known:
            raise MaxbenchError(f"unknown metric '{n}' in --metrics; known metrics: {', '.join(known)}")
    return list(dict.fromkeys(names))


def signature(name: str, **parts) -> str:
    """'name|key:value|...' in the order given, like sacreBLEU's signatures."""
    return "|".join([name] + [f"{k.replace('_', '-')}:{v}" for k, v in parts.items()])
