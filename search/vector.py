"""The vector half of search: the agent's chunks nearest to the query embedding (cosine distance).

This is the simple exact version: it orders by ``embedding <=> query`` without the ``::vector(N)``
cast that the HNSW index is built on (indexing/vector_index.py), so the planner cannot pick that
global index and lose rows to the agent filter (pgvector#259); it scans this agent's rows through
chunk_agent_identity_idx instead. Exact is right for small agents; large agents need the HNSW path.
"""

from __future__ import annotations

from django.db import connection
from pgvector import Vector

from indexing.embedding_identity import EmbeddingIdentity
from search.types import SearchFilters


def vector_candidates(
    *,
    agent_id: int,
    query_embedding: list[float],
    identity: EmbeddingIdentity | str,
    dimensions: int,
    filters: SearchFilters,
    limit: int,
) -> list[tuple[int, float]]:
    """(chunk id, cosine distance) of this agent's chunks embedded under ``identity``, nearest first."""
    identity_key = identity.key if isinstance(identity, EmbeddingIdentity) else identity
    if not identity_key or len(query_embedding) != dimensions or limit < 1:
        return []
    params: list = [Vector._to_db(query_embedding), agent_id, identity_key, dimensions]
    file_join = file_where = ""
    if not filters.is_empty:
        clause, filter_params = filters.file_sql("f")
        file_join = "JOIN indexing_memoryfile f ON f.id = c.file_id"
        file_where = f"AND {clause}"
        params.extend(filter_params)
    params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT c.id, c.embedding <=> %s::vector AS distance
            FROM indexing_chunk c {file_join}
            WHERE c.agent_id = %s AND c.embedding_identity = %s AND c.embedding_dimensions = %s
              AND c.embedding IS NOT NULL {file_where}
            ORDER BY distance, c.id
            LIMIT %s
            """,
            params,
        )
        return [(row[0], float(row[1])) for row in cursor.fetchall()]
