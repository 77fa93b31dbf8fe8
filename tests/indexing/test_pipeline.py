"""The worker side, proven by counting with the fake provider: only distinct new chunk texts are
embedded; jobs are idempotent; races, failures and identity changes leave a consistent index."""

import json
from datetime import timedelta

import pytest
from django.contrib.postgres.search import SearchQuery
from django.utils import timezone

from indexing import embedding_cache
from indexing.embeddings import ProviderPermanentError, ProviderTransientError
from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.writes import SyncEntry, file_ingest, workspace_sync
from indexing.maintenance import agent_reembed, file_reindex, index_maintenance
from indexing.services import file_index
from indexing.tasks import index_job_task


def fifty_sections(edited: int | None = None) -> str:
    parts = []
    for i in range(50):
        body = f"Section {i} records decision number {i}: the team agreed on plan {i * 7} for quarter {i % 4}."
        if i == edited:
            body = f"Section {i} was rewritten: the plan changed completely after the review."
        parts.append(f"## Topic {i}\n\n{body}\n")
    return "\n".join(parts)


def keyword_hits(agent, word: str) -> int:
    return Chunk.objects.filter(agent=agent, search_vector=SearchQuery(word, config="english")).count()


def test_a_new_file_embeds_each_chunk_once(alice, fake_embeddings, indexed):
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="memory/plans.md", content=fifty_sections())
    chunks = Chunk.objects.filter(file=memory_file)
    assert chunks.count() == 50
    assert fake_embeddings.texts_embedded == 50
    assert not chunks.filter(embedding=None).exists()
    assert set(chunks.values_list("embedding_identity", flat=True)) == {"fake:fake-hash:64"}
    assert set(chunks.values_list("embedding_dimensions", flat=True)) == {64}
    job.refresh_from_db()
    assert (job.state, job.chunks_added, job.chunks_embedded, job.files_changed) == ("done", 50, 50, 1)
    # Line ranges are exact: chunk i is heading line + blank + body line of section i.
    first = chunks.get(ordinal=3)
    lines = memory_file.content.split("\n")
    assert first.text == "\n".join(lines[first.start_line - 1 : first.end_line])


def test_re_uploading_unchanged_content_makes_no_job_and_no_embedding_call(alice, fake_embeddings, indexed):
    with indexed():
        file_ingest(agent=alice.agent, path="memory/plans.md", content=fifty_sections())
    fake_embeddings.reset_counts()
    with indexed():
        _, job = file_ingest(agent=alice.agent, path="memory/plans.md", content=fifty_sections())
    assert job is None
    assert fake_embeddings.calls == 0


def test_editing_one_paragraph_embeds_only_the_changed_chunk(alice, fake_embeddings, indexed):
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/plans.md", content=fifty_sections())
    fake_embeddings.reset_counts()
    with indexed():
        _, job = file_ingest(agent=alice.agent, path="memory/plans.md", content=fifty_sections(edited=17))
    assert fake_embeddings.texts_embedded == 1
    assert fake_embeddings.calls == 1
    job.refresh_from_db()
    assert (job.chunks_added, job.chunks_removed, job.chunks_embedded, job.cache_hits) == (1, 1, 1, 49)
    assert Chunk.objects.filter(file=memory_file).count() == 50
    assert Chunk.objects.filter(file=memory_file, text__contains="rewritten").exclude(embedding=None).count() == 1


def test_the_same_text_in_two_files_of_an_agent_is_embedded_once_and_another_agent_learns_nothing(
    alice, bob, fake_embeddings, indexed, settings
):
    text = "Shared knowledge: the office wifi password rotates every Monday."
    with indexed():
        file_ingest(agent=alice.agent, path="memory/a.md", content=text)
        file_ingest(agent=alice.agent, path="notes/b.md", content=text)
    assert fake_embeddings.texts_embedded == 1
    # Bob guesses alice's note: his job neither hits a cache nor is spared an embedding.
    with indexed():
        response = bob.client.put("/api/v1/files/MEMORY.md", {"content": text}, format="json")
    job = bob.client.get(f"/api/v1/jobs/{response.json()['job']}").json()
    assert (job["state"], job["cache_hits"], job["chunks_embedded"]) == ("done", 0, 1)
    assert fake_embeddings.texts_embedded == 2
    assert Chunk.objects.filter(text=text).exclude(embedding=None).count() == 3
    # With one cache for every agent (MEMORYHUB_EMBEDDING_CACHE_SCOPE=shared), the second agent's copy
    # costs nothing, and its job says so.
    settings.MEMORYHUB_EMBEDDING_CACHE_SCOPE = "shared"
    other = "Bob's note: the printer on floor 3 needs a new drum."
    with indexed():
        file_ingest(agent=bob.agent, path="notes/printer.md", content=other)
        _, alices = file_ingest(agent=alice.agent, path="notes/printer.md", content=other)
    alices.refresh_from_db()
    assert (fake_embeddings.texts_embedded, alices.cache_hits, alices.chunks_embedded) == (3, 1, 0)


