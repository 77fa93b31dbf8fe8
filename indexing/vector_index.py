"""The HNSW index for the configured embedding dimension.

Chunk.embedding has no fixed dimension, so the index is an expression index over
``embedding::vector(N)`` restricted to rows with ``embedding_dimensions = N`` (the pgvector way to
index vectors of several dimensions in one column). Vector search must cast and filter the same way
for the planner to use it. It is created after every ``migrate`` for the current
MEMORYHUB_EMBEDDING_DIMENSIONS; an index for an old dimension stays until dropped by hand.
"""

import logging

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)

# pgvector 0.6 indexes at most 2,000 dimensions with HNSW; larger vectors are searched exactly.
HNSW_MAX_DIMENSIONS = 2000


def vector_index_name(dimensions: int) -> str:
    return f"chunk_embedding_hnsw_{dimensions}"


def ensure_vector_index(dimensions: int | None) -> bool:
    """Create the HNSW cosine index for `dimensions` if missing. Returns True when such an index exists."""
    if not dimensions:
        return False
    if dimensions > HNSW_MAX_DIMENSIONS:
        logger.warning("no HNSW index for %d dimensions (limit %d): vector search is exact", dimensions, HNSW_MAX_DIMENSIONS)
        return False
    dims = int(dimensions)
    with connection.cursor() as cursor:
        # Serves vector search: ORDER BY embedding::vector(N) <=> query for chunks of dimension N.
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {vector_index_name(dims)} ON indexing_chunk "
            f"USING hnsw ((embedding::vector({dims})) vector_cosine_ops) "
            f"WHERE embedding_dimensions = {dims}"
        )
    return True


def ensure_vector_index_after_migrate(sender, **kwargs):
    if "indexing_chunk" in connection.introspection.table_names():
        ensure_vector_index(settings.MEMORYHUB_EMBEDDING_DIMENSIONS)
