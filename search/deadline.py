"""The bounds of one search in time: a deadline for the whole search and a statement timeout on each
of its queries.

A search's cost must depend on its answer, not on the data or on a slow neighbour: every query it sends
runs inside ``SearchDeadline.queries()``, under a ``statement_timeout`` that is the smaller of
MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS and the time left before MEMORYHUB_SEARCH_DEADLINE_MS (set on the
connection for the search and put back afterwards; inside a caller's transaction, in a savepoint). The
queries run on the connection reads go to (memoryhub/replicas.py: a replica or the primary), or on the
one named by ``queries(using=…)``.
Postgres cancels a statement that runs past it (the work stops on the server too, not only in this
process), and the search answers with what it has (``SearchTimedOut``), or a 503 when it has nothing.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import psycopg
from django.conf import settings
from django.db import DatabaseError, OperationalError, connections, transaction

from memoryhub.domain import Busy
from memoryhub.replicas import current_read_alias


class SearchTimedOut(Exception):
    """The search's deadline passed, or one of its queries ran past its statement timeout."""


class SearchUnavailable(Busy):
    """The search found nothing before its deadline (the database is slow or busy): 503 with Retry-After."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="search_timeout")


class SearchDeadline:
    """``with SearchDeadline() as deadline:`` around one search; its queries in ``deadline.queries()``."""

    def __init__(self, *, deadline_ms: int | None = None, statement_timeout_ms: int | None = None) -> None:
        self.deadline_ms = settings.MEMORYHUB_SEARCH_DEADLINE_MS if deadline_ms is None else deadline_ms
        self.statement_timeout_ms = (
            settings.MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS if statement_timeout_ms is None else statement_timeout_ms
        )
        self.started = time.monotonic()
        self.timed_out = False  # set once anything was cut short: the answer's message says so
        # Per database alias: what this search set on the connection outside transactions, and the
        # connection's own value, put back at the end.
        self._session_timeout: dict[str, int] = {}
        self._previous: dict[str, str] = {}

    def __enter__(self) -> SearchDeadline:
        return self

    def __exit__(self, *exc) -> None:
        for alias, previous in self._previous.items():
            if connections[alias].connection is None:  # closed (a replica that failed): nothing to put back
                continue
            try:
                with connections[alias].cursor() as cursor:
                    cursor.execute("SELECT set_config('statement_timeout', %s, false)", [previous])
            except DatabaseError:  # a broken connection is discarded by Django anyway
                pass

    def remaining(self) -> float:
        """Seconds left before the deadline (negative once it passed)."""
        return self.deadline_ms / 1000 - (time.monotonic() - self.started)

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0

    @contextmanager
    def queries(self, *, using: str | None = None):
        """Run the block's queries under the statement timeout; SearchTimedOut when the deadline has
        passed already or Postgres cancelled one of them."""
        alias = using or current_read_alias()
        connection = connections[alias]
        left_ms = int(self.remaining() * 1000)
        if left_ms <= 0:
            self.timed_out = True
            raise SearchTimedOut
        timeout_ms = max(1, min(self.statement_timeout_ms, left_ms))
        try:
            if connection.in_atomic_block:
                with self._in_savepoint(timeout_ms, alias=alias):
                    yield
            else:
                # Autocommit (the API): a session setting, set once per search while the deadline is far
                # and put back by __exit__, costs no transaction round trips per phase.
                if timeout_ms != self._session_timeout.get(alias):
                    with connection.cursor() as cursor:
                        cursor.execute(
                            "SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, false)",
                            [f"{timeout_ms}ms"],
                        )
                        previous = cursor.fetchone()[0]
                    self._previous.setdefault(alias, previous)
                    self._session_timeout[alias] = timeout_ms
                yield
        except OperationalError as exc:
            if isinstance(exc.__cause__, psycopg.errors.QueryCanceled):
                self.timed_out = True
                raise SearchTimedOut from exc
            raise

    @contextmanager
    def _in_savepoint(self, timeout_ms: int, *, alias: str):
        """Inside a caller's transaction: a savepoint (a cancelled statement must not abort the caller's
        transaction) with SET LOCAL, put back afterwards since it would outlive the released savepoint."""
        connection = connections[alias]
        with transaction.atomic(using=alias):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)",
                    [f"{timeout_ms}ms"],
                )
                previous = cursor.fetchone()[0]
            yield
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [previous])
