"""A worker killed with SIGKILL in the middle of a job: the files it had claimed are recovered by the
next worker within the lease (seconds, not the 15-minute stuck-work sweep), indexed once, and the job
ends done. The tasks run with late acknowledgement, so the dead worker's message also comes back
later; it finds nothing left to do (tests/reliability/test_redelivery.py)."""

import pytest

from indexing.models import Chunk, IndexJob, MemoryFile
from tests.reliability.processes import service_env, start_worker, wait_for

LEASE = 6  # seconds; the default is 60


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_killed_workers_files_are_indexed_by_the_next_worker_within_the_lease(alice, queue, tmp_path):
    env = service_env(
        queue=queue, MEMORYHUB_EMBEDDING_FAKE_LATENCY=3, MEMORYHUB_INDEX_LEASE_SECONDS=LEASE, MEMORYHUB_INDEX_RECOVERY_INTERVAL=1
    )
    first = start_worker(tmp_path, env, name="first")
    second = None
    try:
        jobs = []
        for i in range(3):
            response = alice.client.put(f"/api/v1/files/notes/n{i}.md", f"Note {i}: the spare key is in drawer {i}.", content_type="text/markdown")
            assert response.status_code == 201, response.content
            jobs.append(response.json()["job"])

        # The first worker claims a file, then sits in the (slow) embedding call: kill it there.
        claimed = wait_for(
            lambda: MemoryFile.objects.filter(agent=alice.agent, state="indexing").values_list("id", flat=True).first(),
            timeout=60, interval=0.05, what=f"a file being indexed; worker log:\n{first.output()}",
        )
        first.kill()
        assert MemoryFile.objects.get(pk=claimed).state == "indexing"
        stranded = MemoryFile.objects.filter(agent=alice.agent, state="indexing").count()  # its whole batch
        killed_at = IndexJob.objects.filter(files__id=claimed).values_list("id", flat=True).first()

        second = start_worker(tmp_path, env, name="second")
        wait_for(
            lambda: not MemoryFile.objects.filter(agent=alice.agent).exclude(state="indexed").exists(),
            timeout=60, what=f"every file indexed; second worker log:\n{second.output()}",
        )
        # A job is settled just after its last file (the same task, a moment later): wait for that too.
        wait_for(
            lambda: set(IndexJob.objects.filter(pk__in=jobs).values_list("state", flat=True)) == {"done"},
            timeout=30, what=f"every job done (job {killed_at} had the killed file); second worker log:\n{second.output()}",
        )
        for memory_file in MemoryFile.objects.filter(agent=alice.agent):
            chunks = list(Chunk.objects.filter(file=memory_file).values_list("embedding", flat=True))
            assert len(chunks) == 1 and chunks[0] is not None, memory_file.path
        second.output()  # flushes the log
        assert f"recovered {stranded} file(s) a dead worker left indexing" in second.log.read_text()
    finally:
        first.stop()
        if second is not None:
            second.stop()
