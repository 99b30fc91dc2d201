"""The habits that keep the structure: ruff (lint + format) and the import-linter contracts in pyproject.toml."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

BIN = Path(sys.executable).parent
PACKAGES = ("core", "systems", "benchmark", "human_eval")


def _run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    # wide enough that lint-imports prints each broken import on one line
    env = dict(os.environ, COLUMNS="400")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_ruff_finds_no_lint_error():
    out = _run(str(BIN / "ruff"), "check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_leaves_every_file_unchanged():
    out = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


LINT_IMPORTS = ROOT / "scripts" / "lint_imports.py"


def test_import_contracts_are_kept():
    out = _run(sys.executable, str(LINT_IMPORTS))
    assert out.returncode == 0, out.stdout + out.stderr


def _copy_tree(dest: Path) -> None:
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.html", "*.j2"))


@pytest.mark.parametrize(
    ("module", "bad_import", "reported"),
    [
        (
            "systems/decoding.py",
            "import maxbench.benchmark.run.runner",
            "maxbench.systems.decoding -> maxbench.benchmark.run.runner",
        ),
        ("core/errors.py", "import maxbench.systems.models", "maxbench.errors -> maxbench.systems.models"),
        ("benchmark/commands/run.py", "import maxbench.cli", "maxbench.benchmark.commands.run -> maxbench.cli"),
        (
            "benchmark/present/leaderboard.py",
            "import maxbench.human_eval.analysis.ratings",
            "maxbench.benchmark.present.leaderboard -> maxbench.human_eval.analysis.ratings",
        ),
        (
            "human_eval/analysis/ratings.py",
            "import maxbench.benchmark.metrics",
            "maxbench.human_eval.analysis.ratings -> maxbench.benchmark.metrics",
        ),
        (
            "human_eval/analysis/statistics.py",
            "import sqlalchemy",
            "maxbench.human_eval.analysis.statistics -> sqlalchemy",
        ),
        (
            "human_eval/analysis/options.py",
            "import maxbench.human_eval.studies.design",
            "maxbench.human_eval.analysis.options -> maxbench.human_eval.studies.design",
        ),
        (
            "human_eval/app/admin.py",
            "import maxbench.human_eval.app.factory",
            "maxbench.human_eval.app.admin -> maxbench.human_eval.app.factory",
        ),
        (
            "systems/layers/sparsemax/operator.py",
            "import maxbench.systems.layers.graphmax.operator",
            "maxbench.systems.layers.sparsemax.operator -> maxbench.systems.layers.graphmax.operator",
        ),
        (
            "benchmark/data/corpora.py",
            "import maxbench.benchmark.run.runner",
            "No cycles are allowed in maxbench.benchmark.",
        ),
    ],
)
def test_a_wrong_import_breaks_a_contract(tmp_path, module, bad_import, reported):
    _copy_tree(tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{bad_import}  # deliberately wrong\n")
    out = _run(sys.executable, str(LINT_IMPORTS), "--root", str(tmp_path))
    assert out.returncode != 0, out.stdout
    assert reported in out.stdout, out.stdout


def test_only_the_maxbench_package_is_imported():
    """The root folders are importable by their bare names from the checkout (``import benchmark``),
    which would give one file two module identities: every import names ``maxbench``."""
    import re

    bare = re.compile(r"^\s*(?:from|import)\s+(core|systems|benchmark|human_eval)\b", re.M)
    found = []
    for folder in (*PACKAGES, "tests", "benchmarks", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            found += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for m in bare.finditer(path.read_text())]
    assert not found, found
