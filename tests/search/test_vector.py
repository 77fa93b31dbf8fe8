"""The vector half: exact for small agents, a per-agent HNSW index for big ones, and never a vector of
another agent or of an old embedding identity.

The "big" agent has a few hundred chunks: the HNSW threshold is lowered for these tests so the index is
built in well under a second.
"""

import hashlib
import random

import pytest
from django.db import connection, transaction

from indexing.models import Chunk, MemoryFile
from search.tasks import vector_indexes_task
from search.types import SearchFilters
from search.vector import _exact_search, vector_candidates, vector_literal, vector_plan
from search.vector_index import agent_vector_index, agent_vector_index_name, vector_indexes_list, vector_indexes_sync

DIMS = 16
IDENTITY = f"fake:fake-hash:{DIMS}"
MIN_CHUNKS = 300


@pytest.fixture(autouse=True)
def vector_settings(settings):
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "fake"
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash"
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = DIMS
    settings.MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS = MIN_CHUNKS
    return settings


def random_vector(rng: random.Random) -> list[float]:
    return [rng.gauss(0, 1) for _ in range(DIMS)]


def add_chunks(agent, vectors, *, path_prefix="memory/notes", identity=IDENTITY, chunks_per_file=10, source="memory"):
    """Files of `chunks_per_file` chunks carrying `vectors`, in order; returns the chunk ids in that order."""
    files = {}
    rows = []
    for position, vector in enumerate(vectors):
        number = position // chunks_per_file
        if number not in files:
            files[number] = MemoryFile.objects.create(
                agent=agent, path=f"{path_prefix}-{number:04d}.md", source=source, content="x", content_hash="h", size=1,
                state=MemoryFile.State.INDEXED,
            )
        text = f"{path_prefix} chunk {position}"
        rows.append(
            Chunk(
                agent=agent, file=files[number], ordinal=position % chunks_per_file, start_line=1, end_line=1, text=text,
                text_hash=hashlib.sha256(text.encode()).hexdigest(), token_count=3, search_text=text,
                embedding=vector, embedding_identity=identity, embedding_dimensions=DIMS,
            )
        )
    return [chunk.id for chunk in Chunk.objects.bulk_create(rows)]


def search(agent, vector, *, filters=None, limit=10):
    hits = vector_candidates(
        agent_id=agent.id, query_embedding=vector, identity=IDENTITY, dimensions=DIMS, filters=filters or SearchFilters(),
        limit=limit,
    )
    return [(hit.chunk_id, hit.distance) for hit in hits]


def exact(agent, vector, *, filters=None, limit=10):
    hits = _exact_search(
        agent_id=agent.id, dims=DIMS, identity_key=IDENTITY, filters=filters or SearchFilters(), query=vector_literal(vector),
        limit=limit,
    )
    return [(hit.chunk_id, hit.distance) for hit in hits]


@pytest.fixture
def big_agent(alice):
    """alice with 400 chunks (above the lowered threshold) and her HNSW index built."""
    rng = random.Random(4)
    vectors = [random_vector(rng) for _ in range(400)]
    add_chunks(alice.agent, vectors[:370], path_prefix="memory/notes")
    add_chunks(alice.agent, vectors[370:], path_prefix="projects/plan", source="workspace")
    outcome = vector_indexes_sync()
    assert outcome.created == [agent_vector_index_name(agent_id=alice.agent.id, dimensions=DIMS)]
    return alice.agent


def test_a_small_agent_is_searched_exactly_and_nearest_first(alice):
    rng = random.Random(1)
    vectors = [random_vector(rng) for _ in range(50)]
    ids = add_chunks(alice.agent, vectors)

    assert vector_plan(agent_id=alice.agent.id, dimensions=DIMS, identity_key=IDENTITY, filters=SearchFilters(), limit=5).kind == "exact"
    results = search(alice.agent, vectors[7], limit=5)
    assert results[0][0] == ids[7]
    assert results[0][1] == pytest.approx(0.0, abs=1e-6)
    distances = [distance for _, distance in results]
    assert distances == sorted(distances) and len(results) == 5


