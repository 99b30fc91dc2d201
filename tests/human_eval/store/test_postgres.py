"""The rating app on PostgreSQL (the production database), on the test session's throwaway
server (tests/conftest.py's postgres_cluster: Debian's PostgreSQL 15, started per session).
The security, durability and database tests also run on it through the db_url fixture."""

import threading

import psycopg
import pytest
from sqlalchemy import func, inspect, select
from sqlalchemy.engine import make_url

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import dispose_engines, engine_for, session_for
from maxbench.human_eval.store.models import Base, Rating
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.export import long_format_rows
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, csrf_token, write_run

CRITERIA = load_rubric("posg-lm").criterion_names


@pytest.fixture
def pg_study(tmp_path, postgres_cluster):
    url = postgres_cluster.new_database()
    run = write_run(tmp_path / "run", SYSTEMS, 5)
    with session_for(url, create=True) as s:
        created = create_study(
            s, run, load_rubric("posg-lm"), StudyOptions(items_per_system=4, raters_per_item=1, attention_rate=0)
        )
    yield create_app({"DB_URL": url, "SECRET_KEY": "pg"}), created, url, postgres_cluster
    dispose_engines()


def enter(client, created):
    client.get("/a/" + created.annotator_tokens[0][1])
    page = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = client.get("/check")
    client.post(
        "/check",
        data={"csrf_token": csrf_token(page.text), "answer": str(load_rubric("posg-lm").comprehension_check().answer)},
    )
    return client.get("/next").location


def test_the_server_is_real_postgres(pg_study):
    _, _, url, _ = pg_study
    assert engine_for(url).dialect.name == "postgresql"
    assert set(Base.metadata.tables) <= set(inspect(engine_for(url)).get_table_names())


def test_rating_path_and_concurrent_duplicates_on_postgres(pg_study):
    app, created, PG_URL, _ = pg_study
    client = app.test_client()
    client.get("/a/" + created.annotator_tokens[0][1])
    page = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = client.get("/check")
    client.post(
        "/check",
        data={"csrf_token": csrf_token(page.text), "answer": str(load_rubric("posg-lm").comprehension_check().answer)},
    )
    path = client.get("/next").location
    page = client.get(path)
    cookie = client.get_cookie("maxbench_session").value
    results = []
    barrier = threading.Barrier(4)

    def submit(value):
        twin = app.test_client()
        twin.set_cookie("maxbench_session", cookie)
        form = {"csrf_token": csrf_token(page.text), **{f"c_{c}": str(value) for c in CRITERIA}}
        barrier.wait()
        results.append(twin.post(path, data=form).status_code)

    threads = [threading.Thread(target=submit, args=(v,)) for v in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [303] * 4
    with session_for(PG_URL) as s:
        values = s.scalars(select(Rating.value)).all()
        assert len(values) == len(CRITERIA) and len(set(values)) == 1
    path = client.get("/next").location
    while path.startswith("/item/"):
        page = client.get(path)
        path = client.post(
            path, data={"csrf_token": csrf_token(page.text), **{f"c_{c}": "4" for c in CRITERIA}}
        ).location
    assert path == "/finish"
    with session_for(PG_URL) as s:
        rows = long_format_rows(s, created.slug)
        assert len(rows) == created.n_items * len(CRITERIA)
        assert s.scalar(select(func.count(Rating.id))) == len(rows)


def test_database_refusing_connections_mid_study_answers_503_and_loses_nothing(pg_study):
    """The server drops every connection to the study's database and refuses new ones (as a
    failover or an operator would): the submit answers 503, stores nothing, and goes through
    once the database is back."""
    app, created, url, cluster = pg_study
    client = app.test_client()
    path = enter(client, created)
    form = {"csrf_token": csrf_token(client.get(path).text), **{f"c_{c}": "3" for c in CRITERIA}}
    path = client.post(path, data=form).location
    page = client.get(path)
    name = make_url(url).database
    with psycopg.connect(host=str(cluster.socket_dir), user="maxbench", dbname="postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        try:
            form = {"csrf_token": csrf_token(page.text), **{f"c_{c}": "4" for c in CRITERIA}}
            r = client.post(path, data=form)
            assert r.status_code == 503 and "busy or unavailable" in r.text and "Traceback" not in r.text
            assert name not in r.text and "psycopg" not in r.text
        finally:
            admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
    assert client.post(path, data=form).status_code == 303
    with session_for(url) as s:
        assert s.scalar(select(func.count(Rating.id))) == 2 * len(CRITERIA)
