"""Index tasks are acknowledged late, so a message can be delivered twice (a worker killed after the
work but before the ack, a visibility timeout passed): the second delivery does nothing — no chunk
written twice, no embedding call, no counter counted twice."""

import pytest

from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.recovery import abandoned_files_recover
from indexing.tasks import index_batch_task, index_job_task


@pytest.mark.django_db(transaction=True)
def test_a_job_delivered_twice_is_indexed_once(alice, fake_embeddings):
    response = alice.client.put("/api/v1/files/notes/a.md", "# A\n\nThe spare key is in the drawer.\n", content_type="text/markdown")
    job_id = response.json()["job"]
    job = IndexJob.objects.get(pk=job_id)
    assert job.state == "done"
    embedded, chunks = fake_embeddings.texts_embedded, list(Chunk.objects.values_list("id", flat=True))

    index_job_task.apply(args=[job_id])  # the same message again
    index_batch_task.apply(args=[job_id, list(MemoryFile.objects.values_list("id", flat=True))])

    assert fake_embeddings.texts_embedded == embedded
    assert list(Chunk.objects.values_list("id", flat=True)) == chunks
    again = IndexJob.objects.get(pk=job_id)
    assert (again.state, again.chunks_added, again.chunks_embedded) == ("done", job.chunks_added, job.chunks_embedded)


@pytest.mark.django_db(transaction=True)
def test_a_dead_workers_redelivered_message_after_recovery_finds_nothing_to_do(alice, fake_embeddings, settings):
    """The file a dead worker held is recovered and indexed under its job; then the dead worker's own
    message comes back (acks_late) and must not index it again."""
    from django.utils import timezone

    response = alice.client.put("/api/v1/files/notes/a.md", "The spare key is in the drawer.\n", content_type="text/markdown")
    job_id = response.json()["job"]
    # What a dead worker leaves: the job running, its file claimed, the lease long expired.
    IndexJob.objects.filter(pk=job_id).update(state="running")
    stale = timezone.now() - timezone.timedelta(seconds=settings.MEMORYHUB_INDEX_LEASE_SECONDS + 5)
    MemoryFile.objects.filter(pk=MemoryFile.objects.get().pk).update(state="indexing", updated_at=stale)
    fake_embeddings.reset_counts()

    assert abandoned_files_recover() == [job_id]  # queued again (eager: indexed now)
    assert MemoryFile.objects.get().state == "indexed"
    assert IndexJob.objects.get(pk=job_id).state == "done"
    embedded = fake_embeddings.texts_embedded

    index_job_task.apply(args=[job_id])  # the dead worker's message, redelivered
    assert fake_embeddings.texts_embedded == embedded
    assert Chunk.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_live_lease_is_left_alone(alice, fake_embeddings):
    alice.client.put("/api/v1/files/notes/a.md", "text\n", content_type="text/markdown")
    MemoryFile.objects.update(state="indexing")  # claimed a moment ago (updated_at is now)
    assert abandoned_files_recover() == []
    assert MemoryFile.objects.get().state == "indexing"
