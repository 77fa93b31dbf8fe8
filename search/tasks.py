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


# A run of memory_words_task stops after this many seconds; the next run goes on where it stopped.
MEMORY_WORDS_RUN_SECONDS = 50


@shared_task(acks_late=True, reject_on_worker_lost=True)
def memory_words_task() -> dict:
    """Periodic (CELERY_BEAT_SCHEDULE): read the words of the chunks written since the last run and embed
    the new ones, for keyword expansion (search/expansion.py). Safe to run twice."""
    from search.expansion import memory_words_sync

    outcome = memory_words_sync(seconds=MEMORY_WORDS_RUN_SECONDS)
    return {
        "agents": outcome.agents,
        "chunks_read": outcome.chunks_read,
        "words_added": outcome.words_added,
        "words_embedded": outcome.words_embedded,
        "words_dropped": outcome.words_dropped,
        "recounted": outcome.recounted,
        "neighbours_found": outcome.neighbours_found,
        "errors": outcome.errors,
        "finished": outcome.finished,
        "skipped": outcome.skipped,
    }
