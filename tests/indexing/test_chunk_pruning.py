"""Deleting chunks (a file, a sync's unlisted files, an agent) names the agent in every statement on the
chunk table, so Postgres prunes each to the agent's partition (indexing/partitions.py), the database's own
key check included; and nothing is left behind. (The admin's chunk counts of a file: test_admin.py.)"""

import json
import re
import threading

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

from agents.deletion import agent_purge
from agents.services import agent_delete
from indexing.models import Chunk, MemoryFile
from indexing.partitions import SHADOW, SHADOW_SUFFIX, agent_chunk_table, chunk_partitions, chunk_table_rebuild
from tests.indexing.test_chunk_partitions import _chunks, _file

# The chunk partitions this backend holds a lock on (its transaction's, since the test runs in one).
LOCKED_PARTITIONS = (
    "SELECT DISTINCT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
    "JOIN pg_inherits i ON i.inhrelid = c.oid WHERE l.pid = pg_backend_pid() AND i.inhparent = 'indexing_chunk'::regclass"
)
# The same, of the chunk table and of the new table an online rebuild fills (indexing_chunk_rebuild).
LOCKED_PARTITIONS_OF_BOTH = LOCKED_PARTITIONS.replace(
    "i.inhparent = 'indexing_chunk'::regclass", f"i.inhparent IN ('indexing_chunk'::regclass, to_regclass('{SHADOW}'))"
)


@pytest.fixture
def memories(alice, bob):
    """Two files of alice's with chunks, and one of bob's (which every delete of alice's leaves alone)."""
    files = [_file(alice.agent, n) for n in (1, 2)]
    for memory_file in files:
        _chunks(alice.agent, memory_file, 3)
    bobs = _file(bob.agent, 1)
    _chunks(bob.agent, bobs, 2)
    return files, bobs


def _chunk_statements(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if re.search(r"\bindexing_chunk\b", q["sql"])]


def _names_agent(sql: str, agent_id: int) -> bool:
    return re.search(rf'"agent_id" (?:= |IN \(){agent_id}\b', sql) is not None


