"""Open enrolment from crowd platforms: one public URL per study, ``/s/<study>``.

Prolific opens it with ``?PROLIFIC_PID=..&STUDY_ID=..&SESSION_ID=..``, MTurk with
``?workerId=..&assignmentId=..&hitId=..``. A new participant gets the next free block (the
study's pre-balanced Annotator blocks, in order); the same participant id always gets the
same block back. A block claimed but not started (no page rated) for longer than the
study's ``abandon_after_s`` goes to the next participant: the first claim is released and
the block's token changes, so the first participant's browser session ends. When no block
is free the study is full (its quota). At the end, a Prolific participant is redirected to
Prolific with the study's completion code; an MTurk worker is shown the code.

Claims are race-safe on SQLite and PostgreSQL: ``enrolment.annotator_id`` and
``(study_id, participant_id)`` are unique, so of two transactions claiming one block, or
one participant claiming twice, one commits and the other retries and finds the winner.

Participant ids are stored (``Enrolment``) for the researcher; they are never rendered to
participants and never exported with the ratings.
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from flask import Blueprint, redirect, request, session, url_for
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from maxbench.human_eval.app.errors import error_response
from maxbench.human_eval.store.db import get_db, hash_token, write_transaction
from maxbench.human_eval.store.models import PARTICIPANT_ID_MAX, Annotator, Assignment, Enrolment, Study, utcnow

bp = Blueprint("enrolment", __name__)

PLATFORMS = {
    "prolific": ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID"),
    "mturk": ("workerId", "assignmentId", "hitId"),
}
PROLIFIC_ORIGIN = "https://app.prolific.com"
PROLIFIC_COMPLETE = PROLIFIC_ORIGIN + "/submissions/complete?cc={code}"
DEFAULT_ABANDON_AFTER_S = 3600
_ID = re.compile(rf"^[A-Za-z0-9_-]{{1,{PARTICIPANT_ID_MAX}}}$")
_CLAIM_TRIES = 20


def enrolment_settings(study: Study) -> dict | None:
    """The study's open-enrolment settings (in its design record), or None when it has none."""
    return (study.design or {}).get("enrolment")


class BadParameters(Exception):
    """The platform's query parameters are missing or malformed: the message is for the participant."""


def _platform_parameters() -> tuple[str, str, str]:
    """(platform, participant id, platform session) from the query; BadParameters otherwise."""
    for platform, names in PLATFORMS.items():
        if names[0] in request.args:
            missing = [n for n in names if not request.args.get(n)]
            if missing:
                raise BadParameters(
                    f"The link from {platform.title()} is missing {', '.join(missing)}. "
                    "Please return to the platform and open the study from there.",
                )
            values = [request.args[n] for n in names]
            if platform == "mturk" and values[1] == "ASSIGNMENT_ID_NOT_AVAILABLE":
                raise BadParameters("Please accept the task on Mechanical Turk first, then open it again.")
            bad = [n for n, v in zip(names, values) if not _ID.match(v)]
            if bad:
                raise BadParameters(
                    f"The {', '.join(bad)} in the link is not valid (at most {PARTICIPANT_ID_MAX} letters, "
                    "digits, '-' or '_'). Please return to the platform and open the study from there.",
                )
            return platform, values[0], values[2] if platform == "prolific" else values[1]
    expected = " or ".join(f"{names[0]} ({p.title()})" for p, names in PLATFORMS.items())
    raise BadParameters(
        f"This study link needs a participant id: {expected}. Please open it from the platform that sent you."
    )


@bp.get("/s/<slug>")
def arrive(slug: str):
    db = get_db()
    study = db.scalar(select(Study).where(Study.slug == slug))
    settings = enrolment_settings(study) if study is not None else None
    if settings is None:
        return error_response(404, "There is no open study at this address. Check the link on the platform.")
    if study.closed_at is not None:
        return error_response(403, "This study is closed and no longer takes part. Thank you for your interest.")
    try:
        platform, participant, platform_session = _platform_parameters()
    except BadParameters as exc:
        return error_response(400, str(exc))
    annotator = claim_block(db, study, platform, participant, platform_session, settings)
    if annotator is None:
        return error_response(
            409, "This study is full: every place has been taken. Please return it on the platform. Thank you."
        )
    session.clear()
    session["annotator"] = annotator.id
    session["token"] = annotator.token_hash[:16]
    return redirect(url_for("annotator.next_page"), code=303)


