"""The state machines of a memory file and of an index job, in one place.

A file:

    new content, re-index, sweep ──► pending ──claim──► indexing ──► indexed
                                        ▲                  │   └───► failed ──(retry: claimable)──► indexing
                                        └── worker died, job stuck ┘

- ``pending``: content accepted, not yet chunked (search does not find it yet).
- ``indexing``: claimed by a worker. Its chunks may already be written without vectors (keyword-first,
  indexing/services.py): keyword search finds it, vector search not yet.
- ``indexed``: chunks and vectors of its current content are in the index.
- ``failed``: ``last_error`` says why; its chunks, if any, are still keyword-searchable; the periodic
  task retries it with back-off (``failures`` counts the attempts in a row).

A job: ``queued ──start──► running ──► done | failed``; ``running ──transient error──► queued`` (the task
retries); a stuck or retried job goes back to ``queued``. ``running ──batch sent──► waiting ──batches
collected──► queued``: its embeddings are in a provider's batch (indexing/embedding_batches.py); its
files wait as ``pending`` with their chunks written (keyword-searchable), and the sweeps leave it alone.

Each transition is a function returning the fields an UPDATE sets, next to the states it may leave
from, so a writer says *which* transition it makes (``MemoryFile.objects.filter(..., state__in=CLAIMABLE)
.update(**to_indexing())``) and the rules (what resets ``failures``, what clears the error, how long an
error may be) live here only.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import F
from django.utils import timezone

from indexing.models import IndexJob, MemoryFile

State = MemoryFile.State
JobState = IndexJob.State

# Errors stored on files and jobs are cut to this many characters (a provider's message can be long).
ERROR_MAX_CHARS = 2000

# Files a worker may claim; files still on their way to the index (the sweep re-queues them when stuck).
CLAIMABLE = (State.PENDING, State.FAILED)
IN_FLIGHT = (State.PENDING, State.INDEXING)
# Jobs a worker may still be running, or that wait for one.
ACTIVE_JOBS = (JobState.QUEUED, JobState.RUNNING)
# Jobs that still own their pending files: active, or waiting for a provider's batch.
OWNING_JOBS = (*ACTIVE_JOBS, JobState.WAITING)


def error_text(text: str) -> str:
    return text[:ERROR_MAX_CHARS]


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


# --- Files ------------------------------------------------------------------------------------------


def to_pending(*, now: datetime | None = None, job: IndexJob | None = None, reindex: bool = False) -> dict:
    """Back to the queue: new content, an operator's re-index (``reindex``: re-chunk even if unchanged,
    and try again whatever the earlier failures), or the sweep. ``job``: the job that will index it."""
    fields = {"state": State.PENDING, "updated_at": _now(now)}
    if job is not None:
        fields["job"] = job
    if reindex:
        fields.update(indexed_hash="", failures=0)
    return fields


def to_indexing(*, now: datetime | None = None) -> dict:
    """Claimed by a worker (from CLAIMABLE)."""
    return {"state": State.INDEXING, "updated_at": _now(now)}


def to_failed(reason: str, *, now: datetime | None = None) -> dict:
    """Failed once more; ``reason`` is shown in the admin and the job."""
    return {"state": State.FAILED, "last_error": error_text(reason), "failures": F("failures") + 1, "updated_at": _now(now)}


def to_settled(error: str, *, now: datetime | None = None) -> dict:
    """The end of a worker's pass over a file whose chunks it wrote: indexed, or failed with ``error``
    (its chunks are in the index either way, so ``indexed_hash`` is its content's)."""
    now = _now(now)
    if error:
        return {**to_failed(error, now=now), "indexed_hash": F("content_hash")}
    return {
        "state": State.INDEXED, "last_error": "", "failures": 0, "indexed_at": now, "updated_at": now,
        "indexed_hash": F("content_hash"),
    }


# --- Jobs -------------------------------------------------------------------------------------------


def job_to_running(*, now: datetime | None = None) -> dict:
    """Started by a worker (from ``queued``); counts the attempt."""
    return {"state": JobState.RUNNING, "started_at": _now(now), "attempts": F("attempts") + 1, "error": ""}


def job_to_queued(*, error: str = "", restart: bool = False) -> dict:
    """Back to the queue: a transient error (``error`` says which), a stuck job, an operator's retry
    (``restart``: its times are cleared)."""
    fields = {"state": JobState.QUEUED, "error": error_text(error)}
    if restart:
        fields.update(started_at=None, finished_at=None)
    return fields


def job_to_waiting() -> dict:
    """Its embeddings went to a provider's batch (from ``running``); queued again once collected."""
    return {"state": JobState.WAITING}


def job_to_finished(error: str = "", *, now: datetime | None = None) -> dict:
    """Done, or failed with ``error``, when none of its files is in flight any more."""
    return {"state": JobState.FAILED if error else JobState.DONE, "error": error_text(error), "finished_at": _now(now)}
