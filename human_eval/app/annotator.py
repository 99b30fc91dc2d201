"""The annotator's path: secret link -> instructions and consent -> comprehension check ->
one page per item, in the recorded order -> finish page.

An annotator is identified only by their personal link (``/a/<token>``); opening it puts
the annotator's id in the signed session cookie and redirects to token-free URLs. A link
works on any device (it is the secret), except that the link of a block held by a
participant enrolled from a crowd platform admits only that participant's browser
(maxbench.human_eval.app.enrolment.take_block): another gets a page saying so. Every
view loads the annotator from that cookie and every query is filtered by it, so another
annotator's page ids answer 404. Nothing here renders a system name, system code, run id
or run path: templates receive only the prompt, the text and the rubric.
"""

from __future__ import annotations

import time

from flask import Blueprint, abort, jsonify, redirect, render_template, request, session, url_for
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import joinedload

from maxbench.human_eval.app.enrolment import (
    LINK_HELD,
    SESSION_PREFIX,
    completion_redirect,
    forget_session,
    is_sealed,
    link_digests,
    take_block,
)
from maxbench.human_eval.app.errors import error_response
from maxbench.human_eval.app.forms import FIELD_PREFIX, ConsentForm, check_form, expected_fields, rating_form
from maxbench.human_eval.store.db import get_db, hash_token, write_transaction
from maxbench.human_eval.store.models import Annotator, Assignment, Item, PageText, Rating, Study, utcnow
from maxbench.human_eval.studies.rubrics import Rubric

bp = Blueprint("annotator", __name__)


class Gone(Exception):
    """The annotator may not continue: unknown, revoked, or the study is closed."""

    def __init__(self, code: int, message: str):
        self.code, self.message = code, message


@bp.errorhandler(Gone)
def _gone(exc: Gone):
    return error_response(exc.code, exc.message)


def current_annotator() -> tuple[Annotator, Study]:
    annotator_id = session.get("annotator")
    if annotator_id is None:
        raise Gone(403, "Please open the personal link you were given to start or continue.")
    db = get_db()
    annotator = db.get(Annotator, annotator_id, options=[joinedload(Annotator.study)])
    # The cookie also carries part of the token's digest: a reissued link ends old sessions,
    # and only the browser that holds the block has the prefix of its sealed digest.
    if annotator is None or session.get("token") != annotator.token_hash[:SESSION_PREFIX]:
        forget_session()
        raise Gone(403, "Please open the personal link you were given to start or continue.")
    _check_open(annotator)
    if not is_sealed(annotator.token_hash) and not take_block(db, annotator):
        # A session from before blocks were sealed: the first browser back seals it.
        forget_session()
        raise Gone(409, LINK_HELD)
    return annotator, annotator.study


def _check_open(annotator: Annotator) -> None:
    """Gone when the annotator's link is withdrawn or the study closed."""
    if annotator.revoked_at is not None:
        forget_session()
        raise Gone(403, "This link has been withdrawn by the researcher. Your ratings so far are saved.")
    if annotator.study.closed_at is not None:
        raise Gone(403, "This study is closed and no longer takes ratings. Thank you for your help.")


def _pages(annotator: Annotator) -> list[tuple[int, str, bool]]:
    """(position, public_id, completed) of the annotator's pages, in presentation order."""
    rows = (
        get_db()
        .execute(
            select(Assignment.position, Assignment.public_id, Assignment.completed_at.is_not(None))
            .where(Assignment.annotator_id == annotator.id)
            .order_by(Assignment.position)
        )
        .all()
    )
    return [(p, pid, bool(done)) for p, pid, done in rows]


def _n_texts(annotator: Annotator) -> int:
    """Texts to rate: the annotator's pages without the attention checks."""
    return get_db().scalar(
        select(func.count(Assignment.id)).where(
            Assignment.annotator_id == annotator.id, Assignment.item_id.is_not(None)
        )
    )


