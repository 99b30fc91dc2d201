"""What produced a result: Python and package versions, and the maxbench commit when known."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

NOT_INSTALLED = "not installed"


def package_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED


def git_commit() -> str | None:
    """The commit of the maxbench checkout this code runs from, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def versions(packages: Sequence[str], commit: bool = False) -> dict[str, str]:
    """``{"python": ..., package: version, ...}`` in the order given, plus ``maxbench_commit`` if asked
    for and known. Results record this so that a reader can tell what computed them."""
    found = {"python": platform.python_version()} | {p: package_version(p) for p in packages}
    if commit and (sha := git_commit()):
        found["maxbench_commit"] = sha
    return found
