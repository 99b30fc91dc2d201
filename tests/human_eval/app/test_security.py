"""Security of the rating app: access to others' pages, CSRF, tampering, scale, escaping,
blinding, double submits, bad links, error pages, a locked database, cookie settings."""

import json
import re
import sqlite3
from urllib.parse import urlsplit

import pytest
from sqlalchemy import func, select

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Annotator, Assignment, Item, Rating, StudySystem
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, csrf_token, make_study

CRITERIA = load_rubric("graphmax").criterion_names
EVIL_PROMPT = "Review:<script>alert('prompt')</script>{{ 7*7 }}"
EVIL_TEXT = 'Great <b>food</b><img src=x onerror=alert(1)><script>document.cookie</script> & "more"'


@pytest.fixture
def study(tmp_path, db_url):
    """On SQLite and on PostgreSQL (tests/conftest.py's db_url)."""
    url, created, run_dir = make_study(
        tmp_path,
        db_url=db_url,
        n_prompts=4,
        items_per_system=3,
        raters_per_item=2,
        annotators=2,
        attention_rate=0.34,
        text_for=lambda s, i: EVIL_TEXT,
        prompt_for=lambda i: EVIL_PROMPT,
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "test"})
    yield app, url, created, run_dir
    dispose_engines()


def path_of(link):
    return urlsplit(link).path


def enter(client, created, index=0):
    client.get(path_of(created.links("http://x")[index][1]))
    r = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(r.text), "consent": "y"})
    r = client.get("/check")
    client.post(
        "/check",
        data={"csrf_token": csrf_token(r.text), "answer": str(load_rubric("graphmax").comprehension_check().answer)},
    )
    return client.get("/next").location


def form_for(page_text, value="3"):
    return {"csrf_token": csrf_token(page_text), **{f"c_{c}": str(value) for c in CRITERIA}}


def n_ratings(url):
    with session_for(url) as s:
        return s.scalar(select(func.count(Rating.id)))


def test_other_annotators_pages_are_not_found(study):
    app, url, created, _ = study
    alice = app.test_client()
    path = enter(alice, created, 0)
    page = alice.get(path)
    with session_for(url) as s:
        bobs = s.scalars(select(Assignment.public_id).join(Annotator).where(Annotator.label == "a02")).all()
    for public_id in bobs:
        assert alice.get(f"/item/{public_id}").status_code == 404
        assert alice.post(f"/item/{public_id}", data=form_for(page.text)).status_code == 404
    assert n_ratings(url) == 0
    # No session at all: nothing is readable.
    assert app.test_client().get(path).status_code == 403
    assert app.test_client().get("/progress.json").status_code == 403


def test_post_without_or_with_wrong_csrf_token_is_rejected(study):
    app, url, created, _ = study
    client = app.test_client()
    path = enter(client, created)
    page = client.get(path)
    data = form_for(page.text)
    del data["csrf_token"]
    r = client.post(path, data=data)
    assert r.status_code == 400 and "expired" in r.text
    other = app.test_client()
    enter(other, created, 1)
    foreign_token = csrf_token(other.get("/next", follow_redirects=True).text)
    assert client.post(path, data={**data, "csrf_token": foreign_token}).status_code == 400
    assert client.post(path, data={**data, "csrf_token": "forged"}).status_code == 400
    # Every other form checks it too.
    assert client.post("/welcome", data={"consent": "y"}).status_code == 400
    assert client.post("/check", data={"answer": "1"}).status_code == 400
    assert app.test_client().post("/admin/login", data={"token": created.admin_token}).status_code == 400
    assert n_ratings(url) == 0


