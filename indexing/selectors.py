"""Read-only queries over an agent's index."""

from django.db.models import Count, Max, Q

from agents.models import Agent
from indexing.embedding_identity import configured_identity
from indexing.models import Chunk, IndexJob, MemoryFile


def agent_index_status(*, agent: Agent) -> dict:
    """The numbers behind GET /api/v1/status for one agent."""
    files = MemoryFile.objects.filter(agent=agent).aggregate(
        files=Count("id"),
        pending=Count("id", filter=Q(state__in=[MemoryFile.State.PENDING, MemoryFile.State.INDEXING])),
        failed=Count("id", filter=Q(state=MemoryFile.State.FAILED)),
        last_indexed_at=Max("indexed_at"),
    )
    identity = configured_identity()
    return {
        "files": files["files"],
        "chunks": Chunk.objects.filter(agent=agent).count(),
        "pending": files["pending"],
        "failed": files["failed"],
        "failed_jobs": IndexJob.objects.filter(agent=agent, state=IndexJob.State.FAILED).count(),
        "embedding": {
            "provider": identity.provider,
            "model": identity.model or None,
            "dimensions": identity.dimensions,
            "vector_search": identity.has_vectors,
        },
        "last_indexed_at": files["last_indexed_at"],
    }
