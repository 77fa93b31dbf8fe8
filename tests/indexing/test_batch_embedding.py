"""Batch embedding: bulk work goes through the provider's batch API (OpenAI /v1/batches, Gemini
asyncBatchEmbedContent) and a periodic collector, against a local fake of both APIs
(tests/indexing/batch_embedding_servers.py). Small and interactive work stays synchronous; a failed or
expired batch falls back to synchronous embedding. The same with a real worker killed mid-batch is in
tests/reliability/test_batch_embedding_worker.py."""

import itertools
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents.deletion import agent_purge
from agents.models import Agent
from agents.services import agent_delete
from indexing.embedding_batches import embedding_batches_collect
from indexing.maintenance import index_maintenance
from indexing.models import Chunk, EmbeddingBatch, EmbeddingCache, IndexJob, MemoryFile
from indexing.writes import SyncEntry, file_ingest, workspace_sync
from tests.indexing.batch_embedding_servers import API_KEY, BatchEmbeddingServer

THRESHOLD = 10
MODELS = {"openai": "text-embedding-3-small", "gemini": "gemini-embedding-001"}
DIMENSIONS = 16


def configure(settings, server):
    settings.MEMORYHUB_EMBEDDING_PROVIDER = server.api
    settings.MEMORYHUB_EMBEDDING_MODEL = MODELS[server.api]
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = DIMENSIONS
    settings.MEMORYHUB_EMBEDDING_MAX_RETRIES = 0
    settings.MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD = THRESHOLD
    if server.api == "openai":
        settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL = API_KEY, server.base_url
    else:
        settings.GEMINI_API_KEY, settings.GEMINI_BASE_URL = API_KEY, server.base_url


@pytest.fixture(params=["openai", "gemini"])
def server(request, settings):
    server = BatchEmbeddingServer(request.param, dimensions=DIMENSIONS).start()
    configure(settings, server)
    yield server
    server.stop()


def notes(count: int, *, shared: int = 3, tag: str = "") -> list[SyncEntry]:
    """``count`` files of two sections each; the last ``shared`` files repeat the first ones' text, so
    the distinct texts are fewer than the chunks. ``tag`` changes every text."""
    entries = []
    for i in range(count):
        n = i % (count - shared) if i >= count - shared else i
        content = f"# Trip {n}\n\nWe flew{tag} to city number {n} and ate dish {n}.\n\n# Hotel {n}\n\nRoom {n}{tag} faced the harbour {n}."
        entries.append(SyncEntry(path=f"memory/trip-{i}.md", content=content))
    return entries


def chunk_texts_distinct(agent) -> set[str]:
    return set(Chunk.objects.filter(agent=agent).values_list("text_hash", flat=True))


_ticks = itertools.count(1)


def collect(indexed):
    """A tick of the periodic task, a poll interval after the last one (its clock is passed in, not
    waited for), with the jobs it queues run here (on commit, eagerly)."""
    with indexed():
        return embedding_batches_collect(now=timezone.now() + timedelta(seconds=61 * next(_ticks)))


