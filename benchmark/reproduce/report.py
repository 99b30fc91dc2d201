"""The reproduction report: one verdict per claim x base model x corpus ("cell"), decided by the
rules of ``verdicts.py`` (stated once, in ``verdicts.RULES``) on the relative scale, with the rows
behind each cell, the deviations from the paper, the diagnostics kept out of the counts, and the
runs used. It reads runs and scores; it never generates and never rescores.

The work is split by job:

- ``evidence.py``: what the report rests on: each run's scores.json, ``pairs.json`` (the report's
  evidence file: paired tests between two systems that are not the run's baseline, and scores of
  the human references, so that ``--report-only`` computes nothing again), timings, trained heads;
- ``claims/``: one module per claim kind (difference, ratio, correlation, convergence) behind the
  ``ClaimKind`` interface: rows and cells, and how their numbers read;
- ``judge.py``: verdicts, Holm's step and the flags, beside ``verdicts.py``;
- ``render.py`` (the document's sections) and ``exports.py`` (md, html, csv, json, the plot).

A cell resting on a run that is not scored, whose ``scores.json`` scores other generations, that
covers part of its suite, or on fewer folds than the protocol plans, is labelled partial, and the
report says which cells are partial before anything else.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from maxbench.benchmark.reproduce import adapters, exports
from maxbench.benchmark.reproduce.cells import Report
from maxbench.benchmark.reproduce.claims import claim_cells
from maxbench.benchmark.reproduce.controls import check as check_controls
from maxbench.benchmark.reproduce.evidence import (
    PAIRS,
    Evidence,
    Pairs,
    signature_warnings,
    total_wall_seconds,
    trained_heads,
)
from maxbench.benchmark.reproduce.judge import (
    decide_cells,
    flag_cells,
    mark_identical,
    mark_repeated,
    missing_baselines,
    with_settings,
)
from maxbench.benchmark.reproduce.matched import rows as matched_rows
from maxbench.benchmark.reproduce.papers import Paper
from maxbench.benchmark.reproduce.protocol import RunSpec

TRACE = "figure2-trace.json"


def build(
    paper: Paper,
    runs: list[RunSpec],
    pairs: Pairs,
    previous_heads: list[dict] | None = None,
    previous_adapters: list[dict] | None = None,
) -> Report:
    """Every claim's rows and cells (the sensitivity settings' claims judged like any diagnostic),
    decided, flagged, identical rows marked; ``previous_heads`` and ``previous_adapters`` are the
    committed report's heads and adapters lists (``evidence.trained_heads``, ``adapters.trained_adapters``)."""
    evidence = Evidence.of(runs, pairs)
    rows, cells = [], []
    judged = with_settings(paper)
    for claim in judged.claims:
        r, c = claim_cells(claim, judged, evidence)
        rows += r
        cells += c
    trained = adapters.trained_adapters(runs, previous_adapters)
    held = adapters.hold_inert(judged, runs, cells, trained)  # out of Holm's family before it is formed
    mark_repeated(judged, runs, evidence.scores, cells)  # so is a cell repeating another's evidence
    decide_cells(judged, cells)
    adapters.mark_inert(held)
    heads = trained_heads(runs, previous_heads)
    flag_cells(judged, runs, evidence.scores, cells, heads)
    mark_identical(rows)
    found = matched_rows(paper, evidence)  # outside the counts: read after every verdict is decided
    return Report(paper=paper, evidence=evidence, rows=rows, cells=cells, heads=heads, adapters=trained, matched=found)


def _committed(out: Path, key: str) -> list[dict]:
    """The ``key`` list (heads, adapters) of the report.json already in ``out`` ([] if none or unreadable)."""
    try:
        return list(json.loads((out / "report.json").read_text()).get(key) or [])
    except (OSError, ValueError, AttributeError, TypeError):
        return []


def check_out(paper: Paper, out: Path) -> None:
    """Refuse, before anything is planned or written, an ``--out`` that is not and cannot become a folder
    (an existing file), or whose report files would land on the paper file: ``maxbench.fileio``'s shared
    output checks, as every command's."""
    from maxbench.fileio import check_not_input, check_output_dir

    check_output_dir(out, "--out")
    inputs = [(paper.path, "the paper file")] if paper.path is not None else []
    for name in [*(f"report.{ext}" for ext in ("md", "html", "csv", "json")), exports.PLOT, PAIRS]:
        check_not_input(out / name, f"--out {out}: its", inputs)


def write_report(
    paper: Paper, runs: list[RunSpec], out: Path, command: str, n_resamples: int = 1000, flips: tuple = ()
) -> list[Path]:
    """Write report.md/.html/.csv/.json, differences.png and pairs.json for the runs in ``out`` (and
    the flipped-attribute check of ``flips``, ``flipped.plan_flipped``'s runs)."""
    from maxbench.benchmark.reproduce.flipped import flip_rows, flip_section

    pairs = Pairs(n_resamples, out / PAIRS)
    rep = build(paper, runs, pairs, _committed(out, "heads"), _committed(out, "adapters"))
    rep.controls = check_controls(paper, out)
    for ctrl in rep.controls:  # the run cell each control controls says so
        spec = ctrl.spec
        for c in rep.cells:
            if (c.claim, c.model, c.corpus, c.method) == (spec.claim, spec.model, spec.corpus, spec.method):
                c.flags.append(
                    f"control: {spec.method} vs {spec.control} over {ctrl.n} seed(s): {ctrl.verdict} "
                    f"(section '{spec.title}')"
                )
    rep.command = command
    rep.wall = total_wall_seconds(runs)
    trace_path = out / TRACE
    rep.trace = json.loads(trace_path.read_text()) if trace_path.exists() else None
    rep.warnings = signature_warnings(paper, runs)
    for line in missing_baselines(runs, rep.evidence.scores, rep.cells):
        print(f"warning: {line}", file=sys.stderr)
        rep.warnings.append(line)
    rep.flipped = flip_rows(list(flips))
    paths = exports.write(rep, out, flip_section(list(flips), rep.flipped))
    pairs.save()
    return paths + [out / PAIRS]
