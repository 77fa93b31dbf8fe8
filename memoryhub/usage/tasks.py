from celery import shared_task


@shared_task
def usage_rollup_task() -> int:
    """Periodic (CELERY_BEAT_SCHEDULE, MEMORYHUB_USAGE_ROLLUP_INTERVAL): hourly usage counters."""
    from memoryhub.usage.services import usage_rollup

    return usage_rollup()
