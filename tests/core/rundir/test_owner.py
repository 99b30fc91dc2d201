"""The run folder's one owner is the ``maxbench.rundir`` package: no other module of the package opens a
run's files itself (``generations.jsonl``, ``scores.json``, ``manifest.json``, the removed rows, the
shard files)."""

import ast
from pathlib import Path

import pytest

from maxbench.rundir import GENERATIONS, MANIFEST, REMOVED, SCORES, SHARD_GLOB
from tests.support.paths import ROOT

#: the package's folders (pyproject.toml's package-dir) and the owner's folder among them (a package:
#: every module under it is the owner, and no other)
PACKAGE_FOLDERS = ("core", "benchmark", "systems", "human_eval")
OWNER = "core/rundir/"
#: modules still to be routed through the owner, each of which must still break the rule (so that a
#: routed one leaves this list): the reproduction report's evidence (it reads scores, manifests,
#: generations and timings itself) and the convergence claim (the rows' per-step statistics)
NOT_YET_ROUTED: set[str] = set()
#: a run's files, by name; the shard files' names start with "generations.shard-"
RUN_FILES = {GENERATIONS, MANIFEST, SCORES, REMOVED, SHARD_GLOB}
#: the owner's names of those files: a module that imports one joins it to a run folder itself
FILE_NAME_CONSTANTS = {"GENERATIONS", "MANIFEST", "SCORES", "REMOVED", "SHARD_GLOB"}

SMOKE_A = "tiny-random/softmax/greedy"
SMOKE_B = "tiny-random/sparsemax/greedy"


def is_owner_module(name: str | None) -> bool:
    """Whether ``name`` is the owner package or one of its modules."""
    return name == "maxbench.rundir" or (name or "").startswith("maxbench.rundir.")


def is_owner_file(rel: str) -> bool:
    """Whether ``rel`` (a path under the repository) is a module of the owner package."""
    return rel.startswith(OWNER)


def run_file_uses(source: str) -> list[str]:
    """Where a module's source names a run's file as a path would (a string that is a run file's name,
    possibly after a '/', or a shard file's name or pattern; an f-string's pieces count) or imports
    the owner's name of one. Prose that mentions a file (a message, a help text, a docstring) is no
    use of it: it has spaces."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value.strip()
            if " " in text:
                continue
            name = text.rsplit("/", 1)[-1]
            if name in RUN_FILES or name.startswith("generations.shard-"):
                found.append(f"line {node.lineno}: {node.value!r}")
        if isinstance(node, ast.ImportFrom) and is_owner_module(node.module):
            for alias in node.names:
                if alias.name in FILE_NAME_CONSTANTS:
                    found.append(f"line {node.lineno}: imports {alias.name} from {node.module}")
    return found


def package_modules(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text(encoding="utf-8")
        for folder in PACKAGE_FOLDERS
        for path in sorted((root / folder).rglob("*.py"))
    }


def test_no_module_but_the_run_folder_owner_opens_a_runs_files():
    """Every reader of a run goes through ``maxbench.rundir``: one row rule, one freshness check, one
    refusal. A module that joins ``generations.jsonl``, ``scores.json``, ``manifest.json``, the removed
    rows or a shard file to a folder itself, or imports the owner's name of one, fails this test."""
    uses = {rel: run_file_uses(src) for rel, src in package_modules(ROOT).items() if not is_owner_file(rel)}
    offenders = {rel: found for rel, found in uses.items() if found and rel not in NOT_YET_ROUTED}
    assert not offenders, offenders
    routed = [rel for rel in NOT_YET_ROUTED if not uses.get(rel)]
    assert not routed, f"{routed} no longer open run files: take them off NOT_YET_ROUTED"


def test_the_owner_is_every_module_of_the_rundir_package_and_no_other():
    """The exception of the rule above is the owner package, whole, and nothing beside it; and the scan
    does find the owner's own uses of the files, so it is the exception that lets the rule hold."""
    modules = package_modules(ROOT)
    owner = sorted(rel for rel in modules if is_owner_file(rel))
    assert "core/rundir/__init__.py" in owner and len(owner) > 1
    assert all(rel.startswith("core/rundir/") for rel in owner)
    assert any(run_file_uses(modules[rel]) for rel in owner)
    for beside in ("core/rundir.py", "core/rundir_extra/x.py", "benchmark/run/rundir/files.py"):
        assert not is_owner_file(beside)


@pytest.mark.parametrize(
    "source,caught",
    [
        ('p = run_dir / "scores.json"', True),
        ('p = f"{run_dir}/generations.jsonl"', True),
        ('p = run_dir / f"generations.shard-{i}-of-{n}.jsonl"', True),
        ('json.loads((d / "manifest.json").read_text())', True),
        ("from maxbench.rundir import GENERATIONS", True),
        ("from maxbench.rundir.files import SCORES", True),
        ('raise MaxbenchError(f"{run} has no scores.json; score it")', False),
        ('"""Reads ``generations.jsonl``."""', False),
        ("from maxbench.rundir import read_scores", False),
    ],
)
def test_the_scan_catches_a_module_that_opens_a_run_file_itself(source, caught):
    assert bool(run_file_uses(source)) is caught
