"""Celery tasks of the search app."""

from celery import shared_task


@shared_task(acks_late=True, reject_on_worker_lost=True)
def vector_indexes_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE): build HNSW indexes for agents that grew big, drop the rest.

    Safe to run twice: the second run finds the advisory lock taken and returns.
    """
    from search.vector_index import vector_indexes_sync

    outcome = vector_indexes_sync()
    return {"created": outcome.created, "dropped": outcome.dropped, "kept": len(outcome.kept), "skipped": outcome.skipped}
