"""Open enrolment from Prolific and MTurk: one public URL, the next free block per new
participant, the same block for the same id, abandoned blocks given away, the study full at
its quota, limited comprehension attempts, the redirect with the completion code, bad
parameters, and race-safe claims, on SQLite and PostgreSQL."""

import threading
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from sqlalchemy import func, select, update

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import hash_token, session_for
from maxbench.human_eval.store.models import Annotator, Enrolment, Rating, utcnow
from maxbench.human_eval.studies.export import long_format_rows
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import csrf_token, make_study

CHECK = load_rubric("fluency").check.answer
CODE = "C1A2B3"


@pytest.fixture
def study(tmp_path, db_url):
    url, created, _ = make_study(
        tmp_path,
        db_url=db_url,
        rubric="fluency",
        n_prompts=4,
        items_per_system=4,
        raters_per_item=1,
        annotators=4,
        attention_rate=0,
        completion_code=CODE,
        open_enrolment=True,
        abandon_after_s=600,
        check_attempts=2,
    )
    return url, created, create_app({"DB_URL": url, "SECRET_KEY": "t"})


def prolific(pid, session="s1"):
    return f"?PROLIFIC_PID={pid}&STUDY_ID=st1&SESSION_ID={session}"


def block_of(url, pid):
    with session_for(url) as s:
        annotator_id = s.scalar(select(Enrolment.annotator_id).where(Enrolment.participant_id == pid))
        return None if annotator_id is None else s.get(Annotator, annotator_id).label


def test_participants_get_blocks_in_order_and_the_same_one_back(study):
    url, created, app = study
    public = f"/s/{created.slug}"
    clients = {}
    for k, pid in enumerate(["p0aaaa", "p1bbbb", "w2cccc"]):
        client = clients[pid] = app.test_client()
        query = prolific(pid) if k < 2 else f"?workerId={pid}&assignmentId=as1&hitId=h1"
        r = client.get(public + query)
        assert r.status_code == 303 and r.location.endswith("/next")
        assert client.get("/next").location.endswith("/welcome")
        page = client.get("/welcome")
        assert pid not in page.text  # never shown, not even to its owner
    assert [block_of(url, p) for p in ("p0aaaa", "p1bbbb", "w2cccc")] == ["a01", "a02", "a03"]
    # The same participant in the same browser gets the same block back.
    again = clients["p1bbbb"].get(public + prolific("p1bbbb"))
    assert again.status_code == 303 and clients["p1bbbb"].get("/next").location.endswith("/welcome")
    assert block_of(url, "p1bbbb") == "a02"


def test_quota_abandonment_and_return(study):
    url, created, app = study
    public = f"/s/{created.slug}"
    clients = {}
    for pid in ("pa", "pb", "pc", "pd"):
        clients[pid] = app.test_client()
        assert clients[pid].get(public + prolific(pid)).status_code == 303
    full = app.test_client().get(public + prolific("pe"))
    assert full.status_code == 409 and "full" in full.text
    # pa's claim is older than the abandonment time and nothing was rated: pe gets it.
    with session_for(url) as s:
        s.execute(
            update(Enrolment).where(Enrolment.participant_id == "pa").values(claimed_at=utcnow() - timedelta(hours=1))
        )
        s.commit()
    assert app.test_client().get(public + prolific("pe")).status_code == 303
    assert block_of(url, "pe") == "a01" and block_of(url, "pa") is None
    # pa's old browser session no longer reaches the block.
    assert clients["pa"].get("/welcome").status_code == 403
    # pa comes back: every block is held, so the study is full for pa now.
    assert app.test_client().get(public + prolific("pa")).status_code == 409


