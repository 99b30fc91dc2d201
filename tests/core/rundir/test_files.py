"""Recorded paths (``maxbench.rundir.files``): a run's files name a file inside the repository relative
to it (a committed run names no folder of the machine that made it), and runs recorded before, with
absolute paths, still load."""

import pytest

from maxbench.benchmark.data.suites import load_suite
from maxbench.benchmark.metrics.scoring import _recorded_suite, check_suite
from maxbench.errors import MaxbenchError
from maxbench.rundir import recorded_path
from tests.support.paths import ROOT

#: a suite inside the repository that is not built in, so that only its recorded path finds it
FOLD = "results/reproductions/graphmax/suites/food-reviews-fold0of5-seed1-n16.toml"


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_recorded_suite_path_is_found_from_any_working_folder(tmp_path, monkeypatch, form):
    fold = load_suite(str(ROOT / FOLD))
    path = FOLD if form == "relative" else str(ROOT / FOLD)  # absolute: runs recorded before
    suite = {"name": fold.name, "version": fold.version, "sha256": fold.sha256, "path": path}
    monkeypatch.chdir(tmp_path)  # the recorded relative path is the repository's, not the working folder's
    assert _recorded_suite({"suite": suite}).sha256 == fold.sha256
    (tmp_path / "run").mkdir()
    with pytest.raises(MaxbenchError, match=r"records suite 'food-reviews-fold0of5-seed1-n16' with sha256 000000"):
        check_suite(tmp_path / "run", {"suite": suite | {"sha256": "0" * 64}})


def test_a_suite_recorded_by_another_machines_absolute_path_falls_back_to_the_built_in_by_name():
    smoke = load_suite("smoke")
    elsewhere = {"name": "smoke", "version": smoke.version, "sha256": smoke.sha256, "path": "/elsewhere/smoke.toml"}
    assert _recorded_suite({"suite": elsewhere}).sha256 == smoke.sha256


def test_a_folder_inside_the_repository_is_recorded_relative_however_it_was_given(tmp_path, monkeypatch):
    run = ROOT / "results" / "base-lms" / "runs" / "base-lms-food-reviews"  # scripted.json's run
    assert recorded_path(run) == "results/base-lms/runs/base-lms-food-reviews"
    monkeypatch.chdir(ROOT / "results")
    assert recorded_path("base-lms/runs/base-lms-food-reviews") == "results/base-lms/runs/base-lms-food-reviews"
    assert recorded_path(tmp_path / "run") == str(tmp_path / "run") and recorded_path(None) is None
