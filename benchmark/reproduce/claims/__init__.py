"""The kinds of claim a paper file can make (``kind = "..."``), one module each, behind one
interface: ``ClaimKind``. A kind turns a claim into the rows behind it and its cells (one per base
model x corpus x method, before Holm's step), and says how its numbers read: the interval a cell is
judged on and on which scale, the paper's effect and maxbench's estimate as the verdicts table
shows them, and the tables of its claim's section.

A new kind is one new module here that defines a ``ClaimKind`` subclass, and its line in
``kinds.CLAIM_KINDS`` (the names a paper file may use). The
verdict rules themselves are ``verdicts.RULES`` and are the same for every kind.

- ``difference`` (``difference.py``): each score's paired difference, method - baseline, and its
  relative effect method / baseline - 1 on the log-ratio scale, folds combined, correlated scores
  summarised, against every competitor;
- ``ratio`` (``ratio.py``): a ratio measured per fold (CPU time per token, an adapter's training
  time), judged as ratio - 1;
- ``correlation`` (``correlation.py``): Pearson's r over the text sources, judged on r;
- ``convergence`` (``convergence.py``): the share of decoding steps a solver's stopping rule ended
  within the paper's budget T (a diagnostic, never counted).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from maxbench.benchmark.reproduce import fmt
from maxbench.benchmark.reproduce.cells import CellVerdict, Row
from maxbench.benchmark.reproduce.evidence import Evidence
from maxbench.benchmark.reproduce.kinds import kind_of
from maxbench.benchmark.reproduce.papers import Claim, Paper
from maxbench.benchmark.reproduce.verdicts import LEVEL, NEGLIGIBLE, NOT_COMPARABLE, Estimate
from maxbench.document import Cell, Table, num


class ClaimKind(ABC):
    """One kind of claim. ``cells`` is the one method a kind must define; the rest have the
    defaults of a relative effect, method / baseline - 1, judged on its log-ratio interval."""

    #: the name a paper file gives as ``kind``
    name: str = ""
    #: the scale ``verdicts.decide`` judges on: "%" (fractions of the baseline) or "r"
    scale: str = "%"
    #: the negligible band on that scale
    band: float = NEGLIGIBLE
    #: whether its cells are points of the differences plot (relative effects, in %)
    plotted: bool = True
    #: whether its rows join the table of rows in the diagnostics section
    in_rows_table: bool = True
    #: whether its scores are scores of the protocol's metrics (checked before anything runs)
    reads_scores: bool = True
    #: whether a claim of this kind compares its methods with a baseline (a paper file's claim without
    #: one is one line naming the claim, exit 2)
    needs_baseline: bool = True

    # -- what a paper file says

    def check(self, claim: Claim) -> str:
        """What is wrong with a runnable claim of this kind in its paper file ('' if nothing)."""
        return "a correlation claim (and only one) needs 'against', one per score" if claim.against else ""

    def paper_relative(self, claim: Claim, i: int) -> float | None:
        """The paper's effect on score ``i`` on the verdict's scale: (method - baseline) / baseline;
        None where the paper prints no number."""
        m, b = claim.paper_method, claim.paper_baseline
        return self.relative(b[i], m[i]) if i < len(m) and i < len(b) and b[i] else None

    def relative(self, baseline: float, method: float) -> float:
        """A pair of the paper's numbers on the verdict's scale."""
        return (method - baseline) / baseline

    def paper_difference(self, claim: Claim, i: int) -> float | None:
        """The paper's method - baseline on score ``i`` (its ``paper_effect`` where it gives one)."""
        if claim.paper_effect is not None:
            return claim.paper_effect
        if i < len(claim.paper_method) and i < len(claim.paper_baseline):
            return claim.paper_method[i] - claim.paper_baseline[i]
        return None

    @abstractmethod
    def cells(self, claim: Claim, paper: Paper, evidence: Evidence) -> tuple[list[Row], list[CellVerdict]]:
        """Every row of a runnable claim and its cells, before Holm's step (cells with comparisons
        are judged by ``judge.decide_cells``; a cell without is decided here)."""

    def interval(self, est: Estimate, level: float = LEVEL) -> tuple[float | None, float | None]:
        """A comparison's interval on the scale the verdict is decided on (at ``level``: a family's
        Bonferroni-widened level, ``Estimate.widened``)."""
        return est.widened(level)

    # -- how the report shows it

    def paper_text(self, c: CellVerdict) -> str:
        """The paper's effect in the verdicts table."""
        if len(c.details) > 1 and any(d.paper is not None for d in c.details):  # one effect per competitor
            return "; ".join(f"vs {d.baseline}: {'n/a' if d.paper is None else fmt.pct(d.paper)}" for d in c.details)
        if c.paper_relative is None:
            return "(figure: sign only)" if c.details else ""
        return fmt.pct(c.paper_relative)

    def estimate_text(self, c: CellVerdict) -> str:
        """maxbench's estimate in the verdicts table (each competitor's, for a 'best among' cell)."""
        if c.est.estimate is not None:
            return fmt.pct_interval(c.est.estimate, c.est.low, c.est.high)
        if len(c.details) > 1:
            return "; ".join(
                f"vs {d.baseline}: {fmt.pct_interval(d.est.estimate, d.est.low, d.est.high)}" for d in c.details
            )
        return "n/a"

    def prompts_text(self, c: CellVerdict) -> str:
        return f"{c.n_prompts} ({c.n_folds})"

    def row_paper_text(self, r: Row, claim: Claim) -> str:
        """The paper's numbers of one row (baseline -> method, and its relative effect)."""
        if r.paper_method is None:
            return "(figure)"
        return f"{fmt.value(r.paper_baseline)} -> {fmt.value(r.paper_method)}" + (
            f" ({fmt.pct(r.paper_relative)})" if r.paper_relative is not None else ""
        )

    def row_difference_text(self, r: Row) -> str:
        return fmt.difference(r.diff)

    def row_relative_text(self, r: Row) -> str:
        return fmt.pct_interval(r.rel.estimate, r.rel.low, r.rel.high)

    def tables(self, claim: Claim, rows: list[Row], evidence: Evidence) -> list[Table]:
        """The tables of the claim's section: the rows behind its cells that are not shown elsewhere."""
        visible = [r for r in rows if not r.identical_to and not r.same_as]
        seeded = [r for r in visible if r.seeds]
        return ([rows_table({claim.id: claim}, visible)] if visible else []) + ([seeds_table(seeded)] if seeded else [])


