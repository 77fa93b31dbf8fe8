"""The vector half of search: one agent's chunks nearest to the query embedding, by cosine distance.

Filtering an approximate index to one agent must not lose recall (pgvector#259), so each query takes
one of two plans:

- **exact** — the agent's chunks of this identity (and filters) are collected in a MATERIALIZED CTE
  and sorted by distance. The CTE fence keeps the planner from walking an HNSW index and filtering
  afterwards. Cost is linear in the agent's size: a few ms per few thousand 384-dim vectors, so this
  is the plan for every agent below MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS, for filters that keep only a
  small fraction of a big agent, and for a big agent whose index is not built yet.
- **HNSW** — the agent's own partial index (search/vector_index.py), which holds no other agent's
  rows, so filtering to the agent loses nothing. `hnsw.ef_search` is max(MEMORYHUB_VECTOR_EF_SEARCH,
  limit), set with set_config(..., is_local => true) inside a transaction so it never leaks to
  other queries. With pgvector >= 0.8 iterative scans keep walking the graph until enough rows pass
  the filters; on older pgvector a filtered query gets a larger ef_search instead, and any HNSW answer
  shorter than `limit` is redone exactly.

Agent ids and dimensions are inlined as integers (never user text): the planner can only use a
partial index whose predicate it can prove from constants in the query.
"""

import logging
import math
from typing import NamedTuple

import psycopg

from django.conf import settings
from django.db import transaction

from indexing.tables import CHUNK, FILE
from memoryhub.replicas import current_read_alias, read_connection as connection  # a replica or the primary
from search.types import SearchFilters
from search.vector_index import agent_vector_index

logger = logging.getLogger(__name__)

# pgvector refuses larger values of hnsw.ef_search.
EF_SEARCH_MAX = 1000

_pgvector_versions: dict[str, tuple[int, ...]] = {}


class VectorHit(NamedTuple):
    chunk_id: int
    distance: float
    # Where the chunk sits, read from the rows the search visits anyway, so snippets need not fetch
    # the chunks again (search/services.py).
    file_id: int
    start_line: int
    end_line: int


def pgvector_version() -> tuple[int, ...]:
    """The installed pgvector extension version, e.g. (0, 6, 2); cached per database."""
    alias = connection.settings_dict.get("NAME") or ""
    if alias not in _pgvector_versions:
        with connection.cursor() as cursor:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
        parts = (row[0] if row else "0").split(".")
        _pgvector_versions[alias] = tuple(int(part) for part in parts if part.isdigit())
    return _pgvector_versions[alias]


def vector_candidates(
    *,
    agent_id: int,
    query_embedding: list[float],
    identity,
    dimensions: int,
    filters: SearchFilters | None,
    limit: int,
    has_index: bool | None = None,
) -> list[VectorHit]:
    """Up to `limit` chunks of this agent, nearest first, with their cosine distance and place.

    `identity` is the EmbeddingIdentity (or its key) the query was embedded with: vectors of any other
    identity are never compared with it. `has_index`: whether the agent has a usable HNSW index for
    `dimensions`, when the caller read it already (memory_search, in its checks); None = look it up.
    """
    identity_key = identity.key if hasattr(identity, "key") else str(identity or "")
    if limit <= 0 or not dimensions or not identity_key:
        return []
    dims = int(dimensions)
    if len(query_embedding) != dims:
        # A query embedded under another identity can match nothing of this one.
        logger.warning("query embedding has %d dimensions, the index %d: no vector candidates", len(query_embedding), dims)
        return []
    filters = filters or SearchFilters()
    query = vector_literal(query_embedding)
    plan = vector_plan(agent_id=agent_id, dimensions=dims, identity_key=identity_key, filters=filters, limit=limit, has_index=has_index)
    if plan.kind == "hnsw":
        rows = _hnsw_search(
            agent_id=agent_id, dims=dims, identity_key=identity_key, filters=filters, query=query, limit=limit,
            ef_search=plan.ef_search,
        )
        if len(rows) >= limit:
            return rows
        # Fewer than asked: the filters (or vectors of an old identity still in the index) ate the
        # candidates. The exact plan returns every match there is.
    return _exact_search(agent_id=agent_id, dims=dims, identity_key=identity_key, filters=filters, query=query, limit=limit)


class VectorPlan:
    def __init__(self, kind: str, ef_search: int = 0, reason: str = ""):
        self.kind, self.ef_search, self.reason = kind, ef_search, reason

    def __repr__(self) -> str:
        return f"VectorPlan({self.kind!r}, ef_search={self.ef_search}, reason={self.reason!r})"