def claim_block(db, study: Study, platform: str, participant: str, platform_session: str, settings: dict):
    """The participant's block: theirs already, else the next free or abandoned one; None when full."""
    abandon_after = timedelta(seconds=settings.get("abandon_after_s", DEFAULT_ABANDON_AFTER_S))
    for _ in range(_CLAIM_TRIES):
        own = db.scalar(
            select(Enrolment).where(Enrolment.study_id == study.id, Enrolment.participant_id == participant)
        )
        if own is not None and own.annotator_id is not None:
            return db.get(Annotator, own.annotator_id)
        with write_transaction(db):
            try:
                block = _free_block(db, study, utcnow() - abandon_after)
                if block is None:
                    db.rollback()
                    db.expire_all()
                    # the same participant arriving twice at once: the other request may have taken the
                    # last block for them, which is theirs, not "full"
                    mine = db.scalar(
                        select(Enrolment.annotator_id).where(
                            Enrolment.study_id == study.id, Enrolment.participant_id == participant
                        )
                    )
                    return None if mine is None else db.get(Annotator, mine)
                if own is None:
                    db.add(
                        Enrolment(
                            study_id=study.id,
                            platform=platform,
                            participant_id=participant,
                            platform_session=platform_session,
                            annotator_id=block,
                            claimed_at=utcnow(),
                        )
                    )
                else:  # their earlier block was given away: a new one
                    db.execute(
                        update(Enrolment)
                        .where(Enrolment.id == own.id, Enrolment.annotator_id.is_(None))
                        .values(annotator_id=block, claimed_at=utcnow(), released_at=None)
                    )
                db.commit()
            except IntegrityError:  # another participant took this block, or this one raced itself
                db.rollback()
                continue
        db.expire_all()
    return None


def _free_block(db, study: Study, abandoned_before) -> int | None:
    """The first block nobody holds, else the first abandoned one (released here, in the
    caller's transaction); blocks in use through a personal link are never taken."""
    held = select(Enrolment.annotator_id).where(Enrolment.annotator_id.is_not(None))
    free = db.scalar(
        select(Annotator.id)
        .where(
            Annotator.study_id == study.id,
            Annotator.revoked_at.is_(None),
            Annotator.consented_at.is_(None),
            Annotator.id.not_in(held),
        )
        .order_by(Annotator.id)
        .limit(1)
    )
    if free is not None:
        return free
    started = select(Assignment.annotator_id).where(Assignment.completed_at.is_not(None))
    stale = db.execute(
        select(Enrolment.id, Enrolment.annotator_id)
        .join(Annotator, Annotator.id == Enrolment.annotator_id)
        .where(
            Enrolment.study_id == study.id,
            Enrolment.claimed_at < abandoned_before,
            Annotator.finished_at.is_(None),
            Annotator.excluded_at.is_(None),
            Annotator.revoked_at.is_(None),
            Annotator.id.not_in(started),
        )
        .order_by(Enrolment.claimed_at)
        .limit(1)
    ).first()
    if stale is None:
        return None
    enrolment_id, annotator_id = stale
    released = db.execute(
        update(Enrolment)
        .where(Enrolment.id == enrolment_id, Enrolment.annotator_id == annotator_id)
        .values(annotator_id=None, released_at=utcnow())
    ).rowcount
    if released != 1:
        raise IntegrityError("release", None, Exception("released by another transaction"))
    # A fresh start for the next participant; the new token ends the first one's session.
    db.execute(
        update(Annotator)
        .where(Annotator.id == annotator_id)
        .values(
            token_hash=hash_token(secrets.token_urlsafe(18)),
            consented_at=None,
            check_attempts=0,
            check_passed_at=None,
            last_seen_at=None,
        )
    )
    return annotator_id


def completion_redirect(annotator: Annotator, study: Study) -> str | None:
    """Where a finished Prolific participant goes: Prolific's completion URL with the code."""
    if not study.completion_code:
        return None
    platform = get_db().scalar(select(Enrolment.platform).where(Enrolment.annotator_id == annotator.id))
    if platform == "prolific":
        from urllib.parse import quote

        return PROLIFIC_COMPLETE.format(code=quote(study.completion_code, safe=""))
    return None
