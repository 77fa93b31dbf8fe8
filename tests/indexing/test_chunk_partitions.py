"""The chunk table partitioned by agent (indexing/partitions.py): each agent's own indexes live on its
partition, a query of one agent reads one partition, and an existing one-table database is rebuilt
online without losing a write made during the rebuild."""

import itertools
import threading

import pytest
from django.db import connection

from indexing.models import Chunk, MemoryFile
from indexing.partitions import agent_chunk_table, chunk_partitions, chunk_table_rebuild
from search.keyword_stats import keyword_indexes, keyword_stats_sync
from search.vector_index import agent_vector_index_create, vector_indexes_list

WORDS = ["pottery", "weather", "chess", "support", "group", "garden", "violin", "harbour"]


def _file(agent, number: int) -> MemoryFile:
    return MemoryFile.objects.create(
        agent=agent, path=f"memory/note-{number}.md", source="memory", content="x", content_hash=f"h{number}", size=1
    )


def _chunks(agent, memory_file, count: int, start: int = 0) -> list[Chunk]:
    return Chunk.objects.bulk_create(
        Chunk(
            agent=agent, file=memory_file, ordinal=start + i, start_line=start + i + 1, end_line=start + i + 1,
            text=f"{WORDS[i % len(WORDS)]} note {start + i}", search_text=f"{WORDS[i % len(WORDS)]} note {start + i}",
            text_hash=f"t{start + i}", token_count=3,
        )
        for i in range(count)
    )


def _table_state() -> dict[int, tuple[int, str]]:
    return {chunk_id: (agent_id, text) for chunk_id, agent_id, text in Chunk.objects.values_list("id", "agent_id", "text")}


