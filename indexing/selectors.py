"""Read-only queries over an agent's index."""

from datetime import datetime, timedelta

from django.db.models import CASCADE, Count, F, Max, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import LIVE, Agent, AgentToken, MemoryGrant
from indexing.embedding_batches import UNFINISHED as BATCHES_UNFINISHED, batches_in_flight
from indexing.embedding_identity import configured_identity, provider_chosen
from indexing.models import Chunk, EmbeddingBatch, EmbeddingCache, IndexJob, MemoryFile
from indexing.model_check import model_check_state
from indexing.window_probe import model_window_source
from memoryhub.domain import NotFound


def agent_index_status(*, agent: Agent) -> dict:
    """The numbers behind GET /api/v1/status for one agent."""
    from search.expansion import memory_words_counts  # search's table (imported here, as partitions.py does)

    files = MemoryFile.objects.filter(agent=agent).aggregate(
        files=Count("id"),
        pending=Count("id", filter=Q(state__in=[MemoryFile.State.PENDING, MemoryFile.State.INDEXING])),
        # Of those, the files keyword search finds already (chunks of this content written, vectors not yet).
        awaiting_vectors=Count(
            "id", filter=Q(state__in=[MemoryFile.State.PENDING, MemoryFile.State.INDEXING], indexed_hash=F("content_hash"))
        ),
        failed=Count("id", filter=Q(state=MemoryFile.State.FAILED)),
        last_indexed_at=Max("indexed_at"),
    )
    identity = configured_identity()
    window, window_source = model_window_source()
    batches = [
        {"id": batch.pk, "provider": batch.provider, "remote_id": batch.remote_id, "state": batch.state,
         "inputs": batch.inputs, "submitted_at": batch.created_at, "job": batch.job_id}
        for batch in batches_in_flight(agent_id=agent.pk)
    ]
    return {
        "files": files["files"],
        "chunks": Chunk.objects.filter(agent=agent).count(),
        "pending": files["pending"],
        "awaiting_vectors": files["awaiting_vectors"],
        "failed": files["failed"],
        "failed_jobs": IndexJob.objects.filter(agent=agent, state=IndexJob.State.FAILED).count(),
        "embedding": {
            "provider": identity.provider,
            "model": identity.model or None,
            "revision": identity.revision or None,
            "dimensions": identity.dimensions,
            "vector_search": identity.has_vectors,
            "chosen": provider_chosen(),
            "window": window if identity.has_vectors else None,
            "window_source": window_source,
            "model_check": model_check_state(),
        },
        "embedding_batches": batches,
        "memory_words": memory_words_counts(agent_id=agent.pk, identity_key=identity.key),
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
        raise NotFound(f"No file {path!r}.", code="not_found")
    return memory_file


# memory_get's bounds, for the REST endpoint and the tool alike. No file can have more lines than
# bytes, so a "from" past MEMORYHUB_MAX_FILE_BYTES is a client bug, not a request for an empty page.
MEMORY_GET_DEFAULT_LINES = 50
MEMORY_GET_MAX_LINES = 1000
MEMORY_GET_MAX_FROM = 100_000_000


def file_read_lines(*, agent: Agent, path: str, start: int = 1, lines: int = MEMORY_GET_DEFAULT_LINES) -> dict:
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
        raise NotFound(f"No job {job_id}.", code="not_found")
    return job


# --- Admin console -------------------------------------------------------------------------------


def _per_agent(queryset, aggregate):
    """A correlated subquery: ``aggregate`` over this agent's rows of ``queryset`` (one value per agent
    row, so a page of agents costs one query whatever its length)."""
    rows = queryset.filter(agent_id=OuterRef("pk")).order_by().values("agent_id").annotate(value=aggregate).values("value")
    return Subquery(rows)


def agent_index_annotate(*, queryset):
    """Agents with the admin list's columns: files, chunks, pending files, failed files, queued or
    running jobs, failed jobs and the last indexing time. Every count is served by an (agent, …) index."""
    files = MemoryFile.objects.all()
    jobs = IndexJob.objects.all()
    return queryset.annotate(
        file_count=Coalesce(_per_agent(files, Count("id")), 0),
        chunk_count=Coalesce(_per_agent(Chunk.objects.all(), Count("id")), 0),
        pending_count=Coalesce(
            _per_agent(files.filter(state__in=[MemoryFile.State.PENDING, MemoryFile.State.INDEXING]), Count("id")), 0
        ),
        failed_file_count=Coalesce(_per_agent(files.filter(state=MemoryFile.State.FAILED), Count("id")), 0),
        active_job_count=Coalesce(
            _per_agent(jobs.filter(state__in=[IndexJob.State.QUEUED, IndexJob.State.RUNNING]), Count("id")), 0
        ),
        failed_job_count=Coalesce(_per_agent(jobs.filter(state=IndexJob.State.FAILED), Count("id")), 0),
        last_indexed_at=_per_agent(files, Max("indexed_at")),
    )


# The agent delete page counts each kind of row that goes with the agent up to this many ("more than …"
# past it), so the page costs the same few queries, each reading at most this many index entries, however
# much the agent holds.
AGENT_HOLDINGS_COUNT_CAP = 10_000


def agent_holdings(*, agent_id: int, cap: int = AGENT_HOLDINGS_COUNT_CAP) -> tuple[list[tuple[str, int]], list[str]]:
    """What deleting the agent deletes with it (agents.services.agent_delete), for its confirmation page:
    ``(label, count)`` per counted kind, a count above ``cap`` meaning "more than cap" (it stops there), and
    the names of the other kinds that go too, uncounted (statistics and usage history; finished embedding
    batches, which no index serves by agent). One query per counted kind, each naming the agent and served
    by an index that starts with it (the chunk count reads the agent's partition only)."""
    counted = [
        ("files", MemoryFile.objects.filter(agent_id=agent_id)),
        ("chunks", Chunk.objects.filter(agent_id=agent_id)),
        ("index jobs", IndexJob.objects.filter(agent_id=agent_id)),
        ("tokens", AgentToken.objects.filter(agent_id=agent_id)),
        ("grants to read other agents' memory", MemoryGrant.objects.filter(reader_id=agent_id)),
        ("grants to other agents to read its memory", MemoryGrant.objects.filter(owner_id=agent_id)),
        ("embedding batches in flight", EmbeddingBatch.objects.filter(agent_id=agent_id, state__in=BATCHES_UNFINISHED)),
    ]
    counts = [(label, rows.order_by().values("pk")[: cap + 1].count()) for label, rows in counted]
    counted_models = {rows.model for _, rows in counted}
    uncounted = {relation.related_model for relation in agent_cascades()} - counted_models
    return counts, sorted(str(model._meta.verbose_name_plural) for model in uncounted)


def agent_cascades() -> list:
    """The relations through which deleting an agent deletes other rows (Django's cascade)."""
    return [
        field for field in Agent._meta.get_fields(include_hidden=True)
        if field.auto_created and not field.concrete and (field.one_to_many or field.one_to_one)
        and field.on_delete is CASCADE
    ]


def _hit_rate(hits: int | None, embedded: int | None) -> float | None:
    """Share of chunk vectors that cost no embedding call (reused or cached), None before any."""
    hits, embedded = hits or 0, embedded or 0
    return hits / (hits + embedded) if hits + embedded else None


def dashboard_stats(*, now: datetime | None = None, recent: int = 5, team_ids: frozenset[int] | None = None) -> dict:
    """The admin dashboard's numbers, in a fixed number of queries whatever the size of the database;
    with ``team_ids``, of those teams' agents only (None: every team, for a superuser)."""
    now = now or timezone.now()
    hour, day = now - timedelta(hours=1), now - timedelta(days=1)

    def scoped(queryset, team_field="agent__team"):
        return queryset if team_ids is None else queryset.filter(**{f"{team_field}__in": team_ids})

    # An agent being deleted is gone for its tokens already (agents/deletion.py): counted apart, not as live.
    agents = scoped(Agent.objects.all(), "team").aggregate(
        total=Count("id", filter=LIVE), active=Count("id", filter=LIVE & Q(is_active=True)), deleting=Count("id", filter=~LIVE)
    )
    tokens = scoped(AgentToken.objects.all()).aggregate(
        active=Count("id", filter=Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now)))
    )
    files = scoped(MemoryFile.objects.all()).aggregate(
        total=Count("id"),
        bytes=Coalesce(Sum("size"), 0),
        indexed=Count("id", filter=Q(state=MemoryFile.State.INDEXED)),
        pending=Count("id", filter=Q(state__in=[MemoryFile.State.PENDING, MemoryFile.State.INDEXING])),
        failed=Count("id", filter=Q(state=MemoryFile.State.FAILED)),
    )
    # A chunk has a vector exactly when it has an embedding identity; filtering on the identity lets
    # Postgres count from chunk_agent_identity_idx (an index-only scan) instead of reading every vector.
    chunks = scoped(Chunk.objects.all()).aggregate(total=Count("id"), with_vector=Count("id", filter=~Q(embedding_identity="")))
    State = IndexJob.State
    jobs = scoped(IndexJob.objects.all()).aggregate(
        **{
            f"{name}_{state}": Count("id", filter=Q(created_at__gte=since, state=state))
            for name, since in (("hour", hour), ("day", day))
            for state in (State.DONE, State.FAILED)
        },
        hour_total=Count("id", filter=Q(created_at__gte=hour)),
        day_total=Count("id", filter=Q(created_at__gte=day)),
        active=Count("id", filter=Q(state__in=[State.QUEUED, State.RUNNING])),
        waiting=Count("id", filter=Q(state=State.WAITING)),
        failed=Count("id", filter=Q(state=State.FAILED)),
        day_hits=Sum("cache_hits", filter=Q(created_at__gte=day)),
        day_embedded=Sum("chunks_embedded", filter=Q(created_at__gte=day)),
        all_hits=Sum("cache_hits"),
        all_embedded=Sum("chunks_embedded"),
    )
    identity = configured_identity()
    return {
        "agents": agents,
        "tokens": tokens,
        "files": files,
        "chunks": chunks,
        "jobs": {
            "hour": {"total": jobs["hour_total"], "done": jobs["hour_done"], "failed": jobs["hour_failed"]},
            "day": {"total": jobs["day_total"], "done": jobs["day_done"], "failed": jobs["day_failed"]},
            "active": jobs["active"],
            "waiting": jobs["waiting"],
            "failed": jobs["failed"],
        },
        "batches": scoped(EmbeddingBatch.objects.filter(state__in=BATCHES_UNFINISHED)).aggregate(
            in_flight=Count("id"), inputs=Coalesce(Sum("inputs"), 0), oldest=Min("created_at")
        ),
        "cache": {
            # The cache is shared by every team (content-addressed): its size is the service's, not a team's.
            "entries": EmbeddingCache.objects.count() if team_ids is None else None,
            "hit_rate_day": _hit_rate(jobs["day_hits"], jobs["day_embedded"]),
            "hit_rate_all": _hit_rate(jobs["all_hits"], jobs["all_embedded"]),
            "embedded_day": jobs["day_embedded"] or 0,
            "hits_day": jobs["day_hits"] or 0,
        },
        "embedding": identity,
        "embedding_chosen": provider_chosen(),
        "failed_jobs": list(
            scoped(IndexJob.objects.filter(state=State.FAILED)).select_related("agent").order_by("-created_at")[:recent]
        ),
        "failed_files": list(
            scoped(MemoryFile.objects.filter(state=MemoryFile.State.FAILED))
            .select_related("agent")
            .defer("content")
            .order_by("-updated_at")[:recent]
        ),
    }
