"""Work a failure left behind, found and sent on again: nothing is lost when a worker dies, when the
broker is down, or when the embedding provider fails for a while.

- **Dispatch with an outbox.** ``job_dispatch`` publishes a job's task once its transaction has
  committed. When the broker does not answer, the write that created the job has still happened: the
  job is flagged ``awaiting_dispatch`` and ``outbox_drain`` publishes it once the broker is back.
- **A lease on claimed files.** While a worker indexes files it touches their ``updated_at`` every
  third of ``MEMORYHUB_INDEX_LEASE_SECONDS`` (``claimed_files_lease``). A file still ``indexing``
  without a touch for the whole lease belonged to a worker that died; ``abandoned_files_recover``
  puts it back to ``pending`` and queues its job again. The tasks are idempotent (status-guarded
  claims), so a redelivered message of the dead worker finds nothing left to do.
- **Failed files after an outage.** ``provider_recovery_probe`` makes one tiny embedding call when
  files failed for the provider's sake (not for their own content); when it answers, they are queued
  at once instead of waiting out the backoff.

``index_recovery`` runs all three: every ``MEMORYHUB_INDEX_RECOVERY_INTERVAL`` seconds (beat), and
when a worker starts.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import LIVE_AGENT
from indexing.models import IndexJob, MemoryFile
from indexing.states import ACTIVE_JOBS, job_to_queued, to_pending

logger = logging.getLogger(__name__)

JobState = IndexJob.State
State = MemoryFile.State

# last_error prefixes of failures that were the provider's, not the file's (services.files_index).
PROVIDER_FAILURE_PREFIXES = ("embedding failed:", "embedding deferred")
OUTBOX_BATCH = 500
PROBE_TEXT = "memoryhub provider probe"


# --- Dispatch and the outbox ---------------------------------------------------------------------


# Jobs no one waits on: an operator's re-index (every agent's, after a model change) and the periodic
# sweeps' work. They go to the background queue, which workers read in turn with the main one, so they
# never stand in front of a tenant's upload (settings.CELERY_TASK_QUEUES).
BACKGROUND_TRIGGERS = frozenset({IndexJob.Trigger.REINDEX, IndexJob.Trigger.SCHEDULE})


def job_queue(trigger: str) -> str:
    """The queue a job of this trigger is published to: the main queue, or ``<main>.background``."""
    from memoryhub.observability import background_queue_name, index_queue_name

    return background_queue_name() if trigger in BACKGROUND_TRIGGERS else index_queue_name()


def _publish(job_id: int, queue: str) -> None:
    from indexing.tasks import index_job_task

    task_publish(index_job_task, args=[job_id], queue=queue)


def task_publish(task, *, args: list, queue: str) -> None:
    # retry=False: one attempt (a 2 s connect timeout, CELERY_BROKER_TRANSPORT_OPTIONS), so a web
    # request never hangs on a broker that is down; the outbox (or the stuck-work sweep) covers the miss.
    task.apply_async(args=args, queue=queue, retry=False)


def job_dispatch(*, job_id: int, trigger: str) -> bool:
    """Publish a committed job's task; on a broker failure flag it for the outbox. True if published."""
    try:
        _publish(job_id, job_queue(trigger))
        return True
    except Exception as exc:  # kombu's and redis-py's connection errors have no common base worth naming
        logger.warning("could not publish index job %s (%s: %s); the outbox will send it", job_id, exc.__class__.__name__, exc)
    try:
        IndexJob.objects.filter(pk=job_id).update(awaiting_dispatch=True)
    except Exception:  # the database went too: the stuck-work sweep finds the queued job later
        logger.exception("could not flag index job %s for the outbox", job_id)
    return False


def job_enqueue_on_commit(*, job_id: int, trigger: str) -> None:
    """What every write path calls: dispatch the job once the transaction that created it commits."""
    transaction.on_commit(lambda: job_dispatch(job_id=job_id, trigger=trigger))


def agent_deletion_dispatch(*, agent_id: int) -> bool:
    """Publish the deletion task of an agent marked for deletion, on the background queue (no one waits
    on it). On a broker failure the mark itself is the record: the stuck-work sweep publishes it again
    (indexing/maintenance.py). True if published."""
    from agents.tasks import agent_delete_task
    from memoryhub.observability import background_queue_name

    try:
        task_publish(agent_delete_task, args=[agent_id], queue=background_queue_name())
        return True
    except Exception as exc:  # as job_dispatch: the broker's connection errors have no common base
        logger.warning(
            "could not publish the deletion of agent %s (%s: %s); the stuck-work sweep will send it",
            agent_id, exc.__class__.__name__, exc,
        )
    return False


def agent_deletion_enqueue_on_commit(*, agent_id: int) -> None:
    """Publish the agent's deletion once the transaction that marked it commits."""
    transaction.on_commit(lambda: agent_deletion_dispatch(agent_id=agent_id))


def outbox_drain(*, limit: int = OUTBOX_BATCH) -> int:
    """Publish jobs whose task never reached the broker; stop at the first failure (still down).
    Returns how many were published."""
    published = 0
    rows = IndexJob.objects.filter(awaiting_dispatch=True).order_by("created_at").values_list("id", "state", "trigger")[:limit]
    for job_id, state, trigger in rows:
        if state == JobState.QUEUED:
            try:
                _publish(job_id, job_queue(trigger))
            except Exception as exc:
                logger.info("outbox: the broker still does not answer (%s)", exc.__class__.__name__)
                break
            published += 1
        IndexJob.objects.filter(pk=job_id).update(awaiting_dispatch=False)
    return published


