"""The annotator's path and the researcher's side, through Flask's test client."""

import json
import re
from urllib.parse import urlsplit

import krippendorff
import numpy as np
import pytest
from sqlalchemy import select

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.store.models import Annotator, Assignment, Rating
from maxbench.human_eval.studies.export import long_format_rows
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import csrf_token, make_study

GRAPHMAX = load_rubric("graphmax")
CRITERIA = GRAPHMAX.criterion_names


@pytest.fixture
def study(tmp_path):
    url, created, run_dir = make_study(
        tmp_path,
        n_prompts=6,
        items_per_system=3,
        raters_per_item=2,
        annotators=2,
        attention_rate=0.34,
        completion_code="DONE-42",
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "test"})
    return app, url, created


def path_of(link):
    return urlsplit(link).path


def enter(client, created, index=0, answer=None):
    """Open the link, consent, pass the check; returns the first item path."""
    r = client.get(path_of(created.links("http://x")[index][1]))
    assert r.status_code == 303
    r = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(r.text), "consent": "y"})
    r = client.get("/check")
    answer = GRAPHMAX.comprehension_check().answer if answer is None else answer
    r = client.post("/check", data={"csrf_token": csrf_token(r.text), "answer": str(answer)})
    assert r.status_code == 303
    return client.get("/next").location


def rate(client, path, value=3, honest_attention=True):
    page = client.get(path)
    assert page.status_code == 200, page.text
    match = re.search(r"select (\d)", page.text)
    if match:
        value = int(match.group(1)) if honest_attention else (int(match.group(1)) % 5) + 1
    data = {"csrf_token": csrf_token(page.text), **{f"c_{c}": str(value) for c in CRITERIA}}
    return client.post(path, data=data), bool(match)


def test_full_path_consent_check_rate_finish(study):
    app, url, created = study
    client = app.test_client()
    r = client.get(path_of(created.links("http://x")[0][1]))
    assert r.location == "/welcome"
    welcome = client.get("/welcome")
    assert "Text style" in welcome.text and "Worked examples" in welcome.text and "voluntary" in welcome.text
    # Consent is required.
    r = client.post("/welcome", data={"csrf_token": csrf_token(welcome.text)})
    assert r.status_code == 400 and "tick the box" in r.text
    assert client.get("/next").location == "/welcome"
    client.post("/welcome", data={"csrf_token": csrf_token(welcome.text), "consent": "y"})
    # A wrong comprehension answer is counted and the instructions are shown again.
    check = client.get("/check")
    wrong = (GRAPHMAX.comprehension_check().answer + 1) % 3
    r = client.post("/check", data={"csrf_token": csrf_token(check.text), "answer": str(wrong)})
    assert r.status_code == 422 and "not quite right" in r.text
    assert client.get("/item/whatever").status_code == 404
    r = client.post(
        "/check", data={"csrf_token": csrf_token(check.text), "answer": str(GRAPHMAX.comprehension_check().answer)}
    )
    path = client.get("/next").location
    n_pages = created.n_pages[0]
    seen_positions = []
    while path.startswith("/item/"):
        page = client.get(path)
        seen_positions.append(int(re.search(r"Page (\d+) of (\d+)", page.text).group(1)))
        assert f"of {n_pages}" in page.text and 'role="progressbar"' in page.text
        r, _ = rate(client, path)
        assert r.status_code == 303
        path = r.location
    assert seen_positions == list(range(1, n_pages + 1))  # shown in the recorded order
    finish = client.get(path)
    assert path == "/finish" and "DONE-42" in finish.text
    assert json.loads(client.get("/progress.json").text) == {"done": n_pages, "total": n_pages, "finished": True}
    with session_for(url) as s:
        a = s.scalar(select(Annotator).where(Annotator.label == "a01"))
        assert a.check_attempts == 2 and a.finished_at and a.attention_failures == 0
        assert all(x.completed_at and x.seconds is not None and x.seconds >= 0 for x in a.assignments)
        rows = long_format_rows(s, created.slug)
    assert len(rows) == 6 * len(CRITERIA) and {r["annotator"] for r in rows} == {"a01"}


def test_leave_and_resume_where_left(study):
    app, url, created = study
    client = app.test_client()
    path = enter(client, created)
    r, _ = rate(client, path)
    r, _ = rate(client, r.location)
    next_path = r.location
    assert client.get("/leave").status_code == 200
    # The browser session is gone; the link is the way back, straight to the next unrated page.
    assert client.get("/next").status_code == 403
    assert client.get(next_path).status_code == 403
    r = client.get(path_of(created.links("http://x")[0][1]))
    assert r.location == next_path
    assert json.loads(client.get("/progress.json").text)["done"] == 2
    # A fresh browser with the same link resumes at the same place too.
    other = app.test_client()
    assert other.get(path_of(created.links("http://x")[0][1])).location == next_path


def test_pages_must_be_rated_in_order(study):
    app, url, created = study
    client = app.test_client()
    first = enter(client, created)
    with session_for(url) as s:
        later = s.scalars(
            select(Assignment.public_id).join(Annotator).where(Annotator.label == "a01", Assignment.position == 3)
        ).one()
    assert client.get(f"/item/{later}").location == first  # redirected to the due page
    page = client.get(first)
    data = {"csrf_token": csrf_token(page.text), **{f"c_{c}": "2" for c in CRITERIA}}
    assert client.post(f"/item/{later}", data=data).status_code == 409
    with session_for(url) as s:
        assert s.scalar(select(Rating.id)) is None


