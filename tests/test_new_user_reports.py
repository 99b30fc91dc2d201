"""Honest numbers in reports (issue 41 item 6): a bootstrap over one item is no interval."""

from __future__ import annotations

import numpy as np

from maxbench.human_eval.analysis.statistics import (
    bootstrap_rank_biserial_paired,
    bootstrap_rank_biserial_unpaired,
    percentile_ci,
    seeded_rng,
)
from tests.human_eval.report.test_cli import FAST, grid, run, write_csv


def test_one_item_gives_no_interval_and_two_do():
    replicates = np.array([-0.194] * 50)
    assert percentile_ci(replicates, 1) is None
    assert percentile_ci(np.linspace(-1, 1, 50), 2) is not None
    rng = seeded_rng(1, "t")
    assert bootstrap_rank_biserial_paired(np.array([0.5]), 100, rng) is None
    one = np.array([[0, 1, 0, 0, 0]])
    assert (
        bootstrap_rank_biserial_unpaired(one, np.array([[0, 0, 1, 0, 0], [1, 0, 0, 0, 0]]), range(1, 6), 100, rng)
        is None
    )


def test_a_report_over_one_item_says_n_a_with_the_reason(tmp_path, capsys):
    ratings = write_csv(tmp_path / "r.csv", grid(items=1, annotators=("x", "y", "z")))
    rc, out, err = run(
        capsys,
        "report",
        "--ratings",
        ratings,
        "--reference",
        "A",
        "--out",
        tmp_path / "rep",
        "--min-seconds",
        "0",
        *FAST,
    )
    assert rc == 0, err
    (md,) = (tmp_path / "rep").rglob("report.md")
    text = md.read_text()
    assert "n/a" in text and "fewer than two items to resample" in text
    assert "[-0.19, -0.19]" not in text
