"""The rating app: ``create_app(config=None)`` builds the Flask application.

Configuration comes from the environment, then from ``config`` (a dict, for tests):

- ``MAXBENCH_DB_URL`` -> ``DB_URL``: SQLAlchemy URL; default SQLite under
  ``$MAXBENCH_HOME/human_eval/`` (see human_eval.db).
- ``MAXBENCH_SECRET_KEY`` -> ``SECRET_KEY``: signs the session cookie. Without it a random
  key is created once in ``$MAXBENCH_HOME/human_eval/secret_key`` (mode 0600) and shared
  by every worker process, so sessions survive restarts.
- ``MAXBENCH_SECURE_COOKIES=1`` -> ``SESSION_COOKIE_SECURE``: send cookies over HTTPS only.
  Turn it on whenever the app is reached through HTTPS (behind a reverse proxy).
- ``MAXBENCH_PROXY_FIX=1``: trust one proxy's X-Forwarded-For/-Proto/-Host headers
  (werkzeug ProxyFix); only when a reverse proxy sets them.

Production: ``gunicorn -w 4 -b 127.0.0.1:8000 'human_eval.app:create_app()'`` (see README).
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile

from flask import Flask, g, jsonify, render_template, request
from flask_wtf.csrf import CSRFError, CSRFProtect
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import sessionmaker
from werkzeug.exceptions import HTTPException

from systems.assets import maxbench_home

from .db import DatabaseBusy, DatabaseGone, database_url, engine_for

csrf = CSRFProtect()
log = logging.getLogger("maxbench.human_eval")

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


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _persistent_secret_key() -> str:
    """One random key per MAXBENCH_HOME, created atomically so concurrent workers agree."""
    path = maxbench_home() / "human_eval" / "secret_key"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".secret_key.")
        try:
            os.write(fd, secrets.token_hex(32).encode())
            os.close(fd)
            os.chmod(tmp, 0o600)
            try:
                os.link(tmp, path)  # fails if another worker won the race: use its key
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    return path.read_text().strip()


def create_app(config: dict | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(
        DB_URL=database_url(),
        SECRET_KEY=os.environ.get("MAXBENCH_SECRET_KEY"),
        SESSION_COOKIE_NAME="maxbench_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=_env_flag("MAXBENCH_SECURE_COOKIES"),
        PROXY_FIX=_env_flag("MAXBENCH_PROXY_FIX"),
        # The CSRF token lives as long as the session: an annotator who reads slowly must
        # not lose a rating to an expired token.
        WTF_CSRF_TIME_LIMIT=None,
        WTF_CSRF_SSL_STRICT=True,
        MAX_CONTENT_LENGTH=64 * 1024,
    )
    if config:
        app.config.update(config)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = _persistent_secret_key()
    if app.config["PROXY_FIX"]:
        from werkzeug.middleware.proxy_fix import ProxyFix

        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1, x_host=1)

    engine = engine_for(app.config["DB_URL"], create=True)
    app.extensions["maxbench_sessionmaker"] = sessionmaker(bind=engine, expire_on_commit=False)
    csrf.init_app(app)

    from .admin import bp as admin_bp
    from .annotator import bp as annotator_bp

    app.register_blueprint(annotator_bp)
    app.register_blueprint(admin_bp, url_prefix="/admin")

    app.teardown_appcontext(_close_db)
    app.after_request(_security_headers)
    _register_error_handlers(app)
    return app


def get_db():
    """The request's database session (opened on first use, closed at teardown)."""
    if "db" not in g:
        from flask import current_app

        g.db = current_app.extensions["maxbench_sessionmaker"]()
    return g.db


def _close_db(_exc=None) -> None:
    db = g.pop("db", None)
    if db is not None:
        db.close()  # rolls back anything not committed: only commits were acknowledged


def _security_headers(response):
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    # Never a Referer to other sites (nothing of a study leaks); same-origin Referers stay,
    # because Flask-WTF's CSRF check over HTTPS requires them.
    response.headers["Referrer-Policy"] = "same-origin"
    if not request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"
    return response


def _wants_json() -> bool:
    return request.path.endswith(".json")


def error_response(code: int, message: str | None = None):
    message = message or MESSAGES.get(code, MESSAGES[500])
    if _wants_json():
        return jsonify(error=message), code
    return render_template("error.html", code=code, message=message), code


def _register_error_handlers(app: Flask) -> None:
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
        log.error("database unavailable: %s", exc.orig)
        return error_response(503)

    @app.errorhandler(DatabaseBusy)
    @app.errorhandler(DatabaseGone)
    def _db_busy(exc):
        log.error("%s", exc)
        return error_response(503)

    @app.errorhandler(SQLAlchemyError)
    def _db_error(exc):
        log.exception("database error")
        return error_response(500)

    @app.errorhandler(Exception)
    def _unexpected(exc):
        log.exception("unexpected error")  # the trace goes to the server log, never the page
        return error_response(500)
