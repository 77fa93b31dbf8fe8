"""Celery tasks of the indexing pipeline. They take ids, and the services they call claim work with
status-guarded UPDATEs, so a task delivered twice (acks_late, a worker lost mid-task) is harmless.

Only transient provider errors (429, 5xx, timeouts) are retried, with exponential backoff and a bounded
number of retries; when they run out, or on any other error, the job is marked failed with its reason
and its files stay keyword-searchable until the periodic task tries them again.
"""

from celery import Task, shared_task
from django.conf import settings

from indexing.embeddings import ProviderTransientError


class IndexJobTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        from indexing.services import index_job_fail

        job_id = args[0] if args else kwargs.get("job_id")
        if job_id is not None:
            retries = f" after {self.request.retries} retries" if isinstance(exc, ProviderTransientError) else ""
            index_job_fail(job_id=job_id, reason=f"{exc.__class__.__name__}{retries}: {exc}")
        super().on_failure(exc, task_id, args, kwargs, einfo)


@shared_task(
    base=IndexJobTask,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(ProviderTransientError,),
    retry_backoff=5,
    retry_backoff_max=settings.MEMORYHUB_INDEX_RETRY_BACKOFF_MAX,
    retry_jitter=True,
    max_retries=settings.MEMORYHUB_INDEX_MAX_RETRIES,
)
def index_job_task(job_id: int) -> None:
    from indexing.services import index_job_run

    index_job_run(job_id=job_id)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def index_maintenance_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE): re-queue stuck or failed work, re-embed after identity changes."""
    from indexing.services import index_maintenance

    outcome = index_maintenance()
    return {
        "stuck_jobs": outcome.stuck_jobs,
        "requeued_files": outcome.requeued_files,
        "retried_failed": outcome.retried_failed,
        "reembed_jobs": outcome.reembed_jobs,
    }
