"""The report of a rating study (a Likert scale, or direct assessment on a 0-100 slider):
report.md, report.html, report.json and the figures of an :class:`Analysis`.

The sections, in order: the study, warnings, the results in the papers' layouts
(``human_eval/report/paper_tables.py``), exclusions, the ratings per system and aspect with
their figures (``human_eval/report/figures.py``), the tests against the reference, agreement,
annotators, the automatic metrics against the ratings when a study's run has scores, and
provenance.
"""

from __future__ import annotations

from pathlib import Path

from maxbench.document import Cell, Figure, Para, Section, Table, num
from maxbench.human_eval.analysis.options import CONFIDENCE
from maxbench.human_eval.analysis.results import Analysis, Comparison
from maxbench.human_eval.report.figures import MAX_LIKERT_POINTS, likert_figures
from maxbench.human_eval.report.paper_tables import paper_tables
from maxbench.human_eval.report.render import (
    REPORT_FORMAT_VERSION,
    REPORT_PACKAGES,
    add_code,
    alternative_text,
    fmt,
    fmt_ci,
    fmt_p,
    fmt_value,
    gold_cell,
    label_of_test,
    report_folder,
    write_documents,
    write_file,
)
from maxbench.provenance import versions


def write_report(
    analysis: Analysis,
    out_dir: str | Path,
    name: str,
    correlations: tuple[list, str] | None = None,
    code: dict | None = None,
) -> Path:
    """Write <out_dir>/<name>/{report.md, report.html, report.json, figures/*}; returns the folder.

    ``correlations``: (the table, its note) of ``human_eval/report/agreement.py``, shown before
    the provenance; None leaves the section out. ``code``: the rated systems' plugin code
    (``render.plugin_code``), named in the provenance and in report.json; nothing without plugins.
    """
    folder = report_folder(out_dir, name, with_figures=True)
    figure_dir = folder / "figures"
    drawn = likert_figures(analysis)
    figures, written = {}, set()
    for aspect, (stem, png, svg) in drawn.items():
        write_file(figure_dir / f"{stem}.png", png)
        write_file(figure_dir / f"{stem}.svg", svg)
        written |= {f"{stem}.png", f"{stem}.svg"}
        figures[aspect] = Figure(f"figures/{stem}.png", png, f"Likert distribution of {aspect} per system")
    for stale in figure_dir.glob("likert-*"):
        if stale.name not in written:  # left by an earlier report of another input under this name
            stale.unlink()
    sections = build_sections(analysis, figures)
    if correlations is not None:
        from maxbench.human_eval.report.agreement import correlation_section

        sections.insert(-1, correlation_section(*correlations))
    payload = {
        "format": REPORT_FORMAT_VERSION,
        "versions": versions(REPORT_PACKAGES),
        **analysis.to_dict(),
        "figures": {aspect: f"figures/{stem}.png" for aspect, (stem, _, _) in drawn.items()},
    }
    if correlations is not None:
        payload["metric_correlations"] = {"note": correlations[1], "table": [r.to_json() for r in correlations[0]]}
    if code:
        add_code(sections, payload, code)
    write_documents(folder, sections, payload)
    return folder


def build_sections(analysis: Analysis, figures: dict[str, Figure]) -> list[Section]:
    a = analysis
    o = a.options
    sections = []
    intro = Section(f"Human evaluation report: {a.study}", level=1)
    intro.paragraphs.append(
        Para(
            "Study {} from {} (sha256 {}): {} rating rows in, {} kept after exclusions; "
            f"{len(a.systems)} system(s), {len(a.aspects)} aspect(s), "
            f"{len(a.annotators)} annotator(s), {sum(1 for x in a.annotators if x.n)} with kept ratings.",
            (a.study, a.source, a.sha256, a.exclusions.rows_in, a.exclusions.rows_kept),
        )
    )
    if a.progress is not None and a.progress.complete:
        intro.paragraphs.append(Para(f"Complete study: all {a.progress.texts_assigned} assigned texts are rated."))
    if a.reference is not None:
        intro.paragraphs.append(
            Para(
                f"Reference system: {{}} ({a.reference_rule}). Significance: Holm-adjusted p < "
                f"{o.alpha:g} "
                f"({alternative_text(a)}), Holm's correction over the comparisons of each aspect.",
                (a.reference,),
            )
        )
    sections.append(intro)
    if a.warnings:
        warn = Section("Warnings")
        warn.bullets = [Para("{}", (w,)) for w in a.warnings]
        sections.append(warn)
    sections.extend(paper_tables(a))
    sections.append(_exclusion_section(a))
    sections.append(_descriptive_section(a, figures))
    if a.comparisons:
        sections.append(_test_section(a))
    sections.append(_agreement_section(a))
    sections.append(_annotator_section(a))
    sections.append(_provenance_section(a))
    return sections


