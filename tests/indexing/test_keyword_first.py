"""Keyword first: the worker writes a file's chunks before it asks the provider for their vectors, and
fills the vectors in afterwards (indexing.services.files_index). Counted with the fake provider; the
same with a real worker, a hanging provider and SIGKILL is in tests/reliability/test_keyword_first.py."""

import pytest
from django.contrib.postgres.search import SearchQuery
from django.utils import timezone

from indexing import embedding_cache
from indexing import services
from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.recovery import abandoned_files_recover
from indexing.services import index_job_run
from indexing.writes import file_ingest

NOTE = "# Hangar\n\nThe zeppelin leaves at dawn.\n\n## Tickets\n\nBring the blue ticket.\n"


class WorkerKilled(BaseException):
    """What SIGKILL looks like from inside: nothing after it runs, no except Exception sees it."""


def keyword_hits(agent, word: str) -> int:
    return Chunk.objects.filter(agent=agent, search_vector=SearchQuery(word, config="english")).count()


def test_the_chunks_are_searchable_before_the_provider_is_called(alice, fake_embeddings, indexed, monkeypatch):
    real_embed = embedding_cache.embed_texts
    during_the_call = {}

    def embed(**kwargs):
        memory_file = MemoryFile.objects.get(agent=alice.agent)
        during_the_call.update(
            state=memory_file.state,
            indexed=memory_file.indexed_hash == memory_file.content_hash,
            hits=keyword_hits(alice.agent, "zeppelin"),
            vectors=Chunk.objects.exclude(embedding=None).count(),
        )
        return real_embed(**kwargs)

    monkeypatch.setattr(embedding_cache, "embed_texts", embed)
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)
    assert during_the_call == {"state": "indexing", "indexed": True, "hits": 1, "vectors": 0}
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed"
    assert not Chunk.objects.filter(file=memory_file, embedding=None).exists()
    job.refresh_from_db()
    assert (job.state, job.chunks_added, job.chunks_embedded, job.files_changed) == ("done", 2, 2, 1)


def test_a_worker_that_dies_between_the_steps_leaves_chunks_that_recovery_completes(
    alice, fake_embeddings, indexed, monkeypatch, settings
):
    memory_file, job = file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)  # not run yet

    def killed(**kwargs):
        raise WorkerKilled

    monkeypatch.setattr(embedding_cache, "embed_texts", killed)
    with pytest.raises(WorkerKilled):
        index_job_run(job_id=job.pk)
    monkeypatch.undo()
    memory_file.refresh_from_db()
    assert memory_file.state == "indexing"
    chunks = dict(Chunk.objects.filter(file=memory_file).values_list("id", "embedding_identity"))
    assert len(chunks) == 2 and set(chunks.values()) == {""}
    assert keyword_hits(alice.agent, "zeppelin") == 1  # searchable while nobody works on it

    stale = timezone.now() - timezone.timedelta(seconds=settings.MEMORYHUB_INDEX_LEASE_SECONDS + 5)
    MemoryFile.objects.filter(pk=memory_file.pk).update(updated_at=stale)
    fake_embeddings.reset_counts()
    with indexed():
        assert abandoned_files_recover() == [job.pk]

    memory_file.refresh_from_db()
    assert memory_file.state == "indexed"
    # The same rows, filled in; each text embedded once; the job counted each chunk once.
    assert dict(Chunk.objects.filter(file=memory_file).values_list("id", "embedding_identity")) == {
        chunk_id: "fake:fake-hash:64" for chunk_id in chunks
    }
    assert fake_embeddings.texts_embedded == 2
    job.refresh_from_db()
    assert (job.state, job.files_changed, job.chunks_added, job.chunks_embedded) == ("done", 1, 2, 2)


def test_cached_vectors_are_written_with_the_chunks_in_one_step(alice, fake_embeddings, indexed, monkeypatch):
    from indexing.writes import file_delete

    with indexed():
        file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)  # fills alice's cache
    with indexed():
        file_delete(agent=alice.agent, path="notes/hangar.md")  # her chunks go, her cache stays
    assert not Chunk.objects.filter(agent=alice.agent).exists()
    fake_embeddings.reset_counts()

    def no_second_step(**kwargs):
        raise AssertionError("nothing was missing: no second step")

    monkeypatch.setattr(services, "_files_vectors_fill", no_second_step)
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)
    assert fake_embeddings.calls == 0
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed"
    assert not Chunk.objects.filter(file=memory_file, embedding=None).exists()
    job.refresh_from_db()
    assert (job.chunks_embedded, job.cache_hits) == (0, 2)