def test_a_bulk_sync_is_embedded_through_the_batch_api_once_and_never_synchronously(alice, server, indexed):
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=notes(12))
    job = IndexJob.objects.get(pk=outcome.job.pk)
    [batch] = EmbeddingBatch.objects.all()
    distinct = chunk_texts_distinct(alice.agent)
    assert job.state == "waiting" and batch.state == "in_flight" and batch.remote_id
    assert batch.inputs == len(distinct) == len(server.submitted_inputs) == len(set(server.submitted_inputs))
    assert server.sync_inputs == []

    # Meanwhile: keyword search finds the files; status shows the batch and the files awaiting vectors.
    response = alice.client.post("/api/v1/search", {"query": "harbour", "mode": "keyword"}, format="json")
    assert response.status_code == 200 and response.json()["results"], response.content
    response = alice.client.post("/api/v1/search", {"query": "harbour"}, format="json")
    assert response.json()["results"] and "in the embedding provider's batch" in response.json()["message"]
    status = alice.client.get("/api/v1/status").json()
    assert status["awaiting_vectors"] == 12 and status["pending"] == 12
    assert [(b["provider"], b["remote_id"], b["state"], b["inputs"]) for b in status["embedding_batches"]] == [
        (server.api, batch.remote_id, "in_flight", batch.inputs)
    ]

    assert collect(indexed).collected == []  # still in progress at the provider: nothing changes
    assert IndexJob.objects.get(pk=job.pk).state == "waiting"

    server.complete()
    result = collect(indexed)
    assert result.collected == [batch.pk] and result.jobs_queued == [job.pk]
    job.refresh_from_db()
    batch.refresh_from_db()
    assert (job.state, batch.state, batch.collected) == ("done", "done", batch.inputs)
    assert set(MemoryFile.objects.filter(agent=alice.agent).values_list("state", flat=True)) == {"indexed"}
    identity = f"{server.api}:{MODELS[server.api]}:{DIMENSIONS}"
    assert not Chunk.objects.filter(agent=alice.agent).exclude(embedding_identity=identity).exists()
    assert not Chunk.objects.filter(agent=alice.agent, embedding=None).exists()
    # Every distinct text embedded exactly once, through the batch and the cache; no synchronous call.
    assert EmbeddingCache.objects.filter(provider=server.api).count() == len(distinct)
    assert len(server.submitted_inputs) == len(set(server.submitted_inputs)) == len(distinct)
    assert server.sync_inputs == []
    assert job.chunks_embedded == len(distinct)
    assert alice.client.get("/api/v1/status").json()["embedding_batches"] == []
    response = alice.client.post("/api/v1/search", {"query": "harbour room", "mode": "vector"}, format="json")
    assert response.status_code == 200 and response.json()["results"]


def test_a_bulk_re_embed_after_a_model_change_goes_through_the_batch_api(alice, server, indexed, settings):
    # Indexed first with another identity (the fake provider), then the model changes.
    settings.MEMORYHUB_EMBEDDING_PROVIDER, settings.MEMORYHUB_EMBEDDING_MODEL, settings.MEMORYHUB_EMBEDDING_DIMENSIONS = "fake", "fake-hash", 64
    settings.MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD = 0
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(8, shared=0))
    assert set(MemoryFile.objects.values_list("state", flat=True)) == {"indexed"}
    configure(settings, server)

    with indexed():
        outcome = index_maintenance()
    assert outcome.reembed_jobs == 1
    [batch] = EmbeddingBatch.objects.all()
    assert IndexJob.objects.get(pk=batch.job_id).trigger == "reindex"
    assert batch.inputs == Chunk.objects.filter(agent=alice.agent).count() == 16
    server.complete()
    collect(indexed)
    identity = f"{server.api}:{MODELS[server.api]}:{DIMENSIONS}"
    assert Chunk.objects.filter(agent=alice.agent, embedding_identity=identity).count() == 16
    assert server.sync_inputs == [] and len(server.submitted_inputs) == len(set(server.submitted_inputs)) == 16
    assert IndexJob.objects.get(pk=batch.job_id).state == "done"


def test_small_work_and_uploads_stay_synchronous(alice, server, indexed):
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(3, shared=0))  # 6 texts: under the threshold
    big = "\n\n".join(f"# Part {i}\n\nParagraph {i} about topic {i}." for i in range(THRESHOLD * 2))
    with indexed():
        file_ingest(agent=alice.agent, path="memory/big.md", content=big)  # an upload: interactive
    assert not EmbeddingBatch.objects.exists() and server.submitted_inputs == []
    assert len(server.sync_inputs) == Chunk.objects.filter(agent=alice.agent).count() > THRESHOLD
    assert set(MemoryFile.objects.values_list("state", flat=True)) == {"indexed"}


def test_the_threshold_at_zero_turns_batches_off(alice, server, indexed, settings):
    settings.MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD = 0
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
    assert not EmbeddingBatch.objects.exists() and server.sync_inputs
    assert set(MemoryFile.objects.values_list("state", flat=True)) == {"indexed"}