def vector_plan(
    *, agent_id: int, dimensions: int, identity_key: str, filters: SearchFilters, limit: int, has_index: bool | None = None
) -> VectorPlan:
    """Exact or HNSW for this query, and the ef_search to use (explained for the benchmark and tests).
    `has_index` as vector_candidates takes it."""
    if has_index is None:
        has_index = agent_vector_index(agent_id=agent_id, dimensions=dimensions) is not None
    if not has_index:
        return VectorPlan("exact", reason="no HNSW index for this agent (small, or not built yet)")
    # ef_search = limit (not 2x): measured at 100k chunks for the 100 candidates memory_search asks
    # for, recall@10 vs exact 1.000 either way and recall@100 0.976 vs 0.987, in 5.9 ms instead of 9.2 ms
    # (docs/benchmarks.md, "Search at scale").
    ef_search = min(EF_SEARCH_MAX, max(settings.MEMORYHUB_VECTOR_EF_SEARCH, limit))
    if filters.is_empty:
        return VectorPlan("hnsw", ef_search, reason="unfiltered")
    # Which share of the agent passes the filters, estimated on its files (a few thousand small rows
    # for 100k chunks, where counting chunks would read the big ones).
    matching, total = _file_share(agent_id=agent_id, filters=filters)
    fraction = matching / max(total, 1)
    if fraction < settings.MEMORYHUB_VECTOR_EXACT_FILTER_FRACTION:
        return VectorPlan("exact", reason=f"filters keep {matching} of {total} files")
    if not _iterative_scans():
        # Without iterative scans only ~fraction of the ef_search candidates survive the filter: widen
        # the candidate list in proportion (capped by pgvector; a short answer is redone exactly).
        ef_search = min(EF_SEARCH_MAX, max(ef_search, math.ceil(ef_search / fraction)))
    return VectorPlan("hnsw", ef_search, reason=f"filters keep {matching} of {total} files")


def _file_share(*, agent_id: int, filters: SearchFilters) -> tuple[int, int]:
    file_sql, params = filters.file_sql("f")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FILTER (WHERE {file_sql}), count(*) FROM {FILE} f WHERE f.agent_id = {int(agent_id)}",
            params,
        )
        matching, total = cursor.fetchone()
    return matching, total


def _iterative_scans() -> bool:
    return settings.MEMORYHUB_VECTOR_ITERATIVE_SCAN != "off" and pgvector_version() >= (0, 8)


def vector_literal(values) -> str:
    """A vector as pgvector's text form ("[0.1,0.2]"), for a statement's parameter (the search's query and
    keyword expansion's word vectors)."""
    return "[" + ",".join(repr(float(value)) for value in values) + "]"


def _where(
    *, agent_id: int, dims: int, identity_key: str, filters: SearchFilters, by_file: bool = False
) -> tuple[str, str, list]:
    """(join, where, params) selecting the agent's embedded chunks of this identity that pass the filters.

    by_file: collect the matching files first and fetch their chunks through chunk_file_ordinal_idx
    (for the exact plan, where a selective filter must not cost a scan of all the agent's chunks);
    otherwise join each chunk to its file (for the HNSW plan, which checks the few rows it yields)."""
    where = (
        f"c.agent_id = {int(agent_id)} AND c.embedding_dimensions = {int(dims)} "
        "AND c.embedding_identity = %s AND c.embedding IS NOT NULL"
    )
    params: list = [identity_key]
    join = ""
    file_sql, file_params = filters.file_sql("f")
    if file_sql and by_file:
        where += (
            f" AND c.file_id = ANY(ARRAY(SELECT f.id FROM {FILE} f WHERE f.agent_id = {int(agent_id)} AND {file_sql}))"
        )
        params += file_params
    elif file_sql:
        join = f"JOIN {FILE} f ON f.id = c.file_id"
        where += f" AND f.agent_id = {int(agent_id)} AND {file_sql}"
        params += file_params
    return join, where, params


def _count_matching(*, agent_id: int, dims: int, identity_key: str, filters: SearchFilters, cap: int) -> int:
    """Chunks passing the filters, counted up to `cap` (the benchmark's labels)."""
    join, where, params = _where(agent_id=agent_id, dims=dims, identity_key=identity_key, filters=filters, by_file=True)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {CHUNK} c {join} WHERE {where} LIMIT %s) AS matching",
            [*params, int(cap)],
        )
        return cursor.fetchone()[0]