def _due(pages) -> str | None:
    return next((pid for _, pid, done in pages if not done), None)


def _next_url(annotator: Annotator) -> str:
    if annotator.consented_at is None:
        return url_for(".welcome")
    if annotator.check_passed_at is None:
        return url_for(".check")
    if annotator.excluded_at is not None or annotator.finished_at is not None:
        return url_for(".finish")
    due = _due(_pages(annotator))
    return url_for(".item", public_id=due) if due else url_for(".finish")


# A study's rubric is frozen when the study is created, so each process parses it once.
# Keyed by slug, which is random per study, so two databases in one process never mix.
_rubrics: dict[str, Rubric] = {}


def study_rubric(study: Study) -> Rubric:
    rubric = _rubrics.get(study.slug)
    if rubric is None:
        rubric = _rubrics[study.slug] = Rubric.from_json(study.rubric)
    return rubric


@bp.get("/")
def index():
    return render_template("annotator/index.html")


@bp.get("/a/<token>")
def enter(token: str):
    db = get_db()
    annotator = db.scalar(
        select(Annotator)
        .options(joinedload(Annotator.study))
        .where(Annotator.token_hash.in_(link_digests(hash_token(token))))
    )
    if annotator is None:
        return error_response(
            404, "This link is not valid. Check that you copied the whole link, or ask the researcher for a new one."
        )
    _check_open(annotator)
    if not take_block(db, annotator):  # a block held by an enrolled participant: not through its link
        return error_response(409, LINK_HELD)
    return redirect(_next_url(annotator), code=303)


@bp.get("/next")
def next_page():
    annotator, _ = current_annotator()
    return redirect(_next_url(annotator), code=303)


@bp.route("/welcome", methods=["GET", "POST"])
def welcome():
    annotator, study = current_annotator()
    form = ConsentForm()

    def page(status=200):
        return render_template(
            "annotator/welcome.html",
            study=study,
            rubric=study_rubric(study),
            form=form,
            n_texts=_n_texts(annotator),
            n_pages=len(_pages(annotator)),
        ), status

    if request.method == "POST":
        if not form.validate_on_submit():
            return page(400)
        db = get_db()
        with write_transaction(db):
            db.execute(
                update(Annotator)
                .where(Annotator.id == annotator.id, Annotator.consented_at.is_(None))
                .values(consented_at=utcnow(), last_seen_at=utcnow())
            )
            db.commit()
        return redirect(url_for(".next_page"), code=303)
    return page()


@bp.route("/check", methods=["GET", "POST"])
def check():
    annotator, study = current_annotator()
    if annotator.consented_at is None or (request.method == "GET" and annotator.check_passed_at is not None):
        return redirect(_next_url(annotator), code=303)
    rubric = study_rubric(study)
    question = rubric.comprehension_check()
    form = check_form(question.options)
    wrong = False
    if request.method == "POST":
        if annotator.check_passed_at is not None:
            return redirect(url_for(".next_page"), code=303)
        if not form.validate_on_submit():
            return render_template(
                "annotator/check.html", study=study, rubric=rubric, question=question, form=form, wrong=False
            ), 400
        passed = form.answer.data == question.answer
        values = {"check_attempts": Annotator.check_attempts + 1, "last_seen_at": utcnow()}
        if passed:
            values["check_passed_at"] = utcnow()
        limit = (study.design or {}).get("check_attempts")
        out_of_attempts = not passed and limit is not None and annotator.check_attempts + 1 >= limit
        if out_of_attempts:  # e.g. Prolific allows two attempts at a comprehension check
            values["excluded_at"] = utcnow()
        db = get_db()
        with write_transaction(db):
            db.execute(update(Annotator).where(Annotator.id == annotator.id).values(**values))
            db.commit()
        if passed:
            return redirect(url_for(".next_page"), code=303)
        if out_of_attempts:
            return redirect(url_for(".finish"), code=303)
        wrong = True
    return render_template(
        "annotator/check.html", study=study, rubric=rubric, question=question, form=form, wrong=wrong
    ), (200 if not wrong else 422)