def test_comprehension_attempts_then_the_redirect_with_the_code(study):
    url, created, app = study
    public = f"/s/{created.slug}"
    wrong = (CHECK + 1) % 3
    ok = app.test_client()
    ok.get(public + prolific("good1"))
    page = ok.get("/welcome")
    ok.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = ok.get("/check")
    r = ok.post("/check", data={"csrf_token": csrf_token(page.text), "answer": str(wrong)})
    assert r.status_code == 422  # first attempt wrong: shown again
    r = ok.post("/check", data={"csrf_token": csrf_token(r.text), "answer": str(CHECK)})
    assert r.status_code == 303  # second attempt right
    path = ok.get("/next").location
    while path.startswith("/item/"):
        page = ok.get(path)
        path = ok.post(path, data={"csrf_token": csrf_token(page.text), "c_fluency": "4"}).location
    r = ok.get(path)
    assert r.status_code == 303 and r.location == f"https://app.prolific.com/submissions/complete?cc={CODE}"
    bad = app.test_client()
    bad.get(public + prolific("bad2"))
    page = bad.get("/welcome")
    bad.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = bad.get("/check")
    r = bad.post("/check", data={"csrf_token": csrf_token(page.text), "answer": str(wrong)})
    r = bad.post("/check", data={"csrf_token": csrf_token(r.text), "answer": str(wrong)})
    assert r.status_code == 303 and r.location.endswith("/finish")
    page = bad.get("/finish")
    assert page.status_code == 200 and CODE not in page.text and "ended" in page.text
    # Participant ids are not in any export, blinded or not.
    with session_for(url) as s:
        text = repr(long_format_rows(s, created.slug)) + repr(long_format_rows(s, created.slug, blind=True))
    assert "good1" not in text and "bad2" not in text


@pytest.mark.parametrize(
    "query,expected",
    [
        ("", "needs a participant id"),
        ("?PROLIFIC_PID=abc", "missing STUDY_ID, SESSION_ID"),
        ("?PROLIFIC_PID=" + "x" * 65 + "&STUDY_ID=s&SESSION_ID=s", "PROLIFIC_PID in the link is not valid"),
        ("?PROLIFIC_PID=%3Cscript%3Ealert(1)%3C/script%3E&STUDY_ID=s&SESSION_ID=s", "is not valid"),
        ("?workerId=w1&assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=h", "accept the task"),
    ],
)
def test_bad_platform_parameters_get_a_clear_page(study, query, expected):
    _, created, app = study
    r = app.test_client().get(f"/s/{created.slug}{query}")
    assert r.status_code == 400 and expected in r.text
    assert "<script>alert" not in r.text and "Traceback" not in r.text


def test_unknown_or_closed_study(study):
    _, created, app = study
    assert app.test_client().get("/s/no-such-study" + prolific("p1")).status_code == 404


