"""The report's result types: a ``Row`` (one score of one comparison over its folds), a
``Comparison`` (a cell's method against one competitor) and a ``CellVerdict`` (one claim x base
model x corpus x method, one verdict), each holding ``verdicts.Estimate`` objects, and the flat
dictionaries ``report.json`` and ``report.csv`` hold them as (``Row.to_dict``, ``CELL_COLUMNS``,
``CellVerdict.to_dict``: their keys and order are the committed reports' format), and the
``Report`` that gathers them for rendering.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from maxbench.benchmark.reproduce.evidence import Evidence
from maxbench.benchmark.reproduce.papers import Paper
from maxbench.benchmark.reproduce.verdicts import Estimate, Verdict

#: an undefined estimate (no number, no interval)
NONE = Estimate(None, None, None)


@dataclass(kw_only=True)
class Row:
    """One score of one comparison (method vs baseline) on one base model and corpus, over its folds."""

    claim: str
    model: str
    corpus: str
    method: str
    baseline: str
    score: str
    variant: str = "paper"  # "paper" (the paper's metric) or "maxbench" (maxbench's default beside it)
    kind: str
    paper_baseline: float | None = None
    paper_method: float | None = None
    paper_relative: float | None = None  # the paper's effect on the verdict's scale
    method_mean: float | None = None
    method_sd: float | None = None
    baseline_mean: float | None = None
    baseline_sd: float | None = None
    #: method - baseline (the ratio for a ratio claim, r for a correlation, a share of steps for a
    #: convergence) with its interval; ``n_folds`` its folds (text sources), ``method`` how it was made
    diff: Estimate = NONE
    #: the same on the verdict's scale: method / baseline - 1 (ratio - 1; r), with se and df; for a
    #: difference claim a log-ratio estimate (``Estimate.log``: its se and df, report.json's rel_se and
    #: rel_df, a cell's se and df, are those of log(method / baseline))
    rel: Estimate = NONE
    n_prompts: int = 0
    note: str = ""  # why a number is missing
    diagnostic: bool = False
    identical_to: str = ""  # a maxbench-variant row with the paper variant's numbers: that score's name
    same_as: str = ""  # a row an earlier claim already shows: that claim's id
    peer: str = ""  # a maxbench-variant row: the paper's score it stands beside
    #: a seed-averaged row's seed pairs, each with its own values, difference and relative effect
    #: (``claims/difference.py``); empty for a row that rests on seed 0 alone
    seeds: list = field(default_factory=list)

    @property
    def n_folds(self) -> int:
        return self.diff.n_folds

    @property
    def numbers(self) -> tuple:
        d = self.diff
        return (d.estimate, d.low, d.high, self.method_mean, self.baseline_mean, d.n_folds)

    def to_dict(self) -> dict:
        """The row as ``report.json`` holds it (flat; the estimates' fields by name)."""
        d, r = self.diff, self.rel
        return {
            "claim": self.claim,
            "model": self.model,
            "corpus": self.corpus,
            "method": self.method,
            "baseline": self.baseline,
            "score": self.score,
            "variant": self.variant,
            "kind": self.kind,
            "paper_baseline": self.paper_baseline,
            "paper_method": self.paper_method,
            "paper_relative": self.paper_relative,
            "method_mean": self.method_mean,
            "method_sd": self.method_sd,
            "baseline_mean": self.baseline_mean,
            "baseline_sd": self.baseline_sd,
            "difference": d.estimate,
            "ci_low": d.low,
            "ci_high": d.high,
            "relative": r.estimate,
            "rel_low": r.low,
            "rel_high": r.high,
            "rel_se": r.se,
            "rel_df": r.df,
            "n_folds": d.n_folds,
            "n_prompts": self.n_prompts,
            "interval": d.method,
            "note": self.note,
            "diagnostic": self.diagnostic,
            "identical_to": self.identical_to,
            "same_as": self.same_as,
            "peer": self.peer,
        } | ({"seeds": self.seeds} if self.seeds else {})


@dataclass(kw_only=True)
class Comparison:
    """One comparison of a cell (its method against one competitor), its scores summarised."""

    baseline: str
    est: Estimate
    paper: float | None = None  # the paper's effect on the same scale
    reason: str = ""  # why there is no interval
    verdict: Verdict | None = None

    def to_dict(self) -> dict:
        return {
            "baseline": self.baseline,
            "relative": self.est.estimate,
            "rel_low": self.est.low,
            "rel_high": self.est.high,
            "se": self.est.se,
            "df": self.est.df,
            "p_value": self.est.p_value,
            "paper": self.paper,
            "verdict": self.verdict.verdict if self.verdict else None,
            "why": self.verdict.why if self.verdict else None,
        }


#: the columns of report.csv, in order (``CellVerdict.to_dict`` without its comparisons)
CELL_COLUMNS = (
    "claim",
    "where",
    "model",
    "corpus",
    "method",
    "baselines",
    "scores",
    "kind",
    "paper_relative",
    "relative",
    "rel_low",
    "rel_high",
    "se",
    "df",
    "p_value",
    "p_holm",
    "n_folds",
    "n_prompts",
    "verdict",
    "why",
    "flags",
    "counted",
    "diagnostic",
    "same_as",
)


@dataclass(kw_only=True)
class CellVerdict:
    """One claim x base model x corpus (x method): one verdict."""

    claim: str
    where: str = ""
    model: str = ""
    corpus: str = ""
    method: str = ""
    baselines: str = ""  # its competitors, ", "-joined
    scores: str = ""
    kind: str
    paper_relative: float | None = None
    #: the cell's estimate on the verdict's scale (a correlation's r; undefined for a 'best among'
    #: cell, whose estimates are its comparisons')
    est: Estimate = NONE
    p_value: float | None = None  # the p-value the cell enters Holm's step with (``verdicts.deciding_p``)
    p_holm: float | None = None
    n_folds: int = 0
    n_prompts: int = 0
    verdict: str = ""
    why: str = ""
    flags: list[str] = field(default_factory=list)
    counted: bool = True
    diagnostic: bool = False
    same_as: str = ""
    #: the earlier cell whose evidence this one repeats (``judge.mark_repeated``); never serialised
    twin: CellVerdict | None = field(default=None, repr=False, compare=False)
    details: list[Comparison] = field(default_factory=list)  # one per competitor (serialised as comparisons)
    beside: list[dict] = field(default_factory=list)  # the protocol's 'beside' scores (``judge.beside_of``)

    def to_dict(self) -> dict:
        """The cell as ``report.json`` holds it: ``CELL_COLUMNS``, then its comparisons."""
        values = {
            "relative": self.est.estimate,
            "rel_low": self.est.low,
            "rel_high": self.est.high,
            "se": self.est.se,
            "df": self.est.df,
        }
        d = {k: values[k] if k in values else getattr(self, k) for k in CELL_COLUMNS}
        d["comparisons"] = [x.to_dict() for x in self.details]
        if self.beside:
            d["beside"] = self.beside
        return d


@dataclass(kw_only=True)
class Report:
    """Everything a report shows, built once (``report.build``) and rendered to every format."""

    paper: Paper  # as its file states it (the sensitivity settings' claims: ``judge.with_settings``)
    evidence: Evidence
    rows: list[Row]
    cells: list[CellVerdict]
    heads: dict = field(default_factory=dict)  # (run, system) -> ``evidence.head_training``
    adapters: dict = field(default_factory=dict)  # (run, model) -> ``adapters.record``
    command: str = ""
    wall: float = 0.0  # the runs' total wall seconds
    warnings: list[str] = field(default_factory=list)
    trace: dict | None = None  # graphmax's Figure 2 trace (figure2-trace.json)
    controls: list = field(default_factory=list)  # ``controls.check``'s results
    flipped: list = field(default_factory=list)  # ``flipped.flip_rows``
    matched: list = field(default_factory=list)  # ``matched.rows``: the [[matched]] entries' rows
