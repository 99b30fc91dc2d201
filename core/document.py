"""The document model: a page as a list of sections, rendered to markdown and to self-contained HTML.

A :class:`Section` holds, in this order, paragraphs, tables, bullet points and figures. Text that a
program wrote goes in as is; anything that came from outside (system names, aspects, annotator
labels, generated text) goes in as an argument of a :class:`Para`, as a :class:`Cell` with
``escape=True`` or as :class:`Code`, and is escaped for each output format. Numbers are cells made
with :func:`num`, optionally with a significance mark, a detail such as an interval, and a bold
"best in column" flag.

Both the human-evaluation significance report (``human_eval/report/render.py``) and the benchmark
leaderboard render through this model, so a markdown file and the HTML page beside it always say
the same thing, and the same sections give the same bytes.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATE = Path(__file__).parent / "templates" / "document.html.j2"

__all__ = [
    "Cell",
    "Code",
    "Figure",
    "Para",
    "Section",
    "Table",
    "md_escape",
    "num",
    "render_html",
    "render_markdown",
]


@dataclass(frozen=True)
class Code:
    """An identifier shown verbatim in a monospace font (a system string, a path): a Para argument."""

    text: str


@dataclass(frozen=True)
class Para:
    """My text with {} placeholders; the arguments are user data, escaped per output format."""

    template: str
    args: tuple = ()

    def markdown(self) -> str:
        return self.template.format(*(_md_inline(a) for a in self.args))

    def html(self) -> str:
        return html.escape(self.template).format(*(_html_inline(a) for a in self.args))


@dataclass(frozen=True)
class Cell:
    """One table cell. ``text`` is escaped in both formats unless ``escape`` is False (markdown only:
    HTML is always escaped); ``mark`` (a significance star) and ``detail`` (an interval, shown after a
    space in markdown and on its own small line in HTML) follow the text; ``best`` shows the text bold;
    ``code`` shows it in a monospace font, verbatim (for identifiers such as system strings)."""

    text: str
    mark: str = ""  # a significance star, kept outside the escaping
    escape: bool = True  # False only for text this module's callers wrote (numbers, intervals, test names)
    detail: str = ""
    best: bool = False
    code: bool = False

    def markdown(self) -> str:
        if self.code:
            text = _md_code(self.text, in_table=True)
        else:
            text = md_escape(self.text) if self.escape else self.text
        if self.best:
            text = f"**{text}**"
        detail = (md_escape(self.detail) if self.escape else self.detail) if self.detail else ""
        return text + self.mark + (" " + detail if detail else "")

    def html_class(self, right_aligned: bool) -> str:
        return " ".join(name for name, on in (("num", right_aligned), ("best", self.best)) if on)


def num(text: str, mark: str = "", detail: str = "", best: bool = False) -> Cell:
    """A cell of text the program wrote (a number, an interval), not escaped in markdown."""
    return Cell(text, mark, escape=False, detail=detail, best=best)


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    caption: Para | None = None
    align: str = ""  # one letter per column, "l" text or "r" numbers; default: first l, rest r
    md_align: bool = True  # False: no alignment colons in the markdown separator (the leaderboard's form)

    def right_aligned(self, index: int) -> bool:
        return (self.align[index] if self.align else "lr"[index > 0]) == "r"


@dataclass(frozen=True)
class Figure:
    path: str  # relative to the folder of the rendered page
    png: bytes
    alt: str


@dataclass
class Section:
    """A heading (``level`` 1 to 6; an empty title writes none) and its content, in this order."""

    title: str
    level: int = 2
    paragraphs: list[Para] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    bullets: list[Para] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    figure_row: bool = False  # markdown: the figures on consecutive lines, one paragraph


def md_escape(text: str) -> str:
    text = text.replace("\r", " ").replace("\n", " ")
    return re.sub(r"([\\`*_\[\]<>|#!])", r"\\\1", text)


def _md_code(text: str, in_table: bool = False) -> str:
    """A markdown code span showing ``text`` verbatim: fenced by more backticks than it contains."""
    text = text.replace("\r", " ").replace("\n", " ")
    if in_table:  # GFM splits table cells at '|' even inside code spans
        text = text.replace("|", "\\|")
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_inline(arg) -> str:
    return _md_code(arg.text) if isinstance(arg, Code) else md_escape(str(arg))


def _html_inline(arg) -> str:
    return f"<code>{html.escape(arg.text)}</code>" if isinstance(arg, Code) else html.escape(str(arg))


# --------------------------------------------------------------------------- rendering


def render_markdown(sections: Sequence[Section]) -> str:
    out = []
    for s in sections:
        if s.title:
            out += ["#" * s.level + " " + md_escape(s.title), ""]
        for p in s.paragraphs:
            out += [p.markdown(), ""]
        for t in s.tables:
            out += _markdown_table(t)
        if s.bullets:
            out += ["- " + b.markdown() for b in s.bullets] + [""]
        for f in s.figures:
            out += [f"![{md_escape(f.alt)}]({f.path})"] + [""] * (not s.figure_row)
        out += [""] * (s.figure_row and bool(s.figures))
    return "\n".join(out).rstrip("\n") + "\n"


def _markdown_table(t: Table) -> list[str]:
    lines = []
    if t.caption is not None:
        lines += [t.caption.markdown(), ""]
    lines.append("| " + " | ".join(md_escape(c) if c else " " for c in t.columns) + " |")
    lines.append(
        "|" + "|".join("---:" if t.md_align and t.right_aligned(i) else "---" for i in range(len(t.columns))) + "|"
    )
    lines += ["| " + " | ".join(c.markdown() for c in row) + " |" for row in t.rows]
    return lines + [""]


def render_html(sections: Sequence[Section], title: str | None = None) -> str:
    """One self-contained page (figures inlined as data: URLs); ``title`` defaults to the first heading."""
    import jinja2
    import markupsafe

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    template = env.get_template(TEMPLATE.name)
    return template.render(
        title=sections[0].title if title is None and sections else title or "",
        sections=sections,
        markup=lambda p: markupsafe.Markup(p.html()),  # Para.html() escaped the data
        image=lambda f: "data:image/png;base64," + base64.b64encode(f.png).decode("ascii"),
    )