def test_a_thousand_file_sync_sent_twice_embeds_nothing_the_second_time(alice, fake_embeddings, indexed):
    entries = [SyncEntry(path=f"notes/n{i:04}.md", content=f"Note {i}: remember item {i} of the inventory.") for i in range(1000)]
    with indexed():
        first = workspace_sync(agent=alice.agent, entries=entries)
    assert first.changed == 1000
    assert fake_embeddings.texts_embedded == 1000
    assert MemoryFile.objects.filter(agent=alice.agent, state="indexed").count() == 1000
    fake_embeddings.reset_counts()
    with indexed():
        second = workspace_sync(agent=alice.agent, entries=entries)
    assert (second.job, second.changed, second.unchanged, second.needed) == (None, 0, 1000, [])
    assert fake_embeddings.calls == 0
    # The same, as a hash-only sync.
    from indexing.services import text_hash

    with indexed():
        third = workspace_sync(agent=alice.agent, entries=[SyncEntry(path=e.path, hash=text_hash(e.content)) for e in entries])
    assert (third.job, third.unchanged, third.needed) == (None, 1000, [])
    assert fake_embeddings.calls == 0


def transcript(messages: int, start: int = 0) -> str:
    lines = []
    for i in range(start, start + messages):
        role = "user" if i % 2 == 0 else "assistant"
        lines.append(json.dumps({"role": role, "content": f"Message {i} talks about topic {i} and the weather on day {i} in detail."}))
        if i % 5 == 0:
            lines.append(json.dumps({"type": "tool_result", "content": "noise"}))
    return "\n".join(lines) + "\n"


def test_a_transcript_cites_jsonl_lines_and_appending_embeds_only_the_new_part(alice, fake_embeddings, indexed):
    alice.agent.overrides = {"chunk_tokens": 64, "chunk_overlap": 8}
    alice.agent.save()
    base = transcript(60) + "{broken json\n"
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="sessions/s1.jsonl", content=base)
    job.refresh_from_db()
    assert memory_file.source == "session" and job.malformed_lines == 1
    chunks = list(Chunk.objects.filter(file=memory_file))
    assert len(chunks) > 5
    raw_lines = base.split("\n")
    for chunk in chunks:
        assert chunk.text.startswith(("User: ", "Assistant: "))
        first_message = chunk.text.split("\n")[0].split(": ", 1)[1]
        assert first_message in raw_lines[chunk.start_line - 1]  # cites the JSONL line it came from
    before = {c.text for c in chunks}
    fake_embeddings.reset_counts()
    with indexed():
        file_ingest(agent=alice.agent, path="sessions/s1.jsonl", content=base + transcript(10, start=60))
    after = {c.text for c in Chunk.objects.filter(file=memory_file)}
    new_texts = after - before
    assert fake_embeddings.texts_embedded == len(new_texts)
    assert 0 < len(new_texts) <= 4 < len(after)


def test_running_a_job_twice_does_nothing_the_second_time(alice, fake_embeddings, indexed):
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="memory/a.md", content=fifty_sections())
    chunk_ids = set(Chunk.objects.values_list("id", flat=True))
    fake_embeddings.reset_counts()
    index_job_task.apply(args=[job.id])
    assert file_index(file_id=memory_file.id) is None
    assert fake_embeddings.calls == 0
    assert set(Chunk.objects.values_list("id", flat=True)) == chunk_ids
    job.refresh_from_db()
    assert job.state == "done" and job.attempts == 1


def test_a_job_claimed_by_another_worker_is_left_alone(alice, fake_embeddings):
    memory_file, job = file_ingest(agent=alice.agent, path="memory/a.md", content="hello")  # not run yet
    IndexJob.objects.filter(pk=job.pk).update(state="running")
    index_job_task.apply(args=[job.id])
    memory_file.refresh_from_db()
    assert memory_file.state == "pending" and fake_embeddings.calls == 0


