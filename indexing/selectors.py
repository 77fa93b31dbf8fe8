"""Read-only queries over an agent's index."""

from django.db.models import Count, Max, Q

from agents.models import Agent
from indexing.embedding_identity import configured_identity
from indexing.models import Chunk, IndexJob, MemoryFile
from memoryhub.errors import ApiError


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


def file_list(*, agent: Agent, prefix: str = "", source: str | None = None):
    """This agent's files (without their content), by path."""
    files = MemoryFile.objects.filter(agent=agent).defer("content").order_by("path")
    if prefix:
        files = files.filter(path__startswith=prefix)
    if source:
        files = files.filter(source=source)
    return files


def file_get(*, agent: Agent, path: str) -> MemoryFile:
    """One of this agent's files, or 404 (another agent's file is simply not there)."""
    memory_file = MemoryFile.objects.filter(agent=agent, path=path).first()
    if memory_file is None:
        raise ApiError(status_code=404, code="not_found", message=f"No file {path!r}.")
    return memory_file


def file_read_lines(*, agent: Agent, path: str, start: int = 1, lines: int = 50) -> dict:
    """memory_get: ``lines`` lines of a file from line ``start`` (1-indexed), as the chunker numbers them
    (split on "\\n"; a final newline does not start another line)."""
    memory_file = file_get(agent=agent, path=path)
    all_lines = memory_file.content.split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()  # "a\nb\n" has two lines
    selected = all_lines[start - 1 : start - 1 + lines]
    return {
        "path": memory_file.path,
        "from": start,
        "lines": len(selected),
        "total_lines": len(all_lines),
        "content": "\n".join(selected),
        "source": memory_file.source,
    }


def job_get(*, agent: Agent, job_id: int) -> IndexJob:
    job = IndexJob.objects.filter(agent=agent, pk=job_id).first()
    if job is None:
        raise ApiError(status_code=404, code="not_found", message=f"No job {job_id}.")
    return job
