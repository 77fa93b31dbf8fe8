"""Deleting an agent in the background, in batches.

An agent of a million chunks took about 35 s to delete in one transaction (Django's collector, inside
the admin's request): past gunicorn's timeout the worker was killed, the transaction rolled back, and
the agent could never be deleted. So deletion is two steps:

1. ``agents.services.agent_delete`` marks the agent (``Agent.deletion_requested_at``) in one short
   transaction, with its audit event, and publishes ``agent_delete_task`` on the background queue once
   that commits. From then on the agent is gone for its users: its tokens are refused (401), grants from
   and to it give nothing, its writes and new index jobs are refused, and a running job stops.
2. ``agent_purge`` (the task) asks the embedding provider to cancel the agent's batches still in flight
   (nobody will collect them), then deletes its rows in batches of MEMORYHUB_AGENT_DELETE_BATCH_ROWS, each in
   its own transaction: chunks first (on the agent's partition), then files, embedding batches, jobs,
   the agent's embedding cache, and every other table that references the agent (found through Django's
   relations, so a new one is covered), and the agent's row last, once nothing references it.

Each batch commits on its own, so a worker killed midway leaves fewer rows and a consistent state, and a
run of the task finishes the rest. A run holds a per-agent advisory lock (a second delivery returns at
once), and stops after a time budget to publish itself again, so one deletion never holds a worker for
longer than that. The stuck-work sweep (indexing/maintenance.py) publishes the task again for agents
marked longer ago than MEMORYHUB_INDEX_STUCK_AFTER, which covers a message lost with the broker or a
worker. The per-agent search indexes go with the periodic index tasks, which keep none for an agent
being deleted (search/vector_index.py, search/keyword_stats.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent

logger = logging.getLogger(__name__)

# The per-agent advisory lock of a deletion run: (this class, the agent's id).
ADVISORY_LOCK_CLASS = 0x6D68_6164  # "mhad"
# Rounds of "delete what is left, then try the agent's row" in one run, when writes that were already
# under way at the mark keep adding rows; the next run (or the sweep's) goes on after that.
FINAL_ROUNDS = 3
# PurgeOutcome.skipped of a run that found the agent's lock held: another run is deleting it.
BUSY = "another run is deleting this agent"


@dataclass
class PurgeOutcome:
    deleted: dict[str, int] = field(default_factory=dict)  # rows per table
    batches: int = 0
    batches_cancelled: int = 0  # embedding batches the provider accepted to cancel
    finished: bool = False  # the agent's row is gone (or was already)
    skipped: str = ""  # why nothing was done (another run holds the agent)
    seconds: float = 0.0

    def count(self, table: str, rows: int) -> None:
        self.deleted[table] = self.deleted.get(table, 0) + rows
        self.batches += 1


class BudgetSpent(Exception):
    """The run's time budget is spent; the task publishes itself again to go on."""


def _relations():
    """(model, column) of every table that references an agent through a Django relation, in the order
    they are deleted: what references another of them first (files before jobs before nothing)."""
    from indexing.models import Chunk, EmbeddingBatch, EmbeddingCache, IndexJob, MemoryFile
    from indexing.selectors import agent_cascades

    # The agent's embedding cache (no foreign key: ``agent_scope`` is 0 for the shared cache).
    first = [(EmbeddingBatch, "agent_id"), (IndexJob, "agent_id"), (EmbeddingCache, "agent_scope")]
    handled = {Chunk, MemoryFile, *(model for model, _ in first)}
    rest = [(rel.related_model, rel.field.attname) for rel in agent_cascades() if rel.related_model not in handled]
    return first + sorted(rest, key=lambda pair: (pair[0]._meta.db_table, pair[1]))


def _batch_size() -> int:
    return settings.MEMORYHUB_AGENT_DELETE_BATCH_ROWS


def _in_key_order(model, *, agent_id: int, deadline: float, delete: Callable[[list[int]], None]) -> None:
    """The agent's rows of ``model`` in primary-key order, ``(agent_id, id)`` for chunks (on each partition)
    and files, a batch at a time, each passed to ``delete`` in its own transaction: every batch starts
    where the previous stopped, instead of reading past the rows already deleted."""
    after = 0
    while True:
        _check(deadline)
        with transaction.atomic():
            rows = model.objects.filter(agent_id=agent_id, pk__gt=after).order_by("pk")
            ids = list(rows.values_list("pk", flat=True)[: _batch_size()])
            if not ids:
                return
            delete(ids)
        after = ids[-1]


def _chunks_delete(*, agent_id: int, outcome: PurgeOutcome, deadline: float) -> None:
    from indexing.models import Chunk

    def delete(ids: list[int]) -> None:
        deleted, _ = Chunk.objects.filter(agent_id=agent_id, pk__in=ids).delete()
        outcome.count(Chunk._meta.db_table, deleted)

    _in_key_order(Chunk, agent_id=agent_id, deadline=deadline, delete=delete)


def _files_delete(*, agent_id: int, outcome: PurgeOutcome, deadline: float) -> None:
    """Each batch of files is locked in id order first (the lock order of indexing/locks.py): a worker that
    wrote chunks of one of them after the chunk pass is waited for, and its chunks go in the same
    transaction (the chunk table's key on (agent_id, file_id) refuses a file deleted without them)."""
    from indexing.locks import files_lock
    from indexing.models import Chunk, MemoryFile

    def delete(ids: list[int]) -> None:
        locked = files_lock(ids)
        late, _ = Chunk.objects.filter(agent_id=agent_id, file_id__in=locked).delete()
        deleted, _ = MemoryFile.objects.filter(agent_id=agent_id, pk__in=locked).delete()
        outcome.deleted[Chunk._meta.db_table] = outcome.deleted.get(Chunk._meta.db_table, 0) + late
        outcome.count(MemoryFile._meta.db_table, deleted)

    _in_key_order(MemoryFile, agent_id=agent_id, deadline=deadline, delete=delete)