@pytest.mark.parametrize("tamper", ["extra_field", "missing_criterion", "not_a_number", "renamed_field"])
def test_tampered_fields_are_rejected(study, tamper):
    app, url, created, _ = study
    client = app.test_client()
    path = enter(client, created)
    data = form_for(client.get(path).text)
    if tamper == "extra_field":
        data["system"] = "tiny/softmax"
    elif tamper == "missing_criterion":
        del data["c_story_line"]
    elif tamper == "not_a_number":
        data["c_word_choice"] = "3; DROP TABLE rating"
    else:
        data["c_fluency"] = data.pop("c_text_style")
    r = client.post(path, data=data)
    assert r.status_code == 400 and "Traceback" not in r.text
    assert n_ratings(url) == 0
    # The page is shown again and can be rated properly.
    assert client.post(path, data=form_for(client.get(path).text)).status_code == 303


@pytest.mark.parametrize("value", ["0", "6", "-1", "99", "3.5", ""])
def test_values_outside_the_scale_are_rejected(study, value):
    app, url, created, _ = study
    client = app.test_client()
    path = enter(client, created)
    data = form_for(client.get(path).text)
    data["c_text_style"] = value
    r = client.post(path, data=data)
    assert r.status_code == 400
    assert n_ratings(url) == 0


def test_kerbs_scale_rejects_3(tmp_path, db_url):
    url, created, _ = make_study(
        tmp_path, db_url=db_url, rubric="kerbs-dialogue", raters_per_item=1, annotators=1, attention_rate=0
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    client = app.test_client()
    client.get(path_of(created.links("http://x")[0][1]))
    r = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(r.text), "consent": "y"})
    r = client.get("/check")
    client.post("/check", data={"csrf_token": csrf_token(r.text), "answer": "1"})
    path = client.get("/next").location
    page = client.get(path)
    assert client.post(path, data={"csrf_token": csrf_token(page.text), "c_response": "3"}).status_code == 400
    assert client.post(path, data={"csrf_token": csrf_token(page.text), "c_response": "0"}).status_code == 303


def test_generated_html_and_script_are_escaped(study):
    app, url, created, _ = study
    client = app.test_client()
    path = enter(client, created)
    page = client.get(path)
    # Find a real item page (attention checks carry the app's own text).
    while "Great" not in page.text:
        path = client.post(path, data=form_for(page.text, value=re.search(r"select (\d)", page.text).group(1))).location
        page = client.get(path)
    html = page.text
    assert "<script>alert" not in html and "<script>document.cookie" not in html
    assert "<img src=x" not in html and "<b>food</b>" not in html
    assert "&lt;script&gt;document.cookie&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "{{ 7*7 }}" in html and ">49<" not in html  # text is data, never a template
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/rating.js">']
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]


def test_no_system_identity_in_anything_annotators_receive(study):
    app, url, created, run_dir = study
    with session_for(url) as s:
        codes = s.scalars(select(StudySystem.code)).all()
        prompt_ids = s.scalars(select(Item.prompt_id)).all()
    secrets_ = (
        set(SYSTEMS)
        | set(codes)
        | set(prompt_ids)
        | {str(run_dir), str(run_dir.resolve()), run_dir.name, "softmax", "graphmax", "tiny/", created.slug}
    )
    client = app.test_client()
    seen = []

    def record(r, path):
        seen.append((path, r.status_code, r.get_data(as_text=True), dict(r.headers)))
        return r

    link = path_of(created.links("http://x")[0][1])
    record(client.get(link), link)
    for path in ("/welcome", "/check"):
        page = record(client.get(path), path)
        data = {
            "csrf_token": csrf_token(page.text),
            "consent": "y",
            "answer": str(load_rubric("graphmax").comprehension_check().answer),
        }
        record(client.post(path, data=data), path)
    path = record(client.get("/next"), "/next").location
    while path.startswith("/item/"):
        page = record(client.get(path), path)
        record(client.get("/progress.json"), "/progress.json")
        bad = dict(form_for(page.text), c_text_style="9")
        record(client.post(path, data=bad), path)  # error page of the item too
        m = re.search(r"select (\d)", page.text)
        r = record(client.post(path, data=form_for(page.text, m.group(1) if m else "4")), path)
        path = r.location
    for extra in ("/finish", "/leave", "/nowhere", "/a/not-a-token", "/item/xyz"):
        record(client.get(extra), extra)
    assert len(seen) > 20
    for path, status, body, headers in seen:
        blob = " ".join([path, body, json.dumps(headers)])
        for secret in secrets_:
            assert secret not in blob, f"{secret!r} leaked in {path} ({status})"


