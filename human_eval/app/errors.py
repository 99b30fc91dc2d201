"""Every failure of the rating app as a page (or JSON) without a stack trace.

``error_response(code, message=None)`` answers with the error page (JSON for ``*.json``
URLs) and a plain message for annotators; ``init_app(app)`` registers the handlers that
turn CSRF failures, HTTP errors, an unavailable database and anything unexpected into
such answers. The trace goes to the server log (through maxbench.human_eval.logs, which redacts
credentials), never to the page.
"""

from __future__ import annotations

from flask import Flask, jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from werkzeug.exceptions import HTTPException

from maxbench.human_eval.logs import log
from maxbench.human_eval.store.db import DatabaseBusy, DatabaseGone

MESSAGES = {
    400: "The request could not be understood. Go back, reload the page and try again.",
    403: "You do not have access to this page.",
    404: "This page does not exist. If you followed your personal link, check that you copied all of it.",
    405: "This page cannot be used that way.",
    409: "This page is out of date. Continue with the current item.",
    413: "What was sent is too large.",
    500: "Something went wrong on the server. Your earlier ratings are saved; please try again in a minute.",
    503: "The rating database is busy or unavailable right now. Your earlier ratings are saved; "
    "please try again in a minute.",
}


def _wants_json() -> bool:
    return request.path.endswith(".json")


def error_response(code: int, message: str | None = None):
    message = message or MESSAGES.get(code, MESSAGES[500])
    if _wants_json():
        return jsonify(error=message), code
    return render_template("error.html", code=code, message=message), code


def init_app(app: Flask) -> None:
    @app.errorhandler(CSRFError)
    def _csrf(exc):
        return error_response(
            400, "This form has expired or did not come from this site. Go back, reload the page and submit again."
        )

    @app.errorhandler(HTTPException)
    def _http(exc):
        return error_response(exc.code or 500)

    @app.errorhandler(OperationalError)
    def _db_unavailable(exc):
        log.error("database unavailable on %s %s: %s", request.method, request.path, exc.orig)
        return error_response(503)

    @app.errorhandler(DatabaseBusy)
    @app.errorhandler(DatabaseGone)
    def _db_busy(exc):
        log.error("%s", exc)
        return error_response(503)

    @app.errorhandler(SQLAlchemyError)
    def _db_error(exc):
        log.exception("database error on %s %s", request.method, request.path)
        return error_response(500)

    @app.errorhandler(Exception)
    def _unexpected(exc):
        log.exception("unexpected error on %s %s", request.method, request.path)
        return error_response(500)
