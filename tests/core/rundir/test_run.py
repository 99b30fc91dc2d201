"""A run as every reader reads it (``maxbench.rundir.run``): one refusal of stale scores and of a damaged
manifest, whichever command opened the run, and run folders written before the owner moved read and
resume as their files hold them."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import maxbench
from maxbench.benchmark.data.suites import load_suite
from maxbench.errors import MaxbenchError
from maxbench.rundir import (
    GENERATIONS,
    MANIFEST,
    SCORES,
    RunPlan,
    apply_lineup,
    check_or_write_manifest,
    existing_manifest,
    finished_keys,
    generations_sha256,
    read_generations,
    read_manifest,
    read_scores,
    write_generations,
)
from tests.support.cli import assert_one_line_exit_2
from tests.support.paths import ROOT
from tests.support.rundir import SMOKE_A, SMOKE_B
from tests.support.rundir import plan as _plan
from tests.support.rundir import row as _row
from tests.support.rundir import scores_doc as _scores_doc

# ---------------------------------------------------------------- one refusal, whichever command opened the run


@pytest.fixture
def dropped_run(tmp_path) -> tuple[Path, str]:
    """A run scored with two systems whose second system was dropped since (``apply_lineup``): its
    scores.json scores other generations. Returns the run and the owner's refusal."""
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    both = _plan(run, [SMOKE_A, SMOKE_B])
    check_or_write_manifest(both, {})
    rows = [_row(s.name, it.id, reference=it.reference) for s in both.systems for it in both.suite.items]
    write_generations(run, rows)
    (run / SCORES).write_text(json.dumps(_scores_doc(run, [SMOKE_A, SMOKE_B])))
    assert read_scores(run).stale() is None
    assert apply_lineup(_plan(run, [SMOKE_A])) == {"added": [], "removed": [SMOKE_B], "restored": []}
    why = read_scores(run, fresh=False).stale()
    assert why and "these are not this run's scores" in why
    return run, why


def _refusal(result) -> str:
    """The message of a one-line refusal (``assert_one_line_exit_2``) without its prefix."""
    return assert_one_line_exit_2(result).strip().removeprefix("maxbench: error: ")


def test_stale_scores_are_refused_alike_by_leaderboard_view_export_and_the_api(dropped_run, cli, tmp_path):
    run, why = dropped_run
    assert _refusal(cli("leaderboard", run, "--out", tmp_path / "lb")) == why
    assert _refusal(cli("view", run, "--out", tmp_path / "ex")) == why
    assert _refusal(cli("export", run, "--format", "csv")) == why
    with pytest.raises(MaxbenchError) as exc:
        maxbench.load_run(run)
    assert str(exc.value) == why
    assert not (tmp_path / "lb").exists()


def test_a_study_of_a_run_with_stale_scores_takes_no_baseline_nor_correlations_from_them(dropped_run, tmp_path):
    """Study creation and the study report's metric agreement read scores through the owner too: stale
    ones name no baseline and give no correlations, and the report says why in the owner's words."""
    from maxbench.human_eval.analysis.ratings import Ratings
    from maxbench.human_eval.report.agreement import study_correlations
    from maxbench.human_eval.store.db import dispose_engines, session_for
    from maxbench.human_eval.store.models import Study
    from maxbench.human_eval.studies.create import create_study
    from maxbench.human_eval.studies.options import StudyOptions
    from maxbench.human_eval.studies.rubrics import load_rubric

    run, why = dropped_run
    doc = json.loads((run / SCORES).read_text()) | {"comparisons": {"baseline": SMOKE_A, "systems": {}}}
    (run / SCORES).write_text(json.dumps(doc))
    options = StudyOptions(items_per_system=2, raters_per_item=1, attention_rate=0)
    try:
        with session_for(f"sqlite:///{tmp_path / 'ratings.sqlite3'}", create=True) as session:
            slug = create_study(session, run, load_rubric("fluency"), options).slug
            assert session.query(Study).filter_by(slug=slug).one().design["baseline"] is None
            table, note = study_correlations(session, slug, Ratings((), "db", "", ""), (), 10, 0)
            (run / SCORES).write_text(json.dumps(doc | {"generations_sha256": generations_sha256(run)}))
            fresh = create_study(session, run, load_rubric("fluency"), options).slug
            assert session.query(Study).filter_by(slug=fresh).one().design["baseline"] == SMOKE_A
    finally:
        dispose_engines()
    assert table == [] and note == f"No metric correlations: {why}."


def test_the_protocol_scores_a_run_again_whose_scores_are_stale(dropped_run):
    from maxbench.benchmark.reproduce.protocol import scores_current

    run, _ = dropped_run
    assert not scores_current(run, ["rep"])
    (run / SCORES).write_text(json.dumps(_scores_doc(run, [SMOKE_A])))
    assert scores_current(run, ["rep"]) and not scores_current(run, ["rep", "bleu"])


