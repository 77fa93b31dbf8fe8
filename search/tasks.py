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


@shared_task(acks_late=True, reject_on_worker_lost=True)
def keyword_stats_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE): recount the per-lexeme df of agents too big to count it at query
    time (search/keyword_stats.py), drop the stats of agents that shrank. Safe to run twice."""
    from search.keyword_stats import keyword_stats_sync

    outcome = keyword_stats_sync()
    return {
        "refreshed": outcome.refreshed,
        "dropped": outcome.dropped,
        "kept": len(outcome.kept),
        "indexes_created": outcome.indexes_created,
        "indexes_dropped": outcome.indexes_dropped,
        "skipped": outcome.skipped,
    }