def _own_assignment(annotator: Annotator, public_id: str) -> Assignment:
    assignment = get_db().scalar(
        select(Assignment).where(Assignment.public_id == public_id, Assignment.annotator_id == annotator.id)
    )
    if assignment is None:
        abort(404)  # someone else's page looks exactly like a page that does not exist
    return assignment


def _render_item(study, rubric, assignment, pages, form, status=200):
    done = sum(1 for _, _, d in pages if d)
    texts = []
    if assignment.item is not None:
        prompt, text = assignment.item.prompt, assignment.item.text
        if rubric.kind in ("pairwise", "best-worst"):  # the page's texts in their places (A, B, ...)
            texts = (
                get_db()
                .scalars(
                    select(Item.text)
                    .join(PageText, PageText.item_id == Item.id)
                    .where(PageText.assignment_id == assignment.id)
                    .order_by(PageText.place)
                )
                .all()
            )
    else:
        prompt, text = assignment.attention["prompt"], assignment.attention["text"]
    session["shown"] = [assignment.public_id, time.time()]
    return render_template(
        "annotator/item.html",
        study=study,
        rubric=rubric,
        form=form,
        prompt=prompt,
        text=text,
        texts=texts,
        public_id=assignment.public_id,
        position=assignment.position,
        done=done,
        total=len(pages),
        prefix=FIELD_PREFIX,
    ), status


@bp.get("/item/<public_id>")
def item(public_id: str):
    annotator, study = current_annotator()
    assignment = _own_assignment(annotator, public_id)
    if annotator.check_passed_at is None or annotator.excluded_at is not None or assignment.completed_at:
        return redirect(_next_url(annotator), code=303)
    pages = _pages(annotator)
    if _due(pages) != public_id:
        return redirect(_next_url(annotator), code=303)
    rubric = study_rubric(study)
    return _render_item(study, rubric, assignment, pages, rating_form(rubric, _places(rubric, assignment)))


def _places(rubric: Rubric, assignment: Assignment) -> int | None:
    """How many texts a best-worst page shows (its tuple); None for other pages."""
    if rubric.kind != "best-worst" or assignment.item_id is None:
        return None
    return get_db().scalar(select(func.count(PageText.id)).where(PageText.assignment_id == assignment.id))


@bp.post("/item/<public_id>")
def rate(public_id: str):
    annotator, study = current_annotator()
    assignment = _own_assignment(annotator, public_id)
    if annotator.check_passed_at is None:
        return redirect(_next_url(annotator), code=303)
    if assignment.completed_at is not None or annotator.excluded_at is not None:
        # A repeated submit (double click, retry after a lost response): already stored.
        return redirect(_next_url(annotator), code=303)
    rubric = study_rubric(study)
    pages = _pages(annotator)
    if _due(pages) != public_id:
        # PostgreSQL reads each statement afresh (READ COMMITTED): a duplicate submit may have
        # read this page as open and the page list after the first submit committed.
        if get_db().scalar(select(Assignment.completed_at).where(Assignment.id == assignment.id)) is not None:
            return redirect(_next_url(annotator), code=303)
        return error_response(409)
    form = rating_form(rubric, _places(rubric, assignment))
    unexpected = set(request.form) - expected_fields(rubric)
    if unexpected or not form.validate_on_submit():
        if unexpected:
            form.form_errors.append("The form was changed before it was sent; please rate again.")
        return _render_item(study, rubric, assignment, pages, form, status=400)

    values = {name: form[FIELD_PREFIX + name].data for name in rubric.stored_criteria}
    if rubric.kind == "best-worst" and any(
        values[c.name + "_best"] == values[c.name + "_worst"] for c in rubric.criteria
    ):
        form.form_errors.append("The best and the worst text must be different texts.")
        return _render_item(study, rubric, assignment, pages, form, status=400)
    shown = session.get("shown")
    now = time.time()
    seconds = now - shown[1] if shown and shown[0] == public_id and now >= shown[1] else None

    remaining = [pid for _, pid, done in pages if not done and pid != public_id]
    db = get_db()
    work = _rating_work(
        assignment.id,
        annotator.id,
        assignment.attention,
        study.attention_fail_limit,
        values,
        seconds,
        finished=not remaining,
    )
    with write_transaction(db):
        try:
            stored, excluded = work(db)
            db.commit()  # the rating is acknowledged only after this returns
        except IntegrityError:  # the unique (page, criterion) key: a duplicate got in first
            db.rollback()
            stored, excluded = False, False
    if not stored:  # a duplicate submit: the first one is what counts
        return redirect(url_for(".next_page"), code=303)
    session.pop("shown", None)
    if excluded or not remaining:
        return redirect(url_for(".finish"), code=303)
    return redirect(url_for(".item", public_id=remaining[0]), code=303)


