"""Celery tasks of the indexing pipeline. They take ids, and the services they call claim work with
status-guarded UPDATEs, so a task delivered twice (acks_late, a worker lost mid-task) is harmless.

Only transient provider errors (429, 5xx, timeouts) are retried, with exponential backoff and a bounded
number of retries; when they run out, or on any other error, the job is marked failed with its reason
and its files stay keyword-searchable until the periodic task tries them again.
"""

import logging

from celery import Task, shared_task
from celery.signals import worker_ready
from django.conf import settings

from indexing.embeddings import ProviderTransientError

logger = logging.getLogger(__name__)


class IndexJobTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        from indexing.services import index_job_fail

        job_id = args[0] if args else kwargs.get("job_id")
        if job_id is not None:
            retries = f" after {self.request.retries} retries" if isinstance(exc, ProviderTransientError) else ""
            index_job_fail(job_id=job_id, reason=f"{exc.__class__.__name__}{retries}: {exc}")
        super().on_failure(exc, task_id, args, kwargs, einfo)


RETRYING = dict(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(ProviderTransientError,),
    retry_backoff=5,
    retry_backoff_max=settings.MEMORYHUB_INDEX_RETRY_BACKOFF_MAX,
    retry_jitter=True,
    max_retries=settings.MEMORYHUB_INDEX_MAX_RETRIES,
)


@shared_task(base=IndexJobTask, bind=True, **RETRYING)
def index_job_task(self, job_id: int) -> None:
    """Run a job; a job of several batches fans out to index_batch_task on the same queue."""
    from indexing.services import index_job_run

    queue = (self.request.delivery_info or {}).get("routing_key") if not self.request.is_eager else None

    def dispatch(job: int, file_ids: list[int]) -> None:
        index_batch_task.apply_async(args=[job, file_ids], queue=queue)

    index_job_run(job_id=job_id, dispatch_batch=None if self.request.is_eager else dispatch)


class IndexBatchTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        from indexing.services import index_job_settle

        job_id = args[0] if args else kwargs.get("job_id")
        if job_id is not None:
            index_job_settle(job_id=job_id, internal_errors=[f"{exc.__class__.__name__}: {exc}"])
        super().on_failure(exc, task_id, args, kwargs, einfo)


@shared_task(base=IndexBatchTask, **RETRYING)
def index_batch_task(job_id: int, file_ids: list[int]) -> None:
    """One batch of a fanned-out job; the last batch to finish settles the job."""
    from indexing.services import index_job_batch_run

    index_job_batch_run(job_id=job_id, file_ids=file_ids)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def index_maintenance_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE): re-queue stuck or failed work, re-embed after identity changes."""
    from indexing.maintenance import index_maintenance

    outcome = index_maintenance()
    return {
        "stuck_jobs": outcome.stuck_jobs,
        "requeued_files": outcome.requeued_files,
        "retried_failed": outcome.retried_failed,
        "reembed_jobs": outcome.reembed_jobs,
        "deletions": outcome.deletions,
    }


@shared_task(acks_late=True, reject_on_worker_lost=True)
def index_recovery_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE) and at worker start: the outbox, dead workers' files, failed files
    once the provider answers again (indexing/recovery.py)."""
    from indexing.recovery import index_recovery

    outcome = index_recovery()
    return {"dispatched": outcome.dispatched, "recovered_jobs": outcome.recovered_jobs, "retried_jobs": outcome.retried_jobs}


@shared_task(acks_late=True, reject_on_worker_lost=True)
def embedding_batches_collect_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE): collect the providers' finished embedding batches and queue
    their jobs again (indexing/embedding_batches.py)."""
    from indexing.embedding_batches import embedding_batches_collect

    outcome = embedding_batches_collect()
    return {"polled": outcome.polled, "collected": outcome.collected, "jobs_queued": outcome.jobs_queued}


@shared_task(acks_late=True, reject_on_worker_lost=True)
def model_check_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE, MEMORYHUB_EMBEDDING_CHECK_INTERVAL): whether the model behind the
    configured name still gives the index's vectors (indexing/model_check.py)."""
    from indexing.model_check import model_check

    outcome = model_check()
    return {"state": outcome.state, "compared": outcome.compared, "differed": outcome.differed}


@worker_ready.connect
def _recover_when_a_worker_starts(sender=None, **kwargs) -> None:
    # Whatever a previous worker left (the outbox, files whose lease ran out) is sent on at once,
    # not at the next beat tick; the work itself runs on this worker like any other task.
    try:
        index_recovery_task.apply_async(retry=False)
    except Exception:
        logger.exception("could not queue the recovery task at worker start")