# --- The lease on claimed files ------------------------------------------------------------------


def _lease_touch(file_ids: list[int]) -> None:
    # SKIP LOCKED: a row this worker (or an upload) holds is being written right now anyway, and the
    # touch must never wait in a lock queue (or take part in a deadlock).
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {MemoryFile._meta.db_table} SET updated_at = now() WHERE id IN ("
            f"SELECT id FROM {MemoryFile._meta.db_table} WHERE id = ANY(%s) AND state = %s ORDER BY id FOR UPDATE SKIP LOCKED)",
            [file_ids, State.INDEXING.value],
        )


@contextmanager
def claimed_files_lease(file_ids: list[int]):
    """Keep the lease on ``file_ids`` while the block runs (a thread with its own connection)."""
    stop = threading.Event()
    interval = settings.MEMORYHUB_INDEX_LEASE_SECONDS / 3

    def keep() -> None:
        try:
            while not stop.wait(interval):
                try:
                    _lease_touch(file_ids)
                except Exception:
                    logger.exception("could not renew the lease on %d file(s)", len(file_ids))
        finally:
            connection.close()  # this thread's own connection

    keeper = threading.Thread(target=keep, name="memoryhub-lease", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()


def abandoned_files_recover(*, now: datetime | None = None) -> list[int]:
    """Files left ``indexing`` by a dead worker go back to ``pending``; their jobs are queued again (or
    a new ``schedule`` job takes them when theirs is over). Returns the jobs dispatched."""
    from indexing.maintenance import files_requeue_under_new_job
    from indexing.locks import files_lock

    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.MEMORYHUB_INDEX_LEASE_SECONDS)
    abandoned = list(
        MemoryFile.objects.filter(LIVE_AGENT, state=State.INDEXING, updated_at__lt=cutoff)
        .values_list("id", "agent_id", "job_id", "job__trigger")
    )
    if not abandoned:
        return []
    jobs: list[int] = []
    by_job: dict[tuple[int | None, str | None], list[tuple[int, int]]] = {}
    for file_id, agent_id, job_id, trigger in abandoned:
        by_job.setdefault((job_id, trigger), []).append((file_id, agent_id))
    for (job_id, trigger), rows in by_job.items():
        file_ids = [file_id for file_id, _ in rows]
        with transaction.atomic():
            files_lock(file_ids)
            reset = MemoryFile.objects.filter(pk__in=file_ids, state=State.INDEXING, updated_at__lt=cutoff).update(
                **to_pending(now=now)
            )
            if not reset:
                continue
            requeued = job_id is not None and IndexJob.objects.filter(pk=job_id, state__in=ACTIVE_JOBS).update(
                **job_to_queued(error="re-queued: the worker indexing it stopped answering")
            )
            if requeued:
                job_enqueue_on_commit(job_id=job_id, trigger=trigger)
                jobs.append(job_id)
            else:
                for agent_id in {agent for _, agent in rows}:
                    ids = [file_id for file_id, agent in rows if agent == agent_id]
                    jobs.append(files_requeue_under_new_job(agent_id=agent_id, file_ids=ids).id)
        logger.warning("recovered %d file(s) a dead worker left indexing (job %s)", reset, job_id)
    return jobs


# --- Failed files after a provider outage --------------------------------------------------------


def _provider_failed_files():
    provider_failure = Q()
    for prefix in PROVIDER_FAILURE_PREFIXES:
        provider_failure |= Q(last_error__startswith=prefix)
    return MemoryFile.objects.filter(provider_failure, LIVE_AGENT, state=State.FAILED)


def provider_recovery_probe() -> list[int]:
    """When files failed for the provider's sake, ask the provider once; if it answers, queue them now.
    Returns the jobs queued."""
    from indexing.embeddings import ProviderError, get_provider
    from indexing.maintenance import files_requeue_under_new_job

    waiting = list(_provider_failed_files().filter(job__state__in=[JobState.DONE, JobState.FAILED]).values_list("agent_id", "id")[:10_000])
    waiting += list(_provider_failed_files().filter(job__isnull=True).values_list("agent_id", "id")[:10_000])
    if not waiting:
        return []
    provider = get_provider()
    if provider is None:
        return []
    try:
        provider.embed_documents([PROBE_TEXT])
    except ProviderError as exc:
        logger.info("provider probe: still failing (%s); %d file(s) wait", exc, len(waiting))
        return []
    by_agent: dict[int, list[int]] = {}
    for agent_id, file_id in waiting:
        by_agent.setdefault(agent_id, []).append(file_id)
    jobs = [files_requeue_under_new_job(agent_id=agent_id, file_ids=ids).id for agent_id, ids in by_agent.items()]
    logger.warning("provider probe answered: %d file(s) failed during the outage queued again", len(waiting))
    return jobs


# --- All of it -----------------------------------------------------------------------------------


@dataclass
class RecoveryOutcome:
    dispatched: int = 0
    recovered_jobs: list[int] = field(default_factory=list)
    retried_jobs: list[int] = field(default_factory=list)


def index_recovery() -> RecoveryOutcome:
    outcome = RecoveryOutcome()
    outcome.dispatched = outbox_drain()
    outcome.recovered_jobs = abandoned_files_recover()
    outcome.retried_jobs = provider_recovery_probe()
    return outcome
