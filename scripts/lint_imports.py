"""Checks the import contracts of pyproject.toml with import-linter.

The maxbench package is spread over the repository's root folders (``[tool.setuptools.package-dir]``
maps ``core/`` to ``maxbench`` and ``benchmark/``, ``systems/``, ``human_eval/`` to its sub-packages),
and import-linter reads a package from one folder. So this lays the Python files out as one
``maxbench/`` tree in a temporary folder, as a wheel holds them, and runs ``lint-imports`` there.

    python scripts/lint_imports.py [--root DIR]

``--root`` checks another copy of the repository (the tests break a contract in a copy on purpose).
The exit status is lint-imports' own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path


def assemble(root: Path, dest: Path) -> None:
    """The Python files of ``root``'s mapped folders under ``dest/maxbench/``, and its pyproject.toml."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(mapping.items()):
        target = dest.joinpath(*package.split("."))
        for source in (root / folder).rglob("*.py"):
            rel = source.relative_to(root / folder)
            if rel.parts[0] in {"__pycache__"} or (package == "maxbench" and rel.parts[0] in mapping.values()):
                continue
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="maxbench-contracts-") as tmp:
        assemble(args.root.resolve(), Path(tmp))
        lint = Path(sys.executable).parent / "lint-imports"
        env = dict(os.environ, PYTHONPATH=tmp)
        return subprocess.run([str(lint), "--no-cache"], cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