def test_concurrent_claims_give_each_block_once(study):
    url, created, app = study
    public = f"/s/{created.slug}"
    barrier = threading.Barrier(8)
    results = []

    def arrive(pid):
        client = app.test_client()
        barrier.wait()
        results.append((pid, client.get(public + prolific(pid)).status_code))

    # Six participants for four blocks, and two of them arrive twice at the same moment.
    pids = ["c0", "c1", "c2", "c3", "c4", "c5", "c0", "c1"]
    threads = [threading.Thread(target=arrive, args=(p,)) for p in pids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with session_for(url) as s:
        held = s.execute(select(Enrolment.participant_id, Enrolment.annotator_id)).all()
    blocks = [a for _, a in held if a is not None]
    assert len(blocks) == len(set(blocks)) == 4  # every block once, the quota kept
    assert len({p for p, _ in held}) == len(held)  # one row per participant
    # One browser enters each block: the second browser of c0 or c1 is refused, not let in.
    entered = [p for p, code in results if code == 303]
    assert len(entered) == len(set(entered)) == 4 and {code for _, code in results} <= {303, 409}
    assert sorted(entered) == sorted(p for p, a in held if a is not None)


def n_ratings(url):
    with session_for(url) as s:
        return s.scalar(select(func.count(Rating.id)))


def start_rating(client, public, pid, session="s1"):
    """Enrol, consent and pass the check; the first item's path."""
    assert client.get(public + prolific(pid, session)).status_code == 303
    page = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = client.get("/check")
    client.post("/check", data={"csrf_token": csrf_token(page.text), "answer": str(CHECK)})
    return client.get("/next").location


def test_a_known_participant_id_does_not_take_over_the_block(study):
    """Prolific ids are not secret: the block belongs to the browser that enrolled, in its session."""
    url, created, app = study
    public = f"/s/{created.slug}"
    owner = app.test_client()
    path = start_rating(owner, public, "victim1")
    page = owner.get(path)
    assert page.status_code == 200
    # Another browser with the victim's id, with the right SESSION_ID or not, is refused.
    thief = app.test_client()
    for query in (prolific("victim1"), "?PROLIFIC_PID=victim1&STUDY_ID=x&SESSION_ID=y"):
        r = thief.get(public + query)
        assert r.status_code == 409 and "open in another browser" in r.text and "contact the researcher" in r.text
        assert "victim1" not in r.text
    assert thief.get("/next").status_code == 403
    assert thief.get(path).status_code == 403
    own_form = csrf_token(thief.get("/admin/login").text)  # a valid form token of the thief's own session
    r = thief.post(path, data={"csrf_token": own_form, "c_fluency": "1"})
    assert r.status_code == 403
    assert n_ratings(url) == 0
    # The enrolling browser keeps working, with the stored rating its own.
    r = owner.post(path, data={"csrf_token": csrf_token(page.text), "c_fluency": "4"})
    assert r.status_code == 303 and n_ratings(url) == 1
    with session_for(url) as s:
        assert s.scalars(select(Rating.value)).all() == [4]
    # Coming back from the platform in the same browser continues, also after leaving ...
    assert owner.get(public + prolific("victim1")).status_code == 303
    assert owner.get("/leave").status_code == 200
    assert owner.get(r.location).status_code == 403
    assert owner.get(public + prolific("victim1")).status_code == 303
    next_page = owner.get(r.location)
    assert next_page.status_code == 200
    # ... but not from another platform session of the same id.
    r = owner.get(public + prolific("victim1", "s2"))
    assert r.status_code == 409 and "another Prolific session" in r.text


def test_a_personal_link_of_an_enrolled_block_is_refused(study):
    url, created, app = study
    public = f"/s/{created.slug}"
    owner = app.test_client()
    path = start_rating(owner, public, "enrolled1")
    assert block_of(url, "enrolled1") == "a01"
    link = urlsplit(created.links("http://x")[0][1]).path
    other = app.test_client()
    r = other.get(link)
    assert r.status_code == 409 and "already open in another browser" in r.text
    assert other.get(path).status_code == 403 and n_ratings(url) == 0
    page = owner.get(path)
    assert owner.post(path, data={"csrf_token": csrf_token(page.text), "c_fluency": "2"}).status_code == 303
    assert n_ratings(url) == 1
    # The owner's browser may use the link, and keeps its block after leaving.
    assert owner.get(link).status_code == 303 and owner.get("/leave").status_code == 200
    assert owner.get(link).status_code == 303 and owner.get("/next").status_code == 303
    # A block opened through its personal link first is not handed to a participant; its link
    # still works on another device, because nobody enrolled in it.
    second = urlsplit(created.links("http://x")[1][1]).path
    assert app.test_client().get(second).status_code == 303
    assert app.test_client().get(public + prolific("late2")).status_code == 303
    assert block_of(url, "late2") == "a03"
    assert app.test_client().get(second).status_code == 303
    # The researcher's new link frees the enrolled block for the browser that opens it first.
    with session_for(url) as s:
        s.execute(update(Annotator).where(Annotator.label == "a01").values(token_hash=hash_token("fresh-link")))
        s.commit()
    assert owner.get("/next").status_code == 403  # the old browser's session ends
    assert other.get("/a/fresh-link").status_code == 303 and other.get("/next").status_code == 303
    assert owner.get("/a/fresh-link").status_code == 409
    assert owner.get(public + prolific("enrolled1")).status_code == 409
