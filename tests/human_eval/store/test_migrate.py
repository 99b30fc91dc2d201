"""Schema versions of the ratings database (alembic): a study that outlives an upgrade.

Databases of earlier schemas are rebuilt from the history (the migration chain up to the
revision: r0001 the first release, r0002 page_text, r0003 enrolment; r0004, model raters, is
today's), filled
with a study and its ratings, then upgraded by ``maxbench db upgrade``: every rating is
kept. On SQLite and on the throwaway PostgreSQL server (skipped without initdb)."""

import csv
import io

import pytest
from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy.orm import Session

from maxbench.cli import main
from maxbench.errors import MaxbenchError
from maxbench.human_eval.store import migrate
from maxbench.human_eval.store.db import _with_installed_driver, dispose_engines, engine_for, session_for
from maxbench.human_eval.store.models import Annotator, Assignment, Base, Enrolment, Rating, utcnow
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.export import long_format_rows
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, write_run


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    else:
        from maxbench.human_eval.testing.postgres import pg_bin_dir

        try:
            pg_bin_dir()
        except MaxbenchError:
            pytest.skip("PostgreSQL's initdb is not installed")
        yield request.getfixturevalue("postgres_cluster").new_database()
    dispose_engines()


def plain_engine(url):
    """An engine that checks nothing: the database as an older maxbench left it."""
    return create_engine(_with_installed_driver(url))


def build_old_database(url, tmp_path, revision, stamped=True):
    """The schema of ``revision`` from the migration chain, with a Likert study, ratings and
    answered attention checks in it (stamped, or as made before schema versions existed)."""
    engine = plain_engine(url)
    with engine.connect() as conn:
        if revision == "head-unstamped":
            Base.metadata.create_all(conn)
        else:
            migrate.upgrade(conn, revision)
            if not stamped:
                conn.execute(text(f"DROP TABLE {migrate.VERSION_TABLE}"))
        conn.commit()
    run = write_run(tmp_path / "run", SYSTEMS, 6)
    with Session(engine, expire_on_commit=False) as s:
        created = create_study(
            s,
            run,
            load_rubric("posg-lm"),
            StudyOptions(items_per_system=4, raters_per_item=2, attention_rate=0.25, seed=3),
        )
        for i, page in enumerate(s.scalars(select(Assignment).order_by(Assignment.id))):
            if i % 3 == 2:
                continue  # some pages not done yet
            page.completed_at = utcnow()
            if page.attention is not None:
                page.attention_passed = i % 2 == 0
            else:
                for j, criterion in enumerate(load_rubric("posg-lm").criterion_names):
                    s.add(Rating(assignment_id=page.id, criterion=criterion, value=1 + (i + j) % 5))
        s.commit()
    engine.dispose()
    return created


def all_ratings(url):
    engine = plain_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, assignment_id, criterion, value, created_at FROM rating ORDER BY id")
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def version(url):
    engine = plain_engine(url)
    with engine.connect() as conn:
        current = migrate.current_revision(conn)
    engine.dispose()
    return current


def test_a_new_database_is_stamped_at_head(url):
    with session_for(url, create=True):
        pass
    assert version(url) == migrate.HEAD


