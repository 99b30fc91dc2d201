"""The researcher's side, behind the study's admin token: progress, attention checks,
agreement so far, long-format export, closing the study, revoking or reissuing links.

Logging in with the admin token (printed by ``maxbench study create``) stores the study
id in the signed session cookie, with a key derived from the token's digest and the
study's admin session generation (``design["admin_sessions"]``); the token itself is kept
only as a SHA-256 digest. Every admin request compares that key, so the server can end
sessions: logging out bumps the generation (every browser logged in to that study with a
copy of the cookie, or with the same token, is logged out), and a new admin token
(``rotate_admin_token``, the study page's "New admin token") changes the digest, after
which the old token no longer logs in and every other session of the study ends.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from statistics import median

from flask import Blueprint, Response, redirect, render_template, request, session, url_for
from sqlalchemy import select, update

from maxbench.human_eval.analysis.ratings import ratings_from_records
from maxbench.human_eval.analysis.results import Scale
from maxbench.human_eval.analysis.statistics import agreement
from maxbench.human_eval.app.errors import error_response
from maxbench.human_eval.app.forms import ActionForm, AdminLoginForm
from maxbench.human_eval.store.db import get_db, hash_token, write_transaction
from maxbench.human_eval.store.models import Annotator, Study, utcnow
from maxbench.human_eval.studies.export import long_format_rows, rows_to_csv, rows_to_json

bp = Blueprint("admin", __name__)


ADMIN_GENERATION = "admin_sessions"  # key of Study.design: bumped by logging out


def _session_key(study: Study) -> str:
    """What an admin session of ``study`` holds: it changes with the admin token and at logout."""
    generation = (study.design or {}).get(ADMIN_GENERATION, 0)
    return hashlib.sha256(f"{study.admin_token_hash}:{generation}".encode()).hexdigest()[:32]


def _session_keys() -> dict[int, str]:
    """study id -> key, from the signed cookie (cookies of older versions hold bare ids: ignored)."""
    out = {}
    for entry in session.get("admin", []):
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and isinstance(entry[1], str):
            out[entry[0]] = entry[1]
    return out


def _logged_in(study: Study) -> bool:
    key = _session_keys().get(study.id)
    return key is not None and hmac.compare_digest(key, _session_key(study))


def _remember(study: Study) -> None:
    keys = _session_keys()
    keys[study.id] = _session_key(study)
    session["admin"] = [[k, v] for k, v in sorted(keys.items())]


def _admin_study(slug: str) -> Study:
    study = get_db().scalar(select(Study).where(Study.slug == slug))
    if study is None or not _logged_in(study):
        # Same answer for "no such study" and "not yours": slugs are not secrets, but
        # there is no reason to confirm them.
        raise _NotAllowed()
    return study


class _NotAllowed(Exception):
    pass


@bp.errorhandler(_NotAllowed)
def _not_allowed(_exc):
    return redirect(url_for(".login", next=request.path), code=303)


@bp.route("/login", methods=["GET", "POST"])
def login():
    form = AdminLoginForm()
    failed = False
    if form.validate_on_submit():
        digest = hash_token(form.token.data.strip())
        study = get_db().scalar(select(Study).where(Study.admin_token_hash == digest))
        if study is not None and hmac.compare_digest(study.admin_token_hash, digest):
            _remember(study)
            return redirect(url_for(".study", slug=study.slug), code=303)
        failed = True
    status = 403 if failed else (400 if request.method == "POST" else 200)
    return render_template("admin/login.html", form=form, failed=failed), status


@bp.post("/logout")
def logout():
    """End the session on the server too: a copy of the cookie no longer works afterwards."""
    form = ActionForm()
    if form.validate_on_submit():
        for study in _logged_in_studies():
            end_admin_sessions(get_db(), study.id)
        session.pop("admin", None)
    return redirect(url_for(".login"), code=303)


def _logged_in_studies() -> list[Study]:
    ids = list(_session_keys())
    if not ids:
        return []
    rows = get_db().scalars(select(Study).where(Study.id.in_(ids)).order_by(Study.id)).all()
    return [s for s in rows if _logged_in(s)]


def end_admin_sessions(db, study_id: int) -> None:
    """Log every browser out of the study's admin pages (bumps its admin session generation)."""
    with write_transaction(db):
        design = dict(db.scalar(select(Study.design).where(Study.id == study_id)) or {})
        design[ADMIN_GENERATION] = int(design.get(ADMIN_GENERATION, 0)) + 1
        db.execute(update(Study).where(Study.id == study_id).values(design=design))
        db.commit()
    db.expire_all()


