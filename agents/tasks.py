"""Celery tasks of the agents app: an agent's deletion in the background (agents/deletion.py)."""

from celery import shared_task


@shared_task(acks_late=True, reject_on_worker_lost=True)
def agent_delete_task(agent_id: int) -> dict:
    """Delete a marked agent's rows in batches. A run stops after its time budget and publishes the next
    one; a run delivered twice finds the agent held by the first (an advisory lock) or already gone."""
    from agents.deletion import agent_purge
    from indexing.recovery import agent_deletion_dispatch

    outcome = agent_purge(agent_id=agent_id)
    if not outcome.finished and not outcome.skipped:
        agent_deletion_dispatch(agent_id=agent_id)
    return {"deleted": outcome.deleted, "batches": outcome.batches, "finished": outcome.finished, "skipped": outcome.skipped}
