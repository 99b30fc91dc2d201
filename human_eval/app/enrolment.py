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

A participant id is not a secret (researchers, other participants and screenshots see
Prolific ids), so it is not the credential: a block belongs to the first browser that
enters it and to the platform session it was claimed in (Prolific's SESSION_ID, MTurk's
assignmentId). Another browser presenting the same id, or the same id from another
platform session, is refused with a page that says what to do; so is the block's personal
link (``/a/<token>``) opened in another browser. A personal link of a block nobody enrolled
in still works on any device (the link is a secret), but once opened its block is never
given to a participant.

How a browser holds a block: the block's token digest (``Annotator.token_hash``) is
*sealed* by the claim, or by the first browser to enter (``take_block``), with a
conditional UPDATE that only one transaction can win, and that browser's signed session
cookie receives the sealed digest's prefix (the session check of every annotator view
compares it). A sealed digest starts with ``h``, which no hex digest does, and is derived
from the link's digest, so the personal link still finds its block and can say that it is
held. A new link (the admin's "New link") or a block given away after abandonment gets a
fresh, unsealed digest: the old browser's session ends and the next browser to enter
holds the block. The cookie keeps a short list of the blocks it holds (``holds``), which
leaving (``/leave``) or opening another link does not forget, so the holder can always
come back.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from flask import Blueprint, redirect, request, session, url_for
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.attributes import set_committed_value

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

# --- One browser per block --------------------------------------------------------------

SEALED = "h"  # first character of a sealed token digest; hex digests never start with it
SESSION_PREFIX = 16  # characters of the token digest kept in the signed session cookie
_HOLDS_KEPT = 10  # blocks a browser remembers holding (the newest)
LINK_HELD = (
    "This link is already open in another browser. Please return to that browser to continue. "
    "If you can no longer use it, ask the researcher for a new link."
)
PARTICIPANT_HELD = (
    "This participant's study is already open in another browser. Please return to that browser "
    "to continue. If you can no longer use it, contact the researcher through the platform."
)


def sealed_digest(token_hash: str) -> str:
    """The digest a block's token digest becomes once a browser holds it (same length)."""
    return SEALED + hashlib.sha256(("held:" + token_hash).encode("utf-8")).hexdigest()[1:]


def is_sealed(token_hash: str) -> bool:
    return token_hash.startswith(SEALED)


def link_digests(token_hash: str) -> tuple[str, str]:
    """The digests under which a personal link's block may be stored: free, and held."""
    return token_hash, sealed_digest(token_hash)


def _holds() -> list[list]:
    return [h for h in session.get("holds", []) if isinstance(h, list) and len(h) == 2]


def held_here(annotator: Annotator) -> bool:
    """Whether this browser's signed cookie holds the block as it is now."""
    prefix = annotator.token_hash[:SESSION_PREFIX]
    if session.get("annotator") == annotator.id and session.get("token") == prefix:
        return True
    return [annotator.id, prefix] in _holds()


def start_session(annotator: Annotator) -> None:
    """Make the block this browser's current one, remembering that the browser holds it.
    A session of another block is replaced; this block's own (its open pages) continues."""
    prefix = annotator.token_hash[:SESSION_PREFIX]
    holds = [h for h in _holds() if h[0] != annotator.id] + [[annotator.id, prefix]]
    if session.get("annotator") != annotator.id:
        session.clear()
    session["holds"] = holds[-_HOLDS_KEPT:]
    session["annotator"] = annotator.id
    session["token"] = prefix


def forget_session() -> None:
    """End the current block's session in this browser; the blocks it holds stay held."""
    holds = _holds()
    session.clear()
    if holds:
        session["holds"] = holds


def _enrolled(db, annotator: Annotator) -> bool:
    return db.scalar(select(Enrolment.id).where(Enrolment.annotator_id == annotator.id)) is not None


def take_block(db, annotator: Annotator) -> bool:
    """Enter the block in this browser: True when its session has started here, False when
    another browser holds it.

    The first browser to enter seals the block's digest and holds it. A block that an
    enrolled participant holds admits only that browser. A personal link that is not an
    enrolled block admits whoever presents it (the link is the secret: an annotator may
    move from one device to another), but its block is never given to a participant."""
    if not is_sealed(annotator.token_hash):
        sealed = sealed_digest(annotator.token_hash)
        with write_transaction(db):
            won = db.execute(
                update(Annotator)
                .where(Annotator.id == annotator.id, Annotator.token_hash == annotator.token_hash)
                .values(token_hash=sealed)
            ).rowcount
            db.commit()
        if won != 1 and db.scalar(select(Annotator.token_hash).where(Annotator.id == annotator.id)) != sealed:
            return False  # a new link or a release came in between: this one no longer holds anything
        set_committed_value(annotator, "token_hash", sealed)
        if won == 1:
            start_session(annotator)
            return True
    if not held_here(annotator) and _enrolled(db, annotator):
        return False
    start_session(annotator)
    return True


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
    annotator, claimed_now = claim_block(db, study, platform, participant, platform_session, settings)
    if annotator is None:
        return error_response(
            409, "This study is full: every place has been taken. Please return it on the platform. Thank you."
        )
    if claimed_now:  # sealed in the claim: this browser holds the block
        start_session(annotator)
        return redirect(url_for("annotator.next_page"), code=303)
    if is_sealed(annotator.token_hash) and not held_here(annotator):
        return error_response(409, PARTICIPANT_HELD)
    claimed_in = db.scalar(
        select(Enrolment.platform_session).where(
            Enrolment.study_id == study.id, Enrolment.participant_id == participant
        )
    )
    if claimed_in is not None and claimed_in != platform_session:
        return error_response(
            409,
            f"This participant's study was started in another {platform.title()} session. Please continue "
            "it from the submission you started it in, or contact the researcher through the platform.",
        )
    if not take_block(db, annotator):
        return error_response(409, PARTICIPANT_HELD)
    return redirect(url_for("annotator.next_page"), code=303)


def claim_block(
    db, study: Study, platform: str, participant: str, platform_session: str, settings: dict
) -> tuple[Annotator | None, bool]:
    """(the participant's block, claimed now): theirs already, else the next free or abandoned
    one, claimed and sealed (``take_block``) in one transaction; (None, False) when full."""
    abandon_after = timedelta(seconds=settings.get("abandon_after_s", DEFAULT_ABANDON_AFTER_S))
    for _ in range(_CLAIM_TRIES):
        own = db.scalar(
            select(Enrolment).where(Enrolment.study_id == study.id, Enrolment.participant_id == participant)
        )
        if own is not None and own.annotator_id is not None:
            return db.get(Annotator, own.annotator_id), False
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
                    return (None if mine is None else db.get(Annotator, mine)), False
                # Seal the block in the claim: a personal link opened at the same moment either
                # sealed it first (this claim retries) or finds it held by this participant.
                digest = db.scalar(select(Annotator.token_hash).where(Annotator.id == block))
                sealed = db.execute(
                    update(Annotator)
                    .where(Annotator.id == block, Annotator.token_hash == digest)
                    .values(token_hash=sealed_digest(digest))
                ).rowcount
                if is_sealed(digest) or sealed != 1:
                    raise IntegrityError("seal", None, Exception("opened through its personal link meanwhile"))
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
                        .values(
                            annotator_id=block,
                            platform_session=platform_session,
                            claimed_at=utcnow(),
                            released_at=None,
                        )
                    )
                db.commit()
            except IntegrityError:  # another participant took this block, or this one raced itself
                db.rollback()
                db.expire_all()
                continue
        db.expire_all()
        return db.get(Annotator, block), True
    return None, False


def _free_block(db, study: Study, abandoned_before) -> int | None:
    """The first block nobody holds, else the first abandoned one (released here, in the
    caller's transaction); blocks in use through a personal link (opened in a browser, which
    seals their digest) are never taken."""
    held = select(Enrolment.annotator_id).where(Enrolment.annotator_id.is_not(None))
    free = db.scalar(
        select(Annotator.id)
        .where(
            Annotator.study_id == study.id,
            Annotator.kind == "human",
            Annotator.revoked_at.is_(None),
            Annotator.consented_at.is_(None),
            Annotator.token_hash.not_like(SEALED + "%"),
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
