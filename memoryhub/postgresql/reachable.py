"""Whether the database answers a new connection, asked by a connection of the process's own.

A pooled web process (MEMORYHUB_DB_POOL_SIZE; memoryhub/gunicorn_conf.py turns it on) gets its connections
from psycopg_pool, which waits up to MEMORYHUB_DB_POOL_TIMEOUT for one. That wait says only that no
connection came: every one was in use (the database answers: the server is busy), or the pool could open
none (the database is stopped, unreachable, or refuses the connection's options). One try of our own tells
the two apart, and is asked for by three callers:

- ``memoryhub.errors.database_unavailable_body``, after a pool's timeout: ``server_busy`` or
  ``database_unavailable``;
- ``memoryhub.postgresql.base.DatabaseWrapper``, before it opens a connection: while the last try found the
  database down (``known_down``), a request is answered ``database_unavailable`` at once instead of holding
  its thread for the pool's whole wait (10 s by default) on a connection that cannot open;
- ``/healthz`` (memoryhub/views.py), before its query: it tells a stopped or hung database within the try's
  2 s, where a pooled process's first wait for its pool takes the pool's timeout.

A bare server (no pool) connects at each request. A database that is stopped refuses at once, but a hung one
holds each new connection for its whole connect timeout (10 s): such a timeout counts as a try that found the
database down (``found_down``), and the requests after it are answered at once, as a pooled server's are.

A try is made at most once every REACHABLE_PROBE_SECONDS per process and lasts at most
REACHABLE_PROBE_TIMEOUT seconds; in between, the last answer holds. So during an outage a pooled process
answers its first request after the pool's wait and the others at once, and once the database is back its
requests reach the pool again within REACHABLE_PROBE_SECONDS.
"""

import logging
import math
import threading
import time

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections

REACHABLE_PROBE_SECONDS = 5.0
REACHABLE_PROBE_TIMEOUT = 2  # psycopg (as libpq) takes no less
_probe_lock = threading.Lock()
_probe: dict = {"at": -math.inf, "reachable": True}
_clock = time.monotonic  # the tests move it

logger = logging.getLogger(__name__)


def database_reachable() -> bool:
    """Whether a new connection to the database opens (one try of at most REACHABLE_PROBE_TIMEOUT seconds),
    asked at most once every REACHABLE_PROBE_SECONDS per process; in between, the last answer. A caller
    that comes while a try runs waits for its answer (the lock is held for the try)."""
    with _probe_lock:
        if _clock() - _probe["at"] < REACHABLE_PROBE_SECONDS:
            return _probe["reachable"]
        try:
            params = connections[DEFAULT_DB_ALIAS].get_connection_params()
            psycopg.connect(**{**params, "connect_timeout": REACHABLE_PROBE_TIMEOUT}).close()
        except Exception as exc:  # any failure to connect is the answer
            _record(reachable=False, reason=exc)
        else:
            _record(reachable=True)
        return _probe["reachable"]


def found_down(reason: Exception) -> None:
    """A connection of the process's own timed out: the same answer as a try's, without another try (a bare
    server's request, which connects by itself, found the database hung)."""
    with _probe_lock:
        _record(reachable=False, reason=reason)


def _record(*, reachable: bool, reason: Exception | None = None) -> None:
    """The answer of a try, with the lock held; the log says once when the database stops answering (with the
    reason: a pooler's refusal, say) and once when it answers again."""
    if not reachable and _probe["reachable"]:
        logger.error("the database does not answer a new connection: %s", str(reason).strip())
    if reachable and not _probe["reachable"]:
        logger.warning("the database answers a new connection again")
    _probe.update(at=_clock(), reachable=reachable)


def known_down() -> bool:
    """True while the last try found the database down and a try now (when that answer is old) finds it
    still down. Makes no try while the last answer was "reachable", which is the usual case: a process
    tries only when a pool's timeout or /healthz asks (or its own connection timed out: ``found_down``)."""
    if _probe["reachable"]:
        return False
    return not database_reachable()
