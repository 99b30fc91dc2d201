"""The manifest's reader and writer (``maxbench.rundir.manifest``): a damaged manifest refused naming
what is wrong, and the suite's path recorded relative to the repository when it lies inside it."""

import json
import shutil

import pytest

from maxbench.benchmark.data.suites import load_suite
from maxbench.errors import MaxbenchError
from maxbench.rundir import MANIFEST, RunPlan, check_or_write_manifest, read_manifest, repository_root
from tests.support.paths import ROOT


@pytest.mark.parametrize(
    "manifest,problem",
    [
        ("[1]", "is a list, not a JSON object"),
        ("{", "is not valid JSON"),
        ('{"systems": ["a"]}', "'systems' is a list, expected an object"),
        ('{"identity": "x"}', "'identity' is a string, expected an object"),
        ('{"systems": {"a": 1}}', "systems['a'] is a number, expected an object"),
        ('{"samples": "2"}', "'samples' is \"2\", not a whole number"),
    ],
)
def test_a_damaged_manifest_is_refused_naming_what_is_wrong(tmp_path, manifest, problem):
    (tmp_path / MANIFEST).write_text(manifest)
    with pytest.raises(MaxbenchError) as exc:
        read_manifest(tmp_path)
    assert problem in str(exc.value) and "restore its manifest.json or regenerate the run" in str(exc.value)


def test_a_run_without_a_manifest_reads_as_empty_unless_one_is_required(tmp_path):
    assert read_manifest(tmp_path) == {}
    with pytest.raises(MaxbenchError, match="has no manifest.json"):
        read_manifest(tmp_path, required=True)


# ---------------------------------------------------------------- the suite's recorded path


def _manifest(tmp_path, suite) -> dict:
    check_or_write_manifest(RunPlan(run_dir=tmp_path / "run", suite=suite, systems=[]), {})
    return json.loads((tmp_path / "run" / "manifest.json").read_text())


def test_a_suite_inside_the_repository_is_recorded_relative_to_it(tmp_path):
    assert repository_root() == ROOT and (ROOT / "pyproject.toml").is_file()
    smoke = load_suite("smoke")
    assert smoke.path.is_absolute()  # a built-in suite is found by an absolute path ...
    recorded = _manifest(tmp_path, smoke)["suite"]["path"]
    assert recorded == smoke.path.resolve().relative_to(ROOT).as_posix()  # ... and recorded without it
    assert not recorded.startswith("/") and (ROOT / recorded).is_file()


def test_a_suite_outside_the_repository_is_recorded_as_given(tmp_path):
    smoke = load_suite("smoke")
    for f in (smoke.path, smoke.path.with_suffix(".jsonl")):
        shutil.copy(f, tmp_path / f.name)
    mine = load_suite(str(tmp_path / smoke.path.name))
    assert _manifest(tmp_path, mine)["suite"]["path"] == str(tmp_path / smoke.path.name)
