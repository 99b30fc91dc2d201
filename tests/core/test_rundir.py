"""The run folder's one owner (``maxbench.rundir``): its row rule, its manifest and scores readers and
writers, old run folders read and resumed as they were, one refusal for every reader, and no other
module of the package that opens a run's files itself."""

import ast
import hashlib
import json
import shutil
from pathlib import Path

import pytest

import maxbench
from maxbench.benchmark.data.suites import load_suite
from maxbench.benchmark.metrics.scoring import _recorded_suite, check_suite
from maxbench.errors import MaxbenchError
from maxbench.rundir import (
    GENERATIONS,
    MANIFEST,
    REMOVED,
    SCORES,
    SHARD_GLOB,
    RunPlan,
    ScoresFile,
    apply_lineup,
    check_or_write_manifest,
    existing_manifest,
    finished_keys,
    generations_sha256,
    read_generations,
    read_manifest,
    read_scores,
    recorded_path,
    repository_root,
    row_problem,
    write_generations,
    write_scores,
)
from tests.support.paths import ROOT

#: the package's folders (pyproject.toml's package-dir) and the owner's file among them
PACKAGE_FOLDERS = ("core", "benchmark", "systems", "human_eval")
OWNER = "core/rundir.py"
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
        if isinstance(node, ast.ImportFrom) and node.module == "maxbench.rundir":
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
    uses = {rel: run_file_uses(src) for rel, src in package_modules(ROOT).items() if rel != OWNER}
    offenders = {rel: found for rel, found in uses.items() if found and rel not in NOT_YET_ROUTED}
    assert not offenders, offenders
    routed = [rel for rel in NOT_YET_ROUTED if not uses.get(rel)]
    assert not routed, f"{routed} no longer open run files: take them off NOT_YET_ROUTED"


@pytest.mark.parametrize(
    "source,caught",
    [
        ('p = run_dir / "scores.json"', True),
        ('p = f"{run_dir}/generations.jsonl"', True),
        ('p = run_dir / f"generations.shard-{i}-of-{n}.jsonl"', True),
        ('json.loads((d / "manifest.json").read_text())', True),
        ("from maxbench.rundir import GENERATIONS", True),
        ('raise MaxbenchError(f"{run} has no scores.json; score it")', False),
        ('"""Reads ``generations.jsonl``."""', False),
        ("from maxbench.rundir import read_scores", False),
    ],
)
def test_the_scan_catches_a_module_that_opens_a_run_file_itself(source, caught):
    assert bool(run_file_uses(source)) is caught


# ---------------------------------------------------------------- the row rule and the readers


def _row(system: str, pid: str, **extra) -> dict:
    return {"system": system, "prompt_id": pid, "sample": 0, "prompt": "P", "reference": "R", "text": "T"} | extra


@pytest.mark.parametrize(
    "row,problem",
    [
        ([1, 2], "is not a JSON object"),
        ({"system": "s", "prompt_id": "p", "text": "t"}, "lacks field 'reference'"),
        (_row("s", "p", text=3), "has a non-string 'text' (int)"),
        (_row("s", "p", prompt=None), "has a non-string 'prompt' (NoneType)"),
        (_row("s", "p", sample=-1), "has a 'sample' that is not a whole number >= 0 (-1)"),
        (_row("s", "p", sample=True), "has a 'sample' that is not a whole number >= 0 (true)"),
    ],
)
def test_a_row_is_refused_for_what_makes_it_no_row(row, problem):
    assert row_problem(row) == problem


def test_a_row_without_prompt_or_sample_is_a_row():
    assert row_problem({"system": "s", "prompt_id": "p", "text": "t", "reference": ""}) is None


def test_read_generations_refuses_a_missing_file_an_empty_one_and_a_key_twice(tmp_path):
    with pytest.raises(MaxbenchError, match="is not a run directory"):
        read_generations(tmp_path / "none")
    with pytest.raises(MaxbenchError, match=f"has no {GENERATIONS}; generate first"):
        read_generations(tmp_path)
    assert read_generations(tmp_path, missing_ok=True) == []
    (tmp_path / GENERATIONS).write_text("\n")
    with pytest.raises(MaxbenchError, match="holds no generations"):
        read_generations(tmp_path)
    write_generations(tmp_path, [_row("s", "p"), _row("s", "p", text="other")])
    with pytest.raises(MaxbenchError, match="lines 1 and 2 hold two different rows for system 's', prompt 'p'"):
        read_generations(tmp_path)


