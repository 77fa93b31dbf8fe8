"""A model changed behind the same name is found (indexing/model_check.py), and a new revision
(MEMORYHUB_EMBEDDING_REVISION) embeds the index again without a vector of the old model from the cache.

The provider is the real ``openai`` SDK against a local OpenAI-compatible server; its ``swapped`` switch
stands for another model served under the same name."""

import logging

import pytest
from django.core.management import CommandError, call_command

from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import FakeProvider
from indexing.maintenance import index_maintenance
from indexing.model_check import SAMPLE_FILES, model_check, model_check_cache_clear
from indexing.models import Chunk, EmbeddingCache, EmbeddingModelCheck
from indexing.writes import file_ingest
from tests.reliability.flaky_embeddings import FlakyEmbeddings, use_flaky_provider

NOTES = {
    f"memory/2026-03-{day:02d}.md": f"# March {day}\n\nBought {day} seed packets for the garden; the invoice is number {day * 37}.\n"
    for day in range(1, 13)
}


@pytest.fixture
def server(settings):
    model_check_cache_clear()
    with FlakyEmbeddings(dimensions=16) as flaky:
        use_flaky_provider(settings, flaky)
        settings.MEMORYHUB_EMBEDDING_WINDOW_PROBE = False
        settings.MEMORYHUB_EMBEDDING_MAX_RETRIES = 0
        yield flaky
    model_check_cache_clear()


