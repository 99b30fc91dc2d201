"""``maxbench leaderboard`` over scored runs: one row per system and run, runs that cannot be
compared refused naming the difference, partial runs marked, bad run folders one line."""

import csv
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_exit_2
from tests.support.runs import SCORED_SYSTEMS, leaderboard_table, write_scored_run


def test_same_system_in_two_runs_is_refused(tmp_path, cli):
    a = write_scored_run(tmp_path, "a", SCORED_SYSTEMS)
    b = write_scored_run(tmp_path, "b", SCORED_SYSTEMS[:1], value=0.9)
    assert_one_line_exit_2(
        cli("leaderboard", a, b, "--out", tmp_path / "lb"), "'m/softmax/greedy' is in both", "--mixed"
    )
    assert not (tmp_path / "lb").exists()


def test_same_system_in_two_runs_with_mixed_is_one_row_per_run(tmp_path, cli):
    a = write_scored_run(tmp_path, "a", SCORED_SYSTEMS)
    b = write_scored_run(tmp_path, "b", SCORED_SYSTEMS[:1], value=0.9)
    rc, _, err = cli("leaderboard", a, b, "--out", tmp_path / "lb", "--mixed")
    assert rc == 0, err
    table = leaderboard_table((tmp_path / "lb" / "leaderboard.md").read_text())
    assert table[0][:2] == ["system", "run"]
    assert [row[:2] for row in table[1:]] == [
        ["`m/softmax/greedy`", "`a`"],
        ["`m/sparsemax/greedy`", "`a`"],
        ["`m/softmax/greedy`", "`b`"],
    ]
    with open(tmp_path / "lb" / "leaderboard.csv") as f:
        assert [r[:2] for r in csv.reader(f)][1:] == [
            [s, r] for s, r in zip(SCORED_SYSTEMS + SCORED_SYSTEMS[:1], "aab")
        ]


@pytest.mark.parametrize(
    "other, words",
    [
        ({"suite": "three", "n_items": 3}, ["suite six v1", "three v1", "prompts 6", "but 3"]),
        ({"seed": 99}, ["seed 1234", "but 99"]),
    ],
)
def test_runs_on_different_prompts_or_seeds_are_refused_naming_the_difference(tmp_path, cli, other, words):
    a = write_scored_run(tmp_path, "a", SCORED_SYSTEMS[:1])
    b = write_scored_run(tmp_path, "b", SCORED_SYSTEMS[1:], **other)
    assert_one_line_exit_2(cli("leaderboard", a, b, "--out", tmp_path / "lb"), "not comparable", *words)


def test_mixed_suites_show_a_suite_column_and_the_best_per_suite(tmp_path, cli):
    a = write_scored_run(tmp_path, "a", SCORED_SYSTEMS, value=0.5)  # best bleu-4 in six: sparsemax 0.6
    b = write_scored_run(tmp_path, "b", ["m/graphmax/greedy"], suite="three", n_items=3, value=0.1)
    rc, _, err = cli("leaderboard", a, b, "--out", tmp_path / "lb", "--mixed")
    assert rc == 0, err
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    table = leaderboard_table(md)
    assert table[0][:3] == ["system", "run", "suite"]
    assert [row[2] for row in table[1:]] == ["six (6 prompts, seed 1234, samples 1)"] * 2 + [
        "three (3 prompts, seed 1234, samples 1)"
    ]
    bleu = [row[table[0].index("bleu-4")] for row in table[1:]]
    assert bleu == ["50.00 [49.00, 51.00]", "**60.00** [59.00, 61.00]", "**10.00** [9.00, 11.00]"]
    assert md.startswith("# maxbench leaderboard: runs on several suites\n")


@pytest.mark.parametrize("new_format", [True, False], ids=["scores-say-partial", "derived-from-generations"])
def test_rows_say_how_many_prompts_they_cover_and_mark_partial_runs(tmp_path, cli, new_format):
    a = write_scored_run(tmp_path, "a", SCORED_SYSTEMS, covered=3, new_format=new_format)
    rc, _, err = cli("leaderboard", a, "--out", tmp_path / "lb")
    assert rc == 0, err
    table = leaderboard_table((tmp_path / "lb" / "leaderboard.md").read_text())
    assert table[0][:2] == ["system", "prompts"] and [r[1] for r in table[1:]] == ["3 of 6 (partial)"] * 2
    with open(tmp_path / "lb" / "leaderboard.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["prompts"], r["partial"]) for r in rows] == [("3", "true")] * 2


def test_scores_marked_not_available_print_n_a(tmp_path, cli):
    na = {"sacrebleu": {"value": None, "reason": "the suite has no references"}}  # no interval either
    a = write_scored_run(tmp_path, "a", SCORED_SYSTEMS, extra_scores=na)
    rc, _, err = cli("leaderboard", a, "--out", tmp_path / "lb")
    assert rc == 0, err
    table = leaderboard_table((tmp_path / "lb" / "leaderboard.md").read_text())
    assert [row[table[0].index("sacrebleu")] for row in table[1:]] == ["n/a", "n/a"]
    assert ">n/a<" in (tmp_path / "lb" / "leaderboard.html").read_text()


def test_system_strings_are_escaped_in_the_html_page(tmp_path, cli):
    a = write_scored_run(tmp_path, "a", ["m<img src=x onerror=alert(1)>/softmax/greedy"])
    rc, _, err = cli("leaderboard", a, "--out", tmp_path / "lb")
    assert rc == 0, err
    page = (tmp_path / "lb" / "leaderboard.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda t: [t / "nosuch"], ["is not a run directory", "maxbench run"]),
        (lambda t: [write_scored_run(t, "a", SCORED_SYSTEMS)] * 2, ["is given twice"]),
        (lambda t: [Path(t / "e").mkdir() or t / "e"], ["has no scores.json"]),
    ],
)
def test_leaderboard_bad_run_directories(tmp_path, cli, make, words):
    assert_one_line_exit_2(cli("leaderboard", *make(tmp_path), "--out", tmp_path / "lb"), *words)


@pytest.mark.parametrize("body", ["[1, 2]", '{"systems": {"s": 5}}', '{"systems": {"s": {"scores": {"x": 1}}}}'])
def test_leaderboard_malformed_scores_file(tmp_path, cli, body):
    a = write_scored_run(tmp_path, "a", SCORED_SYSTEMS)
    (a / "scores.json").write_text(body)
    assert_one_line_exit_2(cli("leaderboard", a, "--out", tmp_path / "lb"), "rescore")