def test_racing_uploads_never_mix_two_versions(alice, fake_embeddings, indexed, monkeypatch):
    """Upload B commits while the worker is chunking A2: A2's chunks are discarded, B's are indexed."""
    import indexing.services as services

    with indexed():
        memory_file, job_a = file_ingest(agent=alice.agent, path="memory/race.md", content="## A\n\nversion alpha text")
    real_chunk = services.file_chunk_spans
    state = {"raced": False}

    def chunk_then_race(**kwargs):
        if not state["raced"]:
            state["raced"] = True
            file_ingest(agent=alice.agent, path="memory/race.md", content="## B\n\nversion bravo text")
        return real_chunk(**kwargs)

    file_ingest(agent=alice.agent, path="memory/race.md", content="## A2\n\nversion alpha two")
    monkeypatch.setattr(services, "file_chunk_spans", chunk_then_race)
    fake_embeddings.reset_counts()
    outcome = file_index(file_id=memory_file.id)
    assert outcome.superseded
    texts = " ".join(Chunk.objects.filter(file=memory_file).values_list("text", flat=True))
    assert "alpha two" not in texts  # the superseded version was not written
    assert fake_embeddings.calls == 0  # nor embedded
    memory_file.refresh_from_db()
    assert memory_file.state == "pending" and "bravo" in memory_file.content
    file_index(file_id=memory_file.id)
    texts = list(Chunk.objects.filter(file=memory_file).values_list("text", flat=True))
    assert texts == ["## B\n\nversion bravo text"]
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed" and memory_file.indexed_hash == memory_file.content_hash


def test_an_upload_during_the_embedding_call_is_left_to_its_own_job(alice, fake_embeddings, indexed, monkeypatch):
    """Upload B commits while the worker embeds A2, whose chunks are written already (keyword-first):
    A2's chunks get their vectors but the file is not marked indexed; B's job replaces them whole."""
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/race.md", content="## A\n\nversion alpha text")
    real_embed = embedding_cache.embed_texts
    seen_while_embedding = []

    def embed_then_race(**kwargs):
        if not seen_while_embedding:
            seen_while_embedding.append(list(Chunk.objects.filter(file=memory_file).values_list("text", "embedding_identity")))
            file_ingest(agent=alice.agent, path="memory/race.md", content="## B\n\nversion bravo text")
        return real_embed(**kwargs)

    file_ingest(agent=alice.agent, path="memory/race.md", content="## A2\n\nversion alpha two")
    monkeypatch.setattr(embedding_cache, "embed_texts", embed_then_race)
    outcome = file_index(file_id=memory_file.id)
    assert seen_while_embedding == [[("## A2\n\nversion alpha two", "")]]  # searchable by keyword before its vector
    assert outcome.superseded
    memory_file.refresh_from_db()
    assert memory_file.state == "pending" and "bravo" in memory_file.content
    assert memory_file.indexed_hash != memory_file.content_hash  # A2's chunks are not B's
    file_index(file_id=memory_file.id)
    chunks = list(Chunk.objects.filter(file=memory_file).values_list("text", "embedding_identity"))
    assert chunks == [("## B\n\nversion bravo text", "fake:fake-hash:64")]
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed" and memory_file.indexed_hash == memory_file.content_hash


def test_a_permanent_embedding_failure_leaves_the_file_keyword_searchable(alice, fake_embeddings, indexed):
    fake_embeddings.fail_next(ProviderPermanentError("model not found"))
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="memory/a.md", content="The zeppelin leaves at dawn.")
    memory_file.refresh_from_db()
    job.refresh_from_db()
    assert memory_file.state == "failed" and "model not found" in memory_file.last_error
    assert job.state == "failed" and "model not found" in job.error
    chunk = Chunk.objects.get(file=memory_file)
    assert chunk.embedding is None and chunk.embedding_identity == ""
    assert keyword_hits(alice.agent, "zeppelin") == 1
    status = alice.client.get("/api/v1/status").json()
    assert status["pending"] == 0 and status["failed"] == 1


def test_a_transient_failure_is_retried_and_then_succeeds(alice, fake_embeddings, indexed):
    fake_embeddings.fail_next(ProviderTransientError("429 rate limited"))
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="memory/a.md", content="The zeppelin leaves at dawn.")
    memory_file.refresh_from_db()
    job.refresh_from_db()
    assert memory_file.state == "indexed" and memory_file.last_error == ""
    assert job.state == "done" and job.attempts == 2
    assert not Chunk.objects.filter(file=memory_file, embedding=None).exists()