def test_hnsw_recall_at_10_matches_exact_search(big_agent):
    rng = random.Random(7)
    queries = [random_vector(rng) for _ in range(20)]
    assert vector_plan(agent_id=big_agent.id, dimensions=DIMS, identity_key=IDENTITY, filters=SearchFilters(), limit=10).kind == "hnsw"

    found = sum(len({i for i, _ in search(big_agent, q)} & {i for i, _ in exact(big_agent, q)}) for q in queries)

    assert found / (10 * len(queries)) >= 0.98


def test_hnsw_recall_of_a_full_candidate_pool(big_agent, settings):
    """memory_search asks for MEMORYHUB_SEARCH_CANDIDATE_POOL candidates; ef_search is that many."""
    pool = settings.MEMORYHUB_SEARCH_CANDIDATE_POOL
    assert vector_plan(agent_id=big_agent.id, dimensions=DIMS, identity_key=IDENTITY, filters=SearchFilters(), limit=pool).ef_search == pool
    rng = random.Random(8)
    queries = [random_vector(rng) for _ in range(10)]
    top10 = sum(len({i for i, _ in search(big_agent, q, limit=pool)[:10]} & {i for i, _ in exact(big_agent, q)}) for q in queries)
    top_pool = sum(len({i for i, _ in search(big_agent, q, limit=pool)} & {i for i, _ in exact(big_agent, q, limit=pool)}) for q in queries)
    assert top10 / (10 * len(queries)) >= 0.98
    assert top_pool / (pool * len(queries)) >= 0.9


