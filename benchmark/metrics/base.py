"""What a metric is, what it is given, what it returns, and the registry of metric names.

A metric (as in sacreBLEU) is an object with a ``name`` (the command-line name), a ``variant``
(which of the definitions in circulation it computes), a ``signature`` string that says
exactly what was computed (tokenisation, n, smoothing, references, model, library
versions), ``higher_is_better`` and ``score_ranges``: the names of the scores it returns
(BLEU-2..5 come from one computation) with the range each can take. As in sacreBLEU's
``bleu.py``, the signature is built from the same attributes the computation reads.
``compute(batch)`` (the base class's, once for every metric) checks that the batch has what
the metric needs, then calls the subclass's ``_compute``; it returns a ``MetricResult`` with
that signature and one ``Score`` per name, each keeping its per-prompt statistics for
bootstrap intervals and paired tests, and its per-text values where the metric has them.
A score that cannot be computed is None with the reason why, never a number that looks valid.

How each score is shown is declared on the metric too (``score_info``: one ``ScoreInfo`` per score,
as HELM's presentation schema declares ``lower_is_better`` and a display name per metric): its goal
(``GOALS``: higher or lower is better, or closest to the human references' value), display name,
scale (x100 or as computed), digits and column. The leaderboard, the explorer and the API read it
from ``scores.json``, where scoring copies it, so they need no metric code to render a run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from maxbench.benchmark.metrics.stats import PromptStats, mean_stats
from maxbench.benchmark.metrics.tokenize import word_tokens
from maxbench.errors import MaxbenchError
from maxbench.registry import Registry


@dataclass(frozen=True)
class Conditions:
    """What a conditional suite asked each prompt for (``maxbench.benchmark.data.suites``, docs/conditional.md):
    each prompt's attributes, each attribute's categorical values (None: free text), the corpus the
    suite was drawn from and its generation length in words (attr-acc's ceiling cuts references to it)."""

    suite: str  # name@sha256 of the suite
    attributes: dict[str, dict[str, str]]  # prompt id -> attribute -> value
    schema: dict[str, tuple[str, ...] | None]
    corpus: str | None = None
    corpus_sha256: str | None = None
    generation_words: int | None = None

    def key(self) -> dict:
        """What the score cache keys a conditional batch by, beside its rows."""
        return {
            "suite": self.suite,
            "attributes": self.attributes,
            "schema": {k: list(v) if v is not None else None for k, v in self.schema.items()},
            "corpus": self.corpus,
            "corpus_sha256": self.corpus_sha256,
            "generation_words": self.generation_words,
        }


@dataclass(frozen=True)
class ReferencePool:
    """Every text of the split a suite's prompts were drawn from (``Suite.heldout``): the references of
    pool metrics such as heldout-bleu, which compare each text with all of them, as the graphmax papers
    compare with "the original corpus". ``name`` is the corpus or fold view, ``sha256`` of its texts."""

    name: str
    sha256: str
    texts: tuple[str, ...]

    def key(self) -> dict:
        """What the score cache keys a batch with a pool by, beside its rows."""
        return {"name": self.name, "sha256": self.sha256, "n": len(self.texts)}


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
    reference_stride: int | None = None  # ref-ppl's sliding-window stride, when a reference did not fit the context
    conditions: Conditions | None = None  # a conditional suite's attributes of each prompt (attr-acc)
    reference_pool: ReferencePool | None = None  # the held-out split the prompts came from (heldout-bleu)

    def __post_init__(self):
        if len(self.texts) != len(self.prompt_ids):
            raise ValueError("one prompt id per text is needed")
        if self.references is not None:
            missing = [p for p in self.prompt_order if p not in self.references]
            if missing:
                raise MaxbenchError(f"no reference for prompt '{missing[0]}'")
        if self.conditions is not None:
            missing = [p for p in self.prompt_order if p not in self.conditions.attributes]
            if missing:
                raise MaxbenchError(f"prompt '{missing[0]}' is not an item of suite {self.conditions.suite}")

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

    @cached_property
    def n_empty_references(self) -> int:
        return sum(1 for r in self.reference_list if not r.strip())


#: the range of a score: fractions and F-measures, counts, divergences, perplexities
UNIT = (0.0, 1.0)
NONNEGATIVE = (0.0, math.inf)
PERPLEXITY = (1.0, math.inf)


@dataclass(frozen=True)
class Score:
    """One number of a metric, with what is needed for intervals and tests.

    ``value`` is None where the score is undefined, and ``reason`` then says why; ``stats`` is
    None when the metric could not run at all, or when the score is not a function of additive
    per-prompt statistics (MAUVE re-clusters every resample): such a score brings its own
    ``interval`` (low, high, method) and has no per-prompt values or paired test. ``range`` is
    the interval every value of the score lies in (its intervals are kept inside it).
    """

    name: str
    value: float | None
    stats: PromptStats | None
    per_text: np.ndarray | None = None
    reason: str | None = None
    range: tuple[float, float] = UNIT
    interval: tuple[float, float, str] | None = None


def finite_or_none(x: float) -> float | None:
    """JSON has no NaN or infinity: an undefined score is None."""
    return float(x) if np.isfinite(x) else None


def stats_score(name: str, stats: PromptStats, per_text=None, undefined: str = "") -> Score:
    """The score whose value is ``stats``' value; ``undefined`` says why, should it be NaN or infinite."""
    value = finite_or_none(stats.value())
    reason = (undefined or "undefined on these texts") if value is None else None
    return Score(name, value, stats, None if per_text is None else np.asarray(per_text), reason)


def mean_score(batch: TextBatch, name: str, per_text, undefined: str = "") -> Score:
    """A score that is the mean of per-text values (NaN marks a text where it is undefined)."""
    per_text = np.asarray(per_text, dtype=np.float64)
    stats = mean_stats(batch.prompt_order, batch.prompt_index, per_text)
    return stats_score(name, stats, per_text, undefined or "no text has a defined value")


def first_items(items: Sequence, limit: int | None, what: str) -> tuple[Sequence, str]:
    """The first ``limit`` items (all when None), and a note saying so when some were left out
    (Texygen's is_fast keeps the first 500 references or texts)."""
    if limit is None or len(items) <= limit:
        return items, ""
    return items[:limit], f"the first {limit} of {len(items)} {what} only"


#: what "best" means for a score: a higher value, a lower value, or the value closest to the one the
#: human references get (the convention for likelihood, repetition and diversity of open-ended text:
#: Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"; Su and Collier 2022,
#: "Contrastive Search Is What You Need For Neural Text Generation")
GOALS = {"higher": "higher is better", "lower": "lower is better", "human": "closest to human is better"}


@dataclass(frozen=True)
class ScoreInfo:
    """How one score is shown. ``goal``: a key of ``GOALS``, or None where the metric declares none
    (then its ``higher_is_better`` ranks, and the legend says no goal was declared). ``scale``: what
    the value is multiplied by for display (100 for a fraction shown as a percentage, else 1);
    ``digits``: decimals shown. ``column``: the score's place among the columns (lower first; None:
    after those with one, in the order the run holds them); ``compact``: its place in the compact
    table (None: not there)."""

    display: str
    goal: str | None = None
    scale: float = 1.0
    digits: int = 2
    column: int | None = None
    compact: int | None = None

    def __post_init__(self):
        if self.goal is not None and self.goal not in GOALS:
            raise ValueError(f"goal must be one of {', '.join(GOALS)} or None, got {self.goal!r}")

    def to_dict(self) -> dict:
        return {
            "display": self.display,
            "goal": self.goal,
            "scale": self.scale,
            "digits": self.digits,
            "column": self.column,
            "compact": self.compact,
        }

    @classmethod
    def from_dict(cls, name: str, d) -> ScoreInfo:
        """The info ``to_dict`` wrote; anything missing or malformed takes the default (as computed, no goal)."""
        d = d if isinstance(d, dict) else {}

        def pick(key, kind, default):
            v = d.get(key)
            return v if isinstance(v, kind) and not isinstance(v, bool) else default

        goal = d.get("goal") if d.get("goal") in GOALS else None
        return cls(
            display=pick("display", str, name),
            goal=goal,
            scale=float(pick("scale", (int, float), 1.0)),
            digits=int(pick("digits", int, 2)),
            column=pick("column", int, None),
            compact=pick("compact", int, None),
        )

    def format(self, value) -> str:
        """The value as the tables show it ('n/a' when there is none)."""
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return "n/a"
        return f"{value * self.scale:.{self.digits}f}"


def info(display: str, goal: str | None, percent: bool = True, column: int | None = None, **kw) -> ScoreInfo:
    """A built-in score's ``ScoreInfo``: a fraction shown x100 unless ``percent`` is False."""
    return ScoreInfo(display, goal, 100.0 if percent else 1.0, column=column, **kw)


@dataclass(frozen=True)
class MetricResult:
    metric: str
    variant: str
    signature: str
    higher_is_better: bool
    scores: dict[str, Score]
    notes: str = ""
    not_applicable: str | None = None  # why the metric could not score the input at all


class Metric:
    """Base class: subclasses set the class attributes, ``variant``, ``signature`` and
    ``score_ranges``, and implement ``_compute``."""

    name: str = ""
    higher_is_better: bool = True
    needs_references: bool = False
    needs_prompts: bool = False
    #: scores of this metric that belong in the leaderboard's compact table (the head of leaderboard.md)
    #: and the explorer's compact view whenever a run scored them, ahead of the design card's columns
    #: (``maxbench.benchmark.present.leaderboard.COMPACT``); empty: only in the table of every score
    compact_scores: tuple[str, ...] = ()
    #: the goal of every score of this metric (a key of ``GOALS``), unless ``score_info`` says otherwise
    #: per score; None: no goal declared (``higher_is_better`` ranks)
    goal: str | None = None

    @property
    def score_info(self) -> dict[str, ScoreInfo]:
        """How each score of ``score_ranges`` is shown (``ScoreInfo``); by default its name, the
        metric's ``goal``, as computed (scale 1), in the order the run holds it."""
        return {name: ScoreInfo(name, self.goal) for name in self.score_ranges}

    def human_row(self) -> str | None:
        """Why this metric gives nothing on the suite's references scored as if a system had written
        them (the leaderboard's human row), or None when it applies to them: a metric that compares
        texts with the references would compare the references with themselves."""
        if self.needs_references:
            return "compares texts with the references, so not the references themselves"
        return None

    @property
    def variant(self) -> str:
        raise NotImplementedError

    @property
    def signature(self) -> str:
        raise NotImplementedError

    @property
    def score_ranges(self) -> dict[str, tuple[float, float]]:
        """The names of the scores ``compute`` returns, in order, each with its range."""
        return {self.name: UNIT}

    def cache_signature(self) -> str:
        """What the score cache (``score_cache``) keys this metric's results by: its signature, once
        everything the signature names is known (an evaluator's weights: ``Perplexity`` loads it)."""
        return self.signature

    def unavailable(self, batch: TextBatch) -> str | None:
        """Why this metric cannot score ``batch`` at all, or None when it can."""
        if self.needs_references and batch.references is None:
            return (
                "needs references and this input has none (a suite without references, such as a TXT "
                "suite, or --generations without --references)"
            )
        return None

    def too_small(self, batch: TextBatch) -> str | None:
        """Why ``batch`` is too small for this metric whatever its texts (fewer references than it
        needs), or None. Only the default metric set asks: there the metric is recorded as not
        applicable with this reason and a note, while a metric named in ``--metrics`` on a batch too
        small for it stops the command with ``compute``'s error."""
        return None

    def require(self, batch: TextBatch) -> None:
        """The one-line error of ``unavailable``, if there is one."""
        why = self.unavailable(batch)
        if why:
            raise MaxbenchError(f"metric '{self.name}' {why}; leave it out of --metrics")

    def compute(self, batch: TextBatch) -> MetricResult:
        """Check the batch once, here for every metric, then compute (``_compute``) and hold the result
        to the contract (``check_result``). A plugin's ``_compute`` that raises is one line naming it."""
        self.require(batch)
        if METRICS.is_builtin(self.name):
            result = self._compute(batch)
        else:
            try:
                result = self._compute(batch)
            except MaxbenchError as exc:
                raise MaxbenchError(f"{self.described()}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - a plugin's own failure, as one line
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise MaxbenchError(
                    f"{self.described()}: compute failed: {type(exc).__name__}" + (f": {detail}" if detail else "")
                ) from None
        self.check_result(result, batch)
        if self.needs_references and batch.n_empty_references:
            note = (
                f"{batch.n_empty_references} of {len(batch.prompt_order)} prompts have an empty reference, "
                f"which matches nothing"
            )
            result = replace(result, notes="; ".join(filter(None, (result.notes, note))))
        return result

    def described(self) -> str:
        """The metric as messages name it: a plugin's with its origin."""
        from maxbench.registry import describe_origin

        if self.name in METRICS and not METRICS.is_builtin(self.name):
            return f"plugin metric '{self.name}' from {describe_origin(METRICS.origin(self.name))}"
        return f"metric '{self.name}'"

    def check_result(self, result, batch: TextBatch) -> None:
        """What ``_compute`` returns: a ``MetricResult`` (``self.result(scores)``) whose every score is a
        ``Score`` with a value that is None (with its reason) or a finite number inside the score's
        declared range (``score_ranges``), and per-text values, when given, one per text of the batch.
        Anything else is one line naming the metric and the score: a value outside its own range would
        get an interval clipped to the range that leaves the value outside it."""
        what = self.described()
        if not isinstance(result, MetricResult):
            raise MaxbenchError(
                f"{what}: compute returned {type(result).__name__}, not a MetricResult; "
                "return self.result([Score(...), ...]) (docs/plugins.md)"
            )
        ranges = self.score_ranges
        if not isinstance(result.scores, dict) or list(result.scores) != list(ranges):
            names = list(result.scores) if isinstance(result.scores, dict) else type(result.scores).__name__
            raise MaxbenchError(f"{what} computed scores {names}, but declares {list(ranges)}")
        for name, score in result.scores.items():
            if not isinstance(score, Score):
                raise MaxbenchError(f"{what}: score '{name}' is a {type(score).__name__}, not a Score")
            value = score.value
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                    raise MaxbenchError(f"{what}: score '{name}' has the value {value!r}, not a number")
                if not math.isfinite(value):
                    raise MaxbenchError(
                        f"{what}: score '{name}' is {value}; give an undefined score as value=None with its reason"
                    )
                low, high = ranges.get(name, score.range)
                slack = 1e-6 * max(1.0, abs(float(value)))  # float32 rounding (a cosine of 1 + 1e-7)
                if not low - slack <= value <= high + slack:
                    raise MaxbenchError(
                        f"{what}: score '{name}' is {value:g}, outside its declared range [{low:g}, {high:g}]; "
                        "fix the metric or its score_ranges"
                    )
            if score.per_text is not None and len(np.ravel(score.per_text)) != len(batch.texts):
                raise MaxbenchError(
                    f"{what}: score '{name}' has {len(np.ravel(score.per_text))} per-text values for "
                    f"{len(batch.texts)} texts; give one per text (NaN where undefined)"
                )

    def not_applicable(self, reason: str) -> MetricResult:
        """Every score of the metric as None with ``reason``: what a run records instead of a
        number when the metric cannot score it (e.g. reference metrics on a suite without references)."""
        return replace(
            self.result([Score(name, None, None, reason=reason) for name in self.score_ranges]), not_applicable=reason
        )

    def _compute(self, batch: TextBatch) -> MetricResult:
        raise NotImplementedError

    def result(self, scores: Sequence[Score], notes: str = "") -> MetricResult:
        ranges = self.score_ranges
        if isinstance(scores, (str, bytes, dict)) or not all(isinstance(s, Score) for s in scores):
            raise MaxbenchError(f"{self.described()}: result() takes a list of Score, one per declared score")
        names = [s.name for s in scores]
        if names != list(ranges):
            raise MaxbenchError(f"{self.described()} computed scores {names}, but declares {list(ranges)}")
        return MetricResult(
            self.name,
            self.variant,
            self.signature,
            self.higher_is_better,
            {s.name: replace(s, range=ranges[s.name]) for s in scores},
            notes,
        )


#: the metrics by command-line name; each class's ``name`` is its key here
METRICS: Registry[type[Metric]] = Registry(
    "metric",
    {
        "sacrebleu": "maxbench.benchmark.metrics.reference:SacreBLEU",
        "bleu-n": "maxbench.benchmark.metrics.reference:PoolBLEU",
        "heldout-bleu": "maxbench.benchmark.metrics.reference:HeldoutBLEU",
        "rouge-l": "maxbench.benchmark.metrics.reference:RougeL",
        "meteor": "maxbench.benchmark.metrics.reference:Meteor",
        "bertscore": "maxbench.benchmark.metrics.reference:BERTScore",
        "kld": "maxbench.benchmark.metrics.reference:UnigramKL",
        "ms-jaccard": "maxbench.benchmark.metrics.reference:MSJaccard",
        "self-bleu": "maxbench.benchmark.metrics.diversity:SelfBLEU",
        "rep": "maxbench.benchmark.metrics.diversity:Repetition",
        "seq-rep": "maxbench.benchmark.metrics.diversity:SeqRep",
        "distinct": "maxbench.benchmark.metrics.diversity:Distinct",
        "uniq": "maxbench.benchmark.metrics.diversity:Uniq",
        "ppl": "maxbench.benchmark.metrics.perplexity:Perplexity",
        # ppl under a fixed evaluator, beside the run's ppl (cross-evaluation between base models)
        "ppl-smollm2-135m": "maxbench.benchmark.metrics.perplexity:SmolLM2Perplexity",
        "ppl-gemma3-270m": "maxbench.benchmark.metrics.perplexity:GemmaPerplexity",
        "ref-ppl": "maxbench.benchmark.metrics.perplexity:ReferencePPL",
        "diversity": "maxbench.benchmark.metrics.diversity:SuDiversity",
        "mauve": "maxbench.benchmark.metrics.embedding:Mauve",
        "coherence": "maxbench.benchmark.metrics.embedding:Coherence",
        # conditional suites: does the text carry the attribute its prompt asked for
        "attr-acc": "maxbench.benchmark.metrics.attributes:AttributeAccuracy",
        # the papers' own definitions (benchmark/metrics/paper_variants.py)
        "texygen-bleu": "maxbench.benchmark.metrics.paper_variants:TexygenBLEU",
        "texygen-self-bleu": "maxbench.benchmark.metrics.paper_variants:TexygenSelfBLEU",
        "posg-bleu": "maxbench.benchmark.metrics.paper_variants:PosgBLEU",
        "posg-self-bleu": "maxbench.benchmark.metrics.paper_variants:PosgSelfBLEU",
        "posg-kld": "maxbench.benchmark.metrics.paper_variants:PosgKLD",
        "posg-ms-jaccard": "maxbench.benchmark.metrics.paper_variants:PosgMSJaccard",
        "posg-distinct": "maxbench.benchmark.metrics.paper_variants:PosgDistinct",
        "posg-distinct-pos": "maxbench.benchmark.metrics.paper_variants:PosgDistinctPOS",
        "posg-rep": "maxbench.benchmark.metrics.paper_variants:PosgRep",
    },
    base=Metric,
    group="maxbench.metrics",
)


def builtin_score_info() -> dict[str, ScoreInfo]:
    """Every built-in metric's ``ScoreInfo`` by score name: how a score of a file scored before
    ``scores.json`` kept the display metadata is shown (plugins' scores are not among them)."""
    global _BUILTIN_INFO
    if _BUILTIN_INFO is None:
        found: dict[str, ScoreInfo] = {}
        for name in METRICS.names():
            if METRICS.is_builtin(name):
                try:
                    found.update(get_metric(name).score_info)
                except Exception:  # noqa: BLE001 - a metric whose package is missing here: its scores shown as computed
                    continue
        _BUILTIN_INFO = found
    return _BUILTIN_INFO


_BUILTIN_INFO: dict[str, ScoreInfo] | None = None


def metric_names() -> list[str]:
    return METRICS.names()


def get_metric(name: str, **options) -> Metric:
    """The metric registered as ``name``, built with the options it accepts (others ignored)."""
    import inspect

    cls = METRICS.get(name)
    if cls.name != name:
        raise MaxbenchError(f"metric '{name}' is registered as a class named '{cls.name}'")
    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in options.items() if k in accepted and v is not None})


def parse_metric_list(text: str | None) -> list[str]:
    """Comma-separated metric names; an unknown name is an error naming it and the closest known one."""
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    if not names:
        raise MaxbenchError("--metrics is empty; give metric names separated by commas")
    for n in names:
        METRICS.check(n)
    return list(dict.fromkeys(names))


def signature(name: str, **parts) -> str:
    """'name|key:value|...' in the order given, like sacreBLEU's signatures."""
    return "|".join([name] + [f"{k.replace('_', '-')}:{v}" for k, v in parts.items()])
