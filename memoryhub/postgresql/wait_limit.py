"""A web request never waits for the database without end.

A database that is stopped refuses connections, and the service answers 503 at once
(memoryhub/postgresql/reachable.py). A database that hangs (its processes stopped, a network that drops
the replies, a server out of memory) accepts the connection and never answers: PostgreSQL's own
statement_timeout cannot fire there, and a query, a commit or the pool's check of a connection waited
for its answer with no end, holding the request's thread (and /healthz said nothing: it hung too).

Every connection the service opens is a ``LimitedConnection``: psycopg's, whose waits for the server (each
query, commit and check goes through ``Connection.wait``) end after the limit of the context they run in,
with an OperationalError (which the API answers ``503 database_unavailable``), the connection closed. The
limit is set per web request (``WaitLimitMiddleware``: MEMORYHUB_DB_ANSWER_TIMEOUT, 30 s by default; a
search's own deadline is far shorter) and shorter for /healthz; outside a request (Celery tasks, commands,
whose index builds may rightly take minutes) there is none. Helper threads take their request's limit
(a ContextVar, copied by search/beside.py). New connections are bounded by their connect_timeout.
"""

from __future__ import annotations

import contextlib
import contextvars

import psycopg
from django.conf import settings

# (seconds, what set them: named in the error) or None.
_limit: contextvars.ContextVar[tuple[float, str] | None] = contextvars.ContextVar("memoryhub_db_wait_limit", default=None)


@contextlib.contextmanager
def wait_limit(seconds: float | None, *, why: str = "MEMORYHUB_DB_ANSWER_TIMEOUT"):
    """Within the block, each wait for the database's answer ends after ``seconds`` (None or 0: no limit)."""
    token = _limit.set((seconds, why) if seconds else None)
    try:
        yield
    finally:
        _limit.reset(token)


@contextlib.contextmanager
def wait_limit_at_most(seconds: float, *, why: str):
    """Within the block, the limit in force or ``seconds``, whichever is shorter (no limit stays none)."""
    limit = _limit.get()
    if limit is None or limit[0] <= seconds:
        yield
    else:
        with wait_limit(seconds, why=why):
            yield


class LimitedConnection(psycopg.Connection):
    def wait(self, gen, *args, **kwargs):
        limit = _limit.get()
        if limit is None or args or kwargs.get("timeout") is not None:
            return super().wait(gen, *args, **kwargs)
        seconds, why = limit
        try:
            return super().wait(gen, *args, **kwargs, timeout=seconds)
        except psycopg.errors._WaitTimeout:  # psycopg's own (private) error for a wait past its timeout
            self.close()  # the answer may still come: this connection cannot be used again
            raise psycopg.OperationalError(f"the database did not answer within {seconds:g} s ({why})") from None


class WaitLimitMiddleware:
    """The first middleware: every wait of a request for the database ends after MEMORYHUB_DB_ANSWER_TIMEOUT."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with wait_limit(settings.MEMORYHUB_DB_ANSWER_TIMEOUT):
            return self.get_response(request)