def test_an_expired_batch_keeps_what_it_returned_and_embeds_the_rest_synchronously(alice, server, indexed):
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    server.expire(batch.remote_id, keep=5)
    collect(indexed)
    batch.refresh_from_db()
    assert batch.state == "partial" and batch.collected == 5 and "without a vector" in batch.error
    assert "expired" in batch.error.lower()
    # The five returned are not embedded again; the rest once each, synchronously.
    assert sorted(server.sync_inputs) == sorted(server.submitted_inputs[5:])
    assert IndexJob.objects.get(pk=outcome.job.pk).state == "done"
    assert not Chunk.objects.filter(agent=alice.agent, embedding=None).exists()
    assert EmbeddingCache.objects.count() == batch.inputs


def test_a_failed_batch_falls_back_to_synchronous_embedding_with_its_reason(alice, server, indexed, settings):
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    server.fail(batch.remote_id, "the input file was malformed")
    collect(indexed)
    batch.refresh_from_db()
    assert batch.state == "failed" and batch.collected == 0
    if server.api == "openai":
        assert batch.error == "openai batch failed: the input file was malformed"
    else:
        assert batch.error == "gemini batch BATCH_STATE_FAILED: the input file was malformed"
    assert sorted(server.sync_inputs) == sorted(server.submitted_inputs)
    assert IndexJob.objects.get(pk=outcome.job.pk).state == "done"
    assert set(MemoryFile.objects.values_list("state", flat=True)) == {"indexed"}


def test_a_provider_that_refuses_the_batch_is_embedded_synchronously_at_once(alice, server, indexed, settings):
    settings.OPENAI_API_KEY = settings.GEMINI_API_KEY = "wrong-key"  # the batch endpoints answer 401
    server_sync = server.sync_inputs
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    assert batch.state == "failed" and "401" in batch.error
    # The synchronous calls were refused too (same key): the files are failed with the reason, keyword-searchable.
    assert server_sync == [] and IndexJob.objects.get(pk=outcome.job.pk).state == "failed"
    assert set(MemoryFile.objects.values_list("state", flat=True)) == {"failed"}
    assert Chunk.objects.filter(agent=alice.agent).count() == 24


def test_a_batch_collected_twice_writes_once(alice, server, indexed):
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
    server.complete()
    first = collect(indexed)
    second = collect(indexed)
    assert len(first.collected) == 1 and second.collected == [] and second.polled == 0


def test_the_admin_lists_batches_in_flight(alice, server, indexed, client):
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    User.objects.create_superuser("operator", "op@example.com", "pw")
    client.login(username="operator", password="pw")
    page = client.get("/admin/indexing/embeddingbatch/").content.decode()
    assert batch.remote_id in page and "in_flight" in page
    dashboard = client.get("/admin/").content.decode()
    assert 'id="card-batches"' in dashboard and "1 job waiting" in dashboard


def test_a_poll_that_fails_is_tried_again_and_a_batch_silent_past_the_window_is_given_up(alice, server, indexed):
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    server.poll_failures = 1
    server.complete()
    assert collect(indexed).collected == []  # a 503: next interval
    batch.refresh_from_db()
    assert batch.state == "in_flight" and batch.remote_status == "poll failed"
    assert collect(indexed).collected == [batch.pk]
    assert IndexJob.objects.get(pk=outcome.job.pk).state == "done" and server.sync_inputs == []

    # Another bulk job whose provider never answers again: given up on after the 24 h window.
    with indexed():
        later = workspace_sync(agent=alice.agent, entries=notes(12, tag=" again"))
    stuck = EmbeddingBatch.objects.get(job=later.job)
    server.poll_failures = 10
    with indexed():
        embedding_batches_collect(now=timezone.now() + timedelta(hours=27))
    stuck.refresh_from_db()
    assert stuck.state == "failed" and "past its 24 h window" in stuck.error
    assert IndexJob.objects.get(pk=later.job.pk).state == "done"
    assert sorted(server.sync_inputs) == sorted(server.submitted_inputs[batch.inputs:])


