"""The bounds of one search in time: a deadline for the whole search and a statement timeout on each
of its queries.

A search's cost must depend on its answer, not on the data or on a slow neighbour: every query it sends
runs inside ``SearchDeadline.queries()``, under a ``statement_timeout`` that is the smaller of
MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS and the time left before MEMORYHUB_SEARCH_DEADLINE_MS (in
autocommit, the API's mode, each statement carries it as ``SET LOCAL`` in its own round trip; inside a
caller's transaction, it is set in a savepoint). The queries run on the connection reads go to
(memoryhub/replicas.py: a replica or the primary), or on the one named by ``queries(using=…)``.
Postgres cancels a statement that runs past it (the work stops on the server too, not only in this
process), and the search answers with what it has (``SearchTimedOut``), or a 503 when it has nothing.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction

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

    def __enter__(self) -> SearchDeadline:
        return self

    def __exit__(self, *exc) -> None:
        pass  # nothing of the search's bounds outlives its statements (or, in a transaction, its savepoints)

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
                with connection.execute_wrapper(_StatementTimeout(timeout_ms)):
                    yield
        except OperationalError as exc:
            if isinstance(exc.__cause__, psycopg.errors.QueryCanceled):
                self.timed_out = True
                raise SearchTimedOut from exc
            raise

    @contextmanager
    def bookkeeping(self):
        """The search's own write once it has its answer (its usage row), under the statement timeout
        even when the deadline has passed: a locked table must not hold the answer back. Inside a caller's
        transaction the write keeps to its own savepoint, unbounded, as before."""
        connection = connections[DEFAULT_DB_ALIAS]
        if connection.in_atomic_block:
            yield
        else:
            with connection.execute_wrapper(_StatementTimeout(self.statement_timeout_ms)):
                yield

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


class _StatementTimeout:
    """An execute wrapper bounding each statement in autocommit (the API) by ``SET LOCAL statement_timeout``
    sent ahead of it in the same query string: Postgres starts a statement's timeout afresh for each
    statement of a string and runs the string as one transaction, so the setting bounds the statement and
    ends with it. No round trip to set the timeout nor to put it back (they were two per search), and
    nothing to put back when the statement fails.

    A string of several statements needs the simple query protocol, i.e. psycopg's client-side binding
    (Django's default). Otherwise (server-side binding, executemany) the statement runs in a transaction
    of its own after the setting: the same bound, at the price of the transaction's round trips."""

    def __init__(self, timeout_ms: int) -> None:
        self.set_timeout = f"SET LOCAL statement_timeout = {int(timeout_ms)}"

    def __call__(self, execute, sql, params, many, context):
        cursor = context["cursor"].cursor  # psycopg's
        if isinstance(sql, str) and not many and isinstance(cursor, psycopg.ClientCursor):
            result = execute(f"{self.set_timeout}; {sql}", params, many, context)
            cursor.nextset()  # the statement's own result, after the setting's
            return result
        with transaction.atomic(using=context["connection"].alias):
            cursor.execute(self.set_timeout)
            return execute(sql, params, many, context)
