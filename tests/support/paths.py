"""Where the tests find the repository and their committed data, whatever folder a test file sits
in."""

from pathlib import Path

#: the repository's root (the folder holding pyproject.toml)
ROOT = Path(__file__).resolve().parents[2]
#: the tests' own committed data files (tests/data)
DATA = ROOT / "tests" / "data"