@pytest.mark.parametrize(
    ("revision", "stamped"),
    [("0001", True), ("0001", False), ("0002", True), ("0002", False), ("0003", True), ("0003", False)],
)
def test_upgrade_from_an_older_schema_keeps_every_rating(url, tmp_path, capsys, revision, stamped):
    created = build_old_database(url, tmp_path, revision, stamped)
    before = all_ratings(url)
    assert len(before) > 10
    assert "judgment" not in inspect(plain_engine(url)).get_table_names()

    # Every command that opens the database, and the app, refuses the old schema in one line.
    assert main(["study", "list", "--db", url]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "old schema" in err and "maxbench db upgrade --db " in err
    with pytest.raises(MaxbenchError, match="maxbench db upgrade --db"):
        session_for(url, create=True)
    from maxbench.human_eval.app.factory import create_app

    with pytest.raises(MaxbenchError, match="maxbench db upgrade --db"):
        create_app({"DB_URL": url, "SECRET_KEY": "x"})
    assert version(url) == (revision if stamped else None)  # refusing changed nothing

    assert main(["db", "upgrade", "--db", url]) == 0
    assert f"from schema revision {revision} to {migrate.HEAD}" in capsys.readouterr().out
    assert all_ratings(url) == before
    assert version(url) == migrate.HEAD
    assert {"page_text", "enrolment", "judgment"} <= set(inspect(plain_engine(url)).get_table_names())
    with session_for(url) as s:
        assert len(long_format_rows(s, created.slug)) == len(before)
        # every annotator from before is a person
        assert {a.kind for a in s.scalars(select(Annotator))} == {"human"}
    assert main(["db", "upgrade", "--db", url]) == 0
    assert "nothing changed" in capsys.readouterr().out


def test_todays_tables_without_a_version_are_detected_and_stamped(url, tmp_path):
    build_old_database(url, tmp_path, "head-unstamped")
    before = all_ratings(url)
    assert version(url) is None
    with session_for(url) as s:  # a reader opens it and stamps it
        assert s.scalar(select(Enrolment.id)) is None
    assert version(url) == migrate.HEAD
    assert all_ratings(url) == before


def test_the_migration_chain_builds_the_models_schema(url):
    """r0001..head from an empty database gives what the models create (tables, columns,
    indexes, unique keys, foreign keys), so an upgraded database is one made today."""
    other = url.replace("ratings.sqlite3", "models.sqlite3") if url.startswith("sqlite") else None
    if other is None:
        pytest.skip("compared on SQLite; PostgreSQL runs the chain in the upgrade tests")
    chain, models = plain_engine(url), plain_engine(other)
    with chain.connect() as conn:
        migrate.upgrade(conn)
        conn.commit()
    Base.metadata.create_all(models)
    a, b = inspect(chain), inspect(models)
    assert set(a.get_table_names()) - {migrate.VERSION_TABLE} == set(b.get_table_names())
    for table in b.get_table_names():
        assert [(c["name"], str(c["type"]), c["nullable"]) for c in a.get_columns(table)] == [
            (c["name"], str(c["type"]), c["nullable"]) for c in b.get_columns(table)
        ], table
        for kind in ("get_indexes", "get_unique_constraints"):
            got = sorted((tuple(i["column_names"]), bool(i.get("unique", True))) for i in getattr(a, kind)(table))
            want = sorted((tuple(i["column_names"]), bool(i.get("unique", True))) for i in getattr(b, kind)(table))
            assert got == want, (table, kind)
        assert sorted((tuple(f["constrained_columns"]), f["referred_table"]) for f in a.get_foreign_keys(table)) == (
            sorted((tuple(f["constrained_columns"]), f["referred_table"]) for f in b.get_foreign_keys(table))
        )


def test_a_database_matching_no_schema_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'other.sqlite3'}"
    engine = plain_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE study (id INTEGER PRIMARY KEY)"))
    with pytest.raises(MaxbenchError, match="match no maxbench schema"):
        session_for(url)
    dispose_engines()


def test_participants_export(url, tmp_path, capsys):
    run = write_run(tmp_path / "run", SYSTEMS, 6)
    with session_for(url, create=True) as s:
        created = create_study(
            s,
            run,
            load_rubric("posg-lm"),
            StudyOptions(items_per_system=4, raters_per_item=1, annotators=2, attention_rate=0.5, seed=1),
        )
    engine = engine_for(url)
    with Session(engine) as s:
        pages = s.scalars(select(Assignment).order_by(Assignment.id)).all()
        first = pages[0].annotator_id
        for page in pages:
            if page.annotator_id == first:
                page.completed_at = utcnow()
                if page.attention is not None:
                    page.attention_passed = page.position % 2 == 0
        s.add(
            Enrolment(
                study_id=pages[0].annotator.study_id, platform="prolific", participant_id="PID123", annotator_id=first
            )
        )
        s.add(
            Enrolment(
                study_id=pages[0].annotator.study_id, platform="prolific", participant_id="GONE9", released_at=utcnow()
            )
        )
        s.commit()
        mine = [p for p in pages if p.annotator_id == first]
        checks = [p for p in mine if p.attention is not None]
    out = tmp_path / "out" / "participants.csv"
    assert main(["study", "participants", created.slug, "--db", url, "--out", str(out)]) == 0
    assert "3 participants written" in capsys.readouterr().err
    assert out.stat().st_mode & 0o777 == 0o600
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["id"] for r in rows] == ["PID123", rows[1]["annotator"], "GONE9"]
    assert rows[0]["completion"] == f"{len(mine)}/{len(mine)}" and rows[0]["status"] == "finished"
    assert int(rows[0]["attention_passed"]) == sum(p.position % 2 == 0 for p in checks)
    assert int(rows[0]["attention_failed"]) == sum(p.position % 2 == 1 for p in checks)
    assert rows[1]["completion"].startswith("0/") and rows[1]["status"] == "not started"
    assert rows[2]["status"] == "released" and rows[0]["gold_accuracy"] == ""
    assert main(["study", "participants", created.slug, "--db", url]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("id,platform,annotator,status,completion")
