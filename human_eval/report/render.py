"""What every report shares: number formatting, the report folder and the writing of its files.

A report is one list of sections (the document model of ``core/document.py``), rendered to
report.md and to a self-contained report.html, so the two always say the same thing, beside a
report.json of the numbers. Nothing in the output depends on the clock, the path of the input
or the order of a hash set: the same input and options give byte-identical files, and the
input's sha256 and the package versions are recorded instead of a timestamp.

Each judgment kind builds its own sections: ratings on a scale (Likert, direct assessment) in
``human_eval/report/ratings.py``, pairwise preferences in ``human_eval/report/pairwise.py``,
best-worst scaling in ``human_eval/report/best_worst.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from maxbench.document import Cell, Code, Para, Section, Table, num, render_html, render_markdown
from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write
from maxbench.human_eval.analysis.results import Analysis, BestWorstAnalysis, PairwiseAnalysis
from maxbench.intervals import ConfidenceInterval
from maxbench.provenance import versions

REPORT_FORMAT_VERSION = 1
REPORT_PACKAGES = ("maxbench", "numpy", "scipy", "krippendorff", "matplotlib", "jinja2")
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
    """An interval, or "n/a" where there is none (the analysis's warnings say why: fewer than two
    items to resample, or no finite replicate)."""
    return "n/a" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def gold_cell(correct: int | None, n: int | None) -> str:
    """An annotator's gold-item judgments answered as expected: "correct/n (share)", empty without any."""
    return "" if not n else f"{correct}/{n} ({fmt(correct / n)})"


def label_of_test(test: str) -> str:
    return {"mannwhitneyu": "Mann-Whitney U", "wilcoxon": "Wilcoxon signed-rank"}[test]


def alternative_text(analysis: Analysis) -> str:
    # No system name here: this text goes into templates unescaped.
    return {
        "two-sided": "two-sided",
        "greater": "one-sided, H1: reference rated higher",
        "less": "one-sided, H1: reference rated lower",
    }[analysis.options.alternative]


# --------------------------------------------------------------------------- code of the rated systems


def plugin_code(code: dict | None) -> dict[str, dict[str, dict]]:
    """system -> {part: origin} of the parts (layer, model, adapter) whose code came from a plugin
    (docs/plugins.md), from a study's record of its run's ``systems[S]["code"]``; built-ins add nothing,
    so a study without plugins gets the report it always had."""
    from maxbench.registry import is_plugin_origin

    out = {}
    for system, parts in sorted((code or {}).items()):
        if isinstance(parts, dict):
            kept = {part: origin for part, origin in sorted(parts.items()) if is_plugin_origin(origin)}
            if kept:
                out[system] = kept
    return out


def code_bullets(code: dict[str, dict[str, dict]]) -> list[Para]:
    """The provenance lines of the rated systems' plugin code (``plugin_code``), in full: a distribution
    and its version, or a file (or a session's source) and its whole sha256."""
    out = []
    for system, parts in code.items():
        for part, origin in parts.items():
            source = origin.get("source")
            if source == "entry-point":
                where, args = "distribution {} {}", (origin.get("distribution"), origin.get("version"))
            elif source == "file":
                where, args = "file {}, sha256 {}", (Code(str(origin.get("path"))), origin.get("sha256"))
            elif source == "session":
                where, args = "a session's source, sha256 {}", (origin.get("sha256"),)
            else:
                where, args = "{}", (json.dumps(origin, sort_keys=True),)
            out.append(Para("code of {}: {} from " + where, (Code(system), part, *args)))
    return out


def add_code(sections: list[Section], payload: dict, code: dict[str, dict[str, dict]]) -> None:
    """The rated systems' plugin code in the Provenance section (after its input line), and as ``code`` in
    report.json."""
    provenance = next(s for s in sections if s.title == "Provenance")
    at = next((i + 1 for i, b in enumerate(provenance.bullets) if b.template.startswith("input:")), 0)
    provenance.bullets[at:at] = code_bullets(code)
    payload["code"] = code


# --------------------------------------------------------------------------- judgment studies


def judgment_intro(a: PairwiseAnalysis | BestWorstAnalysis, kind: str) -> Section:
    """The opening section of a pairwise or best-worst report: the study, its rows and exclusions."""
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


def write_judgment_report(
    sections: list[Section], judgment: str, data: dict, out_dir: str | Path, name: str, code: dict | None = None
) -> Path:
    """Write <out_dir>/<name>/{report.md, report.html, report.json} of a pairwise or best-worst study;
    ``code``: the rated systems' plugin code (``plugin_code``), added to the provenance when there is any."""
    folder = report_folder(out_dir, name)
    packages = REPORT_PACKAGES + (("choix",) if judgment == "pairwise" else ())
    payload = {"format": REPORT_FORMAT_VERSION, "judgment": judgment, "versions": versions(packages), **data}
    if code:
        add_code(sections, payload, code)
    write_documents(folder, sections, payload)
    return folder


# --------------------------------------------------------------------------- writing


def report_folder(out_dir: str | Path, name: str, with_figures: bool = False) -> Path:
    """<out_dir>/<name>, made (with its figures/ folder when asked); ``name`` must be a plain folder name."""
    if not _NAME.match(name):
        raise MaxbenchError(f"--name {name!r} is not a plain folder name (letters, digits, '.', '_', '-')")
    folder = Path(out_dir) / name
    try:
        (folder / "figures" if with_figures else folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MaxbenchError(
            f"cannot create the report folder {folder} ({exc.strerror}); choose another --out"
        ) from None
    return folder


def write_documents(folder: Path, sections: list[Section], payload: dict, stem: str = "report") -> None:
    """<stem>.md and <stem>.html rendered from ``sections``, <stem>.json from ``payload``."""
    write_file(folder / f"{stem}.md", render_markdown(sections).encode("utf-8"))
    write_file(folder / f"{stem}.html", render_html(sections, sections[0].title).encode("utf-8"))
    write_file(
        folder / f"{stem}.json",
        (json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8"),
    )


def write_file(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise MaxbenchError(f"cannot write {path} ({exc.strerror}); check the --out folder") from None
