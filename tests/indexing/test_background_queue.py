"""Re-indexing and the sweeps' jobs go to the background queue, uploads, syncs and deletes to the main
one, whichever path queues them: a write, the outbox after a broker outage, the stuck-work sweep, the
recovery of a dead worker's files, a collected embedding batch. A worker reads both queues in turn
(tests/reliability/test_background_queue.py shows an upload overtaking a re-index backlog)."""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from indexing import recovery
from indexing.maintenance import file_reindex, index_maintenance
from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.writes import SyncEntry, file_ingest, workspace_sync

MAIN = django_settings.CELERY_TASK_DEFAULT_QUEUE
BACKGROUND = f"{MAIN}.background"


@pytest.fixture
def published(monkeypatch):
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr(recovery, "_publish", lambda job_id, queue: sent.append((job_id, queue)))
    return sent


def test_the_settings_define_both_queues_for_workers_started_without_queues():
    names = [queue.name for queue in django_settings.CELERY_TASK_QUEUES]
    assert names == [MAIN, BACKGROUND]
    assert [queue.routing_key for queue in django_settings.CELERY_TASK_QUEUES] == names


@pytest.mark.parametrize(
    "trigger, queue",
    [("upload", MAIN), ("sync", MAIN), ("delete", MAIN), ("reindex", BACKGROUND), ("schedule", BACKGROUND)],
)
def test_each_trigger_has_its_queue(trigger, queue):
    assert recovery.job_queue(trigger) == queue


def test_writes_go_to_the_main_queue_and_reindexing_to_the_background(alice, bob, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        upload = file_ingest(agent=alice.agent, path="memory/a.md", content="a note")[1]
        sync = workspace_sync(agent=bob.agent, entries=[SyncEntry(path="memory/b.md", content="b note")]).job
        reindex = file_reindex(agent=alice.agent)
    assert published == [(upload.pk, MAIN), (sync.pk, MAIN), (reindex.pk, BACKGROUND)]


def test_a_model_change_queues_every_agents_reembedding_in_the_background(
    alice, bob, fake_embeddings, indexed, monkeypatch, django_capture_on_commit_callbacks
):
    with indexed():
        for member in (alice, bob):
            file_ingest(agent=member.agent, path="memory/plans.md", content="we chose the blue tent")
    Chunk.objects.update(embedding_identity="fake:an-older-model:16")
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr(recovery, "_publish", lambda job_id, queue: sent.append((job_id, queue)))
    with django_capture_on_commit_callbacks(execute=True):
        assert index_maintenance().reembed_jobs == 2
        upload = file_ingest(agent=alice.agent, path="memory/new.md", content="a new note")[1]
    reembeds = IndexJob.objects.filter(trigger="reindex").values_list("id", flat=True)
    assert sorted(sent) == sorted([*((job, BACKGROUND) for job in reembeds), (upload.pk, MAIN)])


def test_the_outbox_sends_each_job_to_its_own_queue(alice, published):
    upload = IndexJob.objects.create(agent=alice.agent, trigger="upload", awaiting_dispatch=True)
    reindex = IndexJob.objects.create(agent=alice.agent, trigger="reindex", awaiting_dispatch=True)
    assert recovery.outbox_drain() == 2
    assert sorted(published) == sorted([(upload.pk, MAIN), (reindex.pk, BACKGROUND)])


def test_stuck_jobs_go_back_to_their_own_queue(alice, published, django_capture_on_commit_callbacks):
    long_ago = timezone.now() - timedelta(seconds=django_settings.MEMORYHUB_INDEX_STUCK_AFTER + 60)
    upload = IndexJob.objects.create(agent=alice.agent, trigger="upload")
    reindex = IndexJob.objects.create(agent=alice.agent, trigger="reindex")
    IndexJob.objects.filter(pk__in=[upload.pk, reindex.pk]).update(created_at=long_ago)
    with django_capture_on_commit_callbacks(execute=True):
        index_maintenance()
    assert sorted(published) == sorted([(upload.pk, MAIN), (reindex.pk, BACKGROUND)])


def test_a_dead_workers_files_go_back_to_their_jobs_queue(alice, published, django_capture_on_commit_callbacks):
    long_ago = timezone.now() - timedelta(seconds=django_settings.MEMORYHUB_INDEX_LEASE_SECONDS + 60)
    jobs = {}
    for trigger in ("upload", "reindex"):
        job = IndexJob.objects.create(agent=alice.agent, trigger=trigger, state="running")
        MemoryFile.objects.create(
            agent=alice.agent, path=f"memory/{trigger}.md", source="memory", content="x", content_hash=trigger, size=1,
            state="indexing", job=job,
        )
        jobs[trigger] = job.pk
    MemoryFile.objects.filter(agent=alice.agent).update(updated_at=long_ago)
    with django_capture_on_commit_callbacks(execute=True):
        recovery.abandoned_files_recover()
    assert sorted(published) == sorted([(jobs["upload"], MAIN), (jobs["reindex"], BACKGROUND)])