def test_attention_failures_stop_the_annotator_and_flag_ratings(tmp_path):
    url, created, _ = make_study(
        tmp_path,
        n_prompts=6,
        items_per_system=6,
        raters_per_item=1,
        annotators=1,
        attention_rate=0.5,
        attention_fail_limit=2,
        completion_code="C",
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "test"})
    client = app.test_client()
    path = enter(client, created)
    failed = 0
    while path.startswith("/item/"):
        r, was_check = rate(client, path, honest_attention=False)
        failed += was_check
        path = r.location
    assert failed == 2 and path == "/finish"
    finish = client.get("/finish")
    assert "session has ended" in finish.text and "C</code>" not in finish.text
    with session_for(url) as s:
        a = s.scalars(select(Annotator)).one()
        assert a.excluded_at is not None and a.attention_failures == 2
        rows = long_format_rows(s, created.slug)
        assert rows and all(r["flags"] == "attention_failed" for r in rows)
        assert sum(1 for x in a.assignments if x.completed_at) < len(a.assignments)  # stopped early
    admin = admin_client(app, created)
    page = admin.get(f"/admin/study/{created.slug}")
    assert "stopped: attention checks" in page.text


def admin_client(app, created):
    client = app.test_client()
    login = client.get("/admin/login")
    r = client.post("/admin/login", data={"csrf_token": csrf_token(login.text), "token": created.admin_token})
    assert r.status_code == 303 and r.location == f"/admin/study/{created.slug}"
    return client


def test_admin_progress_agreement_export_close(study):
    app, url, created = study
    # Both annotators rate everything; a02 disagrees a little with a01.
    for index, value in ((0, 4), (1, 5)):
        client = app.test_client()
        path = enter(client, created, index)
        step = 0
        while path.startswith("/item/"):
            r, _ = rate(client, path, value=value if step % 2 else 3)
            path, step = r.location, step + 1
    admin = admin_client(app, created)
    page = admin.get(f"/admin/study/{created.slug}")
    assert page.status_code == 200 and "a01" in page.text and "a02" in page.text
    assert page.text.count("finished") >= 2
    with session_for(url) as s:
        rows = long_format_rows(s, created.slug)
    # The admin's agreement equals krippendorff called directly on the same ratings.
    units = sorted({(r["item"], r["system"]) for r in rows})
    for criterion in CRITERIA:
        data = np.full((2, len(units)), np.nan)
        for r in rows:
            if r["criterion"] == criterion:
                data[int(r["annotator"][1:]) - 1, units.index((r["item"], r["system"]))] = r["value"]
        expected = krippendorff.alpha(
            reliability_data=data, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
        )
        assert f"<td>{criterion}</td><td>{round(float(expected), 3)}</td>" in page.text
    csv_text = admin.get(f"/admin/study/{created.slug}/ratings.csv").text
    json_rows = json.loads(admin.get(f"/admin/study/{created.slug}/ratings.json").text)
    assert (
        csv_text.splitlines()[0]
        == "study,item,system,annotator,criterion,value,position,seconds,flags,scale_min,scale_max"
    )
    assert len(csv_text.splitlines()) == len(rows) + 1 and json_rows == rows
    # Closing (confirmed) stops annotators; what was rated stays.
    confirm = admin.get(f"/admin/study/{created.slug}/close")
    data = {"csrf_token": csrf_token(confirm.text), "confirm": "yes"}
    assert admin.post(f"/admin/study/{created.slug}/close", data=data).status_code == 303
    again = app.test_client()
    r = again.get(path_of(created.links("http://x")[0][1]))
    assert r.status_code == 403 and "closed" in r.text
    with session_for(url) as s:
        assert len(long_format_rows(s, created.slug)) == len(rows)


def test_admin_revoke_and_reissue_links(study):
    app, url, created = study
    annotator = app.test_client()
    first = enter(annotator, created, 0)
    rate(annotator, first)
    admin = admin_client(app, created)
    token = csrf_token(admin.get(f"/admin/study/{created.slug}/annotator/a01/revoke").text)
    confirmed = {"csrf_token": token, "confirm": "yes"}
    admin.post(f"/admin/study/{created.slug}/annotator/a01/revoke", data=confirmed)
    r = annotator.get("/next")
    assert r.status_code == 403 and "withdrawn" in r.text
    r = app.test_client().get(path_of(created.links("http://x")[0][1]))
    assert r.status_code == 403 and "withdrawn" in r.text
    page = admin.post(f"/admin/study/{created.slug}/annotator/a01/reissue", data=confirmed)
    new_link = re.search(r'class="new-link">([^<]+)<', page.text).group(1)
    assert app.test_client().get(path_of(created.links("http://x")[0][1])).status_code == 404  # old link dead
    fresh = app.test_client()
    r = fresh.get(path_of(new_link))
    assert r.status_code == 303 and r.location.startswith("/item/")  # resumes after the rated page
    with session_for(url) as s:
        assert len(long_format_rows(s, created.slug)) == len(CRITERIA)  # the earlier rating is kept
