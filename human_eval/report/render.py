"""Turn an Analysis into report.md, report.html (self-contained), report.json and figures.

The markdown and the HTML are rendered from one list of sections (the document model of
``core/document.py``), so they always say the same thing. Nothing in the output depends on
the clock, the path of the input or the order of a hash set: the same input and options
give byte-identical files, and the input's sha256 and the package versions are recorded
instead of a timestamp.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from maxbench.document import Cell, Figure, Para, Section, Table, num, render_html, render_markdown
from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write
from maxbench.human_eval.analysis.options import CONFIDENCE
from maxbench.human_eval.analysis.pairwise import BT_ALPHA
from maxbench.human_eval.analysis.results import Analysis, BestWorstAnalysis, Comparison, PairwiseAnalysis, Scale
from maxbench.intervals import ConfidenceInterval
from maxbench.provenance import versions

REPORT_FORMAT_VERSION = 1
MAX_LIKERT_POINTS = 11  # beyond this a "scale" is a slider: no stacked bars, no count columns
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


# --------------------------------------------------------------------------- formatting


def fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def fmt_value(v: float) -> str:
    return f"{v:g}"


def fmt_ci(ci: ConfidenceInterval | None, digits: int = 2) -> str:
    return "–" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _mean_sd(d) -> str:
    if d.mean is None:
        return "–"
    return f"{d.mean:.2f} ({fmt(d.sd)})"


def _star(analysis: Analysis, comparison: Comparison | None) -> str:
    result = comparison.primary_result if comparison is not None else None
    if result is None or result.pvalue_holm is None:
        return ""
    return "*" if result.pvalue_holm < analysis.options.alpha else ""


def _test_name(test: str) -> str:
    return {"mannwhitneyu": "Mann-Whitney U", "wilcoxon": "Wilcoxon signed-rank"}[test]


def _alternative_text(analysis: Analysis) -> str:
    # No system name here: this text goes into templates unescaped.
    return {
        "two-sided": "two-sided",
        "greater": "one-sided, H1: reference rated higher",
        "less": "one-sided, H1: reference rated lower",
    }[analysis.options.alternative]


# --------------------------------------------------------------------------- sections


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
                f"({_alternative_text(a)}), Holm's correction over the comparisons of each aspect.",
                (a.reference,),
            )
        )
    sections.append(intro)
    if a.warnings:
        warn = Section("Warnings")
        warn.bullets = [Para("{}", (w,)) for w in a.warnings]
        sections.append(warn)
    sections.extend(_paper_tables(a))
    sections.append(_exclusion_section(a))
    sections.append(_descriptive_section(a, figures))
    if a.comparisons:
        sections.append(_test_section(a))
    sections.append(_agreement_section(a))
    sections.append(_annotator_section(a))
    sections.append(_provenance_section(a))
    return sections


def _paper_tables(a: Analysis) -> list[Section]:
    note_star = (
        (
            "* significant against {} ("
            + ", ".join(sorted({_test_name(c.primary) for c in a.comparisons if c.primary_result is not None}))
            + f"; Holm-adjusted p < {a.options.alpha:g}, {_alternative_text(a)})"
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
                num(_test_name(result.test) + ("" if result.test == c.primary else " (not used for stars)")),
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
    s.bullets += [Para("{} ({}) assumes: {}", (_test_name(test), method, text)) for test, method, text in assumptions]
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
        + ((num(_gold_cell(x.gold_correct, x.gold_n)),) if gold else ())
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


def _gold_cell(correct: int | None, n: int | None) -> str:
    return "" if not n else f"{correct}/{n} ({fmt(correct / n)})"


REPORT_PACKAGES = ("maxbench", "numpy", "scipy", "krippendorff", "matplotlib", "jinja2")


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


# --------------------------------------------------------------------------- figures


def likert_figures(a: Analysis) -> dict[str, tuple[str, bytes, bytes]]:
    """aspect -> (file stem, PNG bytes, SVG bytes): 100% stacked bars of the scale points per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    out = {}
    rc = {
        "svg.hashsalt": "maxbench-report",
        "font.family": "DejaVu Sans",
        "font.size": 9,
        "figure.dpi": 100,
        "savefig.dpi": 100,
    }
    for index, aspect in enumerate(a.aspects):
        scale: Scale = a.scales[aspect]
        if len(scale.domain) > MAX_LIKERT_POINTS:
            continue
        with matplotlib.rc_context(rc):
            labels = [_wrap(system) + f"\n(n={a.descriptive(aspect, system).n})" for system in a.systems]
            row_height = 0.3 + 0.16 * max(label.count("\n") + 1 for label in labels)
            fig, ax = plt.subplots(figsize=(7.5, row_height * len(a.systems) + 1.3), layout="constrained")
            colours = colormaps["RdYlGn"](
                [0.08 + 0.84 * k / max(1, len(scale.domain) - 1) for k in range(len(scale.domain))]
            )
            for row, system in enumerate(a.systems):
                d = a.descriptive(aspect, system)
                left = 0.0
                for k, (value, count) in enumerate(d.distribution):
                    share = 100.0 * count / d.n if d.n else 0.0
                    ax.barh(
                        row,
                        share,
                        left=left,
                        color=colours[k],
                        edgecolor="white",
                        linewidth=0.5,
                        label=fmt_value(value) if row == 0 else None,
                    )
                    if share >= 8:
                        ax.text(left + share / 2, row, f"{share:.0f}", ha="center", va="center", fontsize=8)
                    left += share
            ax.set_yticks(range(len(a.systems)), labels)
            ax.invert_yaxis()
            ax.set_xlim(0, 100)
            ax.set_xlabel("share of ratings (%)")
            ax.set_title(_short(aspect, 60))
            fig.legend(
                title="rating",
                ncols=len(scale.domain),
                loc="outside lower center",
                frameon=False,
                fontsize=8,
                title_fontsize=8,
            )
            ax.spines[["top", "right"]].set_visible(False)
            png, svg = io.BytesIO(), io.BytesIO()
            fig.savefig(png, format="png", metadata={"Software": None})
            fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
            plt.close(fig)
        out[aspect] = (f"likert-{index + 1:02d}-{_slug(aspect)}", png.getvalue(), svg.getvalue())
    return out


