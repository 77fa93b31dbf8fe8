"""Per-agent HNSW indexes: built for big agents, dropped when they shrink.

Why not one index over every agent: HNSW returns its `ef_search` nearest candidates over the whole
table and only then applies `agent_id = X`, so an agent holding 1% of the chunks gets ~1% of the
candidates back (pgvector#259). A partial index per agent (`WHERE agent_id = X AND embedding_dimensions
= D`, over the expression `embedding::vector(D)` since the column has no fixed dimension) has no such
filter to lose rows to. Agents below MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS need no index: an exact scan of
a few thousand vectors takes milliseconds (search/vector.py).

Indexes are named ``chunk_hnsw_a<agent id>_d<dimensions>``; the name is how search finds them. They are
built with CREATE INDEX CONCURRENTLY by `vector_indexes_sync`, run by the periodic task
`search.tasks.vector_indexes_task` and by `python manage.py vector_indexes`; until an agent's index is
ready its searches are exact, so a missing index costs speed, never results.
"""

import logging
import re
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from indexing.embedding_identity import configured_identity
from indexing.partitions import agent_chunk_table, chunk_tables_condition
from indexing.tables import AGENT_LIVE, CHUNK
from memoryhub.replicas import read_connection
from search.ddl import advisory_lock, concurrently_clause

logger = logging.getLogger(__name__)

# pgvector indexes at most 2,000 dimensions with HNSW; larger vectors are always searched exactly.
HNSW_MAX_DIMENSIONS = 2000
INDEX_NAME_PATTERN = re.compile(r"^chunk_hnsw_a(\d+)_d(\d+)$")
# Held while indexes are built or dropped, so two runs of the task never race on one index.
ADVISORY_LOCK_KEY = 0x6D68_7665  # "mhve"


def agent_vector_index_name(*, agent_id: int, dimensions: int) -> str:
    return f"chunk_hnsw_a{int(agent_id)}_d{int(dimensions)}"


def agent_vector_index_create(*, agent_id: int, dimensions: int, concurrently: str = "") -> str:
    """Build the agent's HNSW index (``concurrently``: concurrently_clause()) and return its name."""
    name = agent_vector_index_name(agent_id=agent_id, dimensions=dimensions)
    with connection.cursor() as cursor:
        # Serves search/vector.py's HNSW plan: ORDER BY embedding::vector(D) <=> q for this agent. On the
        # agent's partition (indexing/partitions.py): the build reads that partition only.
        cursor.execute(
            f'CREATE INDEX{concurrently} IF NOT EXISTS "{name}" ON {agent_chunk_table(agent_id=agent_id)} '
            f"USING hnsw ((embedding::vector({int(dimensions)})) vector_cosine_ops) "
            f"WITH (m = {int(settings.MEMORYHUB_VECTOR_HNSW_M)}, "
            f"ef_construction = {int(settings.MEMORYHUB_VECTOR_HNSW_EF_CONSTRUCTION)}) "
            f"WHERE agent_id = {int(agent_id)} AND embedding_dimensions = {int(dimensions)}"
        )
    return name


# The index named %(index)s, if it is usable (built, and valid): the FROM and WHERE of a query about it.
# memory_search asks it in the statement of checks it sends anyway (search/services.py).
USABLE_INDEX_SQL = (
    "FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
    "WHERE c.relname = %(index)s AND c.relkind = 'i' AND i.indisvalid AND i.indisready"
)


@dataclass(frozen=True)
class AgentVectorIndex:
    name: str
    agent_id: int
    dimensions: int
    valid: bool  # False after an interrupted CREATE INDEX CONCURRENTLY: unusable, to be rebuilt
    rows: int  # chunks in the index when it was built (pg_class.reltuples)