def _exact_search(*, agent_id: int, dims: int, identity_key: str, filters: SearchFilters, query: str, limit: int):
    join, where, params = _where(agent_id=agent_id, dims=dims, identity_key=identity_key, filters=filters, by_file=True)
    # Expected plan: index scan on chunk_agent_identity_idx (chunk_file_ordinal_idx with filters), CTE materialised,
    # then a top-N sort of the distances. No HNSW index can be used across the fence.
    sql = (
        "WITH agent_chunks AS MATERIALIZED "
        f"(SELECT c.id, c.embedding, c.file_id, c.start_line, c.end_line FROM {CHUNK} c {join} WHERE {where}) "
        f"SELECT id, embedding::vector({dims}) <=> %s::vector({dims}) AS distance, file_id, start_line, end_line "
        "FROM agent_chunks ORDER BY distance, id LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, query, int(limit)])
        return [VectorHit(row[0], float(row[1]), row[2], row[3], row[4]) for row in cursor.fetchall()]


def _hnsw_search(
    *, agent_id: int, dims: int, identity_key: str, filters: SearchFilters, query: str, limit: int, ef_search: int
):
    join, where, params = _where(agent_id=agent_id, dims=dims, identity_key=identity_key, filters=filters)
    distance = f"c.embedding::vector({dims}) <=> %s::vector({dims})"
    # Expected plan: Limit → Index Scan using chunk_hnsw_a<agent>_d<dims> (ordered by distance), with the
    # identity and file filters applied to the rows it yields (nested loop on the file's primary key).
    inner = (
        f"SELECT c.id, {distance} AS distance, c.file_id, c.start_line, c.end_line "
        f"FROM {CHUNK} c {join} WHERE {where} ORDER BY {distance} LIMIT %s"
    )
    inner_params = [query, *params, query, int(limit)]
    # The decision for the index is made already; stale statistics (an agent that grew since the last
    # ANALYZE) must not turn it into a full sort of the agent's chunks (enable_sort off). The settings
    # are local to the statement's transaction.
    setting = "SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_sort', 'off', true)"
    setting_params = [str(int(ef_search))]
    if _iterative_scans():
        setting += ", set_config('hnsw.iterative_scan', %s, true)"
        setting_params.append(settings.MEMORYHUB_VECTOR_ITERATIVE_SCAN)
        # relaxed_order may yield slightly out of order: sort the few rows again.
        inner = f"WITH nearest AS MATERIALIZED ({inner}) SELECT * FROM nearest ORDER BY distance, id"
    rows = rows_with_settings(setting=setting, setting_params=setting_params, sql=inner, params=inner_params)
    return [VectorHit(row[0], float(row[1]), row[2], row[3], row[4]) for row in rows]


def rows_with_settings(*, setting: str, setting_params: list, sql: str, params: list) -> list[tuple]:
    """The rows of ``sql`` run after ``setting`` (a SELECT of ``set_config(..., true)`` calls) in one
    transaction, on the search's database: the settings hold for the query alone."""
    with connection.cursor() as cursor:
        if not connection.in_atomic_block and isinstance(cursor.cursor, psycopg.ClientCursor):
            # In autocommit, one round trip: Postgres runs a string of statements as one transaction,
            # so the settings hold for the query and end with it (no BEGIN and COMMIT of their own).
            cursor.execute(f"{setting}; {sql}", [*setting_params, *params])
            while cursor.nextset():  # the query's rows are the last result
                pass
            return cursor.fetchall()
    # Inside a caller's transaction (a savepoint), or with server-side binding (one statement per string).
    with transaction.atomic(using=current_read_alias()), connection.cursor() as cursor:
        cursor.execute(setting, setting_params)
        cursor.execute(sql, params)
        return cursor.fetchall()


def pairwise_similarity(*, agent_id: int, chunk_ids: list[int], identity_key: str, dims: int) -> dict[tuple[int, int], float]:
    """The cosine similarity of every pair of these chunks of the agent that have a vector of this
    identity, keyed (smaller id, larger id): one statement, n(n-1)/2 rows for n chunks (435 for 30)."""
    if len(chunk_ids) < 2 or not dims:
        return {}
    dims = int(dims)
    _, where, params = _where(agent_id=agent_id, dims=dims, identity_key=identity_key, filters=SearchFilters())
    sql = (
        f"WITH v AS MATERIALIZED (SELECT c.id, c.embedding::vector({dims}) AS e FROM {CHUNK} c WHERE {where} "
        "AND c.id = ANY(%s)) SELECT a.id, b.id, 1 - (a.e <=> b.e) FROM v a JOIN v b ON a.id < b.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, list(chunk_ids)])
        return {(a, b): float(s) for a, b, s in cursor.fetchall()}
