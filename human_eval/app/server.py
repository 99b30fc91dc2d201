"""``maxbench serve``: the rating app under gunicorn, checked before it starts.

``serve(host, port, workers, threads, access_log)`` checks everything that would stop the
server once gunicorn runs (the numbers, the address and port, the database and the secret
key, by building the app once in this process) and answers a problem with one-line
MaxbenchError, before any worker starts. Then it runs gunicorn with ``RedactingLogger``:
gunicorn's own logger, whose every line (errors, the access log, and the app's own log,
maxbench.human_eval.logs) has annotator and admin tokens and query-string values redacted, and
whose access log goes to stderr like every other line, stdout staying free for the caller.

gunicorn is the ``server`` extra: it is imported when ``serve`` runs, so that without it
``maxbench serve`` says in one line how to install it (``SERVER_EXTRA``) and the rest of the
package (creating studies, reports, the app under a test client) works.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import sys

from maxbench.errors import MaxbenchError
from maxbench.human_eval import PRODUCTION_DOCS
from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.logs import add_redaction, log
from maxbench.human_eval.store.db import database_url, dispose_engines, shown_url

SERVER_EXTRA = "maxbench serve needs the 'server' extra (gunicorn is not installed): pip install 'maxbench[server]'"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(host: str, port: int) -> None:
    """Bind ``host:port`` once, as gunicorn will, and say in one line why that fails."""
    if not 1 <= port <= 65535:
        raise MaxbenchError(f"--port {port} is not a TCP port: choose one from 1 to 65535, e.g. 8000")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise MaxbenchError(
            f"--host {host!r} is not an address ({reason}): use 127.0.0.1, 0.0.0.0 or an address of this machine"
        ) from None
    with socket.socket(family, kind, proto) as sock:
        # As gunicorn does: a port left in TIME_WAIT by a stopped server is free to reuse.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise MaxbenchError(
                    f"port {port} on {host} is already in use (another server?): stop it or choose another --port"
                ) from None
            if exc.errno == errno.EACCES:
                raise MaxbenchError(
                    f"port {port} on {host} needs administrator rights: choose a port of 1024 or more, e.g. 8000"
                ) from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise MaxbenchError(
                    f"--host {host} is not an address of this machine: use 127.0.0.1, 0.0.0.0 or one of its addresses"
                ) from None
            raise MaxbenchError(
                f"cannot listen on {host}:{port} ({exc.strerror}): choose another --host or --port"
            ) from None


def _rating_server_class() -> type:
    """gunicorn's application class serving ``create_app()``, logging through ``RedactingLogger``:
    gunicorn's logger with secrets redacted from every line and the access log on stderr.

    gunicorn is imported here; without it, ``SERVER_EXTRA`` as a MaxbenchError."""
    try:
        from gunicorn import glogging
        from gunicorn.app.base import BaseApplication
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "gunicorn":
            raise
        raise MaxbenchError(SERVER_EXTRA) from None

    class RedactingLogger(glogging.Logger):
        def setup(self, cfg):
            super().setup(cfg)
            if cfg.accesslog == "-":
                self._set_handler(self.access_log, "-", logging.Formatter(self.access_fmt), stream=sys.stderr)
            for logger in (self.error_log, self.access_log):
                for handler in logger.handlers:
                    add_redaction(handler)
            # The app's own lines go where gunicorn's go, with its time stamps and process ids.
            for handler in list(log.handlers):
                if getattr(handler, "_gunicorn", False):
                    log.removeHandler(handler)
            for handler in self.error_log.handlers:
                log.addHandler(handler)
            log.propagate = False

    class RatingServer(BaseApplication):
        def __init__(self, options: dict):
            self.options = options
            super().__init__()

        def load_config(self):
            self.cfg.set("logger_class", RedactingLogger)
            for key, value in self.options.items():
                if value is not None:
                    self.cfg.set(key, value)

        def load(self):
            return create_app()

    return RatingServer


def serve(host: str, port: int, workers: int, threads: int, access_log: bool) -> None:
    rating_server = _rating_server_class()  # first: without gunicorn no other check matters
    if workers < 1 or threads < 1:
        raise MaxbenchError("--workers and --threads must be at least 1")
    url = database_url()
    # Build the app once here: a bad database or secret-key folder is one line now rather
    # than a traceback in every worker.
    create_app()
    dispose_engines()  # no pooled connection may cross the fork into the workers
    check_address(host, port)
    if not _is_loopback(host) and os.environ.get("MAXBENCH_SECURE_COOKIES") != "1":
        print(
            "maxbench: warning: serving on a non-loopback address with plain-HTTP cookies; put the app "
            f"behind an HTTPS reverse proxy and set MAXBENCH_SECURE_COOKIES=1 (see {PRODUCTION_DOCS})",
            file=sys.stderr,
        )
    # An IPv6 address is written in brackets before a port, in the bind string and in URLs.
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    options = {
        "bind": netloc,
        "workers": workers,
        "threads": threads,
        "worker_class": "gthread" if threads > 1 else "sync",
        "timeout": 30,
        "graceful_timeout": 10,
        "accesslog": "-" if access_log else None,
        "errorlog": "-",
        "loglevel": "info",
        # gunicorn's runtime control socket is one fixed path per user: two servers
        # on one machine would fight over it, and nothing here uses it.
        "control_socket_disable": True,
    }
    print(
        f"maxbench: rating app on http://{netloc}/ (admin: /admin/login), database {shown_url(url)}",
        file=sys.stderr,
        flush=True,
    )
    try:
        rating_server(options).run()
    except SystemExit as exc:
        # gunicorn exits non-zero when it cannot bind after all (another server took the
        # port since the check) or a worker cannot boot; its log lines above say which.
        if exc.code not in (0, None):
            raise MaxbenchError(
                f"the rating server stopped (gunicorn status {exc.code}): the lines above say why"
            ) from None
