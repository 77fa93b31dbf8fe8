"""Recording searches and rolling activity up into hourly counters (UsageHour)."""

import logging
from datetime import datetime, timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from indexing.models import IndexJob, MemoryFile
from memoryhub.usage.models import SearchEvent, UsageHour

logger = logging.getLogger(__name__)

# Each roll-up recomputes this many hours back from the current one: a job counts in the hour it was
# created but its figures are final only when it finishes, which may be in a later hour.
ROLLUP_HOURS_BACK = 3
# Search rows are kept this long (the slowest searches of the last day, and the roll-up's window).
SEARCH_EVENTS_KEPT = timedelta(days=2)
_WRITE_TRIGGERS = [IndexJob.Trigger.UPLOAD, IndexJob.Trigger.SYNC, IndexJob.Trigger.DELETE]
_COUNTERS = ["searches", "writes", "chunks_embedded", "cache_hits", "failures"]


# One search's row in one statement, committed without waiting for the WAL flush (synchronous_commit off
# for this transaction only): a usage row lost to a crash in the next fraction of a second costs nothing,
# while waiting for the disk cost every search ~1-5 ms (docs/benchmarks.md, "Search at scale").
_SEARCH_EVENT_SQL = (
    f"WITH durability AS (SELECT set_config('synchronous_commit', 'off', true)) "
    f"INSERT INTO {SearchEvent._meta.db_table} (agent_id, created_at, mode, results, took_ms) "
    "SELECT %s, %s, %s, %s, %s FROM durability"
)


def search_record(*, agent_id: int, mode: str, results: int, took_ms: float) -> None:
    """Record one search for the usage page. Errors are logged, never raised: the search has its answer.
    Inside a caller's transaction, a savepoint keeps a failed insert from breaking it (and the caller's
    commit keeps its own durability)."""
    results = min(results, 32767)
    try:
        if connection.in_atomic_block:
            with transaction.atomic():
                SearchEvent.objects.create(agent_id=agent_id, mode=mode, results=results, took_ms=took_ms)
        else:
            with connection.cursor() as cursor:
                cursor.execute(_SEARCH_EVENT_SQL, [agent_id, timezone.now(), mode, results, took_ms])
    except DatabaseError:
        logger.warning("usage: a search could not be recorded", exc_info=True)


def hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def usage_rollup(*, now: datetime | None = None) -> int:
    """Recompute the counters of the last ROLLUP_HOURS_BACK hours and the current one, snapshot each
    agent's stored files and bytes into the current hour, and prune old search rows. Safe to run twice
    or concurrently: rows are upserted with values recomputed from the source tables. Returns the
    number of agent-hours written."""
    now = now or timezone.now()
    current = hour_floor(now)
    start = current - timedelta(hours=ROLLUP_HOURS_BACK)
    rows: dict[tuple[int, datetime], dict] = {}

    def row(agent_id: int, hour: datetime) -> dict:
        return rows.setdefault((agent_id, hour), {name: 0 for name in _COUNTERS})

    searches = (
        SearchEvent.objects.filter(created_at__gte=start)
        .annotate(bucket=TruncHour("created_at"))
        .values("agent_id", "bucket")
        .annotate(n=Count("id"))
    )
    for item in searches:
        row(item["agent_id"], item["bucket"])["searches"] = item["n"]
    jobs = (
        IndexJob.objects.filter(created_at__gte=start)
        .annotate(bucket=TruncHour("created_at"))
        .values("agent_id", "bucket")
        .annotate(
            writes=Sum(F("files_changed") + F("files_removed"), filter=Q(trigger__in=_WRITE_TRIGGERS), default=0),
            chunks_embedded=Sum("chunks_embedded", default=0),
            cache_hits=Sum("cache_hits", default=0),
            failures=Count("id", filter=Q(state=IndexJob.State.FAILED)),
        )
    )
    for item in jobs:
        target = row(item["agent_id"], item["bucket"])
        for name in ("writes", "chunks_embedded", "cache_hits", "failures"):
            target[name] = item[name]

    past = [UsageHour(agent_id=agent_id, hour=hour, **values) for (agent_id, hour), values in rows.items() if hour != current]
    UsageHour.objects.bulk_create(past, update_conflicts=True, unique_fields=["agent", "hour"], update_fields=_COUNTERS)

    stored = MemoryFile.objects.values("agent_id").annotate(files=Count("id"), bytes=Sum("size"))
    present = []
    for item in stored:
        values = rows.pop((item["agent_id"], current), {name: 0 for name in _COUNTERS})
        present.append(UsageHour(agent_id=item["agent_id"], hour=current, files=item["files"], bytes=item["bytes"] or 0, **values))
    present += [UsageHour(agent_id=agent_id, hour=hour, **values) for (agent_id, hour), values in rows.items() if hour == current]
    UsageHour.objects.bulk_create(
        present, update_conflicts=True, unique_fields=["agent", "hour"], update_fields=[*_COUNTERS, "files", "bytes"]
    )
    SearchEvent.objects.filter(created_at__lt=now - SEARCH_EVENTS_KEPT).delete()
    return len(past) + len(present)
