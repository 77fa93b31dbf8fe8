"""The embedding cache: each distinct text is embedded once per identity and agent (or once for every
agent, with MEMORYHUB_EMBEDDING_CACHE_SCOPE=shared)."""

import threading

import pytest
from django.db import connection

from indexing.embedding_cache import embed_texts, text_hash
from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import FakeProvider, ProviderInputsRejected, ProviderTransientError
from indexing.models import EmbeddingCache

IDENTITY = EmbeddingIdentity(provider="fake", model="fake-hash", dimensions=64)
AGENT = 1  # whose cache: an agent's id (no row needed)


@pytest.fixture
def provider():
    FakeProvider.reset_counts()
    yield FakeProvider(IDENTITY)
    FakeProvider.reset_counts()


def test_the_same_text_twice_in_one_call_is_embedded_once(db, provider):
    outcome = embed_texts(provider=provider, agent_id=AGENT, texts=["deploy key in vault", "lunch at noon", "deploy key in vault"])
    assert FakeProvider.texts_embedded == 2
    assert (outcome.embedded, outcome.cache_hits) == (2, 1)
    assert outcome.vectors[0] == outcome.vectors[2] != outcome.vectors[1]
    assert len(outcome.vectors[0]) == 64


def test_a_second_call_is_answered_from_the_cache(db, provider):
    first = embed_texts(provider=provider, agent_id=AGENT, texts=["alpha", "beta"])
    second = embed_texts(provider=provider, agent_id=AGENT, texts=["beta", "gamma", "alpha"])
    assert FakeProvider.texts_embedded == 3  # alpha, beta, gamma
    assert (second.embedded, second.cache_hits) == (1, 2)
    assert second.vectors[0] == pytest.approx(first.vectors[1])
    assert second.vectors[2] == pytest.approx(first.vectors[0])


def test_each_agent_has_a_cache_of_its_own(alice, bob, provider):
    # A cache hit on bob's upload would tell bob that another agent's memory holds the text.
    embed_texts(provider=provider, agent_id=alice.agent.pk, texts=["we ship on fridays"])
    outcome = embed_texts(provider=provider, agent_id=bob.agent.pk, texts=["we ship on fridays"])
    assert (outcome.cache_hits, outcome.embedded, FakeProvider.calls) == (0, 1, 2)
    rows = EmbeddingCache.objects.filter(text_hash=text_hash("we ship on fridays"))
    assert sorted(rows.values_list("agent_scope", flat=True)) == sorted([alice.agent.pk, bob.agent.pk])
    again = embed_texts(provider=provider, agent_id=bob.agent.pk, texts=["we ship on fridays"])
    assert (again.cache_hits, FakeProvider.calls) == (1, 2)  # within one agent's memory, the cache works


def test_a_shared_cache_embeds_a_text_once_for_every_agent(alice, bob, provider, settings):
    settings.MEMORYHUB_EMBEDDING_CACHE_SCOPE = "shared"
    embed_texts(provider=provider, agent_id=alice.agent.pk, texts=["we ship on fridays"])  # alice's file
    outcome = embed_texts(provider=provider, agent_id=bob.agent.pk, texts=["we ship on fridays"])  # bob's
    assert (outcome.cache_hits, FakeProvider.calls) == (1, 1)
    assert list(EmbeddingCache.objects.values_list("agent_scope", flat=True)) == [0]


def test_a_different_identity_does_not_reuse_vectors(db, provider):
    embed_texts(provider=provider, agent_id=AGENT, texts=["same text"])
    wider = FakeProvider(EmbeddingIdentity(provider="fake", model="fake-hash", dimensions=32))
    outcome = embed_texts(provider=wider, agent_id=AGENT, texts=["same text"])
    assert outcome.embedded == 1 and len(outcome.vectors[0]) == 32
    assert FakeProvider.texts_embedded == 2


def test_misses_are_embedded_in_bounded_batches_and_kept_when_a_later_batch_fails(db, provider):
    texts = [f"note number {i}" for i in range(10)]
    original = FakeProvider.embed_documents
    calls = []

    def failing_third_batch(self, batch):
        calls.append(len(batch))
        if len(calls) == 3:
            raise ProviderTransientError("rate limited")
        return original(self, batch)

    FakeProvider.embed_documents = failing_third_batch
    try:
        with pytest.raises(ProviderTransientError):
            embed_texts(provider=provider, agent_id=AGENT, texts=texts, batch_size=4)
    finally:
        FakeProvider.embed_documents = original
    assert calls == [4, 4, 2]
    assert EmbeddingCache.objects.count() == 8  # the first two batches are kept
    outcome = embed_texts(provider=provider, agent_id=AGENT, texts=texts, batch_size=4)
    assert (outcome.cache_hits, outcome.embedded) == (8, 2)


def test_inputs_the_provider_rejects_get_no_vector_and_the_rest_are_kept(db, provider, monkeypatch):
    def reject_the_bad_one(self, batch):
        vectors = [None if "BAD" in text else self._vector(text) for text in batch]
        rejected = {i: "input too long" for i, v in enumerate(vectors) if v is None}
        if rejected:
            raise ProviderInputsRejected(vectors, rejected)
        return vectors

    monkeypatch.setattr(FakeProvider, "embed_documents", reject_the_bad_one)
    outcome = embed_texts(provider=provider, agent_id=AGENT, texts=["fine", "BAD input", "also fine", "BAD input"])
    assert outcome.vectors[1] is None and outcome.vectors[3] is None
    assert outcome.vectors[0] is not None and outcome.vectors[2] is not None
    assert outcome.rejected == {1: "input too long", 3: "input too long"}
    assert (outcome.embedded, outcome.cache_hits) == (2, 0)
    assert EmbeddingCache.objects.count() == 2


def test_an_empty_call_does_nothing(db, provider):
    outcome = embed_texts(provider=provider, agent_id=AGENT, texts=[])
    assert (outcome.vectors, outcome.cache_hits, outcome.embedded, FakeProvider.calls) == ([], 0, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_on_the_same_new_text_both_succeed(provider):
    errors, outcomes = [], []
    barrier = threading.Barrier(2)
    original = FakeProvider.embed_documents

    def slow_together(self, batch):
        barrier.wait(timeout=10)  # both have looked the text up and missed it
        return original(self, batch)

    FakeProvider.embed_documents = slow_together

    def worker():
        try:
            outcomes.append(embed_texts(provider=provider, agent_id=AGENT, texts=["racing text"]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    try:
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        FakeProvider.embed_documents = original
    assert errors == []
    assert len(outcomes) == 2 and outcomes[0].vectors == outcomes[1].vectors
    assert EmbeddingCache.objects.count() == 1
