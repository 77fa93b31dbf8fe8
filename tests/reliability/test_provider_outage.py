"""Issue 18: when the provider `auto` chose is down, MemoryHub never switches to another provider (its
vectors would not be comparable with the index's). Searches answer from keywords and say so; indexing
keeps the chunks keyword-searchable, fails transiently (the task retries) and embeds with the same
provider once it answers again. Exercised with the native gemini provider against its local fake."""

import uuid

import pytest
import redis

from indexing.embeddings import FakeProvider, ProviderTransientError, get_provider
from indexing.models import Chunk, MemoryFile
from indexing.services import file_index
from search import query_breaker
from search.query_breaker import QueryBreaker
from search.services import memory_search
from tests.indexing.native_embedding_servers import API_KEY, NativeEmbeddingServer
from tests.search.conftest import NOTES, index_files  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("eager_tasks")
QUERY = "When do we deploy the billing service?"


@pytest.fixture
def gemini(settings):
    model = f"gemini-outage-{uuid.uuid4().hex[:8]}"  # no cached provider, query vector or breaker of another test
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "gemini"
    settings.MEMORYHUB_EMBEDDING_MODEL = model
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 8
    settings.MEMORYHUB_EMBEDDING_MAX_RETRIES = 1
    settings.MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY = 0.001
    settings.MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY = 0.01
    settings.MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT = 1.0
    server = NativeEmbeddingServer("gemini").start()
    settings.GEMINI_BASE_URL = server.base_url
    settings.GEMINI_API_KEY = API_KEY
    FakeProvider.reset_counts()
    yield server
    server.stop()
    name = f"gemini:{model}:8"
    keys = (f"{query_breaker.KEY_PREFIX}:{name}:{k}" for k in ("failures", "open", "probe"))
    redis.Redis.from_url(settings.REDIS_URL).delete(*keys)
    QueryBreaker._local.success(name)


def test_an_outage_falls_back_to_keywords_and_indexing_waits_for_the_same_provider(alice, index_files, gemini):
    index_files(alice, {"memory/notes.md": NOTES})  # embedded by gemini while it answers
    key = get_provider().identity.key
    assert set(Chunk.objects.filter(agent=alice.agent).values_list("embedding_identity", flat=True)) == {key}

    gemini.script = [(503, {"message": "The model is overloaded."})] * 50
    response = memory_search(agent=alice.agent, query=QUERY)
    assert response.mode == "keyword" and "embedding provider failed" in response.message
    assert response.results and response.results[0].path == "memory/notes.md"

    # A new file during the outage: chunked and keyword-searchable, no vector from anyone else.
    new = MemoryFile.objects.create(
        agent=alice.agent, path="memory/outage.md", content="# Outage\n\nThe quarterly invoice audit moved to Friday.\n",
        content_hash="h-outage", size=10, source="memory",
    )
    with pytest.raises(ProviderTransientError, match="HTTP 503"):
        file_index(file_id=new.pk)
    new.refresh_from_db()
    assert new.state == MemoryFile.State.FAILED and "503" in new.last_error
    assert set(Chunk.objects.filter(file=new).values_list("embedding_identity", flat=True)) == {""}
    assert FakeProvider.calls == 0 and FakeProvider.queries_embedded == 0
    keyword = memory_search(agent=alice.agent, query="quarterly invoice audit", mode="keyword")
    assert [r.path for r in keyword.results][:1] == ["memory/outage.md"]

    # The provider is back: the retry embeds with it, and only with it.
    gemini.script = []
    file_index(file_id=new.pk)
    new.refresh_from_db()
    assert new.state == MemoryFile.State.INDEXED
    assert set(Chunk.objects.filter(agent=alice.agent).values_list("embedding_identity", flat=True)) == {key}
