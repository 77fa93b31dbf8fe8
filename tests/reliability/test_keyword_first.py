"""Issue 11: every file is keyword-searchable as soon as it is chunked, whatever the embedding provider
does. The worker writes a file's chunks (text, lines, tsvector) and commits before it calls the provider,
then fills in the vectors; while the provider hangs, memory_search finds the file by keyword with a
cited snippet. A worker killed between the two steps loses nothing: recovery fills in the vectors.

A real gunicorn and a real Celery worker (on Redis) run the openai provider against a local server that
hangs until the test releases it (tests/reliability/flaky_embeddings.py). The provider's timeout is
long (300 s), so everything checked while it hangs happens during the embedding call itself. Before,
the chunks were written only once that call had answered or failed (up to six tries of the timeout):
the waits below for chunks while the provider hangs would time out.
"""

import pytest

from indexing.models import Chunk, IndexJob, MemoryFile
from tests.reliability.flaky_embeddings import FlakyEmbeddings, use_flaky_provider
from tests.reliability.processes import (
    api_call as call, service_env, start_web, start_worker, unique_queue, wait_for, web_answers,
)

NOTE = "# Hangar\n\nThe zeppelin leaves at dawn from the northern hangar.\n\nBring the blue ticket.\n"
PATH = "notes/hangar.md"
QUERY = "zeppelin northern hangar"
LEASE = 6  # seconds; the default is 60


@pytest.fixture
def provider(settings):
    with FlakyEmbeddings() as server:
        server.model = use_flaky_provider(settings, server)  # this process too: the same index identity
        server.identity = f"openai:{server.model}:{server.dimensions}"
        server.behaviour = "hang"
        yield server


def services_env(server: FlakyEmbeddings, **extra) -> dict:
    return service_env(
        queue=unique_queue(),
        MEMORYHUB_EMBEDDING_PROVIDER="openai",
        MEMORYHUB_EMBEDDING_MODEL=server.model,
        MEMORYHUB_EMBEDDING_DIMENSIONS=server.dimensions,
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="sk-test",
        MEMORYHUB_EMBEDDING_TIMEOUT=300,
        **extra,
    )


def assert_found_with_a_cited_snippet(result: dict) -> None:
    assert result["path"] == PATH
    cited = NOTE.split("\n")[result["start_line"] - 1 : result["end_line"]]
    assert "zeppelin leaves at dawn" in result["snippet"]
    assert result["snippet"].strip() == "\n".join(cited).strip(), (result, cited)


def indexed_and_settled(memory_file: MemoryFile, job_id: int) -> bool:
    """The file indexed and its job settled: the job is settled a moment after its last file."""
    return (
        MemoryFile.objects.get(pk=memory_file.pk).state == "indexed"
        and IndexJob.objects.get(pk=job_id).state in ("done", "failed")
    )