def _exclusion_section(a: Analysis) -> Section:
    ex = a.exclusions
    s = Section("Exclusions")
    s.paragraphs.append(
        Para(
            f"{ex.rows_in} rows in, {ex.rows_in - ex.rows_kept} excluded, {ex.rows_kept} kept. "
            "A row can match more than one rule."
        )
    )
    s.tables.append(Table(("Rule", "Rows matched"), tuple((Cell(name), num(str(n))) for name, n in ex.by_rule)))
    if ex.by_annotator:
        s.tables.append(
            Table(("Annotator", "Rows excluded"), tuple((Cell(name), num(str(n))) for name, n in ex.by_annotator))
        )
    return s


def _descriptive_section(a: Analysis, figures: dict[str, Figure]) -> Section:
    s = Section("Ratings per system and aspect")
    s.paragraphs.append(
        Para(
            "n counts ratings; mean, sd (n - 1) and median are over ratings; the value "
            "columns count ratings at each point of the scale."
        )
    )
    for aspect in a.aspects:
        scale = a.scales[aspect]
        likert = len(scale.domain) <= MAX_LIKERT_POINTS
        columns = ("System", "n", "items", "annotators", "mean", "sd", "median")
        if likert:
            columns += tuple(fmt_value(v) for v in scale.domain)
        rows = []
        for system in a.systems:
            d = a.descriptive(aspect, system)
            cells = [
                Cell(system),
                num(str(d.n)),
                num(str(d.n_items)),
                num(str(d.n_annotators)),
                num(fmt(d.mean)),
                num(fmt(d.sd)),
                num(fmt(d.median, 1)),
            ]
            if likert:
                cells += [num(str(c)) for _, c in d.distribution]
            rows.append(tuple(cells))
        s.tables.append(
            Table(
                columns,
                tuple(rows),
                Para(
                    "{}: scale "
                    f"{fmt_value(scale.low)}-{fmt_value(scale.high)} (from {scale.source})"
                    + ("" if likert else "; distribution in report.json"),
                    (aspect,),
                ),
            )
        )
        if aspect in figures:
            s.figures.append(figures[aspect])
    return s


def _test_rows(a: Analysis, c: Comparison) -> list[tuple[Cell, ...]]:
    rows = []
    for result in sorted([t for t in (c.wilcoxon, c.mannwhitney) if t is not None], key=lambda t: t.test != c.primary):
        sig = (
            "*"
            if (result.test == c.primary and result.pvalue_holm is not None and result.pvalue_holm < a.options.alpha)
            else ""
        )
        rows.append(
            (
                Cell(c.other),
                num(c.design.kind),
                num(label_of_test(result.test) + ("" if result.test == c.primary else " (not used for stars)")),
                num(result.method),
                num(f"{result.n_reference}/{result.n_other}"),
                num(fmt(result.statistic, 1)),
                num(fmt_p(result.pvalue)),
                num(fmt_p(result.pvalue_holm), sig),
                num(fmt(result.effect_size)),
                num(fmt_ci(result.effect_ci)),
            )
        )
    if not rows:
        rows.append((Cell(c.other), num(c.design.kind), num("not run")) + (num("–"),) * 7)
    return rows


def _test_section(a: Analysis) -> Section:
    s = Section("Tests against the reference")
    s.paragraphs.append(
        Para(
            "Each other system is compared with the reference {} per aspect. A paired design (the same items "
            "rated for both systems) uses the Wilcoxon signed-rank test on per-item mean ratings "
            "(scipy.stats.wilcoxon); an unpaired one uses the Mann-Whitney U test on the ratings "
            "(scipy.stats.mannwhitneyu), which is also shown for paired designs for comparison with POSG, who "
            "used it. Holm's step-down correction runs over each aspect's comparisons, separately per test. "
            "r is the rank-biserial correlation, positive when the reference is rated higher, with a "
            f"{CONFIDENCE:.0%} percentile bootstrap interval ({a.options.n_boot} resamples of items, seed "
            f"{a.options.seed}). U is the reference's U statistic; W is scipy's signed-rank statistic on d = reference - other (two-sided: the smaller of T+ and T-; one-sided: T+). "
            "n is reference/other ratings (Mann-Whitney) or paired items (Wilcoxon).",
            (a.reference,),
        )
    )
    if a.options.z_scores:
        s.paragraphs.append(
            Para(
                "Direct assessment: the tests run on per-annotator z-scores (each annotator's ratings minus "
                "that annotator's mean, divided by their sample standard deviation, per aspect), as WMT "
                "standardises its 0-100 scores; the descriptive table shows the raw ratings.",
                (),
            )
        )
    for aspect in a.aspects:
        comps = [c for c in a.comparisons if c.aspect == aspect]
        rows = [row for c in comps for row in _test_rows(a, c)]
        s.tables.append(
            Table(
                (
                    "System",
                    "design",
                    "test",
                    "method",
                    "n",
                    "statistic",
                    "p",
                    "p (Holm)",
                    "r",
                    f"r {CONFIDENCE:.0%} CI",
                ),
                tuple(rows),
                Para(f"{{}} (* Holm-adjusted p < {a.options.alpha:g})", (aspect,)),
                align="llllrrrrrr",
            )
        )
    s.bullets = [Para("{} / {}: {}", (c.aspect, c.other, c.design.statement)) for c in a.comparisons]
    for c in a.comparisons:
        for t in (c.wilcoxon, c.mannwhitney):
            if t is not None and t.note:
                s.bullets.append(Para("{} / {}: {}", (c.aspect, c.other, t.note)))
    assumptions = sorted(
        {(t.test, t.method, t.assumes) for c in a.comparisons for t in (c.wilcoxon, c.mannwhitney) if t is not None}
    )
    s.bullets += [
        Para("{} ({}) assumes: {}", (label_of_test(test), method, text)) for test, method, text in assumptions
    ]
    return s


