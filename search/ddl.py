"""What the background index and stats tasks share: run one at a time, and build indexes without
blocking writes where Postgres allows it."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection


@contextmanager
def advisory_lock(*key: int) -> Iterator[bool]:
    """Hold the session advisory lock ``key`` (one bigint, or two ints: a class and an id) for the block;
    yields False (holding nothing) when another session has it, so a second run of a periodic task can
    return at once."""
    placeholders = ", ".join(["%s"] * len(key))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_try_advisory_lock({placeholders})", list(key))
        acquired = cursor.fetchone()[0]
    if not acquired:
        yield False
        return
    try:
        yield True
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT pg_advisory_unlock({placeholders})", list(key))
        except DatabaseError:  # the transaction is aborted; the error that aborted it is on its way up
            pass


def concurrently_clause() -> str:
    """" CONCURRENTLY" for CREATE/DROP INDEX, or "" inside a transaction block (tests wrap everything
    in one), where CONCURRENTLY cannot run; there, pending deferred foreign-key checks are run first,
    since an index cannot be built while they are pending."""
    if not connection.in_atomic_block:
        return " CONCURRENTLY"
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    return ""
