"""Table names for the raw SQL of the search and indexing paths, read from the models: a model's table
is renamed in one place, and a query that names a table no model has cannot be written by accident.

    f"SELECT count(*) FROM {CHUNK} WHERE agent_id = %s"
"""

from indexing.models import Chunk, EmbeddingCache, IndexJob, MemoryFile

CHUNK = Chunk._meta.db_table
FILE = MemoryFile._meta.db_table
JOB = IndexJob._meta.db_table
EMBEDDING_CACHE = EmbeddingCache._meta.db_table