def test_a_batch_of_an_old_model_is_dropped_and_the_job_reruns_under_the_new_one(alice, server, indexed, settings):
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    server.complete()
    settings.MEMORYHUB_EMBEDDING_PROVIDER, settings.MEMORYHUB_EMBEDDING_MODEL, settings.MEMORYHUB_EMBEDDING_DIMENSIONS = "fake", "fake-hash", 64
    collect(indexed)
    batch.refresh_from_db()
    assert batch.state == "failed" and "model changed" in batch.error and not EmbeddingCache.objects.filter(provider=server.api).exists()
    assert IndexJob.objects.get(pk=outcome.job.pk).state == "done"
    assert set(Chunk.objects.filter(agent=alice.agent).values_list("embedding_identity", flat=True)) == {"fake:fake-hash:64"}


def test_a_sync_of_many_small_files_is_bulk_work_though_each_pass_is_small(alice, server, indexed, settings):
    # 120 one-chunk files: two passes (100 files, then 20), each needing fewer texts than the threshold;
    # the job's 120 chunks reach it, so both passes go through batches and the job waits for both.
    settings.MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD = 110
    entries = [SyncEntry(path=f"log/{i}.md", content=f"Entry {i}: the lighthouse keeper counted {i} ships.") for i in range(120)]
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=entries)
    batches = list(EmbeddingBatch.objects.order_by("id"))
    assert [b.inputs for b in batches] == [100, 20] and server.sync_inputs == []
    server.complete(batches[0].remote_id)
    first = collect(indexed)
    assert first.collected == [batches[0].pk] and first.jobs_queued == []  # the job waits for its other batch
    assert IndexJob.objects.get(pk=outcome.job.pk).state == "waiting"
    server.complete(batches[1].remote_id)
    assert collect(indexed).jobs_queued == [outcome.job.pk]
    assert IndexJob.objects.get(pk=outcome.job.pk).state == "done"
    assert MemoryFile.objects.filter(agent=alice.agent, state="indexed").count() == 120
    assert server.sync_inputs == [] and len(set(server.submitted_inputs)) == len(server.submitted_inputs) == 120


def test_a_small_sync_of_small_files_stays_synchronous(alice, server, indexed, settings):
    settings.MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD = 110
    entries = [SyncEntry(path=f"log/{i}.md", content=f"Entry {i}: the lighthouse keeper counted {i} ships.") for i in range(100)]
    with indexed():
        workspace_sync(agent=alice.agent, entries=entries)
    assert not EmbeddingBatch.objects.exists() and len(server.sync_inputs) == 100


def test_a_batch_is_not_collected_before_its_job_waits_and_a_dead_submission_is_marked_failed(alice, server, indexed, settings):
    # What a worker killed between the provider's answer and the transaction that makes the job wait leaves.
    with indexed():
        outcome = workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    EmbeddingBatch.objects.filter(pk=batch.pk).update(state="submitting")
    server.complete()
    assert collect(indexed).polled == 0  # a submitting batch is not the collector's yet
    with indexed():
        embedding_batches_collect(now=timezone.now() + timedelta(seconds=settings.MEMORYHUB_INDEX_STUCK_AFTER + 1))
    batch.refresh_from_db()
    assert batch.state == "failed" and "stopped before" in batch.error and batch.remote_id
    # Its job is not left waiting on it: it runs again and embeds synchronously.
    assert IndexJob.objects.get(pk=outcome.job.pk).state == "done"
    assert sorted(server.sync_inputs) == sorted(server.submitted_inputs)


def test_deleting_an_agent_cancels_its_batches_still_at_the_provider(alice, bob, server, indexed):
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
        workspace_sync(agent=bob.agent, entries=notes(12, tag=" again"))
    alices, bobs = (EmbeddingBatch.objects.get(agent=member.agent) for member in (alice, bob))
    assert alices.state == bobs.state == "in_flight"

    agent_delete(agent=alice.agent, actor=None)
    outcome = agent_purge(agent_id=alice.agent.pk)

    assert outcome.finished and outcome.batches_cancelled == 1
    assert server.cancelled == [alices.remote_id]  # not run, not paid for: nobody would collect it
    assert list(EmbeddingBatch.objects.values_list("pk", "state")) == [(bobs.pk, "in_flight")]  # bob's goes on


