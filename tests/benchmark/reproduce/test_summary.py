"""The reproduction summaries of README.md and docs/reproductions.md are generated from each committed
report.json (benchmark/reproduce/summary.py): the committed ones match, a change of a report shows,
and a file without its marker block is one line, exit 2."""

import json
import shutil
from pathlib import Path

from maxbench.benchmark.reproduce import summary
from tests.support.paths import ROOT


def test_the_readme_and_docs_summaries_match_the_committed_reports():
    assert summary.stale(ROOT) == [], "run `python -m maxbench.benchmark.reproduce.summary`"
    readme = (ROOT / "README.md").read_text()
    for paper, name in summary.PAPERS:
        doc = json.loads((ROOT / "results" / "reproductions" / paper / "report.json").read_text())
        assert (
            f"**{name}** ([report](results/reproductions/{paper}/report.md), {doc['wall_seconds'] / 60:.1f} min"
            in readme
        )


def _copy(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    for rel in ("README.md", "docs/reproductions.md"):
        shutil.copy(ROOT / rel, root / rel)
    for paper, _ in summary.PAPERS:
        (root / "results" / "reproductions" / paper).mkdir(parents=True)
        shutil.copy(
            ROOT / "results" / "reproductions" / paper / "report.json", root / "results" / "reproductions" / paper
        )
    return root


def test_a_changed_report_makes_the_summaries_stale_until_regenerated(tmp_path, capsys):
    root = _copy(tmp_path)
    assert summary.main(["--check", "--root", str(root)]) == 0
    path = root / "results" / "reproductions" / "posg" / "report.json"
    doc = json.loads(path.read_text())
    doc["wall_seconds"] += 600
    doc["headline"]["cells_by_verdict"] = {"reproduced": 18}
    path.write_text(json.dumps(doc))
    assert summary.main(["--check", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "README.md" in err and "docs/reproductions.md" in err
    assert summary.main(["--root", str(root)]) == 0
    assert summary.main(["--check", "--root", str(root)]) == 0
    readme = (root / "README.md").read_text()
    assert f"{doc['wall_seconds'] / 60:.1f} min of runs" in readme and "18 cells (18 reproduced)" in readme


def test_a_file_without_its_marker_block_is_one_line_exit_2(tmp_path, capsys):
    root = _copy(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("<!-- reproductions-readme:end -->", ""))
    assert summary.main(["--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "README.md has no '<!-- reproductions-readme:begin -->'" in err


def test_the_cells_outside_the_counts_are_named_each_with_its_number():
    """Diagnostic and sensitivity cells, and a cell repeating another's evidence (FCTG's mu ablation,
    whose variants are the zero-shot model), are each named with their number, singular for one."""
    _extra = summary._extra
    assert _extra({"diagnostic_cells": 4, "repeated_cells": 1}) == (
        " (+ 4 diagnostic cells, 1 cell repeating another's evidence, outside the counts)"
    )
    assert _extra({"sensitivity_cells": 1, "repeated_cells": 2}) == (
        " (+ 1 sensitivity cell, 2 cells repeating another's evidence, outside the counts)"
    )
    assert _extra({"diagnostic_cells": 0}) == ""