def test_after_a_transient_failure_the_rest_of_the_job_is_keyword_searchable_at_once(alice, fake_embeddings, indexed, monkeypatch):
    import indexing.services as services

    monkeypatch.setattr(services, "INDEX_BATCH_FILES", 1)
    fake_embeddings.fail_next(ProviderTransientError("503"))
    calls = []
    real = services.files_index

    def spy(**kwargs):
        calls.append((kwargs["file_ids"], kwargs.get("defer_embedding", "")))
        return real(**kwargs)

    monkeypatch.setattr(services, "files_index", spy)
    entries = [SyncEntry(path=f"n/{i}.md", content=f"note {i} about kumquats") for i in range(3)]
    with indexed():
        workspace_sync(agent=alice.agent, entries=entries)
    # First pass: file 1 met the error; files 2 and 3 were chunked without calling the provider.
    assert [bool(deferred) for _, deferred in calls[:3]] == [False, True, True]
    # Then the retry embedded everything.
    assert MemoryFile.objects.filter(agent=alice.agent, state="indexed").count() == 3
    assert fake_embeddings.texts_embedded == 3
    assert IndexJob.objects.get(agent=alice.agent).attempts == 2


def test_when_transient_retries_run_out_the_job_fails_with_its_reason(alice, fake_embeddings, indexed):
    fake_embeddings.fail_next(ProviderTransientError("upstream timeout"), times=50)
    with indexed():
        file_ingest(agent=alice.agent, path="memory/a.md", content="The zeppelin leaves at dawn.")
    job = IndexJob.objects.get(agent=alice.agent)
    memory_file = MemoryFile.objects.get(agent=alice.agent)
    assert job.state == "failed" and "upstream timeout" in job.error and "retries" in job.error
    assert memory_file.state == "failed"
    assert keyword_hits(alice.agent, "zeppelin") == 1


