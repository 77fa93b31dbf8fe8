"""Recording searches and rolling activity up into hourly counters (UsageHour)."""

import atexit
import logging
import os
import threading
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from agents.models import LIVE_AGENT, Agent
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
# A batch of buffered rows in one statement. A row whose agent was deleted since its search is left out
# (its foreign key would fail the whole batch).
_SEARCH_EVENTS_SQL = (
    f"INSERT INTO {SearchEvent._meta.db_table} (agent_id, created_at, mode, results, took_ms) "
    "SELECT r.* FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[], %s::int[], %s::float8[]) "
    "AS r(agent_id, created_at, mode, results, took_ms) "
    f"WHERE EXISTS (SELECT 1 FROM {Agent._meta.db_table} a WHERE a.id = r.agent_id)"
)
# Rows one process holds at most while the database does not take them (down, or locked): past it a
# search's row is dropped (and logged) rather than the process growing.
BUFFER_MAX_ROWS = 10_000
# A flush's statement is cancelled after this long (a locked table must not hold the rows for ever).
_FLUSH_TIMEOUT_MS = 5000
FLUSHER_THREAD_NAME = "usage-flush"


class _Buffer:
    """The searches of this process not written yet, and the thread writing them (one at most)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple] = []
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()  # set: flush now (search_records_close)
        self.dropped = 0


_buffer = _Buffer()


def search_record(*, agent_id: int, mode: str, results: int, took_ms: float) -> None:
    """Record one search for the usage page. Errors are logged, never raised: the search has its answer.

    In autocommit (the API), the row is buffered in this process and written with the others of the last
    MEMORYHUB_USAGE_FLUSH_SECONDS by a background thread, in one statement: the search answers without
    waiting for it. The rows are written at the latest when the process exits (a crash loses them, as it
    may lose a row committed without waiting for the disk). With MEMORYHUB_USAGE_FLUSH_SECONDS = 0 each
    row is written before the search answers, in one statement of its own.
    Inside a caller's transaction, the row is written in it at once, in a savepoint that keeps a failed
    insert from breaking it (and the caller's commit keeps its own durability)."""
    results = min(results, 32767)
    try:
        if connection.in_atomic_block:
            with transaction.atomic():
                SearchEvent.objects.create(agent_id=agent_id, mode=mode, results=results, took_ms=took_ms)
        elif settings.MEMORYHUB_USAGE_FLUSH_SECONDS > 0:
            _buffered((agent_id, timezone.now(), mode, results, took_ms))
        else:
            with connection.cursor() as cursor:
                cursor.execute(_SEARCH_EVENT_SQL, [agent_id, timezone.now(), mode, results, took_ms])
    except DatabaseError:
        logger.warning("usage: a search could not be recorded", exc_info=True)


def _buffered(row: tuple) -> None:
    with _buffer.lock:
        if len(_buffer.rows) >= BUFFER_MAX_ROWS:
            _buffer.dropped += 1
            if _buffer.dropped == 1:
                logger.warning("usage: %d searches buffered and not written yet: further ones are not recorded", len(_buffer.rows))
            return
        _buffer.rows.append(row)
        if _buffer.thread is None:
            _buffer.thread = threading.Thread(target=_flusher, name=FLUSHER_THREAD_NAME, daemon=True)
            _buffer.thread.start()


def _flusher() -> None:
    """Write the buffered rows every MEMORYHUB_USAGE_FLUSH_SECONDS; end once a flush left none (the next
    buffered search starts another thread). Its connection is given back to the per-process pool after
    each flush, so that it never holds one a request thread waits for; without a pool it is kept while
    the thread runs, and closed when it ends."""
    buffer = _buffer
    try:
        while True:
            buffer.wake.wait(settings.MEMORYHUB_USAGE_FLUSH_SECONDS)
            buffer.wake.clear()
            search_records_flush()
            if "pool" in connection.settings_dict.get("OPTIONS", {}):
                connection.close()
            with buffer.lock:
                if not buffer.rows:
                    buffer.thread = None
                    return
    finally:
        with buffer.lock:
            if buffer.thread is threading.current_thread():  # ended by an error: the next search starts another
                buffer.thread = None
        connection.close()


def search_records_close() -> None:
    """Write the buffered searches now and end the flusher thread, closing its database connection (the
    end of a test run, before its database is dropped)."""
    with _buffer.lock:
        thread = _buffer.thread
    if thread is not None:
        _buffer.wake.set()
        thread.join(timeout=30)
    search_records_flush()


def search_records_flush() -> int:
    """Write the buffered searches of this process now, in one statement; returns how many were sent
    (those of deleted agents are left out). On a database error they are logged and dropped."""
    with _buffer.lock:
        rows, _buffer.rows = _buffer.rows, []
        dropped, _buffer.dropped = _buffer.dropped, 0
    if dropped:
        logger.warning("usage: %d searches were not recorded (the buffer was full)", dropped)
    if not rows:
        return 0
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # This transaction only: its statements' time limit, and no wait for the WAL flush.
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true), set_config('synchronous_commit', 'off', true)",
                [f"{_FLUSH_TIMEOUT_MS}ms"],
            )
            cursor.execute(_SEARCH_EVENTS_SQL, [list(column) for column in zip(*rows)])
    except DatabaseError:
        logger.warning("usage: %d searches could not be recorded", len(rows), exc_info=True)
    return len(rows)


def _forked() -> None:
    """A child process starts with no rows (its parent writes its own) and no flusher thread."""
    global _buffer
    _buffer = _Buffer()


os.register_at_fork(after_in_child=_forked)
atexit.register(search_records_flush)


def hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def usage_rollup(*, now: datetime | None = None) -> int:
    """Recompute the counters of the last ROLLUP_HOURS_BACK hours and the current one, snapshot each
    agent's stored files and bytes into the current hour, and prune old search rows. Safe to run twice
    or concurrently: rows are upserted with values recomputed from the source tables. An agent being
    deleted gets none (its deletion would have them to delete again). Returns the number of agent-hours
    written."""
    now = now or timezone.now()
    current = hour_floor(now)
    start = current - timedelta(hours=ROLLUP_HOURS_BACK)
    rows: dict[tuple[int, datetime], dict] = {}

    def row(agent_id: int, hour: datetime) -> dict:
        return rows.setdefault((agent_id, hour), {name: 0 for name in _COUNTERS})

    searches = (
        SearchEvent.objects.filter(LIVE_AGENT, created_at__gte=start)
        .annotate(bucket=TruncHour("created_at"))
        .values("agent_id", "bucket")
        .annotate(n=Count("id"))
    )
    for item in searches:
        row(item["agent_id"], item["bucket"])["searches"] = item["n"]
    jobs = (
        IndexJob.objects.filter(LIVE_AGENT, created_at__gte=start)
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

    stored = MemoryFile.objects.filter(LIVE_AGENT).values("agent_id").annotate(files=Count("id"), bytes=Sum("size"))
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