def _rows_delete(*, model, column: str, agent_id: int, outcome: PurgeOutcome, deadline: float) -> None:
    """Any other table: a bounded batch naming the agent (each such table has an index leading with the
    column), deleted through the ORM, so what the model's own relations say (SET_NULL) is done too."""
    while True:
        _check(deadline)
        with transaction.atomic():
            ids = list(model.objects.filter(**{column: agent_id}).order_by().values_list("pk", flat=True)[: _batch_size()])
            if not ids:
                return
            deleted, _ = model.objects.filter(**{column: agent_id, "pk__in": ids}).delete()
        outcome.count(model._meta.db_table, deleted)


def _anything_left(agent_id: int) -> bool:
    from indexing.models import Chunk, MemoryFile

    tables = [(Chunk, "agent_id"), (MemoryFile, "agent_id"), *_relations()]
    return any(model.objects.filter(**{column: agent_id}).exists() for model, column in tables)


def _agent_row_delete(agent_id: int) -> bool | None:
    """Delete the agent's row when nothing references it any more: True; None when it is already gone;
    False when rows appeared meanwhile (a write under way at the mark). The row is locked first, so no
    row referencing it can commit between the check and the delete."""
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(pk=agent_id).first()
        if agent is None:
            return None
        if _anything_left(agent_id):
            return False
        agent.delete()  # nothing left to cascade to: a few statements finding nothing
    return True


def _check(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise BudgetSpent


def _batches_cancel(*, agent_id: int, outcome: PurgeOutcome, deadline: float) -> None:
    """The agent's embedding batches still at the provider are cancelled first: nobody will collect them,
    and a batch left to run is paid in full. Outside any transaction (each is a call to the provider)."""
    from indexing.embedding_batches import UNFINISHED, embedding_batch_cancel
    from indexing.models import EmbeddingBatch

    for batch in EmbeddingBatch.objects.filter(agent_id=agent_id, state__in=UNFINISHED).order_by("pk"):
        _check(deadline)
        if embedding_batch_cancel(batch=batch, why="cancelled: its agent is being deleted"):
            outcome.batches_cancelled += 1


def _purge_rounds(*, agent_id: int, outcome: PurgeOutcome, deadline: float) -> None:
    _batches_cancel(agent_id=agent_id, outcome=outcome, deadline=deadline)
    for _ in range(FINAL_ROUNDS):
        _chunks_delete(agent_id=agent_id, outcome=outcome, deadline=deadline)
        _files_delete(agent_id=agent_id, outcome=outcome, deadline=deadline)
        for model, column in _relations():
            _rows_delete(model=model, column=column, agent_id=agent_id, outcome=outcome, deadline=deadline)
        if _agent_row_delete(agent_id) is not False:
            outcome.finished = True
            return


def agent_purge(*, agent_id: int, seconds: float | None = None) -> PurgeOutcome:
    """Delete a marked agent's rows in batches, its own row last (the task's work). Does nothing for an
    agent that is not marked (a deletion is always asked for first) or that another run is deleting.
    Stops after ``seconds`` (default: half the task's soft time limit) with ``finished`` False; a later
    run goes on where it stopped."""
    from search.ddl import advisory_lock

    started = time.monotonic()
    outcome = PurgeOutcome()
    if not Agent.objects.being_deleted().filter(pk=agent_id).exists():
        outcome.finished = not Agent.objects.filter(pk=agent_id).exists()
        outcome.skipped = "" if outcome.finished else "the agent is not marked for deletion"
        return outcome
    budget = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2 if seconds is None else seconds
    with advisory_lock(ADVISORY_LOCK_CLASS, agent_id) as acquired:
        if not acquired:
            outcome.skipped = BUSY
            return outcome
        try:
            _purge_rounds(agent_id=agent_id, outcome=outcome, deadline=started + budget)
        except BudgetSpent:
            pass
    outcome.seconds = time.monotonic() - started
    logger.info(
        "agent %s: deleted %s in %d batch(es), %.1f s%s", agent_id, outcome.deleted, outcome.batches, outcome.seconds,
        "" if outcome.finished else "; not finished, to be continued",
    )
    return outcome


def agent_delete_here(*, agent_id: int, pause: float = 0.2) -> PurgeOutcome:
    """Mark an agent and delete it in this process, run after run, until its row is gone; for a command
    that removes the agents it made (the benchmarks), with no audit event and no task.

    Django's ``agent.delete()`` does it in one transaction, which fails when a row naming the agent
    commits meanwhile: a search's usage row, which a server writes a moment after the answer
    (memoryhub/usage/services.py). The purge's batches and its locked last step take such a row along.
    When another run holds the agent (a worker's task), this waits for it."""
    Agent.objects.live().filter(pk=agent_id).update(deletion_requested_at=timezone.now())
    while not (outcome := agent_purge(agent_id=agent_id)).finished:
        if outcome.skipped == BUSY:
            time.sleep(pause)
        elif outcome.skipped:
            raise RuntimeError(f"agent {agent_id}: {outcome.skipped}")
    return outcome
