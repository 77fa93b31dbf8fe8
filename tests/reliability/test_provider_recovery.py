"""Files that failed because the embedding provider was down are retried as soon as a probe shows it
answers again (the recovery task runs every MEMORYHUB_INDEX_RECOVERY_INTERVAL seconds), not after the
15-minute backoff; while it still fails, the probe costs one tiny call and queues nothing. Files that
failed for their own content keep the backoff. Either way they stay keyword-searchable."""

import pytest

from indexing.embeddings import ProviderTransientError
from indexing.models import IndexJob, MemoryFile
from indexing.recovery import index_recovery


@pytest.fixture
def failed_during_outage(alice, fake_embeddings, settings):
    settings.MEMORYHUB_INDEX_MAX_RETRIES = 0  # the job gives up at once, as after its retries
    fake_embeddings.fail_next(ProviderTransientError("HTTP 503 from the embedding endpoint"), times=10)
    response = alice.client.put("/api/v1/files/notes/a.md", "The spare key is in the blue drawer.\n", content_type="text/markdown")
    memory_file = MemoryFile.objects.get(agent=alice.agent)
    assert memory_file.state == "failed" and memory_file.last_error.startswith("embedding failed:")
    assert IndexJob.objects.get(pk=response.json()["job"]).state == "failed"
    fake_embeddings.reset_counts()
    return memory_file


@pytest.mark.django_db(transaction=True)
def test_a_file_failed_in_an_outage_is_keyword_searchable_meanwhile(alice, failed_during_outage):
    found = alice.client.post("/api/v1/search", {"query": "spare key blue drawer", "mode": "keyword"}, format="json").json()
    assert [r["path"] for r in found["results"]] == ["notes/a.md"]


@pytest.mark.django_db(transaction=True)
def test_while_the_provider_still_fails_the_probe_queues_nothing(alice, failed_during_outage, fake_embeddings):
    fake_embeddings.fail_next(ProviderTransientError("still down"), times=1)
    outcome = index_recovery()
    assert outcome.retried_jobs == []
    assert MemoryFile.objects.get().state == "failed"
    assert fake_embeddings.calls == 0  # the probe's call failed; nothing else was sent


@pytest.mark.django_db(transaction=True)
def test_once_the_provider_answers_the_failed_file_is_indexed_at_once(alice, failed_during_outage, fake_embeddings):
    outcome = index_recovery()

    assert len(outcome.retried_jobs) == 1
    memory_file = MemoryFile.objects.get()
    assert (memory_file.state, memory_file.last_error) == ("indexed", "")
    assert memory_file.chunks.exclude(embedding=None).count() == 1
    assert fake_embeddings.texts_embedded == 2  # the probe's text and the file's one chunk


@pytest.mark.django_db(transaction=True)
def test_a_file_rejected_for_its_own_content_keeps_its_backoff(alice, fake_embeddings):
    alice.client.put("/api/v1/files/notes/a.md", "text\n", content_type="text/markdown")
    MemoryFile.objects.update(state="failed", last_error="the provider rejected 1 chunk(s): input too long")
    IndexJob.objects.update(state="done")
    assert index_recovery().retried_jobs == []
    assert MemoryFile.objects.get().state == "failed"