def _scanned_tables(sql: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        plan = cursor.fetchone()[0][0]["Plan"]
    found, stack = set(), [plan]
    while stack:
        node = stack.pop()
        if "Relation Name" in node:
            found.add(node["Relation Name"])
        stack.extend(node.get("Plans", []))
    return found


def test_a_new_database_partitions_the_chunk_table_by_agent(alice, bob, settings):
    assert chunk_partitions() == settings.MEMORYHUB_CHUNK_PARTITIONS > 1
    for member in (alice, bob):
        _chunks(member.agent, _file(member.agent, 1), 3)
    alice_table = agent_chunk_table(agent_id=alice.agent.pk)
    assert alice_table.startswith("indexing_chunk_p")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT agent_id FROM {alice_table}")
        assert alice.agent.pk in {row[0] for row in cursor.fetchall()}
    # A search's statement names the agent: it is planned against that agent's partition only.
    assert _scanned_tables(
        f"SELECT id FROM indexing_chunk WHERE agent_id = {alice.agent.pk} AND search_vector @@ 'pottery'::tsquery"
    ) == {alice_table}


def test_an_agents_own_indexes_are_built_on_its_partition_only(alice, bob, settings):
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 5
    _chunks(alice.agent, _file(alice.agent, 1), 12)
    _chunks(bob.agent, _file(bob.agent, 1), 2)

    outcome = keyword_stats_sync()
    agent_vector_index_create(agent_id=alice.agent.pk, dimensions=8)

    assert outcome.indexes_created == [f"chunk_gin_a{alice.agent.pk}"]
    assert keyword_indexes() == {f"chunk_gin_a{alice.agent.pk}": True}
    assert [index.name for index in vector_indexes_list()] == [f"chunk_hnsw_a{alice.agent.pk}_d8"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_class t ON t.oid = i.indrelid WHERE c.relname LIKE 'chunk\\_%%\\_a%%'"
        )
        tables = dict(cursor.fetchall())
    partition = agent_chunk_table(agent_id=alice.agent.pk)
    assert tables == {f"chunk_gin_a{alice.agent.pk}": partition, f"chunk_hnsw_a{alice.agent.pk}_d8": partition}


@pytest.mark.django_db(transaction=True)
def test_an_existing_table_is_partitioned_online_without_losing_a_write(alice, bob, settings):
    partitions = settings.MEMORYHUB_CHUNK_PARTITIONS
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 150
    try:
        chunk_table_rebuild(partitions=0)  # the layout of a database from before partitioning
        assert chunk_partitions() == 0
        files = {member.agent.pk: _file(member.agent, 1) for member in (alice, bob)}
        _chunks(alice.agent, files[alice.agent.pk], 200)
        _chunks(bob.agent, files[bob.agent.pk], 100)
        keyword_stats_sync()  # alice gets her own GIN index, on the one table
        assert list(keyword_indexes()) == [f"chunk_gin_a{alice.agent.pk}"]
        expected = _table_state()
        highest_before = max(expected)
        ordinals = itertools.count(1000)

        def write_between_batches(last_copied: int) -> None:
            """What the service writes while the rebuild runs (another connection, in a thread): a new
            chunk each, an update and a delete both behind and ahead of the copy."""

            def write():
                try:
                    for member in (alice, bob):
                        (new,) = _chunks(member.agent, files[member.agent.pk], 1, start=next(ordinals))
                        expected[new.pk] = (member.agent.pk, new.text)
                    ids = sorted(expected)
                    behind = [i for i in ids if i <= last_copied]
                    ahead = [i for i in ids if i > last_copied]
                    for chosen in (behind[:1] + ahead[:1]):
                        Chunk.objects.filter(agent_id=expected[chosen][0], pk=chosen).update(text=f"edited {chosen}")
                        expected[chosen] = (expected[chosen][0], f"edited {chosen}")
                    for chosen in (behind[-1:] + ahead[-1:]):
                        Chunk.objects.filter(agent_id=expected[chosen][0], pk=chosen).delete()
                        del expected[chosen]
                finally:
                    connection.close()

            thread = threading.Thread(target=write)
            thread.start()
            thread.join()

        outcome = chunk_table_rebuild(partitions=partitions, batch_size=40, on_batch=write_between_batches)

        assert chunk_partitions() == partitions
        assert outcome.batches >= 7 and outcome.rows_copied >= 300 - outcome.batches * 2
        assert _table_state() == expected
        # Alice's index was rebuilt on her partition under its own name; ids go on after the old ones.
        assert keyword_indexes() == {f"chunk_gin_a{alice.agent.pk}": True}
        with connection.cursor() as cursor:
            cursor.execute("SELECT indrelid::regclass::text FROM pg_index WHERE indexrelid = %s::regclass", [f"chunk_gin_a{alice.agent.pk}"])
            assert cursor.fetchone()[0] == agent_chunk_table(agent_id=alice.agent.pk)
            cursor.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'indexing_chunk'::regclass AND contype = 'p'"
            )
            assert cursor.fetchone()[0] == "PRIMARY KEY (agent_id, id)"
            cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'indexing_chunk'::regclass AND NOT tgisinternal")
            assert cursor.fetchone()[0] == 0
        (after,) = _chunks(alice.agent, files[alice.agent.pk], 1, start=5000)
        assert after.pk > max(highest_before, *expected)
    finally:
        if chunk_partitions() != partitions:  # leave the layout the rest of the suite expects
            chunk_table_rebuild(partitions=partitions)


@pytest.mark.django_db(transaction=True)
def test_a_partitioned_table_with_an_agents_own_index_is_rebuilt_into_one_table(alice, bob, settings):
    """Back to one table (`chunk_partition --partitions 0`): the agent's index is rebuilt on the one table
    under its own name (the swap renamed it twice, and failed, when it was both a per-agent index and one
    of the shadow's own)."""
    partitions = settings.MEMORYHUB_CHUNK_PARTITIONS
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 5
    try:
        _chunks(alice.agent, _file(alice.agent, 1), 12)
        keyword_stats_sync()
        expected = _table_state()

        chunk_table_rebuild(partitions=0)

        assert chunk_partitions() == 0 and _table_state() == expected
        assert keyword_indexes() == {f"chunk_gin_a{alice.agent.pk}": True}
        with connection.cursor() as cursor:
            cursor.execute("SELECT indrelid::regclass::text FROM pg_index WHERE indexrelid = %s::regclass", [f"chunk_gin_a{alice.agent.pk}"])
            assert cursor.fetchone()[0] == "indexing_chunk"
            cursor.execute("SELECT count(*) FROM pg_class WHERE relname LIKE %s", ["%\\_rb%"])
            assert cursor.fetchone()[0] == 0
    finally:
        if chunk_partitions() != partitions:  # leave the layout the rest of the suite expects
            chunk_table_rebuild(partitions=partitions)
