"""The rating app: ``create_app(config=None)`` builds the Flask application.

Configuration comes from the environment, then from ``config`` (a dict, for tests):

- ``MAXBENCH_DB_URL`` -> ``DB_URL``: SQLAlchemy URL; default SQLite under
  ``$MAXBENCH_HOME/human_eval/`` (see maxbench.human_eval.store.db).
- ``MAXBENCH_SECRET_KEY`` -> ``SECRET_KEY``: signs the session cookie. Without it a random
  key is created once in ``$MAXBENCH_HOME/human_eval/secret_key`` (mode 0600) and shared
  by every worker process, so sessions survive restarts.
- ``MAXBENCH_SECURE_COOKIES=1`` -> ``SESSION_COOKIE_SECURE``: send cookies over HTTPS only.
  Turn it on whenever the app is reached through HTTPS (behind a reverse proxy).
- ``MAXBENCH_PROXY_FIX=1``: trust one proxy's X-Forwarded-For/-Proto/-Host headers
  (werkzeug ProxyFix); only when a reverse proxy sets them.

The layout is Flask's tutorial's: this factory imports the blueprints (maxbench.human_eval.app.annotator,
maxbench.human_eval.app.admin), and they and the factory import the helpers (maxbench.human_eval.store.db for the
request's database session, maxbench.human_eval.app.errors for error pages), never this module.

Production: ``gunicorn -w 4 -b 127.0.0.1:8000 'maxbench.human_eval.app.factory:create_app()'`` (see README).
"""

from __future__ import annotations

import os
import secrets
import tempfile

from flask import Flask, request
from flask_wtf.csrf import CSRFProtect

from maxbench.errors import MaxbenchError
from maxbench.fileio import maxbench_home
from maxbench.human_eval.app import errors as error_pages
from maxbench.human_eval.app.admin import bp as admin_bp
from maxbench.human_eval.app.annotator import bp as annotator_bp
from maxbench.human_eval.app.enrolment import PROLIFIC_ORIGIN
from maxbench.human_eval.app.enrolment import bp as enrolment_bp
from maxbench.human_eval.store import db
from maxbench.human_eval.store.db import database_url

csrf = CSRFProtect()


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _persistent_secret_key() -> str:
    """One random key per MAXBENCH_HOME, created atomically so concurrent workers agree."""
    path = maxbench_home() / "human_eval" / "secret_key"
    try:
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
        key = path.read_text().strip()
    except OSError as exc:
        raise MaxbenchError(
            f"cannot keep the app's secret key in {path} ({exc.strerror}): set MAXBENCH_SECRET_KEY "
            "or point MAXBENCH_HOME at a writable folder"
        ) from None
    if not key:
        raise MaxbenchError(
            f"the secret key file {path} is empty: delete it (a new key is made) or set MAXBENCH_SECRET_KEY"
        )
    return key


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

    db.init_app(app)
    csrf.init_app(app)
    app.register_blueprint(annotator_bp)
    app.register_blueprint(enrolment_bp)
    app.register_blueprint(admin_bp, url_prefix="/admin")
    app.after_request(_security_headers)
    error_pages.init_app(app)
    return app


def _security_headers(response):
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
        # The last submit's redirects end at Prolific's completion URL (maxbench.human_eval.app.enrolment):
        # Chromium checks form-action on every redirect of a form submission.
        f"form-action 'self' {PROLIFIC_ORIGIN}"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    # Never a Referer to other sites (nothing of a study leaks); same-origin Referers stay,
    # because Flask-WTF's CSRF check over HTTPS requires them.
    response.headers["Referrer-Policy"] = "same-origin"
    if not request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"
    return response