def _search(member) -> dict:
    response = member.client.post("/api/v1/search", {"query": "seed packets for the garden"}, format="json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def notes(alice, server, indexed):
    with indexed():
        for path, content in NOTES.items():
            file_ingest(agent=alice.agent, path=path, content=content)
    assert Chunk.objects.filter(agent=alice.agent).exclude(embedding=None).count() == len(NOTES)
    return alice


def test_the_same_model_is_found_the_same(notes, server, settings):
    requests = server.requests
    outcome = model_check()
    assert outcome.state == "same" and outcome.differed == 0
    assert 1 <= outcome.compared <= SAMPLE_FILES and outcome.lowest_similarity > 0.9999
    assert server.requests == requests + 1  # one request for the whole sample
    row = EmbeddingModelCheck.objects.get()
    assert (row.identity, row.endpoint, row.state, row.changed_since) == (
        f"openai:{settings.MEMORYHUB_EMBEDDING_MODEL}:16", server.base_url, "same", None
    )


def test_a_model_swapped_behind_the_same_name_is_found_and_shown(notes, server, caplog):
    server.swapped = True
    with caplog.at_level(logging.ERROR, logger="indexing.model_check"):
        outcome = model_check()
    assert outcome.state == "changed" and outcome.differed == outcome.compared >= 1
    assert outcome.lowest_similarity < 0.95
    assert "MEMORYHUB_EMBEDDING_REVISION" in caplog.text
    first = EmbeddingModelCheck.objects.get()
    assert first.state == "changed" and first.changed_since is not None
    check = notes.client.get("/api/v1/status").json()["embedding"]["model_check"]
    assert check["state"] == "changed" and check["changed_since"] is not None
    # A later check that finds the change again keeps when it was first found.
    model_check()
    assert EmbeddingModelCheck.objects.get().changed_since == first.changed_since
    with pytest.raises(CommandError, match="MEMORYHUB_EMBEDDING_REVISION"):
        call_command("embedding_model_check")
    # Searches leave the vector half out meanwhile, and say why.
    found = _search(notes)
    assert found["mode"] == "keyword" and "no longer gives the index's vectors" in found["message"]
    assert found["results"]  # the keyword half still answers
    # The old model back behind the name: the next check finds the index's vectors again.
    server.swapped = False
    assert model_check().state == "same"
    assert EmbeddingModelCheck.objects.get().changed_since is None
    assert _search(notes)["mode"] == "hybrid"


def test_a_new_revision_embeds_every_chunk_again_without_the_old_models_cache(notes, server, settings, indexed):
    server.swapped = True
    assert model_check().state == "changed"
    old_key = Chunk.objects.filter(agent=notes.agent).values_list("embedding_identity", flat=True).first()
    cached = EmbeddingCache.objects.count()
    assert cached == len(NOTES)
    settings.MEMORYHUB_EMBEDDING_REVISION = "2"
    texts = server.texts
    with indexed():
        assert index_maintenance().reembed_jobs == 1
    # Every chunk went to the model again: the cache's vectors are the old model's.
    assert server.texts - texts == len(NOTES)
    keys = set(Chunk.objects.filter(agent=notes.agent).values_list("embedding_identity", flat=True))
    assert keys == {old_key.replace(":16", "@2:16")}
    assert EmbeddingCache.objects.count() == 2 * cached  # the old model's rows stay, under their own name
    status = notes.client.get("/api/v1/status").json()["embedding"]
    assert status["revision"] == "2" and status["model_check"]["state"] == "unchecked"
    assert model_check().state == "same"  # the index is the new model's now
    call_command("embedding_model_check")  # exits 0
    assert _search(notes)["mode"] == "hybrid"


def test_a_provider_that_fails_keeps_the_last_finding_and_says_why(notes, server, settings):
    server.swapped = True
    assert model_check().state == "changed"
    server.behaviour = "500"
    settings.MEMORYHUB_EMBEDDING_MAX_RETRIES = 5
    requests = server.requests
    outcome = model_check()
    assert outcome.state == "failed" and "500" in outcome.error
    assert server.requests == requests + 1  # tried once, not 6 times: the next check tries again
    row = EmbeddingModelCheck.objects.get()
    assert row.state == "changed" and row.error  # what the last comparison found stands


def test_nothing_indexed_is_unchecked(db, server, alice):
    assert alice.client.get("/api/v1/status").json()["embedding"]["model_check"] == {
        "state": "unchecked", "checked_at": None, "changed_since": None
    }
    assert model_check().state == "unchecked"
    check = alice.client.get("/api/v1/status").json()["embedding"]["model_check"]
    assert check["state"] == "unchecked" and check["checked_at"] is not None


def test_a_chunk_embedded_with_its_files_title_in_front_is_left_out(alice, server, settings, indexed):
    settings.MEMORYHUB_CHUNK_TITLE_CONTEXT = True
    content = "# Trip\n\n" + "\n\n".join(f"Day {i}: walked {i} km along the coast and ate fish." for i in range(80)) + "\n"
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/trip.md", content=content)
    chunks = Chunk.objects.filter(file=memory_file).order_by("ordinal")
    assert chunks.count() > 1
    # Only the first chunk has a vector: the check must skip a chunk whose text is not what was embedded.
    Chunk.objects.filter(file=memory_file, ordinal=0).update(embedding=None, embedding_identity="")
    assert model_check().state == "unchecked"


def test_a_chunk_longer_than_a_window_lowered_since_is_left_out(notes, server, settings):
    """The provider now cuts a chunk longer than MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS; its stored vector is
    of the whole text. Compared, the same model would look changed (and pause every search)."""
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 5
    assert Chunk.objects.filter(agent=notes.agent, token_count__gt=5).count() == len(NOTES)
    assert model_check().state == "unchecked"


def test_the_revision_names_the_model_in_the_key_and_the_cache_not_in_requests():
    plain = EmbeddingIdentity("openai", "my-embedder", 384)
    revised = EmbeddingIdentity("openai", "my-embedder", 384, revision="2")
    assert (plain.key, plain.model_version) == ("openai:my-embedder:384", "my-embedder")
    assert (revised.key, revised.model_version, revised.model) == ("openai:my-embedder@2:384", "my-embedder@2", "my-embedder")


def test_the_fake_provider_is_checked_the_same(alice, fake_embeddings, indexed):
    with indexed():
        file_ingest(agent=alice.agent, path="MEMORY.md", content="The hose cost 30 euros.\n")
    FakeProvider.reset_counts()
    assert model_check().state == "same" and FakeProvider.texts_embedded == 1


def test_the_periodic_task_reports_the_check(notes, server, settings):
    from indexing.tasks import model_check_task

    assert settings.CELERY_BEAT_SCHEDULE["indexing-model-check"]["task"] == "indexing.tasks.model_check_task"
    server.swapped = True
    result = model_check_task()
    assert result["state"] == "changed" and result["differed"] == result["compared"] >= 1


def test_a_provider_that_hangs_costs_the_check_one_request_timeout(notes, server, settings):
    settings.MEMORYHUB_EMBEDDING_TIMEOUT, settings.MEMORYHUB_EMBEDDING_MAX_RETRIES = 1.0, 5
    server.behaviour = "hang"
    requests = server.requests
    outcome = model_check()
    server.release()
    assert outcome.state == "failed" and outcome.error
    assert server.requests == requests + 1  # the provider's 5 retries are not spent: the next check tries again
    assert EmbeddingModelCheck.objects.get().state == "failed"


def test_an_index_a_quarter_of_whose_checked_chunks_another_model_embedded_has_its_vector_half_paused(notes, server, settings):
    """Vectors written since the change match the model answering now, and the vector half pushes their files
    up whatever they say: from about a quarter of stale vectors the hybrid search found less than keywords
    alone (docs/providers.md). One of 8 leaves it on; 2 of 8, or 5 of 8, pause it."""
    identity = f"openai:{settings.MEMORYHUB_EMBEDDING_MODEL}:16"
    EmbeddingModelCheck.objects.create(
        identity=identity, endpoint=server.base_url, compared=8, differed=1, changed_since="2026-11-28T21:00:00Z"
    )
    model_check_cache_clear()
    assert EmbeddingModelCheck.objects.get().state == "changed"
    assert _search(notes)["mode"] == "hybrid"
    for differed in (2, 5):
        EmbeddingModelCheck.objects.update(differed=differed)
        model_check_cache_clear()
        found = _search(notes)
        assert found["mode"] == "keyword" and f"({differed} of 8 chunks checked" in found["message"]
    EmbeddingModelCheck.objects.update(differed=0, changed_since=None)  # the model put back: the next check
    model_check_cache_clear()
    assert _search(notes)["mode"] == "hybrid"


def test_superusers_see_the_checks_in_the_admin_and_operators_do_not(notes, server, client):
    from django.contrib.auth.models import User

    server.swapped = True
    model_check()
    client.force_login(User.objects.create_user("operator", password="pw", is_staff=True))
    assert client.get("/admin/indexing/embeddingmodelcheck/").status_code == 403
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get("/admin/indexing/embeddingmodelcheck/")
    assert page.status_code == 200 and b"changed" in page.content and server.base_url.encode() in page.content
    row = EmbeddingModelCheck.objects.get()
    assert client.get(f"/admin/indexing/embeddingmodelcheck/{row.pk}/change/").status_code == 200