def test_a_damaged_manifest_is_refused_with_one_message_by_every_command_and_the_api(dropped_run, cli, tmp_path):
    run, _ = dropped_run
    (run / SCORES).write_text(json.dumps(_scores_doc(run, [SMOKE_A])))
    manifest = json.loads((run / MANIFEST).read_text())
    (run / MANIFEST).write_text(json.dumps(manifest | {"systems": list(manifest["systems"])}))
    with pytest.raises(MaxbenchError) as exc:
        read_manifest(run)
    why = str(exc.value)
    db = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    study = ("study", "create", run, "--items-per-system", 1, "--raters-per-item", 1, "--rubric", "fluency")
    for argv in [
        ("leaderboard", run, "--out", tmp_path / "lb"),
        ("view", run, "--out", tmp_path / "ex"),
        ("export", run, "--format", "csv"),
        ("score", run, "--metrics", "rep"),
        ("compare", run, run, "--metrics", "rep"),
        (*study, "--db", db),
    ]:
        assert _refusal(cli(*argv)) == why, argv
    with pytest.raises(MaxbenchError) as exc:
        maxbench.load_run(run)
    assert str(exc.value) == why


# ---------------------------------------------------------------- old run folders


def committed_runs() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "results").rglob(SCORES) if (p.parent / GENERATIONS).is_file())


@pytest.mark.parametrize("run", committed_runs(), ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_a_committed_run_reads_as_its_files_hold_it(run):
    """A run folder written before the owner moved gives the same rows and numbers: its rows are the
    file's lines, its scores file the document, and it is stale exactly when the hash it records is
    not its generations' (a run still generating, committed as it lands, may be)."""
    # JSON lines end at "\n" only: a generated text may hold U+2028, which splitlines() would split at
    lines = (run / GENERATIONS).read_text(encoding="utf-8").split("\n")
    raw_scores = json.loads((run / SCORES).read_text(encoding="utf-8"))
    assert read_generations(run) == [json.loads(line) for line in lines if line.strip()]
    scores = read_scores(run, fresh=False)
    assert scores.to_dict() == raw_scores and list(scores.to_dict()) == list(raw_scores)
    now = hashlib.sha256((run / GENERATIONS).read_bytes()).hexdigest()
    assert (scores.stale() is None) == (raw_scores["generations_sha256"] == now)


#: finished committed runs (no lineup of theirs is still generating)
FINISHED = [
    "base-lms/runs/base-lms-food-reviews",
    "decoding-baselines/runs/decoding-baselines-food-reviews",
    "reproductions/graphmax/runs/smollm2-135m-food-reviews-fold3of5-n16",
]


@pytest.mark.parametrize("name", FINISHED)
def test_a_finished_committed_run_loads_through_the_api_with_the_numbers_of_its_files(name):
    from maxbench.benchmark.present.export import tidy_rows

    run = ROOT / "results" / name
    raw_rows = [json.loads(line) for line in (run / GENERATIONS).read_text(encoding="utf-8").splitlines()]
    raw_scores = json.loads((run / SCORES).read_text(encoding="utf-8"))
    loaded = maxbench.load_run(run)
    assert loaded.generations == raw_rows and loaded.scores == raw_scores
    assert loaded.rows() == tidy_rows(raw_scores, raw_rows) and len(loaded.rows()) > len(raw_rows)


def test_a_committed_run_resumes_with_nothing_left_to_generate(tmp_path):
    """The base-lms run (written before the move; its shards merged) resumes under the new owner:
    its manifest is this plan's, and every row of the plan is found already written."""
    from maxbench.systems.system_strings import parse_system

    run = tmp_path / "base-lms-food-reviews"
    shutil.copytree(ROOT / "results" / "base-lms" / "runs" / run.name, run)
    ident = json.loads((run / MANIFEST).read_text())["identity"]
    plan = RunPlan(
        run_dir=run,
        suite=load_suite(ident["suite"]["name"]),
        systems=[parse_system(s) for s in ident["systems"]],
        samples=ident["samples"],
        seed=ident["seed"],
        batch_size=ident["batch_size"],
        corpus=ident["corpus"],
        lineup=ident["registry"],
        reference_ppl=ident["reference_ppl"],
    )
    assert plan.identity() == ident
    assert existing_manifest(plan) == read_manifest(run)
    assert apply_lineup(plan) is None
    assert set(plan.canonical_order()) <= finished_keys(plan)
    for committed in (ROOT / "results" / "base-lms" / "runs" / run.name).iterdir():  # nothing was rewritten
        assert (run / committed.name).read_bytes() == committed.read_bytes(), committed.name
