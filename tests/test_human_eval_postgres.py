"""The rating app on PostgreSQL (the production database), when one is available.

Set MAXBENCH_TEST_POSTGRES_URL=postgresql://user@127.0.0.1:5432/db (a database the test may
wipe) to run these; without it they are skipped, and SQLite covers the same paths."""

import os
import threading

import pytest
from sqlalchemy import func, select

from human_eval.app import create_app
from human_eval.db import dispose_engines, engine_for, session_for
from human_eval.export import long_format_rows
from human_eval.models import Base, Rating
from human_eval.rubrics import load_rubric
from human_eval.study import create_study
from human_eval.testing import SYSTEMS, csrf_token, write_run

PG_URL = os.environ.get("MAXBENCH_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not PG_URL, reason="set MAXBENCH_TEST_POSTGRES_URL to test on PostgreSQL")
CRITERIA = load_rubric("posg-lm").criterion_names


@pytest.fixture
def pg_study(tmp_path):
    Base.metadata.drop_all(engine_for(PG_URL, create=True))
    dispose_engines()
    run = write_run(tmp_path / "run", SYSTEMS, 5)
    with session_for(PG_URL, create=True) as s:
        created = create_study(
            s, run, load_rubric("posg-lm"), systems=None, items_per_system=4, raters_per_item=1, attention_rate=0
        )
    yield create_app({"DB_URL": PG_URL, "SECRET_KEY": "pg"}), created
    dispose_engines()


def test_rating_path_and_concurrent_duplicates_on_postgres(pg_study):
    app, created = pg_study
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