def chunks_written_while_hanging(server: FlakyEmbeddings, memory_file: MemoryFile) -> bool:
    return server.hanging == 1 and Chunk.objects.filter(file=memory_file).exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_file_is_keyword_searchable_while_the_provider_hangs_then_gets_its_vectors(alice, provider, tmp_path):
    env = services_env(provider)
    web, url = start_web(tmp_path, env)
    worker = start_worker(tmp_path, env)
    api = f"{url}/api/v1"
    try:
        wait_for(lambda: web_answers(url), timeout=60, what=f"the web server; log:\n{web.output()}")
        status, body = call(f"{api}/files/{PATH}", alice.raw_token, "PUT", NOTE.encode(), "text/markdown")
        assert status == 201, body
        memory_file = MemoryFile.objects.get(agent=alice.agent, path=PATH)
        wait_for(
            lambda: chunks_written_while_hanging(provider, memory_file), timeout=60,
            what=f"the chunks written while the provider hangs; worker log:\n{worker.output()}",
        )

        # memory_search by keyword finds it, and cites the lines its snippet shows.
        status, found = call(f"{api}/search", alice.raw_token, "POST", {"query": QUERY, "mode": "keyword"})
        assert status == 200, found
        assert found["mode"] == "keyword" and len(found["results"]) == 1, found
        assert_found_with_a_cited_snippet(found["results"][0])
        # So does the agent's tool call with the defaults (hybrid): keyword only, and it says why.
        status, tool = call(f"{api}/tools/memory_search", alice.raw_token, "POST", {"query": QUERY})
        assert status == 200, tool
        data = tool["data"]
        assert data["mode"] == "keyword" and [r["path"] for r in data["results"]] == [PATH], data
        assert_found_with_a_cited_snippet(data["results"][0])
        assert data["results"][0]["citation"] in tool["content"]
        assert "Keyword search only" in data["message"], data["message"]
        assert "1 file(s) are searchable by keyword only until their vectors are computed" in data["message"]
        assert data["pending"] == 1
        status, summary = call(f"{api}/status", alice.raw_token)
        assert (summary["pending"], summary["awaiting_vectors"]) == (1, 1), summary

        # All of that happened during the one embedding call, which has not answered yet.
        assert (provider.hanging, provider.requests) == (1, 1)
        memory_file.refresh_from_db()
        assert memory_file.state == "indexing" and memory_file.indexed_hash == memory_file.content_hash
        chunks = dict(Chunk.objects.filter(file=memory_file).values_list("id", "embedding_identity"))
        assert set(chunks.values()) == {""}  # no vector yet

        provider.release()
        wait_for(
            lambda: indexed_and_settled(memory_file, body["job"]), timeout=60,
            what=f"the file indexed once the provider answers; worker log:\n{worker.output()}",
        )
        # The same rows, their vectors filled in.
        assert dict(Chunk.objects.filter(file=memory_file).values_list("id", "embedding_identity")) == {
            chunk_id: provider.identity for chunk_id in chunks
        }
        assert not Chunk.objects.filter(file=memory_file, embedding=None).exists()
        job = IndexJob.objects.get(pk=body["job"])
        assert (job.state, job.chunks_added, job.chunks_embedded) == ("done", len(chunks), len(chunks)), job.error
        status, found = call(f"{api}/search", alice.raw_token, "POST", {"query": QUERY, "mode": "vector"})
        assert status == 200 and found["mode"] == "vector", found
        assert [r["path"] for r in found["results"]] == [PATH]
        status, summary = call(f"{api}/status", alice.raw_token)
        assert (summary["pending"], summary["awaiting_vectors"]) == (0, 0), summary
    finally:
        provider.release()
        web.stop()
        worker.stop()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_between_the_two_steps_loses_nothing(alice, provider, tmp_path):
    env = services_env(provider, MEMORYHUB_INDEX_LEASE_SECONDS=LEASE, MEMORYHUB_INDEX_RECOVERY_INTERVAL=1)
    web, url = start_web(tmp_path, env)
    first = start_worker(tmp_path, env, name="first")
    second = None
    api = f"{url}/api/v1"
    try:
        wait_for(lambda: web_answers(url), timeout=60, what=f"the web server; log:\n{web.output()}")
        status, body = call(f"{api}/files/{PATH}", alice.raw_token, "PUT", NOTE.encode(), "text/markdown")
        assert status == 201, body
        memory_file = MemoryFile.objects.get(agent=alice.agent, path=PATH)
        wait_for(
            lambda: chunks_written_while_hanging(provider, memory_file), timeout=60,
            what=f"the chunks written while the provider hangs; worker log:\n{first.output()}",
        )
        first.kill()  # in the embedding call: after step 1 (chunks), before step 2 (vectors)
        chunks = dict(Chunk.objects.filter(file=memory_file).values_list("id", "embedding_identity"))
        assert chunks and set(chunks.values()) == {""}
        memory_file.refresh_from_db()
        assert memory_file.state == "indexing"
        status, found = call(f"{api}/search", alice.raw_token, "POST", {"query": QUERY, "mode": "keyword"})
        assert status == 200 and len(found["results"]) == 1, found
        assert_found_with_a_cited_snippet(found["results"][0])

        provider.release()  # the provider is well again; the dead worker's request is answered to no one
        requests_before = provider.requests
        second = start_worker(tmp_path, env, name="second")
        wait_for(
            lambda: indexed_and_settled(memory_file, body["job"]), timeout=60,
            what=f"recovery to finish the vectors; second worker log:\n{second.output()}",
        )
        # The rows step 1 wrote were kept and filled in, not written again; nothing is missing.
        assert dict(Chunk.objects.filter(file=memory_file).values_list("id", "embedding_identity")) == {
            chunk_id: provider.identity for chunk_id in chunks
        }
        job = IndexJob.objects.get(pk=body["job"])
        assert job.state == "done", job.error
        # Counted once: the chunks when step 1 wrote them, the embedding when the second worker made it.
        assert (job.files_changed, job.chunks_added, job.chunks_embedded) == (1, len(chunks), len(chunks))
        assert provider.requests - requests_before == 1  # one embedding call for the file (no probe: nothing failed)
        second.output()  # flushes the log
        assert "recovered 1 file(s) a dead worker left indexing" in second.log.read_text()
        status, found = call(f"{api}/search", alice.raw_token, "POST", {"query": QUERY, "mode": "vector"})
        assert status == 200 and [r["path"] for r in found["results"]] == [PATH], found
    finally:
        provider.release()
        for process in (web, first, second):
            if process is not None:
                process.stop()
