"""``maxbench report --study``: the run's baseline is the default reference, and an incomplete study says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from maxbench.cli import main
from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Annotator, Assignment, Rating, Study, utcnow
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import load_rubric
from tests.support.paths import DATA

SYSTEMS = ("m/softmax", "m/graphmax")  # "m/graphmax" comes first by name
FAST = ["--n-boot", "200"]


def make_run(folder: Path, baseline: str | None) -> Path:
    folder.mkdir()
    with open(folder / "generations.jsonl", "w") as f:
        for system in SYSTEMS:
            for p in range(6):
                rec = {"system": system, "prompt_id": f"p{p}", "sample": 0, "prompt": f"P{p}", "reference": ""}
                rec["text"] = f"{p} {system}"
                f.write(json.dumps(rec) + "\n")
    if baseline is not None:  # what benchmark's scoring writes, reduced to the part a study reads
        doc = {"systems": {}, "comparisons": {"baseline": baseline, "systems": {}}}
        (folder / "scores.json").write_text(json.dumps(doc))
    return folder


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    yield url
    dispose_engines()


def new_study(url: str, run_dir: Path, systems=None) -> str:
    with session_for(url, create=True) as session:
        created = create_study(
            session,
            run_dir,
            load_rubric("fluency"),
            StudyOptions(systems=systems, items_per_system=6, raters_per_item=2, attention_rate=0.0),
        )
    return created.slug


def rate(url: str, slug: str, keep_unrated: int = 0, stop: str | None = None) -> None:
    """Rate every text page but the last ``keep_unrated``; ``stop``: revoke that annotator."""
    with session_for(url) as session:
        study_id = session.query(Study.id).filter(Study.slug == slug).scalar()
        pages = (
            session.query(Assignment)
            .join(Annotator)
            .filter(Annotator.study_id == study_id, Assignment.item_id.is_not(None))
            .order_by(Assignment.id)
            .all()
        )
        for n, page in enumerate(pages[: len(pages) - keep_unrated]):
            value = 2 + 2 * ("graphmax" in page.item.system.name) + n % 2
            page.completed_at, page.seconds = utcnow(), 10.0
            session.add(Rating(assignment_id=page.id, criterion="fluency", value=value))
        if stop is not None:
            session.query(Annotator).filter(
                Annotator.study_id == study_id, Annotator.label == stop
            ).one().revoked_at = utcnow()
        session.commit()


def report(capsys, url: str, slug: str, out: Path, *extra) -> tuple[dict, str, str]:
    rc = main(["report", "--study", slug, "--db", url, "--out", str(out), *FAST, *extra])
    err = capsys.readouterr().err
    assert rc == 0, err
    folder = out / slug
    return (
        json.loads((folder / "report.json").read_text()),
        (folder / "report.md").read_text(),
        (folder / "report.html").read_text(),
    )


def test_study_records_the_baseline_of_the_scored_run(tmp_path, db):
    slug = new_study(db, make_run(tmp_path / "run", baseline="m/softmax"))
    with session_for(db) as session:
        assert session.query(Study).filter(Study.slug == slug).one().design["baseline"] == "m/softmax"


def test_baseline_outside_the_studys_systems_is_not_recorded(tmp_path, db):
    slug = new_study(db, make_run(tmp_path / "run", baseline="m/softmax"), systems=["m/graphmax"])
    with session_for(db) as session:
        assert session.query(Study).filter(Study.slug == slug).one().design["baseline"] is None


def test_report_on_a_study_compares_against_the_runs_baseline(tmp_path, db, capsys):
    slug = new_study(db, make_run(tmp_path / "run", baseline="m/softmax"))
    rate(db, slug)
    data, md, _ = report(capsys, db, slug, tmp_path)
    assert data["reference"] == "m/softmax" and data["systems"] == ["m/softmax", "m/graphmax"]
    assert data["comparisons"][0]["reference"] == "m/softmax" and data["comparisons"][0]["other"] == "m/graphmax"
    assert "Reference system: m/softmax (the run's baseline, recorded when the study was created)." in md
    assert "first system by name" not in md


def test_reference_option_overrides_the_baseline(tmp_path, db, capsys):
    slug = new_study(db, make_run(tmp_path / "run", baseline="m/softmax"))
    rate(db, slug)
    data, md, _ = report(capsys, db, slug, tmp_path, "--reference", "m/graphmax")
    assert data["reference"] == "m/graphmax" and data["reference_rule"] == "given with --reference"
    assert "Reference system: m/graphmax (given with --reference)." in md


def test_study_of_an_unscored_run_falls_back_to_the_first_system_by_name_and_says_so(tmp_path, db, capsys):
    slug = new_study(db, make_run(tmp_path / "run", baseline=None))
    rate(db, slug)
    data, md, _ = report(capsys, db, slug, tmp_path)
    assert data["reference"] == "m/graphmax" and data["reference_rule"] == "the first system by name"
    assert "no --reference given: comparing against 'm/graphmax', the first system by name" in md


def test_complete_study_says_it_is_complete(tmp_path, db, capsys):
    slug = new_study(db, make_run(tmp_path / "run", baseline="m/softmax"))
    rate(db, slug)
    data, md, _ = report(capsys, db, slug, tmp_path)
    assert data["progress"] == {"texts_assigned": 24, "texts_rated": 24, "texts_unrated_stopped": 0, "closed": False}
    assert "Complete study: all 24 assigned texts are rated." in md
    assert "incomplete" not in md


def test_incomplete_study_says_so_with_the_counts(tmp_path, db, capsys):
    slug = new_study(db, make_run(tmp_path / "run", baseline="m/softmax"))
    rate(db, slug, keep_unrated=5, stop="a02")  # the last pages in creation order are a02's
    data, md, html = report(capsys, db, slug, tmp_path)
    line = (
        "incomplete study (open): 19 of 24 assigned texts are rated (5 unrated, 5 of them by stopped annotators); "
        "every number below covers the rated texts only"
    )
    assert f"## Warnings\n\n- {line}" in md
    assert line.replace("'", "&#x27;") in html
    assert data["progress"] == {"texts_assigned": 24, "texts_rated": 19, "texts_unrated_stopped": 5, "closed": False}
    assert "Complete study" not in md


def test_a_report_from_a_file_says_nothing_about_completeness(tmp_path, capsys):
    ratings = DATA / "ratings_paired.csv"
    rc = main(["report", "--ratings", str(ratings), "--out", str(tmp_path), "--name", "r", *FAST])
    assert rc == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["progress"] is None  # a file lists ratings, not the assignments that lack one
    assert "omplete study" not in (tmp_path / "r" / "report.md").read_text()
