"""Batch embedding with real workers: a worker submits a bulk sync to the (fake) OpenAI Batch API and is
killed with SIGKILL while it downloads the finished batch's results. Nothing is lost: the batch id was
in the database before anything waited, the next worker's periodic collector polls it again, stores the
vectors and the job ends done — every chunk embedded once, through the batch, no synchronous call."""

import json

import pytest

from indexing.models import Chunk, EmbeddingBatch, EmbeddingCache, IndexJob, MemoryFile
from tests.indexing.batch_embedding_servers import API_KEY, BatchEmbeddingServer
from tests.reliability.processes import service_env, start_worker, wait_for


@pytest.fixture
def server(settings):
    server = BatchEmbeddingServer("openai", dimensions=16).start()
    # This process writes the upload; the workers embed. Same identity on both sides.
    settings.MEMORYHUB_EMBEDDING_PROVIDER, settings.MEMORYHUB_EMBEDDING_MODEL = "openai", "text-embedding-3-small"
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 16
    settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL = API_KEY, server.base_url
    yield server
    server.release_downloads()
    server.stop()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_while_collecting_a_batch_loses_nothing(alice, queue, server, tmp_path):
    env = service_env(
        queue=queue,
        MEMORYHUB_EMBEDDING_PROVIDER="openai", MEMORYHUB_EMBEDDING_MODEL="text-embedding-3-small",
        MEMORYHUB_EMBEDDING_DIMENSIONS=16, OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=server.base_url,
        MEMORYHUB_EMBEDDING_MAX_RETRIES=0, MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD=10,
        MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL=1, MEMORYHUB_INDEX_RECOVERY_INTERVAL=1,
    )
    files = [
        {"path": f"memory/day-{i}.md", "content": f"# Day {i}\n\nThe courier {i} brought parcel {i}.\n\n# Evening {i}\n\nLamp {i} stayed on."}
        for i in range(12)
    ]
    server.hold_downloads()
    first = start_worker(tmp_path, env, name="first")
    second = None
    try:
        response = alice.client.generic("POST", "/api/v1/sync", json.dumps({"files": files}).encode(), content_type="application/json")
        assert response.status_code in (200, 201, 202), response.content
        job_id = response.json()["job"]
        batch = wait_for(
            lambda: EmbeddingBatch.objects.filter(state="in_flight").exclude(remote_id="").first(),
            timeout=90, what=f"a batch in flight; worker log:\n{first.output()}",
        )
        wait_for(lambda: IndexJob.objects.get(pk=job_id).state == "waiting", timeout=30, what="the job waiting")
        # Keyword-searchable meanwhile: the chunks are written, without vectors.
        assert Chunk.objects.filter(agent=alice.agent, embedding=None).count() == 24

        server.complete()
        assert server.downloads_waiting.wait(timeout=60), f"the worker never downloaded the results:\n{first.output()}"
        first.kill()  # in the middle of collecting: the results are at the provider, none stored yet
        assert not EmbeddingCache.objects.exists()
        assert EmbeddingBatch.objects.get(pk=batch.pk).state == "in_flight"
        server.release_downloads()

        second = start_worker(tmp_path, env, name="second")
        wait_for(
            lambda: IndexJob.objects.get(pk=job_id).state == "done",
            timeout=90, what=f"the job done; second worker log:\n{second.output()}",
        )
        batch.refresh_from_db()
        assert (batch.state, batch.collected) == ("done", 24)
        assert set(MemoryFile.objects.filter(agent=alice.agent).values_list("state", flat=True)) == {"indexed"}
        assert not Chunk.objects.filter(agent=alice.agent, embedding=None).exists()
        assert len(server.batches) == 1 and len(server.submitted_inputs) == len(set(server.submitted_inputs)) == 24
        assert server.sync_inputs == []
        assert EmbeddingCache.objects.count() == 24
    finally:
        first.stop()
        if second is not None:
            second.stop()
