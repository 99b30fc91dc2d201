"""Open enrolment from Prolific and MTurk: one public URL, the next free block per new
participant, the same block for the same id, abandoned blocks given away, the study full at
its quota, limited comprehension attempts, the redirect with the completion code, bad
parameters, and race-safe claims, on SQLite and PostgreSQL."""

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.store.models import Annotator, Enrolment, utcnow
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
    for k, pid in enumerate(["p0aaaa", "p1bbbb", "w2cccc"]):
        client = app.test_client()
        query = prolific(pid) if k < 2 else f"?workerId={pid}&assignmentId=as1&hitId=h1"
        r = client.get(public + query)
        assert r.status_code == 303 and r.location.endswith("/next")
        assert client.get("/next").location.endswith("/welcome")
        page = client.get("/welcome")
        assert pid not in page.text  # never shown, not even to its owner
    assert [block_of(url, p) for p in ("p0aaaa", "p1bbbb", "w2cccc")] == ["a01", "a02", "a03"]
    again = app.test_client().get(public + prolific("p1bbbb", "s2"))
    assert again.status_code == 303
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
    results = {}

    def arrive(pid):
        client = app.test_client()
        barrier.wait()
        results[pid] = client.get(public + prolific(pid)).status_code

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
    assert sorted(results.values()).count(409) == 2 and set(results.values()) <= {303, 409}
