"""Read replicas: searches read from streaming replicas of the database when DATABASE_REPLICA_URLS names
some; everything else reads and writes the primary.

Which reads go to a replica: only what runs inside ``replica_reads(alias)``, which ``memory_search``
opens around its search (every caller: REST API, agent tools, MCP, admin playground). A search tolerates
a bounded lag: an index it has not seen yet is a note in its answer already ("N file(s) are still being
indexed"). Everything else stays on the primary: writes, the search's ``pending`` count (read-your-writes:
a file stored a moment ago must be counted as pending, not missed), file reads, sync, the admin.

How a replica is chosen (``search_read_alias``): the replicas take turns; one is used when it answered a
check within the last CHECK_SECONDS, or answers one now. The check is one query on the replica that also
measures its replay lag (0 when it has replayed everything it received); a replica that fails the check,
lags more than DATABASE_REPLICA_MAX_LAG_SECONDS, or fails in the middle of a search (``replica_failed``)
is left alone for DATABASE_REPLICA_RETRY_SECONDS, and the search runs on the primary: the client never
sees the replica's failure. With no replica configured, nothing here runs a query.

Raw SQL in the search modules goes through ``read_connection`` (``connection`` of the alias in use)
instead of ``django.db.connection``; ORM reads follow ``ReadReplicaRouter``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

logger = logging.getLogger(__name__)

# How long a passed check stands: a replica is checked at most this often per process while it is healthy.
CHECK_SECONDS = 1.0

# Replay lag: 0 when everything received has been replayed, else the age of the last replayed commit.
# (A replica cut off from its primary replays everything it received and reports 0: the lag it cannot
# see is bounded by the primary's wal_sender_timeout, after which it shows as unreachable from the
# primary, not from here.)
_LAG_SQL = (
    "SELECT CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 "
    "ELSE COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0) END::float8"
)

_read_alias: ContextVar[str] = ContextVar("memoryhub_read_alias", default=DEFAULT_DB_ALIAS)
_clock = time.monotonic  # tests move time by replacing this
_turn = itertools.count()


@dataclass
class _ReplicaState:
    down_until: float = float("-inf")
    checked_at: float = float("-inf")


_states: dict[str, _ReplicaState] = {}
_states_lock = threading.Lock()


def _state(alias: str) -> _ReplicaState:
    with _states_lock:
        return _states.setdefault(alias, _ReplicaState())


def replica_aliases() -> list[str]:
    """The database aliases of the configured replicas (settings: replica_1, replica_2, …)."""
    return list(settings.MEMORYHUB_DB_REPLICA_ALIASES)


class ReadReplicaRouter:
    """ORM reads go to the alias of the enclosing ``replica_reads`` (the primary outside one); writes,
    migrations and everything else to the primary."""

    def db_for_read(self, model, **hints):
        return _read_alias.get()

    def db_for_write(self, model, **hints):
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        return True  # the replicas hold the primary's rows

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return db == DEFAULT_DB_ALIAS


def current_read_alias() -> str:
    return _read_alias.get()


@contextmanager
def replica_reads(alias: str):
    """Reads of the block (ORM and ``read_connection``) from ``alias``."""
    token = _read_alias.set(alias)
    try:
        yield
    finally:
        _read_alias.reset(token)


class _ReadConnection:
    """``django.db.connection`` of the alias reads currently go to (see ``replica_reads``)."""

    def __getattr__(self, name):
        return getattr(connections[_read_alias.get()], name)


read_connection = _ReadConnection()


def search_read_alias() -> str:
    """A replica fit to search now, or the primary's alias when none is."""
    aliases = replica_aliases()
    if not aliases:
        return DEFAULT_DB_ALIAS
    start = next(_turn) % len(aliases)
    for alias in aliases[start:] + aliases[:start]:
        if _fit(alias):
            return alias
    return DEFAULT_DB_ALIAS


def _fit(alias: str) -> bool:
    state = _state(alias)
    now = _clock()
    if now < state.down_until:
        return False
    if now - state.checked_at < CHECK_SECONDS:
        return True
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(_LAG_SQL)
            lag = cursor.fetchone()[0]
    except DatabaseError as exc:
        replica_failed(alias, reason=f"{exc.__class__.__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        return False
    max_lag = settings.DATABASE_REPLICA_MAX_LAG_SECONDS
    if max_lag and lag > max_lag:
        replica_failed(alias, reason=f"replay lag {lag:.1f} s is over DATABASE_REPLICA_MAX_LAG_SECONDS ({max_lag:g})")
        return False
    state.checked_at = now
    return True


def replica_failed(alias: str, *, reason: str) -> None:
    """Leave ``alias`` alone for DATABASE_REPLICA_RETRY_SECONDS (its connection in this thread is closed:
    the next try opens a fresh one)."""
    state = _state(alias)
    state.down_until = _clock() + settings.DATABASE_REPLICA_RETRY_SECONDS
    state.checked_at = float("-inf")
    try:
        connections[alias].close()
    except DatabaseError:
        pass
    logger.warning("read replica %s not used for %g s: %s", alias, settings.DATABASE_REPLICA_RETRY_SECONDS, reason)


def replicas_reset() -> None:
    """Forget every replica's state (tests)."""
    with _states_lock:
        _states.clear()
