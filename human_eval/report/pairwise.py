"""The report of a pairwise preference study: per aspect, Bradley-Terry strengths with bootstrap
intervals, a sign test per pair of systems with Holm's correction, and the annotators'
agreement (the statistics of ``human_eval/analysis/pairwise.py``)."""

from __future__ import annotations

from pathlib import Path

from maxbench.document import Cell, Para, Section, Table, num
from maxbench.human_eval.analysis.options import CONFIDENCE
from maxbench.human_eval.analysis.pairwise import BT_ALPHA
from maxbench.human_eval.analysis.results import PairwiseAnalysis
from maxbench.human_eval.report.render import (
    REPORT_PACKAGES,
    fmt,
    fmt_ci,
    fmt_p,
    gold_cell,
    judgment_intro,
    write_judgment_report,
)
from maxbench.provenance import versions


def pairwise_sections(a: PairwiseAnalysis) -> list[Section]:
    o = a.options
    intro = judgment_intro(a, "pairwise preference")
    intro.paragraphs.append(
        Para(
            "Position balance (times shown as A): {}.",
            ("; ".join(f"{s} {n}" for s, n in a.shown_left),),
        )
    )
    if a.gold:
        intro.paragraphs.append(
            Para(
                "Gold items (a suite reference against a degraded copy; the reference should win) are in no "
                "other number of this report. Each annotator's gold judgments answered as expected:"
            )
        )
        intro.tables.append(
            Table(("Annotator", "gold"), tuple((Cell(g.annotator), num(gold_cell(g.correct, g.n))) for g in a.gold))
        )
    sections = [intro]
    for x in a.aspects:
        s = Section(f"Aspect: {x.aspect}")
        s.paragraphs.append(
            Para(
                "Bradley-Terry log-strengths (centred at 0; a tie is half a win for each side), fitted by choix "
                f"(ilsr_pairwise_dense, regularisation {BT_ALPHA:g}), with {CONFIDENCE:.0%} percentile bootstrap "
                f"intervals ({o.n_boot} resamples of items, seed {o.seed}); {x.n_judgments} judgments."
            )
        )
        s.tables.append(
            Table(
                ("system", "strength", f"{CONFIDENCE:.0%} CI", "wins", "comparisons"),
                tuple(
                    (
                        Cell(st.system),
                        num(fmt(st.score)),
                        num(fmt_ci(st.ci)),
                        num(fmt(st.wins, 1)),
                        num(str(st.comparisons)),
                    )
                    for st in sorted(x.strengths, key=lambda st: -st.score)
                ),
            )
        )
        s.paragraphs.append(
            Para(
                "Sign test per pair: the exact two-sided binomial test of the decisive judgments against 1/2 "
                f"(scipy.stats.binomtest; ties dropped), Holm's correction over the pairs; * Holm p < {o.alpha:g}."
            )
        )
        s.tables.append(
            Table(
                ("first", "second", "first wins", "second wins", "ties", "p", "p (Holm)"),
                tuple(
                    (
                        Cell(t.first),
                        Cell(t.second),
                        num(str(t.first_wins)),
                        num(str(t.second_wins)),
                        num(str(t.ties)),
                        num(fmt_p(t.pvalue)),
                        num(
                            fmt_p(t.pvalue_holm),
                            mark="*" if t.pvalue_holm is not None and t.pvalue_holm < o.alpha else "",
                        ),
                    )
                    for t in x.sign_tests
                ),
                align="llrrrrr",
            )
        )
        g = x.agreement
        s.paragraphs.append(
            Para(
                f"Agreement over {g.n_units} comparison(s) judged by two or more annotators: Krippendorff's alpha "
                f"(nominal: first better, second better, tie) {fmt(g.alpha_nominal, 3)}; two annotators gave "
                f"the same outcome in {fmt(None if g.rate is None else 100 * g.rate, 1)}% of their pairs."
            )
        )
        sections.append(s)
    prov = Section("Provenance")
    prov.bullets += [Para("{} {}", (k, v)) for k, v in versions(REPORT_PACKAGES + ("choix",)).items()]
    sections.append(prov)
    return sections


def write_pairwise_report(analysis: PairwiseAnalysis, out_dir: str | Path, name: str, code: dict | None = None) -> Path:
    """``code``: the rated systems' plugin code (``render.plugin_code``), named in the provenance."""
    return write_judgment_report(pairwise_sections(analysis), "pairwise", analysis.to_dict(), out_dir, name, code)
