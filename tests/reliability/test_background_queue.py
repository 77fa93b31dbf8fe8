"""A backlog of re-indexing (every agent's, after a model change) does not stand in front of a tenant's
upload: the re-index jobs wait in the background queue, the upload in the main queue, and a real worker
reads the two in turn. Before, both went to one queue, served in order: the upload waited for every
re-index job queued before it."""

import pytest

from indexing.maintenance import file_reindex
from indexing.models import IndexJob, MemoryFile
from tests.reliability.processes import service_env, start_worker, wait_for

BACKLOG = 4


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_an_upload_overtakes_a_reindex_backlog(alice, bob, queue, tmp_path):
    # alice's files, then one re-index job per file: a backlog of BACKLOG background jobs.
    for i in range(BACKLOG):
        response = alice.client.put(f"/api/v1/files/notes/n{i}.md", f"Note {i}: the spare key is in drawer {i}.", content_type="text/markdown")
        assert response.status_code == 201, response.content
    reindex = [file_reindex(agent=alice.agent, file_ids=[memory_file.pk]).pk for memory_file in MemoryFile.objects.filter(agent=alice.agent)]
    # Then another tenant's upload, queued after the whole backlog.
    response = bob.client.put("/api/v1/files/memory/today.md", "Bob booked the train to Lyon.", content_type="text/markdown")
    assert response.status_code == 201, response.content
    upload = response.json()["job"]

    worker = start_worker(tmp_path, service_env(queue=queue))  # started once everything waits in the queues
    try:
        wait_for(
            lambda: set(IndexJob.objects.filter(pk__in=[*reindex, upload]).values_list("state", flat=True)) == {"done"},
            timeout=120, what=f"every job done; worker log:\n{worker.output()}",
        )
    finally:
        worker.stop()
    started = dict(IndexJob.objects.filter(pk__in=[*reindex, upload]).values_list("id", "started_at"))
    before_the_upload = [job for job in reindex if started[job] < started[upload]]
    # The queues are read in turn: at most one background job per turn, and alice's upload job (main
    # queue, ahead of bob's) takes one turn. In one queue, all BACKLOG would have run first.
    assert len(before_the_upload) <= 2, (before_the_upload, started)
    assert MemoryFile.objects.get(agent=bob.agent).state == "indexed"