def rotate_admin_token(db, study_id: int) -> str:
    """A new admin token for the study (returned once; only its digest is stored): the old
    token no longer logs in and every admin session of the study ends."""
    token = "adm-" + secrets.token_urlsafe(24)
    with write_transaction(db):
        db.execute(update(Study).where(Study.id == study_id).values(admin_token_hash=hash_token(token)))
        db.commit()
    db.expire_all()
    return token


@bp.get("/")
def studies():
    rows = _logged_in_studies()
    if not rows:
        return redirect(url_for(".login"), code=303)
    return render_template("admin/studies.html", studies=rows, form=ActionForm())


def annotator_summaries(study: Study) -> list[dict]:
    out = []
    for annotator in study.annotators:
        if annotator.kind == "model":  # a judge: its judgments are in the report, not in this progress table
            continue
        pages = annotator.assignments
        items = [a for a in pages if a.attention is None]
        checks = [a for a in pages if a.attention is not None]
        seconds = [a.seconds for a in items if a.seconds is not None]
        if annotator.revoked_at:
            status = "revoked"
        elif annotator.excluded_at:
            status = "stopped: attention checks"
        elif annotator.finished_at:
            status = "finished"
        elif annotator.check_passed_at:
            status = "rating"
        elif annotator.consented_at:
            status = "at comprehension check"
        else:
            status = "not started"
        out.append(
            {
                "label": annotator.label,
                "status": status,
                "items_done": sum(1 for a in items if a.completed_at),
                "items_total": len(items),
                "checks_passed": sum(1 for a in checks if a.attention_passed is True),
                "checks_failed": sum(1 for a in checks if a.attention_passed is False),
                "checks_total": len(checks),
                "check_attempts": annotator.check_attempts,
                "median_seconds": round(median(seconds), 1) if seconds else None,
                "last_seen": annotator.last_seen_at,
                "revoked": annotator.revoked_at is not None,
            }
        )
    return out


def agreement_so_far(rows: list[dict], criteria: list[str], scale_min: int, scale_max: int) -> list[dict]:
    """Krippendorff's alpha per criterion, ordinal level over the rubric's value domain.

    The report's own computation (maxbench.human_eval.analysis.statistics.agreement), without its bootstrap
    interval, so the admin page and ``maxbench report`` give the same alpha. Units are rated
    texts (item, system); ratings flagged attention_failed or revoked are left out. Alpha
    is undefined until some text has two ratings: said, not guessed.
    """
    kept = ratings_from_records([r for r in rows if not r["flags"]], "the admin view").rows
    domain = tuple(float(v) for v in range(scale_min, scale_max + 1))
    scale = Scale(float(scale_min), float(scale_max), domain, "the study's rubric")
    out = []
    for criterion in criteria:
        ratings = [r for r in kept if r.criterion == criterion]
        if not ratings:
            out.append({"criterion": criterion, "alpha": None, "units": 0, "note": "undefined: no ratings yet"})
            continue
        result = agreement(criterion, ratings, scale, n_boot=0, seed=0)
        alpha = None if result.ordinal is None else round(result.ordinal, 3)
        out.append(
            {"criterion": criterion, "alpha": alpha, "units": result.n_pairable_units, "note": result.undefined_reason}
        )
    return out


def _render_study(study: Study, new_link: tuple[str, str] | None = None, new_admin_token: str | None = None):
    summaries = annotator_summaries(study)
    rows = long_format_rows(get_db(), study.id)
    rubric = study.rubric
    # Best-worst places are not ratings on a scale: their agreement is in the report (best_worst.bws_agreement).
    criteria = [] if rubric.get("kind") == "best-worst" else [c["name"] for c in rubric["criteria"]]
    agreement = agreement_so_far(rows, criteria, rubric["scale_min"], rubric["scale_max"])
    return render_template(
        "admin/study.html",
        study=study,
        summaries=summaries,
        agreement=agreement,
        planned=sum(s["items_total"] for s in summaries),
        done=sum(s["items_done"] for s in summaries),
        form=ActionForm(),
        new_link=new_link,
        new_admin_token=new_admin_token,
    )


@bp.get("/study/<slug>")
def study(slug: str):
    return _render_study(_admin_study(slug))


@bp.get("/study/<slug>/ratings.<fmt>")
def export(slug: str, fmt: str):
    study = _admin_study(slug)
    if fmt not in ("csv", "json"):
        return error_response(404)
    rows = long_format_rows(get_db(), study.id, blind=request.args.get("blind") == "1")
    body = rows_to_csv(rows) if fmt == "csv" else rows_to_json(rows)
    mimetype = "text/csv" if fmt == "csv" else "application/json"
    return Response(
        body, mimetype=mimetype, headers={"Content-Disposition": f'attachment; filename="{study.slug}-ratings.{fmt}"'}
    )