def test_the_periodic_task_retries_failed_files(alice, fake_embeddings, indexed):
    fake_embeddings.fail_next(ProviderPermanentError("bad gateway config"))
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/a.md", content="Retry me later.")
    MemoryFile.objects.filter(pk=memory_file.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    with indexed():
        outcome = index_maintenance()
    assert outcome.retried_failed == 1
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed"
    assert IndexJob.objects.filter(agent=alice.agent, trigger="schedule", state="done").count() == 1


def test_a_file_that_keeps_failing_is_retried_less_often_then_left_alone(alice, fake_embeddings, indexed, settings):
    settings.MEMORYHUB_INDEX_RETRY_FAILED_AFTER = 600
    settings.MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS = 3
    fake_embeddings.fail_next(ProviderPermanentError("content rejected"), times=100)
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/a.md", content="The provider rejects this.")
    memory_file.refresh_from_db()
    assert (memory_file.state, memory_file.failures) == ("failed", 1)

    def retry_after(seconds_since_failure: int) -> int:
        MemoryFile.objects.filter(pk=memory_file.pk).update(updated_at=timezone.now() - timedelta(seconds=seconds_since_failure))
        with indexed():
            return index_maintenance().retried_failed

    assert retry_after(500) == 0  # not yet: 600 s after the first failure
    assert retry_after(700) == 1
    memory_file.refresh_from_db()
    assert memory_file.failures == 2
    assert retry_after(700) == 0  # after a second failure: 1,200 s
    assert retry_after(1300) == 1
    memory_file.refresh_from_db()
    assert memory_file.failures == 3
    assert retry_after(10**6) == 0  # three failures in a row: left alone
    assert memory_file.state == "failed" and keyword_hits(alice.agent, "provider") == 1

    # New content starts the count again, and indexes once the provider accepts it.
    fake_embeddings.reset_counts()  # the provider accepts again
    with indexed():
        file_ingest(agent=alice.agent, path="memory/a.md", content="The provider accepts this one.")
    memory_file.refresh_from_db()
    assert (memory_file.state, memory_file.failures) == ("indexed", 0)


def test_an_operators_reindex_retries_a_file_that_was_given_up(alice, fake_embeddings, indexed, settings):
    settings.MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS = 1
    fake_embeddings.fail_next(ProviderPermanentError("content rejected"))
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/a.md", content="Try again by hand.")
    MemoryFile.objects.filter(pk=memory_file.pk).update(updated_at=timezone.now() - timedelta(days=1))
    with indexed():
        assert index_maintenance().retried_failed == 0
        file_reindex(agent=alice.agent, file_ids=[memory_file.pk])
    memory_file.refresh_from_db()
    assert (memory_file.state, memory_file.failures) == ("indexed", 0)


def test_the_periodic_task_requeues_a_stuck_job(alice, fake_embeddings, indexed):
    memory_file, job = file_ingest(agent=alice.agent, path="memory/a.md", content="Lost message.")  # never enqueued
    old = timezone.now() - timedelta(hours=1)
    IndexJob.objects.filter(pk=job.pk).update(state="running", started_at=old)
    MemoryFile.objects.filter(pk=memory_file.pk).update(state="indexing", updated_at=old)
    with indexed():
        outcome = index_maintenance()
    assert outcome.stuck_jobs == 1
    memory_file.refresh_from_db()
    job.refresh_from_db()
    assert memory_file.state == "indexed" and job.state == "done" and job.attempts == 1


def test_status_pending_is_zero_only_once_everything_is_searchable(alice, fake_embeddings, indexed):
    with indexed():
        alice.client.generic("PUT", "/api/v1/files/memory/a.md", b"first", content_type="text/plain")
        assert alice.client.get("/api/v1/status").json()["pending"] == 1
    status = alice.client.get("/api/v1/status").json()
    assert status["pending"] == 0 and status["files"] == 1 and status["chunks"] == 1


def test_an_identity_change_re_embeds_in_the_background(alice, fake_embeddings, indexed, settings):
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/plans.md", content=fifty_sections())
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 32
    fake_embeddings.reset_counts()
    # Keyword search is unaffected; no chunk has a vector of the new identity yet.
    assert keyword_hits(alice.agent, "decision") == 50
    assert not Chunk.objects.filter(embedding_identity="fake:fake-hash:32").exists()
    with indexed():
        outcome = index_maintenance()
    assert outcome.reembed_jobs == 1
    assert fake_embeddings.texts_embedded == 50
    chunks = Chunk.objects.filter(file=memory_file)
    assert set(chunks.values_list("embedding_identity", "embedding_dimensions")) == {("fake:fake-hash:32", 32)}
    assert all(len(c.embedding) == 32 for c in chunks)
    assert IndexJob.objects.filter(trigger="reindex", state="done").count() == 1
    # Nothing left to do: a second run finds no stale chunk.
    fake_embeddings.reset_counts()
    with indexed():
        assert index_maintenance().reembed_jobs == 0
        assert agent_reembed(agent=alice.agent) is None
    assert fake_embeddings.calls == 0


def test_per_agent_chunk_sizes_apply(alice, bob, fake_embeddings, indexed):
    alice.agent.overrides = {"chunk_tokens": 64}
    alice.agent.save()
    paragraph = " ".join(f"word{i}" for i in range(600))
    with indexed():
        alice_file, _ = file_ingest(agent=alice.agent, path="notes/long.md", content=paragraph)
        bob_file, _ = file_ingest(agent=bob.agent, path="notes/long.md", content=paragraph)
    alice_chunks = Chunk.objects.filter(file=alice_file)
    assert max(alice_chunks.values_list("token_count", flat=True)) <= 64
    assert alice_chunks.count() > 2 * Chunk.objects.filter(file=bob_file).count()


def test_reindexing_after_a_chunk_size_change_reuses_unchanged_vectors(alice, fake_embeddings, indexed):
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/plans.md", content=fifty_sections())
    fake_embeddings.reset_counts()
    with indexed():
        job = file_reindex(agent=alice.agent)
    job.refresh_from_db()
    assert job.state == "done" and job.files_changed == 1
    assert fake_embeddings.calls == 0  # same chunks, same texts: every vector reused


def test_with_provider_none_files_are_indexed_for_keywords_only(alice, settings, indexed):
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "none"
    settings.MEMORYHUB_EMBEDDING_MODEL = ""
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/a.md", content="Kumquats are tasty.")
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed"
    assert Chunk.objects.get(file=memory_file).embedding is None
    assert keyword_hits(alice.agent, "kumquat") == 1


def test_declaring_another_source_for_the_same_text_indexes_it_again(alice, fake_embeddings, indexed):
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="notes/me.md", content="I like tea.")
        same, job = file_ingest(agent=alice.agent, path="notes/me.md", content="I like tea.", source="memory")
    assert job is not None
    memory_file.refresh_from_db()
    assert memory_file.source == "memory" and memory_file.state == "indexed"
    assert fake_embeddings.texts_embedded == 1  # re-chunked, vector reused