def _rating_work(
    assignment_id: int,
    annotator_id: int,
    attention: dict | None,
    fail_limit: int,
    values: dict[str, int],
    seconds: float | None,
    finished: bool,
):
    """The unit of work that stores one page's ratings: returns (stored, annotator now excluded).

    It runs inside write_transaction and leaves the commit to the caller. The conditional
    update of completed_at is the guard against a concurrent duplicate: only one
    transaction can move it from NULL.
    """

    def work(db) -> tuple[bool, bool]:
        claimed = db.execute(
            update(Assignment)
            .where(Assignment.id == assignment_id, Assignment.completed_at.is_(None))
            .values(completed_at=utcnow(), seconds=seconds)
        ).rowcount
        if claimed != 1:
            return False, False
        db.execute(
            insert(Rating),
            [
                {"assignment_id": assignment_id, "criterion": name, "value": value, "created_at": utcnow()}
                for name, value in values.items()
            ],
        )
        annotator_values = {"last_seen_at": utcnow()}
        excluded = False
        if attention is not None:
            passed = all(v == attention["expected"] for v in values.values())
            db.execute(update(Assignment).where(Assignment.id == assignment_id).values(attention_passed=passed))
            if not passed:
                db.execute(
                    update(Annotator)
                    .where(Annotator.id == annotator_id)
                    .values(attention_failures=Annotator.attention_failures + 1)
                )
                failures = db.scalar(select(Annotator.attention_failures).where(Annotator.id == annotator_id))
                if failures >= fail_limit:
                    annotator_values["excluded_at"] = utcnow()
                    excluded = True
        if finished:
            annotator_values["finished_at"] = utcnow()
        db.execute(update(Annotator).where(Annotator.id == annotator_id).values(**annotator_values))
        return True, excluded

    return work


@bp.get("/finish")
def finish():
    annotator, study = current_annotator()
    pages = _pages(annotator)
    if annotator.excluded_at is None and annotator.finished_at is None and _due(pages) is not None:
        return redirect(_next_url(annotator), code=303)
    code = study.completion_code if annotator.excluded_at is None else None
    if code:
        target = completion_redirect(annotator, study)
        if target:
            return redirect(target, code=303)
    return render_template(
        "annotator/finish.html",
        study=study,
        excluded=annotator.excluded_at is not None,
        completion_code=code,
        total=len(pages),
    )


@bp.get("/leave")
def leave():
    """Ratings are committed as they are made; leaving only forgets the browser session.

    The browser still holds its block: opening the personal link again continues."""
    had_session = session.get("annotator") is not None
    forget_session()
    return render_template("annotator/leave.html", had_session=had_session)


@bp.get("/progress.json")
def progress():
    annotator, _ = current_annotator()
    pages = _pages(annotator)
    done = sum(1 for _, _, d in pages if d)
    return jsonify(
        done=done, total=len(pages), finished=annotator.finished_at is not None or annotator.excluded_at is not None
    )
