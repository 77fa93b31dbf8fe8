"""Table names for the raw SQL of the search and indexing paths, read from the models: a model's table
is renamed in one place, and a query that names a table no model has cannot be written by accident.

    f"SELECT count(*) FROM {CHUNK} WHERE agent_id = %s"
"""

from agents.models import Agent
from indexing.models import Chunk, EmbeddingCache, IndexJob, MemoryFile

AGENT = Agent._meta.db_table
CHUNK = Chunk._meta.db_table
FILE = MemoryFile._meta.db_table
JOB = IndexJob._meta.db_table
EMBEDDING_CACHE = EmbeddingCache._meta.db_table
# A condition on a row's agent_id: its agent is not being deleted (agents/deletion.py). The periodic index
# tasks keep no index or stats for an agent being deleted, and build none while its rows go.
AGENT_LIVE = f"agent_id NOT IN (SELECT id FROM {AGENT} WHERE deletion_requested_at IS NOT NULL)"
