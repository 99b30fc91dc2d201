"""maxbench as a library: one import package in a wheel, its data files with it, installable beside
the dependencies it declares, whose ranges admit the lock (constraints.txt)."""

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
#: a data file of each kind the code opens from its own package, as the wheel must hold it
DATA_FILES = [
    "maxbench/templates/document.html.j2",
    "maxbench/benchmark/lineups/default.toml",
    "maxbench/benchmark/suites/food-reviews.jsonl",
    "maxbench/benchmark/suites/food-reviews.toml",
    "maxbench/benchmark/reproduce/papers/graphmax.toml",
    "maxbench/benchmark/present/explorer/templates/index.html",
    "maxbench/benchmark/present/explorer/static/explorer.js",
    "maxbench/human_eval/studies/rubrics/fluency.toml",
    "maxbench/human_eval/app/templates/base.html",
    "maxbench/human_eval/app/templates/annotator/item.html",
    "maxbench/human_eval/app/static/style.css",
]


def _pip(python: str | Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def _package_folders() -> set[str]:
    """Every folder with an __init__.py under the mapped folders, named as an import package."""
    names = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if package == "maxbench" and rel.parts and rel.parts[0] in SETUPTOOLS["package-dir"].values():
                continue
            names.add(".".join([package, *rel.parts]))
    return names


def test_the_package_list_names_every_package_folder():
    """Package discovery does not follow the package-dir mapping, so the list is explicit: a new
    sub-package that is not listed would be missing from every wheel."""
    assert set(SETUPTOOLS["packages"]) == _package_folders()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources (the checkout gets no build/ folder)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    for folder in SETUPTOOLS["package-dir"].values():
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    proc = _pip(
        sys.executable, "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out), str(src), cwd=src
    )
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("maxbench-*.whl")
    return whl


def test_the_wheel_holds_only_maxbench_and_its_data_files(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"maxbench", f"maxbench-{PYPROJECT['project']['version']}.dist-info"}, tops
    packages = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packages == set(SETUPTOOLS["packages"])
    assert not [n for n in names if n.startswith("maxbench/") and "/tests/" in n]
    missing = [f for f in DATA_FILES if f not in names]
    assert not missing, missing


def test_the_wheel_installs_and_every_sub_package_imports_outside_the_checkout(wheel, tmp_path):
    """A fresh environment, outside the checkout, that borrows the test environment's dependencies
    through a .pth line (no download of torch); the wheel goes in with --no-deps."""
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=300)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # a plain path line: the test environment's own .pth files (maxbench's editable finder among
    # them) are not processed for a path added this way
    Path(site, "borrowed-dependencies.pth").write_text(ours + "\n")
    # this environment's pip installs into the new one (no pip bootstrapped there)
    proc = _pip(
        sys.executable,
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        "--quiet",
        str(wheel),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    script = (
        "import importlib, json, maxbench\n"
        f"names = {sorted(SETUPTOOLS['packages'])!r}\n"
        "files = [importlib.import_module(n).__file__ for n in names]\n"
        "print(json.dumps(files))\n"
    )
    run = subprocess.run([str(python), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert all(f.startswith(site) for f in json.loads(run.stdout)), run.stdout
    cli = subprocess.run(
        [str(env_dir / "bin" / "maxbench"), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert cli.returncode == 0 and "usage: maxbench" in cli.stdout, cli.stderr
    mod = subprocess.run(
        [str(python), "-m", "maxbench", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert mod.returncode == 0 and cli.stdout == mod.stdout, mod.stderr


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=~!; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_declared_dependency_is_pinned_by_the_lock():
    pinned = {
        _name(line) for line in (ROOT / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")
    }
    declared = PYPROJECT["project"]["dependencies"] + [
        r for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra
    ]
    assert not [r for r in declared if _name(r) not in pinned]


def test_the_declared_ranges_resolve_against_the_lock_without_installing():
    """pip resolves maxbench with every extra under constraints.txt, offline: a range that excludes
    a locked version fails here instead of on a user's machine."""
    extras = ",".join(PYPROJECT["project"]["optional-dependencies"])
    proc = _pip(
        sys.executable,
        "install",
        "--dry-run",
        "--no-index",
        "--no-build-isolation",
        "--quiet",
        "--report",
        "-",
        "-c",
        "constraints.txt",
        f".[{extras}]",
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [item["metadata"]["name"] for item in report["install"]] == ["maxbench"], report["install"]
