"""Search tests index real files through the real pipeline (tasks run eagerly, in the test process)
with the deterministic fake embedding provider, then search through the service or the API."""

import pytest

from indexing.writes import file_ingest


@pytest.fixture(autouse=True)
def eager_tasks(eager_tasks):  # tests/conftest.py's, for every test here
    return eager_tasks


@pytest.fixture(autouse=True)
def fake_embeddings(fake_embeddings):  # tests/conftest.py's, for every test here
    return fake_embeddings


@pytest.fixture
def index_files(django_capture_on_commit_callbacks):
    """index_files(member, {path: content}) stores and indexes the files; returns the MemoryFiles."""

    def index(member, files: dict[str, str], **fields):
        stored = []
        with django_capture_on_commit_callbacks(execute=True):
            for path, content in files.items():
                memory_file, _ = file_ingest(agent=member.agent, path=path, content=content, **fields)
                stored.append(memory_file)
        for memory_file in stored:
            memory_file.refresh_from_db()
            assert memory_file.state == "indexed", memory_file.last_error
        return stored

    return index


@pytest.fixture
def search():
    """search(member, query, **fields) → (status code, JSON body) of POST /api/v1/search."""

    def run(member, query, **fields):
        response = member.client.post("/api/v1/search", {"query": query, **fields}, format="json")
        return response.status_code, response.json()

    return run


NOTES = """# Project notes

## Deployment
We deploy the billing service every Tuesday at 10:00 with the blue-green script.
Rollbacks use the previous container image; never hot-patch production.

## People
Caroline leads the payments team and prefers written proposals.
Melanie joined in March and owns the mobile app release train.

## Decisions
The team chose PostgreSQL over MongoDB for the ledger because of transactions.
Redis stays a cache only; nothing durable lives there.
"""


@pytest.fixture
def notes():
    return NOTES


def gin_only_plan(search) -> str:
    """EXPLAIN of the last query ``search()`` sends, with sequential scans off and every index of the chunk
    table dropped but its GIN indexes (inside the test's transaction, which is rolled
    back): which GIN index, if any, the planner can use for it. On a tiny test table any plan is cheap,
    so only this shows what the query's shape allows."""
    from django.db import connection

    captured = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        search()
    sql, params = captured[-1]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'indexing_chunk' "
            "AND indexname NOT IN ('indexing_chunk_pkey', 'chunk_search_vector_gin') AND indexname NOT LIKE 'chunk\\_gin\\_a%%'"
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')
        # The key is (agent_id, id) (the table is partitioned by agent): it would serve the agent filter.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no ALTER TABLE with deferred checks pending
        cursor.execute("ALTER TABLE indexing_chunk DROP CONSTRAINT indexing_chunk_pkey")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())
