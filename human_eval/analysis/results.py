"""What an analysis of human ratings returns: small frozen result objects, as scipy.stats' are.

``human_eval/analysis/statistics.py`` fills the test, design and agreement results, ``human_eval/analysis/analyse.py``
the rest and the :class:`Analysis` that holds them all; the modules of ``human_eval/report/`` render them, and
``Analysis.to_dict()`` is the body of ``report.json``. Every interval is a
:class:`maxbench.intervals.ConfidenceInterval`, written to JSON as ``[low, high]``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from maxbench.human_eval.analysis.options import ReportOptions
from maxbench.human_eval.analysis.ratings import StudyProgress
from maxbench.intervals import ConfidenceInterval


@dataclass(frozen=True)
class Scale:
    """The rating scale of one aspect.

    Attributes
    ----------
    low, high : float
        The scale's ends.
    domain : tuple of float
        The ordered values Krippendorff's ordinal metric and the distribution columns use: every
        integer from ``low`` to ``high`` on an integer scale, else the observed values plus the ends.
    source : str
        Where the ends came from: ``--scale``, ``scale columns`` or ``observed values``.
    """

    low: float
    high: float
    domain: tuple[float, ...]
    source: str


@dataclass(frozen=True)
class Exclusions:
    """How many rows the exclusion rules removed.

    Attributes
    ----------
    rows_in, rows_kept : int
        Rows before and after the exclusions.
    by_rule : tuple of (str, int)
        Each rule and the rows it matched; a row can match several rules.
    by_annotator : tuple of (str, int)
        Rows excluded per annotator, annotators without exclusions left out.
    """

    rows_in: int
    rows_kept: int
    by_rule: tuple[tuple[str, int], ...]
    by_annotator: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Descriptive:
    """The kept ratings of one system on one aspect.

    Attributes
    ----------
    aspect, system : str
    n, n_items, n_annotators : int
        Ratings, distinct items and distinct annotators.
    mean, median : float or None
        Over ratings; None when there are none.
    sd : float or None
        Sample standard deviation (ddof 1); None for fewer than two ratings.
    distribution : tuple of (float, int)
        Count of ratings at each value of the scale's domain, zeros included.
    """

    aspect: str
    system: str
    n: int
    n_items: int
    n_annotators: int
    mean: float | None
    sd: float | None
    median: float | None
    distribution: tuple[tuple[float, int], ...]


@dataclass(frozen=True)
class Design:
    """Whether a comparison is paired by item.

    Attributes
    ----------
    kind : str
        ``paired`` or ``unpaired``.
    n_common_items, n_reference_items, n_other_items : int
        Items rated for both systems, for the reference, for the other system.
    statement : str
        The decision and its reason in one sentence, printed in the report.
    """

    kind: str
    n_common_items: int
    n_reference_items: int
    n_other_items: int
    statement: str


@dataclass(frozen=True)
class SignificanceTest:
    """One test of the reference against another system: statistic, p-value and what was assumed.

    Attributes
    ----------
    test : str
        ``mannwhitneyu`` or ``wilcoxon`` (the scipy.stats function that computed it).
    statistic : float or None
        U of the reference sample, or W (scipy's min(T+, T-) two-sided, T+ one-sided); None when
        the test could not run.
    pvalue : float or None
        scipy's p-value; None when the test could not run.
    alternative : str
        ``two-sided``, ``greater`` (H1: the reference is rated higher) or ``less``.
    method : str
        ``exact``, ``asymptotic`` or ``permutation``: what scipy's ``method="auto"`` picks, named.
    n_reference, n_other : int
        Ratings per sample (Mann-Whitney) or paired items, both the same (Wilcoxon).
    effect_size : float or None
        Rank-biserial correlation r, positive when the reference is rated higher.
    effect_ci : ConfidenceInterval or None
        Percentile bootstrap interval of r over resampled items.
    assumes : str
        The test's assumptions and its method, in words.
    pvalue_holm : float or None
        Holm-adjusted over the comparisons of one aspect (one family per test).
    note : str
        Why the test did not run, when it did not.
    """

    test: str
    statistic: float | None
    pvalue: float | None
    alternative: str
    method: str
    n_reference: int
    n_other: int
    effect_size: float | None
    effect_ci: ConfidenceInterval | None
    assumes: str
    pvalue_holm: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    """The reference against one other system on one aspect.

    Attributes
    ----------
    aspect, reference, other : str
    design : Design
    primary : str
        The test that gives the report's stars: ``wilcoxon`` for a paired design, else
        ``mannwhitneyu``.
    mannwhitney, wilcoxon : SignificanceTest or None
        Each test's result; None where it was not run (Wilcoxon on an unpaired design, either one
        when a system has no ratings on the aspect).
    """

    aspect: str
    reference: str
    other: str
    design: Design
    primary: str
    mannwhitney: SignificanceTest | None
    wilcoxon: SignificanceTest | None

    @property
    def primary_result(self) -> SignificanceTest | None:
        return self.wilcoxon if self.primary == "wilcoxon" else self.mannwhitney


@dataclass(frozen=True)
class AgreementResult:
    """Krippendorff's alpha of one aspect, units being texts (item, system).

    Attributes
    ----------
    aspect : str
    ordinal, interval : float or None
        Alpha at the ordinal and interval levels; None where alpha is undefined.
    ordinal_ci : ConfidenceInterval or None
        Percentile bootstrap interval of the ordinal alpha over resampled items.
    n_units : int
        Texts rated at least once.
    n_pairable_units : int
        Texts rated by two or more annotators (only these carry information on agreement).
    n_annotators : int
    n_boot_valid : int
        Resamples in which alpha was defined (the others are dropped from the interval).
    value_domain : tuple of float
        The scale's domain, the ordinal metric's value order.
    undefined_reason : str
        Why alpha is undefined, when it is.
    """

    aspect: str
    ordinal: float | None
    ordinal_ci: ConfidenceInterval | None
    interval: float | None
    n_units: int
    n_pairable_units: int
    n_annotators: int
    n_boot_valid: int
    value_domain: tuple[float, ...]
    undefined_reason: str = ""


@dataclass(frozen=True)
class AnnotatorSummary:
    """One annotator's kept ratings, in rating points (or fractions of the scale when aspects differ).

    Attributes
    ----------
    annotator : str
    n, n_items : int
        Kept ratings and distinct texts.
    mean, sd : float or None
    offset : float or None
        Mean of (own rating - mean of the other annotators on the same text and aspect): negative
        for a harsh rater; None without overlap.
    drift : float or None
        Mean over the later half of the annotator's presentation positions minus the earlier half.
    median_seconds : float or None
    check_failures : int
        Texts carrying one of the excluded flags.
    excluded : int
        Rows removed by the exclusions.
    flags : tuple of str
        Every flag on this annotator's rows.
    gold_correct, gold_n : int or None
        Gold judgments answered as expected, of those made (None: the study has no gold items).
    """

    annotator: str
    n: int
    n_items: int
    mean: float | None
    sd: float | None
    offset: float | None
    drift: float | None
    median_seconds: float | None
    check_failures: int
    excluded: int
    flags: tuple[str, ...]
    gold_correct: int | None = None
    gold_n: int | None = None


@dataclass(frozen=True)
class Analysis:
    """Everything a report shows, computed from one study's ratings.

    Attributes
    ----------
    source, sha256, sha256_of : str
        The input as :class:`maxbench.human_eval.analysis.ratings.Ratings` names it.
    study : str
    progress : StudyProgress or None
        How many assigned texts are rated, for a study read from the rating database.
    options : ReportOptions
        The options the analysis ran with.
    reference : str or None
        The system every other one is compared with; None with a single system.
    reference_rule : str
        How the reference was chosen: given with --reference, the run's baseline recorded with the
        study, or the first system by name.
    systems : tuple of str
        The reference first, then the others by name.
    aspects : tuple of str
        Rubric criteria in input order.
    scales : dict of str to Scale
    exclusions : Exclusions
    descriptives : tuple of Descriptive
        One per (aspect, system).
    comparisons : tuple of Comparison
        One per (aspect, other system).
    agreement : tuple of AgreementResult
        One per aspect.
    annotators : tuple of AnnotatorSummary
    annotator_units : str
        ``rating points`` or ``fraction of the scale``: the unit of the annotator summaries.
    warnings : tuple of str
        Everything the reader must know, shown at the top of the report.
    """

    source: str
    sha256: str
    sha256_of: str
    study: str
    progress: StudyProgress | None
    options: ReportOptions
    reference: str | None
    reference_rule: str
    systems: tuple[str, ...]
    aspects: tuple[str, ...]
    scales: dict[str, Scale]
    exclusions: Exclusions
    descriptives: tuple[Descriptive, ...]
    comparisons: tuple[Comparison, ...]
    agreement: tuple[AgreementResult, ...]
    annotators: tuple[AnnotatorSummary, ...]
    annotator_units: str
    warnings: tuple[str, ...]

    def descriptive(self, aspect: str, system: str) -> Descriptive:
        return next(d for d in self.descriptives if d.aspect == aspect and d.system == system)

    def comparison(self, aspect: str, other: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.aspect == aspect and c.other == other), None)

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))


@dataclass(frozen=True)
class PairwiseAspect:
    """One criterion of a pairwise study: strengths, sign tests, agreement, judgments kept."""

    aspect: str
    strengths: tuple  # of pairwise.Strength, in the order of PairwiseAnalysis.systems
    sign_tests: tuple  # of pairwise.SignTest, one per pair of systems
    agreement: Any  # pairwise.PairAgreement
    n_judgments: int


@dataclass(frozen=True)
class PairwiseAnalysis:
    """The analysis of a pairwise-preference study (``analysis.analyse_pairwise``).

    ``shown_left`` counts how often each system was shown as A (the position balance)."""

    study: str
    source: str
    options: Any
    systems: tuple[str, ...]
    aspects: tuple[PairwiseAspect, ...]
    rows_in: int
    rows_kept: int
    annotators: int
    shown_left: tuple[tuple[str, int], ...]
    exclusions: tuple[tuple[str, int], ...] = ()  # (rule, rows it matched)
    gold: tuple = ()  # of gold.GoldScore: each annotator's gold accuracy

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))


@dataclass(frozen=True)
class BestWorstAspect:
    """One criterion of a best-worst study: counting scores, agreement, judgments kept."""

    aspect: str
    scores: tuple  # of best_worst.CountingScore, in the order of BestWorstAnalysis.systems
    agreement: Any  # best_worst.BwsAgreement
    n_judgments: int


@dataclass(frozen=True)
class BestWorstAnalysis:
    """The analysis of a best-worst scaling study (``analysis.analyse_best_worst``)."""

    study: str
    source: str
    options: Any
    systems: tuple[str, ...]
    aspects: tuple[BestWorstAspect, ...]
    rows_in: int
    rows_kept: int
    annotators: int
    exclusions: tuple[tuple[str, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))


def _plain(obj: Any) -> Any:
    """JSON-ready: NaN/inf become None, tuples lists, numpy scalars Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