def test_double_submit_stores_one_rating(study):
    app, url, created, _ = study
    client = app.test_client()
    path = enter(client, created)
    page = client.get(path)
    first = client.post(path, data=form_for(page.text, "2"))
    second = client.post(path, data=form_for(page.text, "5"))  # retry with other values
    assert first.status_code == second.status_code == 303
    assert second.location == first.location
    with session_for(url) as s:
        values = s.scalars(select(Rating.value)).all()
    assert values == [2] * len(CRITERIA)


def test_unknown_and_revoked_links_get_clear_pages(study):
    app, url, created, _ = study
    r = app.test_client().get("/a/abcdefghijklmnop")
    assert r.status_code == 404 and "not valid" in r.text and "Traceback" not in r.text
    with session_for(url) as s:
        a = s.scalar(select(Annotator).where(Annotator.label == "a01"))
        from maxbench.human_eval.store.models import utcnow

        a.revoked_at = utcnow()
        s.commit()
    r = app.test_client().get(path_of(created.links("http://x")[0][1]))
    assert r.status_code == 403 and "withdrawn" in r.text


def test_admin_pages_need_the_admin_token(study):
    app, url, created, _ = study
    annotator = app.test_client()
    enter(annotator, created)
    for client in (app.test_client(), annotator):
        for path in (
            f"/admin/study/{created.slug}",
            f"/admin/study/{created.slug}/ratings.csv",
            f"/admin/study/{created.slug}/ratings.json",
            "/admin/",
        ):
            r = client.get(path)
            assert r.status_code == 303 and "/admin/login" in r.location
    login = app.test_client()
    page = login.get("/admin/login")
    r = login.post("/admin/login", data={"csrf_token": csrf_token(page.text), "token": "adm-wrong"})
    assert r.status_code == 403 and "not valid" in r.text
    # An annotator's token is not an admin token.
    token = created.annotator_tokens[0][1]
    assert login.post("/admin/login", data={"csrf_token": csrf_token(page.text), "token": token}).status_code == 403


def test_admin_of_one_study_cannot_see_another(tmp_path, db_url):
    url, one, _ = make_study(tmp_path, db_url=db_url, raters_per_item=1, annotators=1)
    from maxbench.human_eval.studies.create import create_study
    from maxbench.human_eval.studies.options import StudyOptions

    with session_for(url) as s:
        two = create_study(
            s,
            tmp_path / "runs" / "run-2026-test",
            load_rubric("fluency"),
            StudyOptions(items_per_system=2, raters_per_item=1),
        )
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    client = app.test_client()
    page = client.get("/admin/login")
    client.post("/admin/login", data={"csrf_token": csrf_token(page.text), "token": one.admin_token})
    assert client.get(f"/admin/study/{one.slug}").status_code == 200
    assert client.get(f"/admin/study/{two.slug}").status_code == 303
    assert client.get(f"/admin/study/{two.slug}/ratings.csv").status_code == 303


def test_error_pages_never_show_a_traceback(study, monkeypatch):
    app, url, created, _ = study
    client = app.test_client()
    enter(client, created)
    import maxbench.human_eval.app.annotator as annotator_views

    def boom(*a, **k):
        raise RuntimeError("secret internal detail /work/main/human_eval")

    monkeypatch.setattr(annotator_views, "_pages", boom)
    r = client.get("/next")
    assert r.status_code == 500
    assert "Traceback" not in r.text and "secret internal detail" not in r.text and "/work/main" not in r.text
    assert "ratings are saved" in r.text
    assert client.get("/progress.json").get_json() == {
        "error": r.text.split("<p>")[1].split("</p>")[0].replace("&#39;", "'")
    }
    assert client.get("/no/such/page").status_code == 404


