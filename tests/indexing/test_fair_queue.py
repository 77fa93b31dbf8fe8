"""Uploads that arrive while an agent's upload job is still waiting join that job: a tenant that writes
faster than the workers index holds one waiting job (one task in the shared queue), not a queue of its
own in front of the other tenants' jobs. A job a worker has claimed takes no more files, and a claim
that races an upload waits for it and then indexes its file."""

import threading

import pytest
from django.db import connection, transaction

from indexing import recovery
from indexing.models import IndexJob, MemoryFile
from indexing.services import index_job_run
from indexing.writes import COALESCE_MAX_FILES, file_ingest


@pytest.fixture
def published(monkeypatch):
    sent = []
    monkeypatch.setattr(recovery, "_publish", lambda job_id, queue: sent.append(job_id))
    return sent


def test_a_flood_of_uploads_is_one_waiting_job_and_other_agents_keep_their_place(
    alice, bob, published, fake_embeddings, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        jobs = {file_ingest(agent=alice.agent, path=f"flood/f{i}.md", content=f"note {i}")[1].pk for i in range(30)}
        bob_job = file_ingest(agent=bob.agent, path="memory/mine.md", content="bob's note")[1].pk
        jobs_after = {file_ingest(agent=alice.agent, path=f"flood/g{i}.md", content=f"more {i}")[1].pk for i in range(5)}

    (alice_job,) = jobs
    assert jobs_after == {alice_job} and bob_job != alice_job
    assert published == [alice_job, bob_job]  # two tasks in the queue, not 36
    assert IndexJob.objects.get(pk=alice_job).files_seen == 35

    index_job_run(job_id=alice_job)
    assert set(MemoryFile.objects.filter(agent=alice.agent).values_list("state", flat=True)) == {"indexed"}
    assert IndexJob.objects.get(pk=alice_job).state == "done"


def test_a_claimed_job_takes_no_more_files(alice, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = file_ingest(agent=alice.agent, path="memory/a.md", content="a")[1]
        IndexJob.objects.filter(pk=first.pk).update(state="running")  # a worker claimed it
        second = file_ingest(agent=alice.agent, path="memory/b.md", content="b")[1]
    assert second.pk != first.pk and published == [first.pk, second.pk]


def test_a_full_waiting_job_is_not_joined(alice, published):
    first = file_ingest(agent=alice.agent, path="memory/a.md", content="a")[1]
    IndexJob.objects.filter(pk=first.pk).update(files_seen=COALESCE_MAX_FILES)
    assert file_ingest(agent=alice.agent, path="memory/b.md", content="b")[1].pk != first.pk


def test_other_triggers_are_never_joined(alice, published):
    upload = file_ingest(agent=alice.agent, path="memory/a.md", content="a")[1]
    IndexJob.objects.filter(pk=upload.pk).update(trigger="sync")
    assert file_ingest(agent=alice.agent, path="memory/b.md", content="b")[1].pk != upload.pk


@pytest.mark.django_db(transaction=True)
def test_a_claim_racing_an_upload_waits_for_it_and_indexes_its_file(alice, published, fake_embeddings):
    job = file_ingest(agent=alice.agent, path="memory/a.md", content="a")[1]
    claimed = threading.Event()
    outcome = {}

    def worker():
        try:
            outcome["job"] = index_job_run(job_id=job.pk)  # blocks on the job row until the upload commits
        finally:
            claimed.set()
            connection.close()

    with transaction.atomic():
        joined = file_ingest(agent=alice.agent, path="memory/b.md", content="b")[1]
        thread = threading.Thread(target=worker)
        thread.start()
        assert not claimed.wait(1.0), "the claim went through while the upload held the job"
    thread.join(60)
    assert joined.pk == job.pk and outcome["job"].state == "done"
    assert set(MemoryFile.objects.filter(agent=alice.agent).values_list("state", flat=True)) == {"indexed"}