def claim_cells(claim: Claim, paper: Paper, evidence: Evidence) -> tuple[list[Row], list[CellVerdict]]:
    """Every row of a claim and its cells, before Holm's step; a claim that cannot run here is one
    cell, not comparable, with its reason."""
    if not claim.runnable:
        cell = CellVerdict(
            claim=claim.id,
            where=claim.where,
            kind=claim.kind,
            verdict=NOT_COMPARABLE,
            why=claim.reason,
            counted=not claim.diagnostic,
            diagnostic=claim.diagnostic,
        )
        return [], [cell]
    return kind_of(claim.kind).cells(claim, paper, evidence)


def rows_table(claims: dict[str, Claim], rows: list[Row]) -> Table:
    """The rows behind cells: the paper's numbers, maxbench's means, each difference, each in its
    kind's terms."""
    cols = (
        "model",
        "corpus",
        "method vs baseline",
        "score",
        "paper (baseline -> method)",
        "maxbench baseline",
        "maxbench method",
        "difference [95% CI]",
        "relative [95% CI]",
        "prompts (folds)",
    )
    body = []
    for r in rows:
        kind = kind_of(r.kind)
        body.append(
            (
                Cell(r.model, code=True),
                Cell(r.corpus),
                Cell(f"{r.method} vs {r.baseline}"),
                Cell(r.score + ("" if r.variant == "paper" else " (maxbench)")),
                num(kind.row_paper_text(r, claims[r.claim])),
                num(fmt.value(r.baseline_mean, r.baseline_sd)),
                num(fmt.value(r.method_mean, r.method_sd)),
                num(kind.row_difference_text(r)),
                num(kind.row_relative_text(r) + (f" ({r.note})" if r.note else "")),
                num(f"{r.n_prompts} ({r.n_folds})"),
            )
        )
    return Table(cols, tuple(body), align="llllrrrrrr")


def seeds_table(rows: list[Row]) -> Table:
    """Each seed pair of the seed-averaged rows: its own values and relative effect, beside the
    average the row (and the verdict) rests on."""
    cols = ("model", "corpus", "score", "seed pair (method vs baseline)", "baseline", "method", "relative [95% CI]")
    body = []
    for r in rows:
        for x in r.seeds:
            body.append(
                (
                    Cell(r.model, code=True),
                    Cell(r.corpus),
                    Cell(r.score + ("" if r.variant == "paper" else " (maxbench)")),
                    Cell(f"{x['method']} vs {x['baseline']}"),
                    num(fmt.value(x["baseline_value"])),
                    num(fmt.value(x["method_value"])),
                    num(fmt.pct_interval(x["relative"], x["rel_low"], x["rel_high"])),
                )
            )
    return Table(cols, tuple(body), align="llllrrr")
