"""The database backend of DATABASE_URL and DATABASE_REPLICA_URLS: Django's PostgreSQL backend, with a
connection error that names the setting to change when the server refuses the start-up option the service
sends, an answer at once while the database is known to be down (memoryhub/postgresql/reachable.py), and
connections whose waits for the database end within a web request's limit (memoryhub/postgresql/wait_limit.py;
a pool's check of a connection within POOL_CHECK_SECONDS), and whose statements end soon after the client
stopped waiting (MEMORYHUB_DB_CLIENT_CHECK_SECONDS).

Every connection starts with ``-c plan_cache_mode=force_custom_plan`` in its libpq ``options``
(MEMORYHUB_DB_FORCE_CUSTOM_PLANS, memoryhub/settings.py). A connection pooler may refuse any start-up option:
PgBouncer answers ``unsupported startup parameter: options`` (tests/memoryhub/test_pgbouncer.py). That
message alone does not say that the option is the service's own, nor how to do without it; this one does.
(With MEMORYHUB_DB_POOL_SIZE set, a web process connects through its pool, which logs the server's message
and answers "server busy"; ``make run`` and docker compose run ``migrate`` first, unpooled, which stops
with this message.)
"""

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.db.backends.postgresql import base

from memoryhub.postgresql.reachable import REACHABLE_PROBE_SECONDS, found_down, known_down
from memoryhub.postgresql.wait_limit import LimitedConnection, wait_limit_at_most

# The pool checks the connection it hands out (an empty query, CONN_HEALTH_CHECKS): a database that runs answers
# it at once. Within a request the check waits this long at most, not the request's whole answer limit (30 s by
# default): a hung database then costs a pooled process's first request the pool's wait (10 s), as a stopped one does.
POOL_CHECK_SECONDS = 2.0

# What the server or pooler answers to a start-up option it does not accept.
REFUSED_OPTIONS = "unsupported startup parameter: options"

HINT = (
    "the database server (a connection pooler?) refuses the start-up option this service sends with each "
    "connection (-c plan_cache_mode=force_custom_plan). Set MEMORYHUB_DB_FORCE_CUSTOM_PLANS=0, and run "
    "`ALTER ROLE <user> SET plan_cache_mode = force_custom_plan` on the database instead "
    "(docs/configuration.md)"
)


class _Psycopg:
    """psycopg as Django's backend uses it (``DatabaseWrapper.Database``), whose connections are
    LimitedConnection (memoryhub/postgresql/wait_limit.py)."""

    connect = staticmethod(LimitedConnection.connect)

    def __getattr__(self, name):
        return getattr(psycopg, name)


class DatabaseWrapper(base.DatabaseWrapper):
    Database = _Psycopg()

    @property
    def pool(self):
        options = self.settings_dict["OPTIONS"].get("pool")
        if isinstance(options, dict):
            options.setdefault("connection_class", LimitedConnection)
        return super().pool

    def _configure_connection(self, connection):
        # Run once per new connection (a pool's, when it opens one). A request that stops waiting closes its
        # connection (memoryhub/postgresql/wait_limit.py), and the server notices a client gone only when it
        # next reads or writes: without this check a statement ran on to its end, doing work nobody waits for.
        commit = super()._configure_connection(connection)
        seconds = settings.MEMORYHUB_DB_CLIENT_CHECK_SECONDS
        if seconds and connection.info.server_version >= 140000:
            connection.execute("SELECT set_config('client_connection_check_interval', %s, false)", [f"{seconds * 1000:.0f}"])
            commit = True
        return commit

    def get_new_connection(self, conn_params):
        # Without this, a pooled process holds each request's thread for the pool's whole wait while the
        # database is down, and a bare one for the connect timeout while it hangs
        # (memoryhub/postgresql/reachable.py). The primary only: a replica's wait is short.
        if self.alias == DEFAULT_DB_ALIAS and known_down():
            raise self.Database.OperationalError(
                f"the database did not answer a new connection (tried again every {REACHABLE_PROBE_SECONDS:g} s)"
            )
        try:
            if self.pool is None:
                return super().get_new_connection(conn_params)
            with wait_limit_at_most(POOL_CHECK_SECONDS, why="the pool's check of a connection"):
                return super().get_new_connection(conn_params)
        except psycopg.errors.ConnectionTimeout as exc:  # a bare server's own (a pool's wait ends in PoolTimeout)
            if self.alias == DEFAULT_DB_ALIAS:
                found_down(exc)
            raise
        except self.Database.OperationalError as exc:
            if REFUSED_OPTIONS in str(exc) and "plan_cache_mode" in str(conn_params.get("options", "")):
                raise self.Database.OperationalError(f"{exc.args[0] if exc.args else exc}; {HINT}") from exc
            raise