def test_invalid_chunk_overrides_fall_back_to_the_defaults(alice, settings):
    from indexing.services import chunk_sizes

    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 8191  # overrides only: no model window in the way
    for overrides in ({"chunk_tokens": "big"}, {"chunk_tokens": 10}, {"chunk_tokens": 100, "chunk_overlap": 100}, {"chunk_tokens": True}):
        alice.agent.overrides = overrides
        assert chunk_sizes(agent=alice.agent) == (settings.MEMORYHUB_CHUNK_TOKENS, settings.MEMORYHUB_CHUNK_OVERLAP)
    alice.agent.overrides = {"chunk_tokens": 200}
    assert chunk_sizes(agent=alice.agent) == (200, 40)


def test_the_periodic_task_requeues_a_pending_file_whose_job_is_over(alice, fake_embeddings, indexed):
    from indexing.tasks import index_maintenance_task

    memory_file, job = file_ingest(agent=alice.agent, path="memory/a.md", content="Orphaned.")  # never enqueued
    IndexJob.objects.filter(pk=job.pk).update(state="failed")
    MemoryFile.objects.filter(pk=memory_file.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    with indexed():
        result = index_maintenance_task.apply().get()
    assert result["requeued_files"] == 1
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed"


@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_to_one_path_leave_exactly_one_version(alice, fake_embeddings):
    """Real threads, real transactions: whichever upload commits last is what the index holds, and it is
    indexed by its own job at once (not left pending for the stuck-work sweep). Ten rounds of six racing
    uploads: a job that skipped a row held by another transaction left it pending in ~1 round of 12."""
    import threading

    from django.db import connection

    for round_ in range(10):
        versions = [
            f"## Round {round_}, version {n}\n\n" + "\n\n".join(f"Paragraph {p} of version {n}." for p in range(20))
            for n in range(6)
        ]
        barrier = threading.Barrier(len(versions))
        errors = []

        def upload(text):
            try:
                barrier.wait()
                file_ingest(agent=alice.agent, path="memory/contested.md", content=text)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=upload, args=(v,)) for v in versions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        memory_file = MemoryFile.objects.get(agent=alice.agent, path="memory/contested.md")
        assert memory_file.state == "indexed", f"round {round_}"  # every job ran eagerly, on commit
        texts = "\n\n".join(Chunk.objects.filter(file=memory_file).order_by("ordinal").values_list("text", flat=True))
        assert texts == memory_file.content
        assert not IndexJob.objects.filter(agent=alice.agent, state__in=["queued", "running"]).exists()


def test_batches_are_bounded_by_files_and_by_bytes(monkeypatch):
    import indexing.services as services

    monkeypatch.setattr(services, "INDEX_BATCH_FILES", 3)
    monkeypatch.setattr(services, "INDEX_BATCH_BYTES", 100)
    rows = [(1, 10), (2, 10), (3, 10), (4, 10), (5, 95), (6, 200), (7, 1)]
    assert services._batches(rows) == [[1, 2, 3], [4], [5], [6], [7]]


def test_a_job_of_several_batches_fans_out_and_the_last_batch_settles_it(alice, fake_embeddings, monkeypatch):
    import indexing.services as services
    from indexing.services import index_job_run
    from indexing.tasks import index_batch_task

    monkeypatch.setattr(services, "INDEX_BATCH_FILES", 2)
    outcome = workspace_sync(agent=alice.agent, entries=[SyncEntry(path=f"n/{i}.md", content=f"note {i} on figs") for i in range(5)])
    dispatched = []
    fake_embeddings.fail_next(ProviderTransientError("429"))  # the first batch is retried once

    job = index_job_run(job_id=outcome.job.id, dispatch_batch=lambda job_id, ids: dispatched.append(ids))
    assert job.state == "running" and dispatched == [dispatched[0], dispatched[1], dispatched[2]] and len(dispatched) == 3
    for ids in dispatched:
        index_batch_task.apply(args=[outcome.job.id, ids])
        if ids is not dispatched[-1]:
            assert IndexJob.objects.get(pk=outcome.job.id).state == "running"
    job = IndexJob.objects.get(pk=outcome.job.id)
    assert (job.state, job.files_changed, job.chunks_added, job.chunks_embedded) == ("done", 5, 5, 5)
    assert MemoryFile.objects.filter(agent=alice.agent, state="indexed").count() == 5
    assert index_job_run(job_id=outcome.job.id, dispatch_batch=dispatched.append) is None  # claimed once only
