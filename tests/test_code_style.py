"""The habits that keep the structure: ruff (lint + format) and the import-linter contracts in pyproject.toml."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PACKAGES = ("core", "systems", "benchmark", "human_eval")


def _run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_ruff_finds_no_lint_error():
    out = _run(str(BIN / "ruff"), "check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_leaves_every_file_unchanged():
    out = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_import_contracts_are_kept():
    out = _run(str(BIN / "lint-imports"), "--no-cache")
    assert out.returncode == 0, out.stdout + out.stderr


def _copy_tree(dest: Path) -> None:
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.html", "*.j2"))


@pytest.mark.parametrize(
    ("module", "bad_import", "reported"),
    [
        ("systems/decoding.py", "import benchmark.runner", "systems.decoding -> benchmark.runner"),
        ("core/errors.py", "import systems.models", "core.errors -> systems.models"),
        ("human_eval/ratings.py", "import benchmark.metrics", "human_eval.ratings -> benchmark.metrics"),
        ("human_eval/admin.py", "import human_eval.app", "human_eval.admin -> human_eval.app"),
        ("benchmark/corpora.py", "import benchmark.runner", "No cycles are allowed in benchmark."),
    ],
)
def test_a_wrong_import_breaks_a_contract(tmp_path, module, bad_import, reported):
    _copy_tree(tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{bad_import}  # deliberately wrong\n")
    out = _run(str(BIN / "lint-imports"), "--no-cache", cwd=tmp_path)
    assert out.returncode != 0, out.stdout
    assert reported in out.stdout, out.stdout