def _wrap(name: str, width: int = 30) -> str:
    """A system name on lines of at most ``width`` characters, broken after '/' or ',' where possible."""
    lines, line = [], ""
    for piece in re.findall(r"[^/,]+[/,]?|[/,]", name):
        while len(piece) > width:  # a piece with no break opportunity is cut hard
            if line:
                lines.append(line)
                line = ""
            lines.append(piece[:width])
            piece = piece[width:]
        if len(line) + len(piece) > width and line:
            lines.append(line)
            line = ""
        line += piece
    return "\n".join(lines + [line] if line else lines)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]
    return slug or "aspect"


def correlation_section(table, note: str) -> Section:
    """Kendall's tau and Spearman's rho of each automatic metric with each rated aspect."""
    section = Section("Automatic metrics against human ratings")
    section.paragraphs.append(
        Para(
            note + " Item level: one point per rated text; system level: one point per system (its mean "
            "metric value and mean rating). [95% bootstrap interval]; a metric where lower is better (↓) agrees "
            "with the raters when its correlation is negative."
        )
    )
    if not table:
        return section

    def corr(v, ci):
        return num(fmt(v), detail="" if ci is None else f"[{fmt(ci[0])}, {fmt(ci[1])}]")

    rows = []
    for r in table:
        i, s = r.item, r.system
        rows.append(
            (
                Cell(r.metric + (" ↓" if r.higher_is_better is False else ""), code=True),
                Cell(r.aspect, escape=True),
                num(str(i.n)),
                corr(i.tau, i.tau_ci),
                corr(i.rho, i.rho_ci),
                num(str(s.n)),
                corr(s.tau, s.tau_ci),
                corr(s.rho, s.rho_ci),
            )
        )
    section.tables.append(
        Table(
            columns=("metric", "aspect", "texts", "item τ", "item ρ", "systems", "system τ", "system ρ"),
            rows=tuple(rows),
            align="llrrrrrr",
        )
    )
    return section


