"""The real server (``maxbench serve``: gunicorn, separate processes) on 127.0.0.1: concurrent
annotators submit, the server is killed with SIGKILL mid-stream, restarted, and every
rating it acknowledged is found; the annotators then finish on the restarted server."""

import json
import threading
import time
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select

from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Assignment
from maxbench.human_eval.studies.export import long_format_rows
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import (
    ProtocolError,
    ScriptedAnnotator,
    csrf_token,
    make_study,
    start_server,
)

N_ANNOTATORS = 6


@pytest.fixture
def served_study(tmp_path, db_url):
    """On SQLite and on PostgreSQL (tests/conftest.py's db_url)."""
    url, created, _ = make_study(
        tmp_path,
        db_url=db_url,
        rubric="posg-lm",
        n_prompts=15,
        items_per_system=15,
        raters_per_item=2,
        annotators=N_ANNOTATORS,
        attention_rate=0.1,
    )
    env = {"MAXBENCH_HOME": str(tmp_path / "home"), "MAXBENCH_SECRET_KEY": "durability-test"}
    servers = []

    def start():
        server = start_server(url, workers=2, threads=4, env=env, log_path=tmp_path / "server.log")
        servers.append(server)
        return server

    yield url, created, start
    for server in servers:
        server.stop()
    dispose_engines()


def value_for(path, field):
    return 1 + (hash((path, field)) % 5)


def test_kill_9_loses_no_acknowledged_rating(served_study):
    url, created, start = served_study
    answer = load_rubric("posg-lm").comprehension_check().answer
    server = start()
    annotators = [ScriptedAnnotator(server.base_url, link, answer) for _, link in created.links(server.base_url)]
    errors = []

    def work(annotator):
        try:
            path = annotator.start()
            while path:
                path = annotator.rate_page(path, value_for)
        except (OSError, ProtocolError, Exception) as exc:  # the kill ends every client this way
            errors.append(type(exc).__name__)

    threads = [threading.Thread(target=work, args=(a,)) for a in annotators]
    for t in threads:
        t.start()
    total_pages = sum(created.n_pages)
    deadline = time.monotonic() + 60
    while sum(len(a.acks) for a in annotators) < total_pages // 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    server.kill_hard()  # SIGKILL to gunicorn's master and workers while submits are in flight
    for t in threads:
        t.join(timeout=30)
    acked = [ack for a in annotators for ack in a.acks]
    assert total_pages // 3 <= len(acked) < total_pages, "the kill must land mid-study"
    assert errors, "clients should have seen the server die"

    # Every acknowledged rating is in the database, with the values that were sent.
    dispose_engines()
    with session_for(url) as s:
        for ack in acked:
            assignment = s.scalar(select(Assignment).where(Assignment.public_id == ack.public_id))
            assert assignment.completed_at is not None, ack
            assert {r.criterion: r.value for r in assignment.ratings} == ack.values
    dispose_engines()

    # Restarted, every annotator resumes after their last acknowledged page and finishes.
    server = start()
    for a in annotators:
        resumed = ScriptedAnnotator(server.base_url, a.link, answer)  # same link path, new port
        path = resumed.start()
        done_positions = {ack.position for ack in a.acks}
        while path:
            path = resumed.rate_page(path, value_for)
        assert not done_positions & {ack.position for ack in resumed.acks}
        a.acks.extend(resumed.acks)
    # Opening the link again once done leads to no page to rate (an annotator who finished before
    # the kill resumes this way: on a loaded machine one may finish before a third of all pages).
    for a in annotators:
        assert ScriptedAnnotator(server.base_url, a.link, answer).start() is None

    # All ratings, through the restarted server's admin export.
    admin = ScriptedAnnotator(server.base_url, "", 0)
    _, _, login = admin.request("GET", "/admin/login")
    status, location, _ = admin.request(
        "POST", "/admin/login", {"csrf_token": csrf_token(login), "token": created.admin_token}
    )
    assert status == 303
    status, _, body = admin.request("GET", f"/admin/study/{created.slug}/ratings.json")
    exported = json.loads(body)
    n_criteria = 2
    assert len(exported) == created.n_items * 2 * n_criteria  # every text, 2 raters, 2 criteria
    with session_for(url) as s:
        assert exported == long_format_rows(s, created.slug)
    # A submit in flight at the kill may have been stored without its answer arriving: such
    # a page is done but was never acknowledged (at most one per annotator); none is stored twice.
    item_acks = [ack for a in annotators for ack in a.acks if not ack.attention]
    assert created.n_items * 2 - N_ANNOTATORS <= len(item_acks) <= created.n_items * 2
    assert len({ack.public_id for ack in item_acks}) == len(item_acks)


def test_concurrent_duplicate_submits_store_one_rating(served_study):
    url, created, start = served_study
    server = start()
    answer = load_rubric("posg-lm").comprehension_check().answer
    a = ScriptedAnnotator(server.base_url, created.links(server.base_url)[0][1], answer)
    path = a.start()
    _, _, page = a.request("GET", path)
    results = []
    barrier = threading.Barrier(4)

    def submit(value):
        twin = ScriptedAnnotator(server.base_url, a.link, answer, cookie=a.cookie)
        form = {"csrf_token": csrf_token(page), "c_diversity": str(value), "c_quality": str(value)}
        barrier.wait()
        results.append(twin.request("POST", path, form)[0])

    threads = [threading.Thread(target=submit, args=(v,)) for v in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [303] * 4
    with session_for(url) as s:
        assignment = s.scalar(select(Assignment).where(Assignment.public_id == urlsplit(path).path.rsplit("/", 1)[1]))
        values = [r.value for r in assignment.ratings]
    assert len(values) == 2 and len(set(values)) == 1  # one submit won, whole
