"""Searches read from a real streaming replica of the embedded server (pg_basebackup), and survive it
going away: the search answers from the primary, the replica is left alone for its cool-down, then used
again. The replica's own lag shows which server answered: with replay paused, a file committed on the
primary is missing from the replica's answers until the search goes back to the primary.

Time is the router's clock (memoryhub.replicas._clock), moved by the tests, never waited for; the only
waits are on the replica's replay position, with a generous timeout."""

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.db.backends.postgresql.base import DatabaseWrapper
from django.test.utils import CaptureQueriesContext

from memoryhub import embedded_postgres, replicas
from search.services import memory_search

pytestmark = [
    pytest.mark.django_db(transaction=True),  # the replica sees committed rows only
    pytest.mark.skipif(
        bool(settings.DATABASE_URL) or not embedded_postgres.is_installed(),
        reason="starts a replica of the embedded PostgreSQL",
    ),
]

ALIAS = "replica_test"
REPLAY_TIMEOUT_SECONDS = 120


@dataclass
class Replica:
    data_dir: Path
    params: dict

    def start(self) -> None:
        self.params = embedded_postgres.replica_start(replica_dir=self.data_dir, primary_dir=settings.EMBEDDED_POSTGRES_DIR)

    def stop(self) -> None:
        embedded_postgres.stop(self.data_dir)


@pytest.fixture(scope="module")
def replica_server(django_db_setup, django_db_blocker):
    # Under /tmp, not pytest's tmp_path: the socket path must stay short, and the folder must be
    # reachable by the user the server runs as.
    data_dir = Path(tempfile.mkdtemp(prefix="mh-replica-"))
    replica = Replica(data_dir=data_dir, params={})
    try:
        with django_db_blocker.unblock():
            replica.start()
        yield replica
    finally:
        replica.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(replicas, "_clock", lambda: now[0])
    return now


# How settings.py connects to a replica: persistent connections, or a pool (MEMORYHUB_DB_POOL_SIZE) whose
# wait for a connection is DATABASE_REPLICA_CONNECT_TIMEOUT.
CONNECTIONS = {
    "persistent": {"OPTIONS": {"connect_timeout": 2}},
    "pooled": {"CONN_MAX_AGE": 0, "OPTIONS": {"connect_timeout": 2, "pool": {"min_size": 1, "max_size": 2, "timeout": 2}}},
}


@pytest.fixture(params=list(CONNECTIONS))
def replica(request, replica_server, settings, clock):
    """The replica as the only entry of the replica list, searched with no lag limit unless a test sets one."""
    if not embedded_postgres.is_running(replica_server.data_dir):
        replica_server.start()
    primary = connections[DEFAULT_DB_ALIAS].settings_dict
    # A connection made here rather than a DATABASES entry: the test runner then neither sets up nor
    # flushes it (a hot standby is read-only), and it reads the test database through the replica.
    connections[ALIAS] = DatabaseWrapper(
        {**primary, "ENGINE": "django.db.backends.postgresql", "HOST": replica_server.params["host"],
         "PORT": str(replica_server.params["port"]), "USER": replica_server.params["user"], **CONNECTIONS[request.param]},
        alias=ALIAS,
    )
    settings.MEMORYHUB_DB_REPLICA_ALIASES = [ALIAS]
    settings.DATABASE_REPLICA_MAX_LAG_SECONDS = 0
    settings.DATABASE_REPLICA_RETRY_SECONDS = 30
    replicas.replicas_reset()
    yield replica_server
    connections[ALIAS].close()
    connections[ALIAS].close_pool()
    del connections[ALIAS]
    replicas.replicas_reset()


def _lsn(alias: str, sql: str):
    with connections[alias].cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def wait_until_replica(condition_sql: str) -> None:
    """Wait until the replica has received (or replayed) everything the primary has written so far."""
    target = _lsn(DEFAULT_DB_ALIAS, "SELECT pg_current_wal_lsn()::text")
    deadline = time.monotonic() + REPLAY_TIMEOUT_SECONDS
    while True:
        try:
            with connections[ALIAS].cursor() as cursor:
                cursor.execute(f"SELECT {condition_sql} >= %s::pg_lsn", [target])
                if cursor.fetchone()[0]:
                    return
        except OperationalError:
            # A replica just restarted may not take connections yet, and the pool retries with a backoff
            # after the failures of its down time: the wait is for the replica, not for one attempt.
            connections[ALIAS].close()
        assert time.monotonic() < deadline, f"the replica did not reach {target} in {REPLAY_TIMEOUT_SECONDS} s"
        time.sleep(0.05)


def found_paths(member, query: str) -> list[str]:
    return [result.path for result in memory_search(agent=member.agent, query=query).results]


