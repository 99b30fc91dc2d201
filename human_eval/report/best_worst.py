"""The report of a best-worst scaling study: per aspect, each system's counting score with a
bootstrap interval and the annotators' agreement on the best and the worst text (the statistics
of ``human_eval/analysis/best_worst.py``)."""

from __future__ import annotations

from pathlib import Path

from maxbench.document import Cell, Para, Section, Table, num
from maxbench.human_eval.analysis.options import CONFIDENCE
from maxbench.human_eval.analysis.results import BestWorstAnalysis
from maxbench.human_eval.report.render import REPORT_PACKAGES, fmt, fmt_ci, judgment_intro, write_judgment_report
from maxbench.provenance import versions


def best_worst_sections(a: BestWorstAnalysis) -> list[Section]:
    o = a.options
    intro = judgment_intro(a, "best-worst scaling")
    sections = [intro]
    for x in a.aspects:
        s = Section(f"Aspect: {x.aspect}")
        s.paragraphs.append(
            Para(
                "Counting scores: (times best - times worst) / times shown, in [-1, 1], with "
                f"{CONFIDENCE:.0%} percentile bootstrap intervals ({o.n_boot} resamples of items, seed {o.seed}); "
                f"{x.n_judgments} judgments."
            )
        )
        s.tables.append(
            Table(
                ("system", "score", f"{CONFIDENCE:.0%} CI", "best", "worst", "shown"),
                tuple(
                    (
                        Cell(c.system),
                        num(fmt(c.score)),
                        num(fmt_ci(c.ci)),
                        num(str(c.best)),
                        num(str(c.worst)),
                        num(str(c.shown)),
                    )
                    for c in sorted(x.scores, key=lambda c: -(c.score if c.score is not None else -2))
                ),
            )
        )
        g = x.agreement
        s.paragraphs.append(
            Para(
                f"Agreement over {g.n_units} tuple(s) judged by two or more annotators: two annotators chose the "
                f"same best text in {fmt(None if g.best_rate is None else 100 * g.best_rate, 1)}% and the same "
                f"worst text in {fmt(None if g.worst_rate is None else 100 * g.worst_rate, 1)}% of their pairs."
            )
        )
        sections.append(s)
    prov = Section("Provenance")
    prov.bullets += [Para("{} {}", (k, v)) for k, v in versions(REPORT_PACKAGES).items()]
    sections.append(prov)
    return sections


def write_best_worst_report(
    analysis: BestWorstAnalysis, out_dir: str | Path, name: str, code: dict | None = None
) -> Path:
    """``code``: the rated systems' plugin code (``render.plugin_code``), named in the provenance."""
    return write_judgment_report(best_worst_sections(analysis), "best-worst", analysis.to_dict(), out_dir, name, code)
