"""Maintenance: work put back in the queue by an operator (re-index, re-embed, retry) or by the periodic
sweep (stuck jobs, orphaned files, failed files whose back-off has passed, chunks of an old embedding
identity). Everything here only queues: the indexing itself is indexing/services.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import LIVE_AGENT, Agent
from indexing.embedding_identity import configured_identity
from indexing.locks import agent_lock, files_lock, files_update
from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.recovery import agent_deletion_dispatch, job_enqueue_on_commit
from indexing.services import index_job_fail
from indexing.states import IN_FLIGHT, OWNING_JOBS, job_to_queued, to_pending
from memoryhub.domain import NotFound

State = MemoryFile.State
JobState = IndexJob.State
Trigger = IndexJob.Trigger


def _files_requeue(*, agent: Agent, file_ids: list[int], trigger: str, force: bool = False) -> IndexJob | None:
    """Put existing files back in the queue under a new job (``force``: re-chunk even if unchanged)."""
    if not file_ids:
        return None
    try:
        return _files_requeue_locked(agent=agent, file_ids=file_ids, trigger=trigger, force=force)
    except NotFound:  # the agent is being deleted: nothing of it is indexed again
        return None


def _files_requeue_locked(*, agent: Agent, file_ids: list[int], trigger: str, force: bool) -> IndexJob:
    with transaction.atomic():
        agent_lock(agent)
        file_ids = files_lock(file_ids)  # an unordered multi-row UPDATE could deadlock with a worker
        job = IndexJob.objects.create(agent=agent, trigger=trigger, files_seen=len(file_ids))
        MemoryFile.objects.filter(agent=agent, id__in=file_ids).update(**to_pending(job=job, reindex=force))
        job_enqueue_on_commit(job_id=job.id, trigger=job.trigger)
    return job


def file_reindex(*, agent: Agent, file_ids: list[int] | None = None) -> IndexJob | None:
    """Re-chunk and re-index files of this agent (all when ``file_ids`` is None), e.g. after a change of
    the agent's chunk sizes. Vectors are reused by text hash, so unchanged chunks cost no embedding."""
    files = MemoryFile.objects.filter(agent=agent)
    if file_ids is not None:
        files = files.filter(id__in=file_ids)
    return _files_requeue(agent=agent, file_ids=list(files.values_list("id", flat=True)), trigger=Trigger.REINDEX, force=True)


def agent_reembed(*, agent: Agent) -> IndexJob | None:
    """Queue this agent's indexed files that have chunks without a vector of the configured identity
    (after a change of model or dimensions). Search keeps working meanwhile: keyword search is not
    affected, and vector search only uses vectors of the configured identity."""
    identity = configured_identity()
    if not identity.has_vectors:
        return None
    stale = Chunk.objects.filter(agent=agent).exclude(embedding_identity=identity.key)
    file_ids = list(
        MemoryFile.objects.filter(agent=agent, state=State.INDEXED, id__in=stale.values("file_id")).values_list("id", flat=True)
    )
    return _files_requeue(agent=agent, file_ids=file_ids, trigger=Trigger.REINDEX)


def index_job_retry(*, job: IndexJob) -> bool:
    """Queue a failed job again (the admin's "Retry"): its files still failed or pending are indexed
    anew by the same job. Returns False when the job is not failed (a queued, running or done job has
    nothing to retry, and a second click is harmless)."""
    with transaction.atomic():
        claimed = IndexJob.objects.filter(pk=job.pk, state=JobState.FAILED).update(**job_to_queued(restart=True))
        if claimed:
            job_enqueue_on_commit(job_id=job.id, trigger=job.trigger)
    return bool(claimed)


def files_requeue_under_new_job(*, agent_id: int, file_ids: list[int], now: datetime | None = None) -> IndexJob:
    """Queue files again under a new ``schedule`` job (the periodic sweeps: orphaned, failed, recovered)."""
    now = now or timezone.now()
    with transaction.atomic():
        files_lock(file_ids)  # lock order, before the multi-row UPDATEs
        job = IndexJob.objects.create(agent_id=agent_id, trigger=Trigger.SCHEDULE, files_seen=len(file_ids))
        # Failed files keep their state (they are keyword-searchable); the job's claim accepts them.
        MemoryFile.objects.filter(id__in=file_ids, state__in=IN_FLIGHT).update(**to_pending(job=job, now=now))
        MemoryFile.objects.filter(id__in=file_ids, state=State.FAILED).update(job=job, updated_at=now)
        job_enqueue_on_commit(job_id=job.id, trigger=job.trigger)
    return job


def agent_deletions_redispatch(*, cutoff: datetime) -> list[int]:
    """Publish again the deletion of every agent marked before ``cutoff`` and still there. A run that is
    still going holds the agent's lock, so the extra message returns at once. Returns the agents."""
    published = []
    for agent_id in Agent.objects.being_deleted().filter(deletion_requested_at__lt=cutoff).values_list("id", flat=True):
        if not agent_deletion_dispatch(agent_id=agent_id):
            break  # the broker is down: the next sweep tries again
        published.append(agent_id)
    return published