def _confirmed(study: Study, question: str, consequence: str, button: str):
    """None when the POST carries the confirmation; else the page that asks for it.

    Acting on a button alone would let one stray click close a study or cut an
    annotator off; a second page (no JavaScript needed) asks first.
    """
    form = ActionForm()
    if request.method == "POST":
        if not form.validate_on_submit():
            return error_response(400)
        if request.form.get("confirm") == "yes":
            return None
    page = render_template(
        "admin/confirm.html",
        study=study,
        question=question,
        consequence=consequence,
        button=button,
        action=request.path,
        form=form,
    )
    return page, 200


def _set_closed(study: Study, closed: bool) -> None:
    db = get_db()
    with write_transaction(db):
        if closed:
            db.execute(update(Study).where(Study.id == study.id, Study.closed_at.is_(None)).values(closed_at=utcnow()))
        else:
            db.execute(update(Study).where(Study.id == study.id).values(closed_at=None))
        db.commit()


@bp.route("/study/<slug>/close", methods=["GET", "POST"])
def close(slug: str):
    study = _admin_study(slug)
    ask = _confirmed(
        study,
        f"Close the study {study.slug}?",
        "Annotators can no longer rate; every rating so far is kept. "
        "You can reopen it later (here or with maxbench study reopen).",
        "Close the study",
    )
    if ask is not None:
        return ask
    _set_closed(study, True)
    return redirect(url_for(".study", slug=slug), code=303)


@bp.post("/study/<slug>/reopen")
def reopen(slug: str):
    study = _admin_study(slug)
    if not ActionForm().validate_on_submit():
        return error_response(400)
    _set_closed(study, False)
    return redirect(url_for(".study", slug=slug), code=303)


def _own_annotator(study: Study, label: str) -> Annotator:
    annotator = get_db().scalar(
        select(Annotator).where(Annotator.study_id == study.id, Annotator.label == label, Annotator.kind == "human")
    )
    if annotator is None:  # a model rater (a judge) has no link to revoke or renew
        # The admin is logged in to this study: say what is wrong instead of a login page.
        raise _UnknownAnnotator(study, label)
    return annotator


class _UnknownAnnotator(Exception):
    def __init__(self, study: Study, label: str):
        self.slug, self.label = study.slug, label


@bp.errorhandler(_UnknownAnnotator)
def _unknown_annotator(exc: _UnknownAnnotator):
    return error_response(
        404, f"Study {exc.slug} has no annotator {exc.label!r}: go back to the study page, which lists its annotators."
    )


@bp.route("/study/<slug>/annotator/<label>/revoke", methods=["GET", "POST"])
def revoke(slug: str, label: str):
    study = _admin_study(slug)
    annotator = _own_annotator(study, label)
    ask = _confirmed(
        study,
        f"Revoke the link of annotator {label}?",
        "Their link stops working at once and their ratings so far are flagged as revoked in the export. "
        "A new link (New link) lets them continue.",
        "Revoke the link",
    )
    if ask is not None:
        return ask
    db = get_db()
    with write_transaction(db):
        db.execute(
            update(Annotator)
            .where(Annotator.id == annotator.id, Annotator.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        db.commit()
    return redirect(url_for(".study", slug=slug), code=303)


@bp.route("/study/<slug>/annotator/<label>/reissue", methods=["GET", "POST"])
def reissue(slug: str, label: str):
    """A new link for the same annotator and assignments; the old link stops working."""
    study = _admin_study(slug)
    annotator = _own_annotator(study, label)
    ask = _confirmed(
        study,
        f"Give annotator {label} a new link?",
        "Their current link stops working at once; the new one, shown once on the next page, "
        "continues where they left off.",
        "Make a new link",
    )
    if ask is not None:
        return ask
    token = secrets.token_urlsafe(18)
    db = get_db()
    with write_transaction(db):
        db.execute(
            update(Annotator).where(Annotator.id == annotator.id).values(token_hash=hash_token(token), revoked_at=None)
        )
        db.commit()
    link = request.host_url.rstrip("/") + url_for("annotator.enter", token=token)
    db.expire_all()
    return _render_study(_admin_study(slug), new_link=(label, link))


@bp.route("/study/<slug>/admin-token", methods=["GET", "POST"])
def new_admin_token(slug: str):
    """Replace the study's admin token, e.g. when it may have leaked."""
    study = _admin_study(slug)
    ask = _confirmed(
        study,
        f"Give study {study.slug} a new admin token?",
        "The current admin token stops working at once and every other browser logged in to this study "
        "is logged out; the new token is shown once on the next page.",
        "Make a new admin token",
    )
    if ask is not None:
        return ask
    db = get_db()
    token = rotate_admin_token(db, study.id)
    study = db.scalar(select(Study).where(Study.slug == slug))
    _remember(study)  # this browser stays logged in
    return _render_study(study, new_admin_token=token)