def test_a_search_reads_the_replica_and_a_lagging_one_is_passed_over(alice, index_files, replica, settings, clock):
    index_files(alice, {"notes/heron.md": "The heron project ships in May; Caroline owns it.\n"})
    wait_until_replica("pg_last_wal_replay_lsn()")
    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        assert found_paths(alice, "heron project") == ["notes/heron.md"]
    assert on_replica.captured_queries, "the search did not read the replica"

    _lsn(ALIAS, "SELECT pg_wal_replay_pause()::text")
    try:
        index_files(alice, {"notes/osprey.md": "The osprey migration finished in June.\n"})
        wait_until_replica("pg_last_wal_receive_lsn()")  # received, not replayed: the replica lags
        # Without a lag limit the replica answers, and does not have the new file yet.
        assert "notes/osprey.md" not in found_paths(alice, "osprey migration")
        # With one, the next check measures the lag, and the search goes to the primary, which has it.
        settings.DATABASE_REPLICA_MAX_LAG_SECONDS = 0.001
        clock[0] += replicas.CHECK_SECONDS
        with CaptureQueriesContext(connections[ALIAS]) as on_replica:
            assert found_paths(alice, "osprey migration")[0] == "notes/osprey.md"
        assert [q["sql"] for q in on_replica.captured_queries] == [replicas._LAG_SQL]  # the check, then nothing
    finally:
        _lsn(ALIAS, "SELECT pg_wal_replay_resume()::text")


def test_searches_keep_working_when_the_replica_goes_away_and_use_it_again_after_the_cool_down(
    alice, index_files, replica, search, clock, monkeypatch
):
    index_files(alice, {"notes/heron.md": "The heron project ships in May; Caroline owns it.\n"})
    wait_until_replica("pg_last_wal_replay_lsn()")
    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        status, body = search(alice, "heron project")
    assert status == 200 and [r["path"] for r in body["results"]] == ["notes/heron.md"]
    assert on_replica.captured_queries

    replica.stop()
    # The replica passed its check a moment ago: this search starts on it, loses it, and runs again on
    # the primary. The client sees an ordinary answer.
    status, body = search(alice, "heron project")
    assert status == 200, body
    assert [r["path"] for r in body["results"]] == ["notes/heron.md"]
    # In its cool-down the replica is not even connected to.
    replica_connection = connections[ALIAS]
    connects = []
    new_connection = replica_connection.get_new_connection
    monkeypatch.setattr(replica_connection, "get_new_connection", lambda params: connects.append(1) or new_connection(params))
    status, body = search(alice, "heron project")
    assert status == 200 and [r["path"] for r in body["results"]] == ["notes/heron.md"]
    assert connects == []

    # After the cool-down it is tried again: still down, the check fails and the primary answers.
    clock[0] += settings.DATABASE_REPLICA_RETRY_SECONDS
    status, body = search(alice, "heron project")
    assert status == 200 and [r["path"] for r in body["results"]] == ["notes/heron.md"]
    assert connects == [1]

    # Back up: after the next cool-down, searches read it again.
    replica.start()
    wait_until_replica("pg_last_wal_replay_lsn()")
    clock[0] += settings.DATABASE_REPLICA_RETRY_SECONDS
    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        status, body = search(alice, "heron project")
    assert status == 200 and [r["path"] for r in body["results"]] == ["notes/heron.md"]
    assert on_replica.captured_queries


def test_orm_reads_go_to_the_replica_only_inside_a_search_and_writes_never(replica):
    from django.db import router

    from indexing.models import MemoryFile

    with replicas.replica_reads(ALIAS):
        assert router.db_for_read(MemoryFile) == ALIAS
        assert router.db_for_write(MemoryFile) == DEFAULT_DB_ALIAS
    assert router.db_for_read(MemoryFile) == DEFAULT_DB_ALIAS  # outside a search: the primary
    assert not router.allow_migrate(ALIAS, "indexing")


def test_a_search_inside_a_transaction_on_the_primary_reads_the_primary(alice, index_files, replica):
    from django.db import transaction

    from indexing.writes import file_ingest

    index_files(alice, {"notes/heron.md": "The heron project ships in May; Caroline owns it.\n"})
    wait_until_replica("pg_last_wal_replay_lsn()")
    with transaction.atomic():
        file_ingest(agent=alice.agent, path="notes/osprey.md", content="The osprey migration finished in June.\n")
        with CaptureQueriesContext(connections[ALIAS]) as on_replica:
            response = memory_search(agent=alice.agent, query="heron project")
        assert [result.path for result in response.results] == ["notes/heron.md"]
        assert response.pending == 1  # the file this transaction stored, not yet indexed
    assert on_replica.captured_queries == []


def test_keyword_expansions_plan_is_read_on_the_replica_with_the_vector_checks(alice, index_files, replica):
    """With a replica, the pending files are counted on the primary (read-your-writes) and the rest of the
    checks read where the search reads: keyword expansion's plan comes with them, from the replica."""
    from search.expansion import memory_words_sync
    from search.models import MemoryWordsState

    index_files(alice, {"notes/heron.md": "The heron project ships in May; Caroline owns it.\n"})
    memory_words_sync()
    wait_until_replica("pg_last_wal_replay_lsn()")
    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        assert found_paths(alice, "who owns the heron project?") == ["notes/heron.md"]
    plan = [query["sql"] for query in on_replica.captured_queries if MemoryWordsState._meta.db_table in query["sql"]]
    assert len(plan) == 1 and "pg_index" in plan[0]  # one statement, with the vector checks