@dataclass
class MaintenanceOutcome:
    stuck_jobs: int = 0
    requeued_files: int = 0
    retried_failed: int = 0
    reembed_jobs: int = 0
    jobs: list[int] = field(default_factory=list)
    deletions: list[int] = field(default_factory=list)  # agents whose deletion was published again


def index_maintenance(*, now: datetime | None = None) -> MaintenanceOutcome:
    """The periodic task's work: re-queue stuck and failed work, re-embed after an identity change.

    - jobs queued or running for longer than MEMORYHUB_INDEX_STUCK_AFTER (lost message, dead worker):
      their files claimed by a dead worker go back to pending and the job is queued again;
    - pending or indexing files whose job is over (or gone) are queued under a new ``schedule`` job;
    - failed files are tried again MEMORYHUB_INDEX_RETRY_FAILED_AFTER after their failure, twice that
      after a second one, and so on, until MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS failures in a row (then
      they stay failed, keyword-searchable with their old chunks, until new content or a re-index);
    - agents with chunks embedded under another identity get an ``agent_reembed``;
    - agents marked for deletion longer ago than MEMORYHUB_INDEX_STUCK_AFTER get their deletion task
      published again (the first was lost, or a run stopped without publishing the next).

    Nothing of an agent being deleted is queued again: its rows are on their way out.
    """
    now = now or timezone.now()
    stuck_cutoff = now - timedelta(seconds=settings.MEMORYHUB_INDEX_STUCK_AFTER)
    failed_cutoff = now - timedelta(seconds=settings.MEMORYHUB_INDEX_RETRY_FAILED_AFTER)
    outcome = MaintenanceOutcome()

    outcome.deletions = agent_deletions_redispatch(cutoff=stuck_cutoff)
    stuck = IndexJob.objects.filter(
        Q(state=JobState.QUEUED, created_at__lt=stuck_cutoff) | Q(state=JobState.RUNNING, started_at__lt=stuck_cutoff)
    ).filter(LIVE_AGENT).values_list("id", "state", "attempts", "trigger")
    for job_id, state, attempts, trigger in stuck:
        if attempts > settings.MEMORYHUB_INDEX_MAX_RETRIES:
            index_job_fail(job_id=job_id, reason=f"gave up after {attempts} attempts (stuck)")
            continue
        with transaction.atomic():
            files_update(
                MemoryFile.objects.filter(job_id=job_id, state=State.INDEXING, updated_at__lt=stuck_cutoff),
                **to_pending(now=now),
            )
            if IndexJob.objects.filter(pk=job_id, state=state).update(**job_to_queued()):
                outcome.stuck_jobs += 1
                outcome.jobs.append(job_id)
                job_enqueue_on_commit(job_id=job_id, trigger=trigger)

    active_jobs = IndexJob.objects.filter(state__in=OWNING_JOBS).values("id")
    orphans = (
        MemoryFile.objects.filter(LIVE_AGENT, state__in=IN_FLIGHT, updated_at__lt=stuck_cutoff)
        .filter(Q(job__isnull=True) | ~Q(job_id__in=active_jobs))
        .values_list("agent_id", "id")
    )
    retry_failed = [
        (agent_id, file_id)
        for agent_id, file_id, failures, updated_at in MemoryFile.objects.filter(
            LIVE_AGENT, state=State.FAILED, updated_at__lt=failed_cutoff, failures__lt=settings.MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS
        ).values_list("agent_id", "id", "failures", "updated_at")
        if updated_at < now - timedelta(seconds=settings.MEMORYHUB_INDEX_RETRY_FAILED_AFTER * 2 ** max(failures - 1, 0))
    ]
    for rows, trigger_count in ((orphans, "requeued_files"), (retry_failed, "retried_failed")):
        by_agent: dict[int, list[int]] = {}
        for agent_id, file_id in rows:
            by_agent.setdefault(agent_id, []).append(file_id)
        for agent_id, file_ids in by_agent.items():
            job = files_requeue_under_new_job(agent_id=agent_id, file_ids=file_ids, now=now)
            setattr(outcome, trigger_count, getattr(outcome, trigger_count) + len(file_ids))
            outcome.jobs.append(job.id)

    identity = configured_identity()
    if identity.has_vectors:
        stale_agents = (
            Chunk.objects.exclude(embedding_identity=identity.key)
            .filter(file__state=State.INDEXED)
            .values_list("agent_id", flat=True)
            .distinct()
        )
        agent_ids = list(stale_agents)
        for agent in Agent.objects.live().filter(id__in=agent_ids):
            job = agent_reembed(agent=agent)
            if job is not None:
                outcome.reembed_jobs += 1
                outcome.jobs.append(job.id)
    return outcome
