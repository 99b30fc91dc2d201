"""The results of a rating study in the layouts of the papers it reproduces, so that a row can be
set beside the published one: graphmax (JAIR) Table 9 (aspects as rows, systems as columns,
mean (sd)), POSG Tables 4 and 6 (systems as rows, aspects as columns, means) and POSG Tables 17
and 18 (Krippendorff's alpha per aspect). A star marks a Holm-adjusted p below the study's alpha
in the primary test against the reference.
"""

from __future__ import annotations

from maxbench.document import Cell, Para, Section, Table, num
from maxbench.human_eval.analysis.results import Analysis, Comparison
from maxbench.human_eval.report.render import alternative_text, fmt, label_of_test


def _mean_sd(d) -> str:
    if d.mean is None:
        return "–"
    return f"{d.mean:.2f} ({fmt(d.sd)})"


def _star(analysis: Analysis, comparison: Comparison | None) -> str:
    result = comparison.primary_result if comparison is not None else None
    if result is None or result.pvalue_holm is None:
        return ""
    return "*" if result.pvalue_holm < analysis.options.alpha else ""


def paper_tables(a: Analysis) -> list[Section]:
    """The three sections in the papers' layouts, in the order the module docstring names them; stars against ``a.reference``."""
    note_star = (
        (
            "* significant against {} ("
            + ", ".join(sorted({label_of_test(c.primary) for c in a.comparisons if c.primary_result is not None}))
            + f"; Holm-adjusted p < {a.options.alpha:g}, {alternative_text(a)})"
        )
        if a.comparisons
        else ""
    )
    shared_scale = len({(s.low, s.high) for s in a.scales.values()}) == 1
    # graphmax (JAIR) Table 9: aspects as rows, systems as columns, mean (sd).
    rows = []
    for aspect in a.aspects:
        cells = [Cell(aspect)]
        for system in a.systems:
            d = a.descriptive(aspect, system)
            comp = a.comparison(aspect, system) if system != a.reference else None
            cells.append(num(_mean_sd(d), _star(a, comp)))
        rows.append(tuple(cells))
    if shared_scale and len(a.aspects) > 1:
        averages = [Cell("Average")]
        for system in a.systems:
            means = [a.descriptive(x, system).mean for x in a.aspects]
            averages.append(num("–" if None in means else f"{sum(means) / len(means):.2f}"))
        rows.append(tuple(averages))
    caption = Para(
        "Mean (sd) per aspect, sd the sample standard deviation over ratings"
        + ("; Average is the mean of the aspect means" if shared_scale and len(a.aspects) > 1 else "")
        + (". " + note_star + "." if note_star else "."),
        (a.reference,) if note_star else (),
    )
    table9 = Section("Results in the layout of graphmax (JAIR) Table 9")
    table9.tables.append(Table(("Aspect",) + a.systems, tuple(rows), caption))
    # POSG Tables 4 and 6: systems as rows, aspects as columns, means with stars.
    rows = []
    for system in a.systems:
        cells = [Cell(system)]
        for aspect in a.aspects:
            d = a.descriptive(aspect, system)
            comp = a.comparison(aspect, system) if system != a.reference else None
            cells.append(num(fmt(d.mean), _star(a, comp)))
        rows.append(tuple(cells))
    posg = Section("Results in the layout of POSG Tables 4 and 6")
    posg.tables.append(
        Table(
            ("System",) + a.aspects,
            tuple(rows),
            Para("Mean rating." + (" " + note_star + "." if note_star else ""), (a.reference,) if note_star else ()),
        )
    )
    # POSG Tables 17-18: Krippendorff's alpha per aspect.
    agreement = Section("Agreement in the layout of POSG Tables 17 and 18")
    agreement.tables.append(
        Table(
            ("",) + a.aspects,
            (
                (Cell("Krippendorff's α (ordinal)"),) + tuple(num(fmt(g.ordinal)) for g in a.agreement),
                (Cell("Krippendorff's α (interval)"),) + tuple(num(fmt(g.interval)) for g in a.agreement),
            ),
            Para(
                "Units are texts (item, system); the ordinal level uses the rubric's scale as value domain; "
                "– marks an undefined alpha (see Agreement)."
            ),
        )
    )
    return [table9, posg, agreement]