def agent_vector_index(*, agent_id: int, dimensions: int) -> AgentVectorIndex | None:
    """The agent's usable HNSW index for `dimensions`, or None (search exactly)."""
    name = agent_vector_index_name(agent_id=agent_id, dimensions=dimensions)
    with read_connection.cursor() as cursor:  # the database the search runs on: a replica or the primary
        cursor.execute(f"SELECT c.reltuples {USABLE_INDEX_SQL}", {"index": name})
        row = cursor.fetchone()
    if row is None:
        return None
    return AgentVectorIndex(name=name, agent_id=int(agent_id), dimensions=int(dimensions), valid=True, rows=max(int(row[0]), 0))


def vector_indexes_list() -> list[AgentVectorIndex]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid AND i.indisready, c.reltuples FROM pg_class c "
            "JOIN pg_index i ON i.indexrelid = c.oid JOIN pg_class t ON t.oid = i.indrelid "
            f"WHERE {chunk_tables_condition('t')} AND c.relname LIKE 'chunk\\_hnsw\\_a%' ORDER BY c.relname"
        )
        rows = cursor.fetchall()
    indexes = []
    for name, valid, reltuples in rows:
        match = INDEX_NAME_PATTERN.match(name)
        if match:
            indexes.append(
                AgentVectorIndex(
                    name=name,
                    agent_id=int(match[1]),
                    dimensions=int(match[2]),
                    valid=bool(valid),
                    rows=max(int(reltuples), 0),
                )
            )
    return indexes


@dataclass
class VectorIndexOutcome:
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # build time per created index
    skipped: str = ""  # why nothing was done (another run holds the lock, no vectors configured)


def vector_indexes_sync(*, min_chunks: int | None = None) -> VectorIndexOutcome:
    """Make the set of per-agent HNSW indexes match the agents' sizes under the configured identity.

    An agent gets an index at `min_chunks` embedded chunks and loses it below half that (so an agent
    hovering around the threshold is not rebuilt on every run). Indexes of other dimensions, of deleted
    agents and invalid leftovers of interrupted builds are dropped. Safe to run twice at once: the
    second run returns at once with `skipped` set.
    """
    import time

    min_chunks = settings.MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS if min_chunks is None else min_chunks
    outcome = VectorIndexOutcome()
    identity = configured_identity()
    concurrently = concurrently_clause()
    with advisory_lock(ADVISORY_LOCK_KEY) as acquired, connection.cursor() as cursor:
        if not acquired:
            outcome.skipped = "another run is building vector indexes"
            return outcome
        sizes: dict[int, int] = {}
        dims = identity.dimensions if identity.has_vectors else None
        if dims and dims <= HNSW_MAX_DIMENSIONS:
            # One pass over chunk_agent_identity_idx; runs every few minutes, not per search.
            cursor.execute(
                f"SELECT agent_id, count(*) FROM {CHUNK} WHERE embedding_identity = %s AND {AGENT_LIVE} "
                "AND embedding IS NOT NULL GROUP BY agent_id HAVING count(*) >= %s",
                [identity.key, max(1, min_chunks // 2)],
            )
            sizes = dict(cursor.fetchall())
        elif dims:
            outcome.skipped = f"{dims} dimensions: above pgvector's HNSW limit of {HNSW_MAX_DIMENSIONS}, search is exact"
        existing = {index.name: index for index in vector_indexes_list()}
        for index in existing.values():
            keep = index.valid and index.dimensions == dims and index.agent_id in sizes
            if keep:
                outcome.kept.append(index.name)
                continue
            cursor.execute(f'DROP INDEX{concurrently} IF EXISTS "{index.name}"')
            outcome.dropped.append(index.name)
        for agent_id, count in sorted(sizes.items()):
            name = agent_vector_index_name(agent_id=agent_id, dimensions=dims)
            if count < min_chunks or name in outcome.kept:
                continue
            started = time.monotonic()
            agent_vector_index_create(agent_id=agent_id, dimensions=dims, concurrently=concurrently)
            outcome.seconds[name] = time.monotonic() - started
            outcome.created.append(name)
            logger.info("built %s (%d chunks) in %.1f s", name, count, outcome.seconds[name])
    return outcome