def _scanned_tables(sql: str) -> set[str]:
    """The tables a statement's plan reads (its scan nodes; a DELETE's target is read through them)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        stack, found = [cursor.fetchone()[0][0]["Plan"]], set()
    while stack:
        node = stack.pop()
        if "Scan" in node["Node Type"] and "Relation Name" in node:
            found.add(node["Relation Name"])
        stack.extend(node.get("Plans", []))
    return found


def _keys_checked() -> None:
    """Run the deferred foreign-key checks now (the test's transaction never commits): an orphan fails."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def _delete_file(alice, files):
    response = alice.client.delete(f"/api/v1/files/{files[0].path}")
    assert response.status_code == 200 and response.json()["chunks_removed"] == 3
    return [files[0].pk]


def _sync_delete_missing(alice, files):
    payload = {"files": [], "delete_missing": True, "prefix": "memory/"}
    response = alice.client.generic("POST", "/api/v1/sync", json.dumps(payload).encode(), content_type="application/json")
    assert response.status_code == 200 and sorted(response.json()["deleted"]) == sorted(f.path for f in files)
    return [f.pk for f in files]


def _delete_agent(alice, files):
    agent_delete(agent=alice.agent, actor=None)
    assert agent_purge(agent_id=alice.agent.pk).finished  # the background task's batches
    return [f.pk for f in files]


@pytest.mark.parametrize(
    "delete", [_delete_file, _sync_delete_missing, _delete_agent], ids=["file", "sync delete_missing", "agent"]
)
def test_every_statement_deleting_chunks_names_the_agent(alice, bob, memories, delete):
    """The admin's agent delete is agent_delete too (AgentAdmin.delete_model), and its rows go in the
    background task's batches (agents/deletion.py)."""
    files, bobs = memories
    agent_id = alice.agent.pk  # None once the agent is deleted
    with CaptureQueriesContext(connection) as captured:
        deleted_ids = delete(alice, files)

    statements = _chunk_statements(captured)
    assert any(sql.startswith("DELETE") for sql in statements)
    for sql in statements:
        assert _names_agent(sql, agent_id), sql
    # Nothing left behind, nothing of bob's touched, and the database's keys agree.
    assert not Chunk.objects.filter(file_id__in=deleted_ids).exists()
    assert not MemoryFile.objects.filter(pk__in=deleted_ids).exists()
    assert Chunk.objects.filter(agent=bob.agent, file=bobs).count() == 2
    _keys_checked()


def test_a_file_delete_is_planned_on_the_agents_partition_only(alice, memories):
    files, _ = memories
    with CaptureQueriesContext(connection) as captured:
        _delete_file(alice, files)
    statements = _chunk_statements(captured)
    assert statements
    for sql in statements:
        assert _scanned_tables(sql) == {agent_chunk_table(agent_id=alice.agent.pk)}, sql


def test_a_file_delete_locks_only_the_agents_partition_key_check_included(alice):
    """What Postgres itself runs counts too: the deferred check that no chunk still references the deleted
    file. On the one-column key (file_id) it reads and locks every partition."""
    files = [_file(alice.agent, 1)]
    _chunks(alice.agent, files[0], 3)
    _delete_file(alice, files)
    _keys_checked()
    assert _locked(LOCKED_PARTITIONS) == {agent_chunk_table(agent_id=alice.agent.pk)}


def _locked(query: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(query)
        return {name for (name,) in cursor.fetchall()}


def _deletes_on_one_connection(alice, *, times: int, locked_query: str) -> list[set[str]]:
    """Delete a file of alice's ``times`` times on a new connection of the service's (its settings,
    nothing set here), each in a transaction that runs the key checks and then reads what it locked."""
    connection.close()
    locked = []
    for number in range(times):
        files = [_file(alice.agent, number)]
        _chunks(alice.agent, files[0], 3)
        with transaction.atomic():
            _delete_file(alice, files)
            _keys_checked()
            locked.append(_locked(locked_query))
    return locked


@pytest.mark.django_db(transaction=True)
def test_every_file_delete_of_a_connection_locks_only_the_agents_partition(alice):
    """Postgres keeps a key check's plan per connection and, at its sixth run, plans it for any agent:
    over every partition, which that run locks, with their indexes, and so does every later run if it
    keeps that plan (it does when most partitions are empty). The service's connections plan each run for
    its values (plan_cache_mode, memoryhub/settings.py)."""
    partition = agent_chunk_table(agent_id=alice.agent.pk)
    locked = _deletes_on_one_connection(alice, times=10, locked_query=LOCKED_PARTITIONS)
    assert locked == [{partition}] * 10, f"partitions locked by each delete: {[len(names) for names in locked]}"


@pytest.mark.django_db(transaction=True)
def test_file_deletes_during_an_online_rebuild_lock_only_the_agents_partitions(alice, settings):
    """While chunk_table_rebuild fills the new table, a delete also runs the capture trigger's statements
    (PL/pgSQL: plans kept per connection, like a key check's) on the new table, and the new table's own key
    check: each locks alice's partition of each table, at every run of the connection."""
    partitions = settings.MEMORYHUB_CHUNK_PARTITIONS
    _chunks(alice.agent, _file(alice.agent, 100), 3)  # a batch to copy, after which the deletes run
    partition = agent_chunk_table(agent_id=alice.agent.pk)
    locked = []

    def delete_between_batches(last_copied: int) -> None:
        def deletes():  # another connection, as the service's writers are
            try:
                locked.extend(_deletes_on_one_connection(alice, times=10, locked_query=LOCKED_PARTITIONS_OF_BOTH))
            finally:
                connection.close()

        if not locked:
            thread = threading.Thread(target=deletes)
            thread.start()
            thread.join()

    try:
        chunk_table_rebuild(partitions=partitions, on_batch=delete_between_batches)
    finally:
        if chunk_partitions() != partitions:  # leave the layout the rest of the suite expects
            chunk_table_rebuild(partitions=partitions)
    assert locked == [{partition, f"{partition}{SHADOW_SUFFIX}"}] * 10, f"partitions locked by each delete: {[len(names) for names in locked]}"


def test_the_database_refuses_a_chunk_without_its_file_or_of_another_agent(alice, bob, memories):
    files, bobs = memories
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'indexing_chunk'::regclass "
            "AND confrelid = 'indexing_memoryfile'::regclass"
        )
        assert [row[0] for row in cursor.fetchall()] == [
            "FOREIGN KEY (agent_id, file_id) REFERENCES indexing_memoryfile(agent_id, id) DEFERRABLE INITIALLY DEFERRED"
        ]
    # A file deleted without its chunks (nothing cascades from a file to its chunks any more).
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryFile.objects.filter(pk=files[0].pk).delete()
        _keys_checked()
    # A chunk of bob's in alice's file.
    with pytest.raises(IntegrityError), transaction.atomic():
        _chunks(bob.agent, files[0], 1, start=50)
        _keys_checked()
    assert Chunk.objects.filter(file=files[0]).count() == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("layout", ["partitioned", "one table"])
def test_the_migration_keys_existing_chunks_by_agent_and_file(alice, bob, settings, layout):
    """Migration indexing/0008 on a database that holds chunks, as a deployment runs it (outside a
    transaction): the key is validated on each partition (or on the one table), then declared on the
    partitioned table, and the one-column key is gone; its reverse restores the one-column key."""
    partitions = settings.MEMORYHUB_CHUNK_PARTITIONS
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    try:
        if layout == "one table":
            chunk_table_rebuild(partitions=0)
        executor.migrate([("indexing", "0007_chunk_partitioned")])
        assert _file_keys("indexing_chunk") == {"FOREIGN KEY (file_id) REFERENCES indexing_memoryfile(id) DEFERRABLE INITIALLY DEFERRED"}
        for member in (alice, bob):
            _chunks(member.agent, _file(member.agent, 1), 3)

        executor = MigrationExecutor(connection)
        executor.migrate(leaves)

        assert _file_keys("indexing_chunk") == {
            "FOREIGN KEY (agent_id, file_id) REFERENCES indexing_memoryfile(agent_id, id) DEFERRABLE INITIALLY DEFERRED"
        }
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*), bool_and(c.convalidated) FROM pg_inherits i JOIN pg_constraint c ON c.conrelid = i.inhrelid "
                "WHERE i.inhparent = 'indexing_chunk'::regclass AND c.conname = 'chunk_agent_file_fk' AND c.conparentid <> 0"
            )
            assert cursor.fetchone() == ((partitions, True) if layout == "partitioned" else (0, None))
        assert Chunk.objects.count() == 6
    finally:
        MigrationExecutor(connection).migrate(leaves)
        if chunk_partitions() != partitions:  # leave the layout the rest of the suite expects
            chunk_table_rebuild(partitions=partitions)


def _file_keys(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
            "AND confrelid = 'indexing_memoryfile'::regclass",
            [table],
        )
        return {row[0] for row in cursor.fetchall()}
