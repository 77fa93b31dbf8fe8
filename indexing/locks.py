"""The locks every write of an agent's memory takes, in one order, so that no two paths deadlock.

- Writes of one agent are serialised by a row lock on the Agent (``agent_lock``): quotas stay exact,
  and two uploads of one path cannot interleave.
- Lock order, everywhere: the Agent row (web side only, FOR NO KEY UPDATE), then MemoryFile rows in
  ascending id (``files_lock``), then their chunks, then IndexJob rows. A path that deletes or replaces
  chunks locks their files first. (Deleting chunks before locking their file, or a plain FOR UPDATE on
  the Agent that blocks the FOR KEY SHARE of the chunks' foreign-key check at a worker's commit,
  deadlocked a sync against a worker.)
- Web writes that still meet a deadlock are run again (``lock_conflict_retry``), then answered
  ``write_conflict`` (503, Retry-After).
- Workers claim files and jobs with status-guarded UPDATEs, so a task that runs twice does nothing
  twice, and write chunks only while holding the MemoryFile row lock and only if the file still has
  the content hash they chunked, so racing uploads never leave a mix of two versions' chunks
  (indexing/services.py).
"""

from __future__ import annotations

import functools
import logging
import random
import time

from django.db import OperationalError, connection, transaction

from agents.models import Agent
from indexing.models import MemoryFile
from memoryhub.domain import Busy, NotFound
from memoryhub.errors import is_lock_conflict

logger = logging.getLogger(__name__)


def agent_lock(agent: Agent) -> None:
    """Serialise this agent's writes until the transaction ends (quotas and racing uploads). NotFound
    when the agent is being deleted (or gone): a write that authenticated just before the deletion was
    asked for adds nothing to what the background deletion is removing.

    FOR NO KEY UPDATE, not FOR UPDATE: it conflicts with itself, but not with the FOR KEY SHARE that
    Postgres' (deferred) foreign-key checks take on the agent row when a worker commits new chunks, so a
    worker never waits for a web request's agent lock while holding file rows that request wants."""
    marks = list(Agent.objects.select_for_update(no_key=True).filter(pk=agent.pk).values_list("deletion_requested_at", flat=True))
    if not marks or marks[0] is not None:
        raise NotFound("This agent is being deleted.", code="agent_deleted")


def files_lock(file_ids) -> list[int]:
    """Lock MemoryFile rows in ascending id order (the one lock order of every path that touches their
    chunks or state) until the transaction ends. Returns the ids that still exist."""
    ids = sorted(set(file_ids))
    locked: list[int] = []
    for start in range(0, len(ids), 5000):  # batches in ascending order keep the global order
        batch = ids[start : start + 5000]
        locked += MemoryFile.objects.select_for_update().filter(pk__in=batch).order_by("id").values_list("id", flat=True)
    return locked


def files_update(files, **fields) -> int:
    """``files.update(**fields)`` after locking the rows in id order: a plain multi-row UPDATE locks them
    in scan order and could deadlock with a sync or a worker holding some of them."""
    with transaction.atomic():
        ids = files_lock(files.values_list("id", flat=True))
        return files.filter(pk__in=ids).update(**fields) if ids else 0


_LOCK_CONFLICT_ATTEMPTS = 3


def lock_conflict_retry(func):
    """Safety net for the web side's write transactions: the lock order of this module should make deadlocks
    impossible, but if Postgres still aborts one (deadlock or serialization failure), run the whole
    transaction again (it was rolled back: nothing is half-written) a few times, then answer 503
    ``write_conflict`` instead of a 500. Inside an outer transaction (tests, or a caller's atomic block)
    a retry is impossible, so the conflict is only translated."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        attempts = 1 if connection.in_atomic_block else _LOCK_CONFLICT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                return func(*args, **kwargs)
            except OperationalError as exc:
                if not is_lock_conflict(exc):
                    raise
                logger.warning("%s met a lock conflict (attempt %s of %s): %s", func.__name__, attempt, attempts, exc)
                if attempt == attempts:
                    raise Busy(
                        "This agent's memory is being written concurrently; nothing was changed. Try again.",
                        code="write_conflict",
                    ) from exc
                time.sleep(0.05 * attempt * (1 + random.random()))  # let the other transaction finish

    return wrapper
