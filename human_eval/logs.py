"""The rating app's logger, and log lines without credentials.

An annotator's personal link (``/a/<token>``) is their only credential, and the README
promises that tokens are kept only as digests; a log line is as readable as the database,
so no line may carry one. ``redact(text)`` replaces

- whatever follows ``/a/`` in a URL (the annotator token; also URL-encoded, any case),
- admin tokens (``adm-...``, as printed by ``maxbench study create``) wherever they appear,
- every value of a query string (``?next=...&x=...``): a pasted secret lands there,

with ``[redacted]``. ``RedactSecrets`` is a logging filter that rewrites a record's message
and traceback through ``redact``; inside a request it also redacts that request's link
token wherever it appears (an exception message may quote it without its ``/a/``). It guards ``log`` (the app's own logger) here and the
server's error and access logs in human_eval/app/server.py.
"""

from __future__ import annotations

import logging
import re

from flask import has_request_context, request

REDACTED = "[redacted]"

_ANNOTATOR_LINK = re.compile(r"(/a(?:/|%2f))[^/\s?#\"'&]+", re.IGNORECASE)
_ADMIN_TOKEN = re.compile(r"adm-[A-Za-z0-9_-]{8,}")
_QUERY = re.compile(r"\?[^\s\"'#]*")
_QUERY_VALUE = re.compile(r"=[^&;]*")


def _redact_query(match: re.Match) -> str:
    return _QUERY_VALUE.sub("=" + REDACTED, match.group(0))


def _request_token() -> str | None:
    if not has_request_context():
        return None
    token = (request.view_args or {}).get("token")
    return token if isinstance(token, str) and token else None


def redact(text: str) -> str:
    """``text`` without annotator tokens, admin tokens and query-string values."""
    token = _request_token()
    if token:
        text = text.replace(token, REDACTED)
    text = _ANNOTATOR_LINK.sub(r"\1" + REDACTED, text)
    text = _ADMIN_TOKEN.sub(REDACTED, text)
    return _QUERY.sub(_redact_query, text)


class RedactSecrets(logging.Filter):
    """Rewrites each record before any handler formats it, so every handler's output is safe."""

    _traceback = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._traceback.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def add_redaction(logger: logging.Logger | logging.Handler) -> None:
    """Guard a logger (records logged on it) or a handler (every record it writes), once."""
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())


log = logging.getLogger("maxbench.human_eval")
add_redaction(log)