def test_the_planner_walks_the_agents_own_index(big_agent):
    query = vector_literal(random_vector(random.Random(3)))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE indexing_chunk")
        cursor.execute(
            f"EXPLAIN SELECT id FROM indexing_chunk c WHERE c.agent_id = {big_agent.id} AND c.embedding_dimensions = {DIMS} "
            f"AND c.embedding_identity = %s ORDER BY c.embedding::vector({DIMS}) <=> %s::vector({DIMS}) LIMIT 10",
            [IDENTITY, query],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert agent_vector_index_name(agent_id=big_agent.id, dimensions=DIMS) in plan


@pytest.mark.parametrize("indexed", [False, True], ids=["exact", "hnsw"])
def test_another_agents_identical_vectors_are_never_returned(alice, bob, indexed):
    rng = random.Random(2)
    count = MIN_CHUNKS + 20 if indexed else 40
    vectors = [random_vector(rng) for _ in range(count)]
    alice_ids = set(add_chunks(alice.agent, vectors))
    bob_ids = set(add_chunks(bob.agent, vectors))
    vector_indexes_sync()
    assert (agent_vector_index(agent_id=alice.agent.id, dimensions=DIMS) is not None) == indexed

    for query in vectors[:5]:
        for agent, own, other in ((alice.agent, alice_ids, bob_ids), (bob.agent, bob_ids, alice_ids)):
            ids = {chunk_id for chunk_id, _ in search(agent, query, limit=20)}
            assert len(ids) == 20 and ids <= own and not ids & other


def test_vectors_of_an_old_identity_are_never_returned(alice):
    rng = random.Random(5)
    vectors = [random_vector(rng) for _ in range(MIN_CHUNKS + 20)]
    current = set(add_chunks(alice.agent, vectors))
    # The same vectors under the model the agent used before (same dimensions, so the same HNSW index).
    old = set(add_chunks(alice.agent, vectors, path_prefix="memory/old", identity=f"fake:older-model:{DIMS}"))
    vector_indexes_sync()
    assert agent_vector_index(agent_id=alice.agent.id, dimensions=DIMS) is not None

    for query in vectors[:5]:
        ids = {chunk_id for chunk_id, _ in search(alice.agent, query, limit=10)}
        assert len(ids) == 10 and ids <= current and not ids & old


def test_filters_keep_only_matching_files_and_lose_no_recall(big_agent):
    rng = random.Random(9)
    queries = [random_vector(rng) for _ in range(5)]
    workspace = SearchFilters(sources=("workspace",))  # 30 of 400 chunks: searched exactly
    notes = SearchFilters(path_prefix="memory/")  # 370 of 400 chunks: HNSW with the filter

    selective = vector_plan(agent_id=big_agent.id, dimensions=DIMS, identity_key=IDENTITY, filters=workspace, limit=10)
    broad = vector_plan(agent_id=big_agent.id, dimensions=DIMS, identity_key=IDENTITY, filters=notes, limit=10)
    assert (selective.kind, broad.kind) == ("exact", "hnsw")

    paths = dict(Chunk.objects.filter(agent=big_agent).values_list("id", "file__path"))
    for filters, prefix in ((workspace, "projects/"), (notes, "memory/")):
        found = 0
        for query in queries:
            results = search(big_agent, query, filters=filters)
            assert len(results) == 10
            assert all(paths[chunk_id].startswith(prefix) for chunk_id, _ in results)
            found += len({i for i, _ in results} & {i for i, _ in exact(big_agent, query, filters=filters)})
        assert found / (10 * len(queries)) >= 0.98


def test_an_agent_being_deleted_loses_its_index_at_the_next_run(big_agent):
    """Its chunks go in the background's batches meanwhile: its index is neither kept nor built again."""
    from agents.services import agent_delete

    agent_delete(agent=big_agent, actor=None)
    outcome = vector_indexes_sync()
    assert outcome.dropped == [agent_vector_index_name(agent_id=big_agent.id, dimensions=DIMS)] and not outcome.created
    assert agent_vector_index(agent_id=big_agent.id, dimensions=DIMS) is None


def test_a_filter_matching_fewer_chunks_than_asked_returns_all_of_them(big_agent):
    filters = SearchFilters(path_prefix="projects/plan-0000")  # one file of 10 chunks
    results = search(big_agent, random_vector(random.Random(11)), filters=filters, limit=25)
    assert len(results) == 10


def test_a_query_of_another_dimension_matches_nothing(alice):
    add_chunks(alice.agent, [random_vector(random.Random(12)) for _ in range(5)])
    assert search(alice.agent, [0.1] * (DIMS + 1)) == []


def test_the_index_task_builds_and_drops_indexes_idempotently(alice, bob, vector_settings):
    rng = random.Random(6)
    add_chunks(alice.agent, [random_vector(rng) for _ in range(MIN_CHUNKS)])
    add_chunks(bob.agent, [random_vector(rng) for _ in range(MIN_CHUNKS - 1)])
    alice_index = agent_vector_index_name(agent_id=alice.agent.id, dimensions=DIMS)

    first = vector_indexes_task.apply().get()
    second = vector_indexes_task.apply().get()

    assert first["created"] == [alice_index] and first["dropped"] == []  # bob is one chunk short
    assert second == {"created": [], "dropped": [], "kept": 1, "skipped": ""}
    assert [index.name for index in vector_indexes_list()] == [alice_index]

    # Shrinking below half the threshold drops the index (above half, it is kept).
    Chunk.objects.filter(agent=alice.agent, id__in=Chunk.objects.filter(agent=alice.agent).values("id")[: MIN_CHUNKS // 2]).delete()
    assert vector_indexes_task.apply().get()["kept"] == 1
    Chunk.objects.filter(agent=alice.agent, id__in=Chunk.objects.filter(agent=alice.agent).values("id")[:1]).delete()
    assert vector_indexes_task.apply().get()["dropped"] == [alice_index]
    assert vector_indexes_list() == []

    # After a change of dimensions, indexes of the old dimension go.
    add_chunks(bob.agent, [random_vector(rng) for _ in range(5)], path_prefix="memory/more")
    assert vector_indexes_task.apply().get()["created"] == [agent_vector_index_name(agent_id=bob.agent.id, dimensions=DIMS)]
    vector_settings.MEMORYHUB_EMBEDDING_DIMENSIONS = DIMS * 2
    assert len(vector_indexes_task.apply().get()["dropped"]) == 1
    assert vector_indexes_list() == []


def test_migrations_leave_no_global_vector_index(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relkind = 'i' AND relname LIKE 'chunk\\_embedding\\_hnsw\\_%%'")
        assert cursor.fetchone()[0] == 0


def _settings_now() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('hnsw.ef_search'), current_setting('enable_sort')")
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_search_sends_its_hnsw_query_in_one_round_trip(transactional_db, alice, bob):
    # memory_search reads whether the agent has its HNSW index in its checks, and sends the query with
    # its settings as one string (one implicit transaction): no lookup, BEGIN or COMMIT of their own.
    from search.services import memory_search

    rng = random.Random(21)
    vectors = [random_vector(rng) for _ in range(MIN_CHUNKS + 20)]
    add_chunks(alice.agent, vectors)
    add_chunks(bob.agent, vectors[:40])  # exact: no index
    vector_indexes_sync()
    assert not connection.in_atomic_block  # as the API runs: autocommit
    before = _settings_now()
    sent = []

    def record(execute, sql, params, many, context):
        sent.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        response = memory_search(agent=alice.agent, query="memory notes chunk 7", mode="vector")
    assert response.mode == "vector" and response.results
    assert not any(in_block for _, in_block in sent), sent
    (query,) = [sql for sql, _ in sent if "hnsw.ef_search" in sql]
    assert "ORDER BY" in query and agent_vector_index_name(agent_id=alice.agent.id, dimensions=DIMS) not in query
    (checks,) = [sql for sql, _ in sent if "pg_index" in sql]
    assert "indexing_memoryfile" in checks  # the index is looked up in the checks statement
    assert _settings_now() == before  # ef_search and enable_sort ended with the query

    # The same hits as the query sent in a transaction of its own, and none of another agent's.
    for vector in vectors[:5]:
        one_string = vector_candidates(
            agent_id=alice.agent.id, query_embedding=vector, identity=IDENTITY, dimensions=DIMS, filters=SearchFilters(),
            limit=20, has_index=True,
        )
        with transaction.atomic():
            in_transaction = vector_candidates(
                agent_id=alice.agent.id, query_embedding=vector, identity=IDENTITY, dimensions=DIMS, filters=SearchFilters(),
                limit=20, has_index=True,
            )
        assert one_string == in_transaction and len(one_string) == 20
    with connection.execute_wrapper(record):
        sent.clear()
        response = memory_search(agent=bob.agent, query="memory notes chunk 7", mode="vector")
    assert response.results and not any("hnsw.ef_search" in sql for sql, _ in sent)  # bob's is searched exactly


def test_the_search_checks_read_this_agents_vectors_index_and_pending_files(alice, bob, settings):
    from indexing.embedding_identity import configured_identity
    from search.deadline import SearchDeadline
    from search.services import _search_checks

    rng = random.Random(22)
    add_chunks(alice.agent, [random_vector(rng) for _ in range(MIN_CHUNKS + 20)])
    vector_indexes_sync()
    for n, state in enumerate([MemoryFile.State.PENDING, MemoryFile.State.INDEXING, MemoryFile.State.INDEXED]):
        MemoryFile.objects.create(
            agent=bob.agent, path=f"memory/new-{n}.md", content="x", content_hash="h2", indexed_hash="h2" if n == 1 else "",
            size=1, state=state,
        )
    identity = configured_identity()
    assert identity.key == IDENTITY

    def checks(member, want_vectors=True):
        with SearchDeadline() as deadline:
            found = _search_checks(agent=member.agent, identity=identity, want_vectors=want_vectors, deadline=deadline)
        return found.pending, found.awaiting_vectors, found.has_vectors, found.has_index, found.has_words

    assert checks(alice) == (0, 0, True, True, False)
    # bob's two files waiting (one of them for its vectors only); none of alice's vectors or index
    assert checks(bob) == (2, 1, False, False, False)
    assert checks(alice, want_vectors=False) == (0, 0, False, False, False)
    Chunk.objects.filter(agent=alice.agent).update(embedding_identity="fake:older-model:16")
    assert checks(alice) == (0, 0, False, True, False)  # the index is there, but no vector of this identity
    with connection.cursor() as cursor:
        cursor.execute(f'DROP INDEX "{agent_vector_index_name(agent_id=alice.agent.id, dimensions=DIMS)}"')
    assert checks(alice) == (0, 0, False, False, False)
