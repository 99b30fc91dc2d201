"""The summaries of the committed reproductions, generated from each
``results/reproductions/<paper>/report.json`` so that they cannot go stale: the README's lines
and docs/reproductions.md's table, each between its marker comments (``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``). Every number is the report's own (its wall time, its headline counts, its
claims' verdicts); nothing else is said there, so a re-rendered report changes its summary only
through ``python -m maxbench.benchmark.reproduce.summary``, and ``--check`` (the test of the
summaries) fails while they differ.

    python -m maxbench.benchmark.reproduce.summary           # rewrite both summaries
    python -m maxbench.benchmark.reproduce.summary --check   # exit 1 and name the file when one differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write

ROOT = Path(__file__).resolve().parents[2]
REPORTS = Path("results") / "reproductions"
#: the papers in the order the summaries list them, with the names they are shown by
PAPERS = (("graphmax", "graphmax"), ("kerbs", "KerBS"), ("posg", "POSG"), ("fctg", "FCTG"))
#: (file, marker) of each generated block
TARGETS = (("README.md", "reproductions-readme"), ("docs/reproductions.md", "reproductions-table"))
#: the verdicts a claim holds in some cell by (shown as what holds)
HOLDS = ("reproduced", "reproduced, smaller than claimed", "larger than claimed")


def load(root: Path) -> list[tuple[str, str, dict]]:
    """(paper, shown name, report.json) of every paper with a committed report, in ``PAPERS`` order."""
    out = []
    for paper, name in PAPERS:
        path = root / REPORTS / paper / "report.json"
        if not path.exists():
            continue
        try:
            out.append((paper, name, json.loads(path.read_text())))
        except (OSError, ValueError) as exc:
            raise MaxbenchError(
                f"{path} is unreadable ({exc}); render it again with `maxbench reproduce {paper} --report-only`"
            ) from None
    return out


def _counts(by: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in by.items())


def _extra(h: dict) -> str:
    """The cells outside the counts: diagnostic, sensitivity settings, and cells repeating an earlier
    cell's evidence (``judge.mark_repeated``)."""
    kinds = (
        ("diagnostic_cells", "diagnostic cell", ""),
        ("sensitivity_cells", "sensitivity cell", ""),
        ("repeated_cells", "cell", " repeating another's evidence"),
    )
    parts = [f"{h[k]} {what}{'' if h[k] == 1 else 's'}{tail}" for k, what, tail in kinds if h.get(k)]
    return f" (+ {', '.join(parts)}, outside the counts)" if parts else ""


def _holds(doc: dict) -> str:
    """The claims that hold in some counted cell, each with how many of its counted cells hold and how."""
    items = []
    for cid in doc["headline"].get("claim_verdicts", {}):
        cells = [c for c in doc["cells"] if c["claim"] == cid and c["counted"]]
        held = {v: sum(1 for c in cells if c["verdict"] == v) for v in HOLDS}
        held = {v: n for v, n in held.items() if n}
        if held:
            items.append(f"{cid} ({', '.join(f'{v} {n}' for v, n in held.items())} of {len(cells)} cells)")
    return "; ".join(items) if items else "none"


def readme_block(reports: list[tuple[str, str, dict]]) -> str:
    """The README's lines: one paragraph per paper."""
    out = []
    for paper, name, doc in reports:
        h = doc["headline"]
        out.append(
            f"**{name}** ([report]({REPORTS.as_posix()}/{paper}/report.md), {doc['wall_seconds'] / 60:.1f} min of runs): "
            f"{h['claims']} claims ({_counts(h['claims_by_verdict'])}); {h['cells']} cells "
            f"({_counts(h['cells_by_verdict'])}){_extra(h)}. Claims that hold in some cell: {_holds(doc)}."
        )
    return "\n\n".join(out)


def docs_table(reports: list[tuple[str, str, dict]]) -> str:
    """docs/reproductions.md's table: one row per paper."""
    rows = [
        "| paper | wall time | claims | cells (claim x base model x corpus) | claims that hold in some cell |",
        "|---|---|---|---|---|",
    ]
    for paper, name, doc in reports:
        h = doc["headline"]
        rows.append(
            f"| [{name}](../{REPORTS.as_posix()}/{paper}/report.md) | {doc['wall_seconds'] / 60:.1f} min | "
            f"{h['claims']}: {_counts(h['claims_by_verdict'])} | {h['cells']}: {_counts(h['cells_by_verdict'])}"
            f"{_extra(h)} | {_holds(doc)} |"
        )
    return "\n".join(rows)


def replace_block(text: str, marker: str, body: str, where: str) -> str:
    """``text`` with the lines between ``<!-- marker:begin -->`` and ``<!-- marker:end -->`` set to ``body``."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise MaxbenchError(
            f"{where} has no '{begin}' ... '{end}' block; add the two marker lines where the summary goes"
        )
    return text[: i + len(begin)] + "\n" + body + "\n" + text[j:]


def generated(root: Path = ROOT) -> dict[str, str]:
    """Each target file's text with its block generated from the committed reports."""
    reports = load(root)
    bodies = {"reproductions-readme": readme_block(reports), "reproductions-table": docs_table(reports)}
    return {rel: replace_block((root / rel).read_text(), marker, bodies[marker], rel) for rel, marker in TARGETS}


def stale(root: Path = ROOT) -> list[str]:
    """The target files whose block differs from the committed reports."""
    return [rel for rel, text in generated(root).items() if (root / rel).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or ``--check``) the summaries; bad input (a missing marker block, an unreadable
    report.json) is one line, exit 2."""
    try:
        return _main(argv)
    except MaxbenchError as exc:
        print(f"summary: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m maxbench.benchmark.reproduce.summary", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--check", action="store_true", help="exit 1 when a summary differs from the reports; write nothing")
    p.add_argument("--root", type=Path, default=ROOT, help="the repository root")
    args = p.parse_args(argv)
    if args.check:
        differ = stale(args.root)
        for rel in differ:
            print(
                f"{rel}: its reproduction summary differs from the reports' report.json; run "
                "`python -m maxbench.benchmark.reproduce.summary`",
                file=sys.stderr,
            )
        return 1 if differ else 0
    for rel, text in generated(args.root).items():
        if (args.root / rel).read_text() != text:
            atomic_write(args.root / rel, text)
            print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
