"""The researcher's actions that cut annotators off ask first; a closed study reopens; the
admin's mistakes get a message, not the login page; logging out ends the session on the
server; a new admin token locks the old one out; the welcome page counts texts."""

import re
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Annotator, Study
from maxbench.human_eval.testing.participants import csrf_token, make_study


@pytest.fixture
def study(tmp_path):
    url, created, _ = make_study(
        tmp_path, n_prompts=6, items_per_system=3, raters_per_item=2, annotators=2, attention_rate=0.34
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "test"})
    yield app, url, created
    dispose_engines()


def admin_client(app, created):
    client = app.test_client()
    login = client.get("/admin/login")
    client.post("/admin/login", data={"csrf_token": csrf_token(login.text), "token": created.admin_token})
    return client


def closed_at(url, slug):
    with session_for(url) as s:
        return s.scalar(select(Study.closed_at).where(Study.slug == slug))


def revoked_at(url, label):
    with session_for(url) as s:
        return s.scalar(select(Annotator.revoked_at).where(Annotator.label == label))


def token_hash(url, label):
    with session_for(url) as s:
        return s.scalar(select(Annotator.token_hash).where(Annotator.label == label))


def test_study_page_buttons_lead_to_confirmation_pages_not_actions(study):
    app, url, created = study
    admin = admin_client(app, created)
    page = admin.get(f"/admin/study/{created.slug}").text
    # Close, revoke and new-link buttons are plain GET forms: a click shows a page, nothing happens.
    for action in ("close", "annotator/a01/revoke", "annotator/a01/reissue"):
        assert re.search(rf'<form method="get" action="/admin/study/{created.slug}/{action}">', page), action
    assert 'method="post" action="/admin/study/' not in page


@pytest.mark.parametrize(
    "action,button,changed",
    [
        ("close", "Close the study", lambda url, created: closed_at(url, created.slug) is not None),
        ("annotator/a01/revoke", "Revoke the link", lambda url, created: revoked_at(url, "a01") is not None),
        ("annotator/a01/reissue", "Make a new link", None),
    ],
)
def test_close_revoke_and_new_link_act_only_when_confirmed(study, action, button, changed):
    app, url, created = study
    admin = admin_client(app, created)
    before = token_hash(url, "a01")
    changed = changed or (lambda url, created: token_hash(url, "a01") != before)
    path = f"/admin/study/{created.slug}/{action}"
    confirm = admin.get(path)
    assert confirm.status_code == 200 and f">{button}</button>" in confirm.text and "Cancel" in confirm.text
    assert 'name="confirm" value="yes"' in confirm.text
    token = csrf_token(confirm.text)
    # A POST without the confirmation (a stale page, a stray request) only asks again.
    again = admin.post(path, data={"csrf_token": token})
    assert again.status_code == 200 and f">{button}</button>" in again.text
    assert not changed(url, created)
    assert admin.post(path, data={"confirm": "yes"}).status_code == 400  # CSRF still checked
    assert not changed(url, created)
    done = admin.post(path, data={"csrf_token": token, "confirm": "yes"})
    assert done.status_code in (200, 303)
    assert changed(url, created)


def copy_of(app, client):
    """Another browser with a copy of ``client``'s session cookie (stolen, or a second tab's)."""
    other = app.test_client()
    other.set_cookie("maxbench_session", client.get_cookie("maxbench_session").value)
    return other


def test_logout_ends_the_session_on_the_server(study):
    app, url, created = study
    admin = admin_client(app, created)
    stolen = copy_of(app, admin)
    page = f"/admin/study/{created.slug}"
    assert stolen.get(page).status_code == 200 and stolen.get("/admin/").status_code == 200
    studies = admin.get("/admin/")
    r = admin.post("/admin/logout", data={"csrf_token": csrf_token(studies.text)})
    assert r.status_code == 303 and r.location.endswith("/admin/login")
    for client in (admin, stolen):
        for path in (page, f"{page}/ratings.csv", "/admin/"):
            r = client.get(path)
            assert r.status_code == 303 and "/admin/login" in r.location, path
    # The token still logs in again.
    assert admin_client(app, created).get(page).status_code == 200


def test_a_new_admin_token_locks_the_old_one_out(study):
    app, url, created = study
    admin = admin_client(app, created)
    elsewhere = admin_client(app, created)
    path = f"/admin/study/{created.slug}/admin-token"
    confirm = admin.get(f"/admin/study/{created.slug}")
    assert f'<form method="get" action="{path}">' in confirm.text
    ask = admin.get(path)
    assert ask.status_code == 200 and ">Make a new admin token</button>" in ask.text
    assert admin.post(path, data={"confirm": "yes"}).status_code == 400  # CSRF checked
    done = admin.post(path, data={"csrf_token": csrf_token(ask.text), "confirm": "yes"})
    assert done.status_code == 200
    new_token = re.search(r'<code class="new-admin-token">([^<]+)</code>', done.text).group(1)
    assert new_token.startswith("adm-") and new_token != created.admin_token
    # This browser stays in; every other session of the study ends.
    assert admin.get(f"/admin/study/{created.slug}").status_code == 200
    assert elsewhere.get(f"/admin/study/{created.slug}").status_code == 303
    login = app.test_client()
    form = login.get("/admin/login")
    r = login.post("/admin/login", data={"csrf_token": csrf_token(form.text), "token": created.admin_token})
    assert r.status_code == 403 and "not valid" in r.text
    r = login.post("/admin/login", data={"csrf_token": csrf_token(form.text), "token": new_token})
    assert r.status_code == 303 and login.get(f"/admin/study/{created.slug}").status_code == 200