def _agreement_section(a: Analysis) -> Section:
    s = Section("Agreement")
    s.paragraphs.append(
        Para(
            "Krippendorff's alpha per aspect (krippendorff package): units are texts (item, system), "
            "the ordinal level uses the rubric's scale points as value domain (Likert ratings are ordinal), the "
            "interval level is shown beside it. The interval is a "
            f"{CONFIDENCE:.0%} percentile bootstrap over items ({a.options.n_boot} resamples; each item brings "
            "all its texts), ordinal level; resamples where alpha is undefined are dropped and counted."
        )
    )
    rows = tuple(
        (
            Cell(g.aspect),
            num(fmt(g.ordinal, 3)),
            num(fmt_ci(g.ordinal_ci, 3)),
            num(fmt(g.interval, 3)),
            num(str(g.n_units)),
            num(str(g.n_pairable_units)),
            num(str(g.n_annotators)),
            num(str(g.n_boot_valid)),
            Cell(g.undefined_reason or ""),
        )
        for g in a.agreement
    )
    s.tables.append(
        Table(
            (
                "Aspect",
                "α ordinal",
                f"{CONFIDENCE:.0%} CI",
                "α interval",
                "units",
                "units rated twice+",
                "annotators",
                "valid resamples",
                "note",
            ),
            rows,
            align="lrrrrrrrl",
        )
    )
    return s


def _annotator_section(a: Analysis) -> Section:
    s = Section("Annotators")
    flags = ", ".join(a.options.exclude_flags) or "none"
    s.paragraphs.append(
        Para(
            f"Over kept ratings, in {a.annotator_units}. offset: mean of (own rating - mean of the other "
            "annotators on the same text and aspect), negative for a harsh rater. drift: mean over the later "
            "half of the annotator's presentation positions minus the earlier half. flagged texts: texts "
            "carrying an excluded flag ({}).",
            (flags,),
        )
    )
    gold = any(x.gold_n is not None for x in a.annotators)
    if gold:
        s.paragraphs.append(
            Para(
                "gold: gold-item judgments answered as expected (a suite reference preferred to, or rated "
                "above, a degraded copy of it), of those made; gold items are in no other number here."
            )
        )
    rows = tuple(
        (
            Cell(x.annotator),
            num(str(x.n)),
            num(str(x.n_items)),
            num(fmt(x.mean)),
            num(fmt(x.sd)),
            num(fmt(x.offset)),
            num(fmt(x.drift)),
            num(fmt(x.median_seconds, 1)),
            num(str(x.check_failures)),
            num(str(x.excluded)),
            Cell(", ".join(x.flags)),
        )
        + ((num(gold_cell(x.gold_correct, x.gold_n)),) if gold else ())
        for x in a.annotators
    )
    s.tables.append(
        Table(
            (
                "Annotator",
                "n",
                "texts",
                "mean",
                "sd",
                "offset",
                "drift",
                "median s",
                "flagged texts",
                "excluded rows",
                "flags",
            )
            + (("gold",) if gold else ()),
            rows,
            align="lrrrrrrrrrl" + ("r" if gold else ""),
        )
    )
    return s


def _provenance_section(a: Analysis) -> Section:
    s = Section("Provenance")
    s.paragraphs.append(Para("Regenerate with the same input and options; the output is byte-identical."))
    s.bullets = [Para("input: {}, study {}; sha256 of {}: {}", (a.source, a.study, a.sha256_of, a.sha256))]
    s.bullets += [Para("{}: {}", (k, v)) for k, v in _options_dict(a).items()]
    s.bullets += [Para("{} {}", (k, v)) for k, v in versions(REPORT_PACKAGES).items()]
    return s


def _options_dict(a: Analysis) -> dict[str, str]:
    o = a.options
    return {
        "reference": str(a.reference),
        "alternative": o.alternative,
        "alpha (significance level)": f"{o.alpha:g}",
        "design": o.design,
        "scale": "from the data" if o.scale is None else f"{o.scale[0]:g}:{o.scale[1]:g}",
        "min seconds": "off" if o.min_seconds is None else f"{o.min_seconds:g}",
        "excluded flags": ", ".join(o.exclude_flags) or "none",
        "bootstrap resamples": str(o.n_boot),
        "seed": str(o.seed),
        "z-scores": "per annotator" if o.z_scores else "off",
    }