def test_a_provider_failure_after_the_first_step_keeps_the_chunks(alice, fake_embeddings, indexed):
    from indexing.embeddings import ProviderPermanentError

    fake_embeddings.fail_next(ProviderPermanentError("model not found"))
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)
    memory_file.refresh_from_db()
    assert memory_file.state == "failed" and "model not found" in memory_file.last_error
    assert memory_file.indexed_hash == memory_file.content_hash
    assert Chunk.objects.filter(file=memory_file, embedding=None).count() == 2
    assert keyword_hits(alice.agent, "zeppelin") == 1
    assert IndexJob.objects.get(pk=job.pk).chunks_added == 2


def test_search_says_which_files_are_keyword_only(alice, fake_embeddings, indexed):
    with indexed():
        file_ingest(agent=alice.agent, path="notes/other.md", content="The ferry leaves at noon.")
        memory_file, _ = file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)
    # What step 1 leaves while the provider is called: chunks in, no vectors, the file indexing.
    Chunk.objects.filter(file=memory_file).update(embedding=None, embedding_identity="", embedding_dimensions=None)
    MemoryFile.objects.filter(pk=memory_file.pk).update(state="indexing")

    body = alice.client.post("/api/v1/search", {"query": "zeppelin dawn"}, format="json").json()
    assert "notes/hangar.md" in [r["path"] for r in body["results"]]  # by keyword: it has no vector yet
    assert body["pending"] == 1
    assert "1 file(s) are searchable by keyword only until their vectors are computed" in body["message"]
    assert "still being indexed" not in body["message"]
    status = alice.client.get("/api/v1/status").json()
    assert (status["pending"], status["awaiting_vectors"]) == (1, 1)
    keyword = alice.client.post("/api/v1/search", {"query": "zeppelin dawn", "mode": "keyword"}, format="json").json()
    assert keyword["message"] == ""  # a keyword search misses nothing of it


def test_a_chunk_waiting_for_its_vector_is_scored_by_its_keywords_alone(alice, fake_embeddings, indexed):
    """While a file waits for its vectors the vector half cannot find it, and a fused score gave its chunks the
    keyword half's share only: a file that has a vector and shares a word with the question passed it. With a
    share of the dev agents' chunks so, the hybrid search fell below keywords alone (docs/search.md)."""
    with indexed():
        file_ingest(agent=alice.agent, path="notes/dawn.md", content="# Dawn\n\nWe walked at dawn by the lake.\n")
        file_ingest(agent=alice.agent, path="notes/bread.md", content="# Bread\n\nBuy bread and milk.\n")
        memory_file, _ = file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)

    def search():
        body = alice.client.post(
            "/api/v1/search", {"query": "zeppelin dawn", "explain": True, "min_score": 0}, format="json"
        ).json()
        return body, [r["path"] for r in body["results"]]

    body, paths = search()
    assert body["mode"] == "hybrid" and paths[0] == "notes/hangar.md"  # with its vector: both halves find it
    # What step 1 leaves while the provider is called: chunks in, no vectors, the file indexing.
    Chunk.objects.filter(file=memory_file).update(embedding=None, embedding_identity="", embedding_dimensions=None)
    MemoryFile.objects.filter(pk=memory_file.pk).update(state="indexing")
    body, paths = search()
    assert body["mode"] == "hybrid" and paths[0] == "notes/hangar.md", body  # its keywords alone: still first
    first = body["results"][0]
    assert first["explain"]["without_vector"] is True and first["explain"]["vector_rank"] is None
    assert first["score"] == pytest.approx(first["explain"]["keyword_score"], abs=1e-3)
    assert "without_vector" not in body["results"][1]["explain"]  # notes/dawn.md has its vector
    assert "scored by their keywords alone meanwhile" in body["message"]


def test_a_failed_files_chunks_without_vectors_are_scored_by_their_keywords_alone(alice, fake_embeddings, indexed):
    """A file the provider refused after its chunks were written stays failed and keyword-searchable until new
    content or a re-index: its chunks have no vector for as long, and are scored as a waiting file's are."""
    from indexing.embeddings import ProviderPermanentError

    with indexed():
        file_ingest(agent=alice.agent, path="notes/dawn.md", content="# Dawn\n\nWe walked at dawn by the lake.\n")
        file_ingest(agent=alice.agent, path="notes/bread.md", content="# Bread\n\nBuy bread and milk.\n")
    fake_embeddings.fail_next(ProviderPermanentError("input refused"))
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="notes/hangar.md", content=NOTE)
    memory_file.refresh_from_db()
    assert memory_file.state == "failed" and memory_file.indexed_hash == memory_file.content_hash
    body = alice.client.post(
        "/api/v1/search", {"query": "zeppelin dawn", "explain": True, "min_score": 0}, format="json"
    ).json()
    assert body["mode"] == "hybrid" and body["pending"] == 0
    first = body["results"][0]
    assert first["path"] == "notes/hangar.md" and first["explain"]["without_vector"] is True, body