def test_read_generations_ignores_a_line_cut_by_a_crash_and_numbers_rows(tmp_path):
    write_generations(tmp_path, [_row("s", "p"), _row("s", "q")])
    with open(tmp_path / GENERATIONS, "a") as f:
        f.write('{"system": "s", "prompt_id": "r", "te')
    assert read_generations(tmp_path, numbered=True) == [(1, _row("s", "p")), (2, _row("s", "q"))]


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


def _scores_doc(run_dir: Path, systems: list[str]) -> dict:
    return {
        "format": "maxbench-scores/1",
        "run_id": run_dir.name,
        "created": "2026-01-01T00:00:00Z",
        "generations_sha256": generations_sha256(run_dir),
        "suite": {"name": "smoke"},
        "bootstrap": {"n_resamples": 0},
        "versions": {},
        "metrics": {"rep": {"signature": "rep|v1"}},
        "systems": {
            s: {"n_texts": 4, "scores": {"rep": {"value": 0.25 * i, "metric": "rep", "signature": "rep|v1"}}}
            for i, s in enumerate(systems)
        },
    }


def test_scores_file_gives_back_the_document_it_was_read_from(tmp_path):
    write_generations(tmp_path, [_row("s", "p")])
    doc = _scores_doc(tmp_path, ["s"]) | {"comparisons": {"baseline": "s", "systems": {}}, "note": "kept"}
    (tmp_path / SCORES).write_text(json.dumps(doc))
    scores = read_scores(tmp_path)
    assert isinstance(scores, ScoresFile) and scores.comparisons == {"baseline": "s", "systems": {}}
    assert scores.to_dict() == doc and list(scores.to_dict()) == list(doc)
    assert scores.stale() is None


@pytest.mark.parametrize(
    "doc,problem",
    [
        ({"systems": []}, "'systems' is a list, expected an object of system -> entry"),
        ({"systems": {"s": {"scores": {"rep": 1}}}}, "systems['s']['scores']['rep'] is a number"),
        ({"systems": {}, "metrics": []}, "'metrics' is a list, expected an object"),
        ({"run_id": "x"}, "has no 'systems' table of scores"),
    ],
)
def test_a_scores_file_of_the_wrong_shape_is_refused_with_what_to_run(tmp_path, doc, problem):
    (tmp_path / SCORES).write_text(json.dumps(doc))
    with pytest.raises(MaxbenchError) as exc:
        read_scores(tmp_path)
    assert problem in str(exc.value) and f"rescore the run (maxbench score {tmp_path})" in str(exc.value)


def test_write_scores_keeps_the_file_when_only_its_time_would_change(tmp_path):
    write_generations(tmp_path, [_row("s", "p")])
    doc = _scores_doc(tmp_path, ["s"])
    write_scores(tmp_path, doc)
    before = (tmp_path / SCORES).read_bytes()
    again = write_scores(tmp_path, doc | {"created": "2027-01-01T00:00:00Z"})
    assert again["created"] == doc["created"] and (tmp_path / SCORES).read_bytes() == before
    write_scores(tmp_path, doc | {"run_id": "other"})
    assert read_scores(tmp_path).run_id == "other"


# ---------------------------------------------------------------- one refusal, whichever command opened the run


def _plan(run_dir: Path, systems: list[str]) -> RunPlan:
    from maxbench.systems.system_strings import parse_system

    return RunPlan(run_dir=run_dir, suite=load_suite("smoke"), systems=[parse_system(s) for s in systems])


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


def _refusal(rc: int, err: str) -> str:
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip().removeprefix("maxbench: error: ")


def test_stale_scores_are_refused_alike_by_leaderboard_view_export_and_the_api(dropped_run, cli, tmp_path):
    run, why = dropped_run
    assert _refusal(*cli("leaderboard", run, "--out", tmp_path / "lb")[::2]) == why
    assert _refusal(*cli("view", run, "--out", tmp_path / "ex")[::2]) == why
    assert _refusal(*cli("export", run, "--format", "csv")[::2]) == why
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
        rc, _, err = cli(*argv)
        assert rc == 2, argv
        assert _refusal(rc, err) == why, argv
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
    lines = (run / GENERATIONS).read_text(encoding="utf-8").splitlines()
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


# ---------------------------------------------------------------- recorded paths
# a manifest names a file inside the repository relative to it (a committed run names no folder of the
# machine that made it), and runs recorded before, with absolute paths, still load

#: a suite inside the repository that is not built in, so that only its recorded path finds it
FOLD = "results/reproductions/graphmax/suites/food-reviews-fold0of5-seed1-n16.toml"


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
