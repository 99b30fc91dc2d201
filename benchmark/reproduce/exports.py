"""The report's files: ``report.md`` and ``report.html`` (the document of ``render.sections``, with
the differences plot and the flipped-attribute check), ``report.csv`` (one line per cell,
``cells.CELL_COLUMNS``), ``report.json`` (cells, rows, headline, deviations, runs, heads, controls,
the flipped check) and ``differences.png``."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from maxbench.benchmark.reproduce.cells import CELL_COLUMNS, CellVerdict, Report
from maxbench.benchmark.reproduce.evidence import run_table
from maxbench.benchmark.reproduce.judge import headline, rules_text
from maxbench.benchmark.reproduce.kinds import kind_of
from maxbench.benchmark.reproduce.papers import SETTING_SEP
from maxbench.benchmark.reproduce.render import deviations, sections
from maxbench.benchmark.reproduce.verdicts import (
    ALPHA,
    INCONCLUSIVE,
    LARGER,
    NEGLIGIBLE,
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    SMALLER,
)
from maxbench.document import Figure, render_html, render_markdown
from maxbench.fileio import atomic_open, atomic_write

#: the differences plot turns symmetric-logarithmic when some point lies further than this from 0
#: (in % of its baseline), linear within ±SYMLOG_LINEAR_PERCENT
SYMLOG_ABOVE_PERCENT = 1000
SYMLOG_LINEAR_PERCENT = 10
COLOURS = {
    REPRODUCED: "C2",
    SMALLER: "C8",
    LARGER: "C1",
    NOT_REPRODUCED: "C3",
    INCONCLUSIVE: "C0",
    NOT_COMPARABLE: "C7",
}
PLOT = "differences.png"


def cells_csv(cells: list[CellVerdict]) -> str:
    """report.csv: one line per cell (lists ';'-joined, floats to 12 significant digits)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CELL_COLUMNS)
    for c in cells:
        d = c.to_dict()
        w.writerow(
            [
                ""
                if d[k] is None
                else (
                    "; ".join(d[k]) if isinstance(d[k], list) else (f"{d[k]:.12g}" if isinstance(d[k], float) else d[k])
                )
                for k in CELL_COLUMNS
            ]
        )
    return buf.getvalue()


def report_json(rep: Report) -> dict:
    """report.json's document."""
    return (
        {
            "paper": rep.paper.name,
            "command": rep.command,
            "wall_seconds": round(rep.wall, 1),
            "rules": rules_text(rep.paper),
            "negligible_band": NEGLIGIBLE,
            "alpha": ALPHA,
            "headline": headline(rep.paper, rep.cells),
            "differences": [p.template.format(*p.args) for p in deviations(rep.paper)],
            "warnings": rep.warnings,
            "runs": run_table(rep.evidence.runs),
            "cells": [c.to_dict() for c in rep.cells],
            "rows": [r.to_dict() for r in rep.rows],
            "heads": [{"run": k[0], "system": k[1], **v} for k, v in sorted(rep.heads.items())],
            "controls": [c.to_dict() for c in rep.controls],
            "flipped": rep.flipped,
        }
        | ({"matched": [r.to_dict() for r in rep.matched]} if rep.paper.matched else {})
        | (
            {"adapters": [{"run": k[0], "model": k[1], **v} for k, v in sorted(rep.adapters.items()) if v is not None]}
            if rep.adapters
            else {}
        )
    )


def _wide(pts: list[tuple]) -> bool:
    """Whether the differences span too much for a linear axis (see SYMLOG_ABOVE_PERCENT)."""
    return max(max(abs(d), abs(lo), abs(hi)) for _, d, lo, hi in pts) > SYMLOG_ABOVE_PERCENT


def plot(cells: list[CellVerdict], path: Path) -> Figure | None:
    """differences.png: every counted cell's relative difference with its interval and the paper's effect
    (a cell repeating another's evidence is that cell's point, drawn once)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One axis for every cell: its relative difference in per cent of maxbench's baseline (a time
    # ratio r as r - 1; each competitor of a 'best among' cell on its own line); r is not on it.
    pts = []
    for c in cells:
        if c.diagnostic or c.same_as or not kind_of(c.kind).plotted or SETTING_SEP in c.claim:
            continue
        for x in c.details:
            e = x.est
            if e.estimate is None or e.low is None:
                continue
            label = f"{c.claim} {c.model} {c.corpus} {c.method} vs {x.baseline}"
            pts.append((c, x, 100 * e.estimate, 100 * e.low, 100 * e.high, label))
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(pts) + 1.4))
    for y, (c, x, d, lo, hi, _) in enumerate(pts):
        ax.errorbar(d, y, xerr=[[d - lo], [hi - d]], fmt="o", color=COLOURS[c.verdict], label=c.verdict)
        if x.paper is not None:
            ax.plot(100 * x.paper, y, "D", mfc="none", color="k", ms=5, label="paper's effect")
    ax.axvline(0, color="k", lw=0.8)
    ax.axvspan(-100 * NEGLIGIBLE, 100 * NEGLIGIBLE, color="0.85", lw=0)
    symlog = _wide([(None, d, lo, hi) for _, _, d, lo, hi, _ in pts])
    if symlog:  # one cell's +90,000% would flatten every other onto the null
        ax.set_xscale("symlog", linthresh=SYMLOG_LINEAR_PERCENT)
    ax.set_yticks(range(len(pts)))
    ax.set_yticklabels([label[:90] for *_, label in pts], fontsize=7)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    keys = [k for k in (*COLOURS, "paper's effect") if k in seen]
    ax.legend([seen[k] for k in keys], keys, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    scale = f"; linear within ±{SYMLOG_LINEAR_PERCENT}%, logarithmic beyond" if symlog else ""
    ax.set_xlabel(
        f"maxbench's relative effect, method / baseline - 1 in % (a time ratio r: r - 1), 95% interval; "
        f"grey: the negligible band ±{100 * NEGLIGIBLE:g}%{scale}"
    )
    ax.grid(alpha=0.3)
    plt.rcParams.update({"svg.hashsalt": "maxbench"})
    with atomic_open(path) as f:
        fig.savefig(f, format="png", metadata={"Software": None}, bbox_inches="tight", dpi=100)
    plt.close(fig)
    return Figure(
        path.name, path.read_bytes(), "every cell's relative effect (method / baseline - 1), with its 95% interval"
    )


def write(rep: Report, out: Path, flip_section=None) -> list[Path]:
    """Write report.md/.html/.csv/.json and differences.png to ``out``; ``flip_section`` (the
    flipped-attribute check's section) goes before the runs used. Returns the paths written."""
    secs = sections(rep)
    if flip_section is not None:
        secs.insert(len(secs) - 1, flip_section)  # before the runs used
    fig = plot(rep.cells, out / PLOT)
    if fig is not None:
        secs[0].figures.append(fig)
    elif (out / PLOT).exists():  # a plot of an earlier rendering (other runs or rules) never stays beside this one
        (out / PLOT).unlink()
    paths = [out / f"report.{ext}" for ext in ("md", "html", "csv", "json")]
    atomic_write(paths[0], render_markdown(secs))
    atomic_write(paths[1], render_html(secs, secs[0].title))
    atomic_write(paths[2], cells_csv(rep.cells))
    atomic_write(paths[3], json.dumps(report_json(rep), indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    return paths + ([out / PLOT] if fig is not None else [])