def write_report(
    analysis: Analysis, out_dir: str | Path, name: str, correlations: tuple[list, str] | None = None
) -> Path:
    """Write <out_dir>/<name>/{report.md, report.html, report.json, figures/*}; returns the folder."""
    if not _NAME.match(name):
        raise MaxbenchError(f"--name {name!r} is not a plain folder name (letters, digits, '.', '_', '-')")
    folder = Path(out_dir) / name
    figure_dir = folder / "figures"
    try:
        figure_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MaxbenchError(
            f"cannot create the report folder {folder} ({exc.strerror}); choose another --out"
        ) from None
    drawn = likert_figures(analysis)
    figures, written = {}, set()
    for aspect, (stem, png, svg) in drawn.items():
        _write(figure_dir / f"{stem}.png", png)
        _write(figure_dir / f"{stem}.svg", svg)
        written |= {f"{stem}.png", f"{stem}.svg"}
        figures[aspect] = Figure(f"figures/{stem}.png", png, f"Likert distribution of {aspect} per system")
    for stale in figure_dir.glob("likert-*"):
        if stale.name not in written:  # left by an earlier report of another input under this name
            stale.unlink()
    sections = build_sections(analysis, figures)
    if correlations is not None:
        sections.insert(-1, correlation_section(*correlations))
    _write(folder / "report.md", render_markdown(sections).encode("utf-8"))
    _write(folder / "report.html", render_html(sections, sections[0].title).encode("utf-8"))
    payload = {
        "format": REPORT_FORMAT_VERSION,
        "versions": versions(REPORT_PACKAGES),
        **analysis.to_dict(),
        "figures": {aspect: f"figures/{stem}.png" for aspect, (stem, _, _) in drawn.items()},
    }
    if correlations is not None:
        payload["metric_correlations"] = {"note": correlations[1], "table": [r.to_json() for r in correlations[0]]}
    _write(
        folder / "report.json",
        (json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8"),
    )
    return folder


def _write(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise MaxbenchError(f"cannot write {path} ({exc.strerror}); check the --out folder") from None


# --------------------------------------------------------------------------- pairwise studies


def _judgment_intro(a: PairwiseAnalysis | BestWorstAnalysis, kind: str) -> Section:
    intro = Section(f"Human evaluation report: {a.study} ({kind})", level=1)
    intro.paragraphs.append(
        Para(
            "Study {} from {}: {} judgment rows in, {} kept after exclusions (flags: {}); "
            f"{len(a.systems)} system(s), {a.annotators} annotator(s).",
            (a.study, a.source, a.rows_in, a.rows_kept, ", ".join(a.options.exclude_flags) or "none"),
        )
    )
    if a.exclusions:
        intro.tables.append(
            Table(("Exclusion rule", "Rows matched"), tuple((Cell(name), num(str(n))) for name, n in a.exclusions))
        )
    return intro


def pairwise_sections(a: PairwiseAnalysis) -> list[Section]:
    o = a.options
    intro = _judgment_intro(a, "pairwise preference")
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
            Table(("Annotator", "gold"), tuple((Cell(g.annotator), num(_gold_cell(g.correct, g.n))) for g in a.gold))
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


def write_pairwise_report(analysis: PairwiseAnalysis, out_dir: str | Path, name: str) -> Path:
    return _write_judgment_report(pairwise_sections(analysis), "pairwise", analysis.to_dict(), out_dir, name)


def bestworst_sections(a: BestWorstAnalysis) -> list[Section]:
    o = a.options
    intro = _judgment_intro(a, "best-worst scaling")
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


def write_bestworst_report(analysis: BestWorstAnalysis, out_dir: str | Path, name: str) -> Path:
    return _write_judgment_report(bestworst_sections(analysis), "best-worst", analysis.to_dict(), out_dir, name)


def _write_judgment_report(sections: list[Section], judgment: str, data: dict, out_dir: str | Path, name: str) -> Path:
    if not _NAME.match(name):
        raise MaxbenchError(f"--name {name!r} is not a plain folder name (letters, digits, '.', '_', '-')")
    folder = Path(out_dir) / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MaxbenchError(
            f"cannot create the report folder {folder} ({exc.strerror}); choose another --out"
        ) from None
    _write(folder / "report.md", render_markdown(sections).encode("utf-8"))
    _write(folder / "report.html", render_html(sections, sections[0].title).encode("utf-8"))
    packages = REPORT_PACKAGES + (("choix",) if judgment == "pairwise" else ())
    payload = {"format": REPORT_FORMAT_VERSION, "judgment": judgment, "versions": versions(packages), **data}
    _write(
        folder / "report.json",
        (json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8"),
    )
    return folder