def test_locked_database_answers_503_and_loses_nothing(tmp_path):
    url, created, _ = make_study(tmp_path, raters_per_item=1, annotators=1, attention_rate=0)
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    client = app.test_client()
    path = enter(client, created)
    r = client.post(path, data=form_for(client.get(path).text))
    path = r.location
    page = client.get(path)
    dispose_engines()
    import os

    os.environ["MAXBENCH_DB_BUSY_TIMEOUT_MS"] = "200"
    try:
        app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
        client2 = app.test_client()
        client2.set_cookie("maxbench_session", client.get_cookie("maxbench_session").value)
        page = client2.get(path)
        holder = sqlite3.connect(str(tmp_path / "ratings.sqlite3"), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            r = client2.post(path, data=form_for(page.text))
            assert r.status_code == 503 and "busy or unavailable" in r.text and "Traceback" not in r.text
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert n_ratings(url) == len(CRITERIA)  # the earlier rating is intact
        r = client2.post(path, data=form_for(page.text))  # the retry goes through
        assert r.status_code == 303 and n_ratings(url) == 2 * len(CRITERIA)
    finally:
        del os.environ["MAXBENCH_DB_BUSY_TIMEOUT_MS"]
        dispose_engines()


def test_cookie_settings(study, monkeypatch):
    app, url, created, _ = study
    r = app.test_client().get(path_of(created.links("http://x")[0][1]))
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    assert r.headers["Referrer-Policy"] == "same-origin" and r.headers["Cache-Control"] == "no-store"
    monkeypatch.setenv("MAXBENCH_SECURE_COOKIES", "1")
    secure_app = create_app({"DB_URL": url, "SECRET_KEY": "test"})
    client = secure_app.test_client()
    base = "https://rate.example.org"
    r = client.get(path_of(created.links("http://x")[0][1]), base_url=base)
    assert "Secure" in r.headers["Set-Cookie"]
    # Over HTTPS a form must come from this site: the browser's same-origin Referer passes.
    page = client.get("/welcome", base_url=base)
    data = {"csrf_token": csrf_token(page.text), "consent": "y"}
    assert client.post("/welcome", data=data, base_url=base).status_code == 400
    r = client.post("/welcome", data=data, base_url=base, headers={"Referer": f"{base}/welcome"})
    assert r.status_code == 303


def test_database_moved_away_answers_503_then_recovers(tmp_path):
    url, created, _ = make_study(tmp_path, raters_per_item=1, annotators=1, attention_rate=0)
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    client = app.test_client()
    path = enter(client, created)
    path = client.post(path, data=form_for(client.get(path).text)).location
    page = client.get(path)
    db_file = tmp_path / "ratings.sqlite3"
    db_file.rename(tmp_path / "elsewhere.sqlite3")
    try:
        r = client.post(path, data=form_for(page.text))
        assert r.status_code == 503 and "busy or unavailable" in r.text and "Traceback" not in r.text
    finally:
        (tmp_path / "elsewhere.sqlite3").rename(db_file)
    r = client.post(path, data=form_for(page.text))
    assert r.status_code == 303
    dispose_engines()
    assert n_ratings(url) == 2 * len(CRITERIA)  # nothing went into a vanished file


def test_commands_on_a_locked_database_exit_2(cli, tmp_path, monkeypatch):
    url, created, _ = make_study(tmp_path, raters_per_item=1, annotators=1)
    dispose_engines()
    monkeypatch.setenv("MAXBENCH_DB_BUSY_TIMEOUT_MS", "100")
    holder = sqlite3.connect(str(tmp_path / "ratings.sqlite3"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        rc, out, err = cli("study", "close", created.slug, "--db", url)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert rc == 2 and "locked" in err and "Traceback" not in err
    rc, out, err = cli("study", "close", created.slug, "--db", url)
    assert rc == 0
    dispose_engines()