def test_rotate_admin_token_for_a_command(study):
    from maxbench.human_eval.app.admin import rotate_admin_token
    from maxbench.human_eval.store.db import hash_token

    app, url, created = study
    admin = admin_client(app, created)
    with session_for(url) as s:
        study_id = s.scalar(select(Study.id).where(Study.slug == created.slug))
        token = rotate_admin_token(s, study_id)
        assert s.scalar(select(Study.admin_token_hash).where(Study.id == study_id)) == hash_token(token)
    assert admin.get(f"/admin/study/{created.slug}").status_code == 303


def test_closed_study_reopens_from_the_admin_page(study):
    app, url, created = study
    admin = admin_client(app, created)
    path = f"/admin/study/{created.slug}/close"
    admin.post(path, data={"csrf_token": csrf_token(admin.get(path).text), "confirm": "yes"})
    link = urlsplit(created.links("http://x")[0][1]).path
    assert app.test_client().get(link).status_code == 403
    page = admin.get(f"/admin/study/{created.slug}").text
    assert "Reopen the study" in page
    r = admin.post(f"/admin/study/{created.slug}/reopen", data={"csrf_token": csrf_token(page)})
    assert r.status_code == 303 and closed_at(url, created.slug) is None
    assert app.test_client().get(link).status_code == 303  # annotators are back in


def test_revoking_an_unknown_label_says_so_to_a_logged_in_admin(study):
    app, url, created = study
    admin = admin_client(app, created)
    for path in (
        f"/admin/study/{created.slug}/annotator/a99/revoke",
        f"/admin/study/{created.slug}/annotator/a99/reissue",
    ):
        r = admin.get(path)
        assert r.status_code == 404 and "/admin/login" not in (r.location or "")
        assert "has no annotator &#39;a99&#39;" in r.text and "lists its annotators" in r.text
    token = csrf_token(admin.get(f"/admin/study/{created.slug}/annotator/a01/revoke").text)
    r = admin.post(f"/admin/study/{created.slug}/annotator/a99/revoke", data={"csrf_token": token, "confirm": "yes"})
    assert r.status_code == 404 and "has no annotator" in r.text
    assert revoked_at(url, "a01") is None and revoked_at(url, "a02") is None
    # Someone who is not logged in still learns nothing about the study.
    assert app.test_client().get(f"/admin/study/{created.slug}/annotator/a99/revoke").status_code == 303


def test_welcome_page_counts_texts_not_attention_checks(study):
    app, url, created = study
    client = app.test_client()
    client.get(urlsplit(created.links("http://x")[0][1]).path)
    welcome = client.get("/welcome").text
    pages = created.n_pages[0]
    texts = 6  # 3 prompts x 2 systems, each rated twice, shared by 2 annotators: 6 texts each
    assert pages > texts  # the fixture has attention checks
    assert f"You will rate {texts} short texts, one per page" in welcome
    assert f"({pages} pages in all: {pages - texts} of them only check" in welcome


def test_cli_reopens_a_closed_study(cli, study):
    app, url, created = study
    rc, out, _ = cli("study", "close", created.slug, "--db", url)
    assert rc == 0 and f"maxbench study reopen {created.slug}" in out
    rc, out, _ = cli("study", "reopen", created.slug, "--db", url)
    assert rc == 0 and "reopened" in out and closed_at(url, created.slug) is None
    rc, out, _ = cli("study", "reopen", created.slug, "--db", url)
    assert rc == 0 and "was open; nothing changed" in out
    rc, _, err = cli("study", "reopen", "nosuch", "--db", url)
    assert rc == 2 and "no study 'nosuch'" in err


def _rate_everything(app, created, values):
    """Annotators (by index) rate every page, with values[index](page number) for every criterion."""
    from maxbench.human_eval.studies.rubrics import load_rubric

    rubric = load_rubric("graphmax")
    for index, value_of in values.items():
        client = app.test_client()
        client.get(urlsplit(created.links("http://x")[index][1]).path)
        welcome = client.get("/welcome")
        client.post("/welcome", data={"csrf_token": csrf_token(welcome.text), "consent": "y"})
        check = client.get("/check")
        answer = rubric.comprehension_check().answer
        client.post("/check", data={"csrf_token": csrf_token(check.text), "answer": str(answer)})
        path, n = client.get("/next").location, 0
        while path.startswith("/item/"):
            page = client.get(path).text
            instructed = re.search(r"select (\d)", page)
            value = int(instructed.group(1)) if instructed else value_of(n)
            data = {"csrf_token": csrf_token(page), **{f"c_{c}": str(value) for c in rubric.criterion_names}}
            path, n = client.post(path, data=data).location, n + 1


def test_admin_agreement_is_the_reports(study):
    from maxbench.human_eval.analysis.analyse import analyse
    from maxbench.human_eval.analysis.options import ReportOptions
    from maxbench.human_eval.report.cli import ratings_from_database

    app, url, created = study
    admin = admin_client(app, created)
    page = admin.get(f"/admin/study/{created.slug}").text
    assert page.count("undefined: no ratings yet") == 4
    # Before a second annotator, alpha is undefined, in the report's words.
    _rate_everything(app, created, {0: lambda n: 1 + n % 5})
    page = admin.get(f"/admin/study/{created.slug}").text
    assert page.count("undefined: only one annotator (a01) rated this aspect") == 4
    _rate_everything(app, created, {1: lambda n: 1 + (n * 2) % 5})
    page = admin.get(f"/admin/study/{created.slug}").text
    report = analyse(ratings_from_database(created.slug, url), ReportOptions())
    assert len(report.agreement) == 4
    for result in report.agreement:
        assert result.ordinal is not None
        expected = f"<td>{result.aspect}</td><td>{round(result.ordinal, 3)}</td><td>{result.n_pairable_units}</td>"
        assert expected in page