def test_a_batchs_vectors_go_into_its_agents_cache_and_nothing_of_a_batch_deleted_meanwhile_is_stored(
    alice, server, indexed, monkeypatch
):
    from indexing import embedding_batches

    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
    server.complete()
    collect(indexed)
    assert set(EmbeddingCache.objects.values_list("agent_scope", flat=True)) == {alice.agent.pk}

    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12, tag=" later"))
    [batch] = EmbeddingBatch.objects.filter(state="in_flight")
    server.complete()
    cached = EmbeddingCache.objects.count()
    poll = embedding_batches._batch_poll

    def deleted_while_polled(*, batch, **rest):  # the agent's deletion removes the batch meanwhile
        EmbeddingBatch.objects.filter(pk=batch.pk).delete()
        return poll(batch=batch, **rest)

    monkeypatch.setattr(embedding_batches, "_batch_poll", deleted_while_polled)
    outcome = collect(indexed)
    assert outcome.collected == [] and EmbeddingCache.objects.count() == cached
    assert not EmbeddingBatch.objects.filter(pk=batch.pk).exists()


def test_a_provider_that_does_not_cancel_does_not_hold_up_the_deletion(alice, server, indexed, caplog):
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    server.cancel_failures = 1

    agent_delete(agent=alice.agent, actor=None)
    outcome = agent_purge(agent_id=alice.agent.pk)

    assert outcome.finished and outcome.batches_cancelled == 0 and server.cancelled == []
    assert not Agent.objects.filter(pk=alice.agent.pk).exists() and not EmbeddingBatch.objects.exists()
    assert f"embedding batch {batch.pk} ({batch.remote_id}): the provider did not cancel it" in caplog.text


def test_a_provider_that_hangs_on_a_cancel_costs_the_deletion_one_request_timeout(alice, server, indexed, settings, caplog):
    settings.MEMORYHUB_EMBEDDING_TIMEOUT = 1.0
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
    [batch] = EmbeddingBatch.objects.all()
    server.hold_cancels()  # the cancel is never answered while the deletion runs

    agent_delete(agent=alice.agent, actor=None)
    outcome = agent_purge(agent_id=alice.agent.pk)

    # The purge went on without the answer: the provider still holds the request, unanswered.
    assert server.cancels_arrived == 1 and server.cancelled == []
    assert outcome.finished and outcome.batches_cancelled == 0
    assert not Agent.objects.filter(pk=alice.agent.pk).exists() and not EmbeddingBatch.objects.exists()
    assert f"embedding batch {batch.pk} ({batch.remote_id}): the provider did not cancel it" in caplog.text


def test_hanging_cancels_spend_the_runs_budget_and_the_next_run_asks_only_for_the_rest(alice, server, indexed, settings):
    settings.MEMORYHUB_EMBEDDING_TIMEOUT = 1.0
    with indexed():
        workspace_sync(agent=alice.agent, entries=notes(12))
        more = [SyncEntry(path=f"more/{entry.path}", content=entry.content) for entry in notes(12, tag=" again")]
        workspace_sync(agent=alice.agent, entries=more)
    first, second = EmbeddingBatch.objects.order_by("pk")
    server.hold_cancels()

    agent_delete(agent=alice.agent, actor=None)
    outcome = agent_purge(agent_id=alice.agent.pk, seconds=0.1)  # spent by the first cancel's timeout

    assert not outcome.finished and server.cancels_arrived == 1
    assert dict(EmbeddingBatch.objects.values_list("pk", "state")) == {first.pk: "failed", second.pk: "in_flight"}

    server.release_cancels()
    outcome = agent_purge(agent_id=alice.agent.pk)

    # The first batch was asked once: this run sent the second's cancel only.
    assert outcome.finished and outcome.batches_cancelled == 1 and server.cancels_arrived == 2
    assert second.remote_id in server.cancelled and not EmbeddingBatch.objects.exists()
