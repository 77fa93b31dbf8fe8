"""Issue 11, case 3: a sick embedding provider costs a search seconds, not minutes, and after repeated
failures none at all until it recovers.

The real ``openai`` SDK talks to a local server (tests/reliability/flaky_embeddings.py) that hangs or
answers 429/500. The query embedding has one attempt of MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT; the
circuit breaker opens after MEMORYHUB_SEARCH_BREAKER_FAILURES failures, skips the provider for
MEMORYHUB_SEARCH_BREAKER_COOLDOWN seconds, then lets one search probe it.
"""

import time

import pytest
import redis
from django.conf import settings

from search import query_breaker
from search.query_breaker import QueryBreaker
from search.services import memory_search
from tests.reliability.flaky_embeddings import FlakyEmbeddings, use_flaky_provider
from tests.search.conftest import NOTES, index_files  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("eager_tasks")
QUERY = "When do we deploy the billing service?"


@pytest.fixture
def provider(settings):
    """A flaky server behind the openai provider, the defaults of indexing (60 s timeout, 5 retries)
    left as they are, and a breaker of 2 failures and a 60 s cool-down (ended by ``_end_cool_down``)."""
    settings.MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT = 1.0
    settings.MEMORYHUB_SEARCH_BREAKER_FAILURES = 2
    settings.MEMORYHUB_SEARCH_BREAKER_COOLDOWN = 60.0
    redis_url = settings.REDIS_URL
    with FlakyEmbeddings() as server:
        model = use_flaky_provider(settings, server)
        server.name = f"openai:{model}:{server.dimensions}"
        yield server
    keys = (f"{query_breaker.KEY_PREFIX}:{server.name}:{k}" for k in ("failures", "open", "probe"))
    redis.Redis.from_url(redis_url).delete(*keys)
    QueryBreaker._local.success(server.name)


def _end_cool_down(provider) -> None:
    """The breaker is open in Redis for the cool-down (a key that expires with it); end it now instead of
    sleeping, so that "still cooling down" holds however slowly the searches before it ran."""
    client, opened = redis.Redis.from_url(settings.REDIS_URL), f"{query_breaker.KEY_PREFIX}:{provider.name}:open"
    assert 50_000 < client.pttl(opened) <= 60_000  # set with the configured cool-down
    client.delete(opened)


@pytest.fixture
def alice_with_vectors(alice, index_files, provider):
    index_files(alice, {"memory/notes.md": NOTES})  # embedded by the server, while it still answers
    provider.requests = 0
    return alice


def test_a_hanging_provider_costs_a_search_seconds_not_minutes(alice_with_vectors, provider):
    provider.behaviour = "hang"
    started = time.monotonic()
    response = memory_search(agent=alice_with_vectors.agent, query=QUERY)
    took = time.monotonic() - started
    assert took < 15, f"answered after {took:.0f} s"  # before: six tries of the 60 s indexing timeout
    assert response.mode == "keyword" and "embedding provider failed" in response.message
    assert response.results and response.results[0].path == "memory/notes.md"
    assert provider.requests == 1  # one attempt, no retries


@pytest.mark.parametrize("failure", ["429", "500"])
def test_after_repeated_failures_searches_skip_the_provider(alice_with_vectors, provider, failure):
    provider.behaviour = failure
    for _ in range(2):
        response = memory_search(agent=alice_with_vectors.agent, query=QUERY)
        assert response.mode == "keyword"
    assert provider.requests == 2  # before: 6 per search (5 retries)
    for _ in range(3):
        response = memory_search(agent=alice_with_vectors.agent, query=QUERY)
        assert response.mode == "keyword" and response.results
        assert "paused" in response.message
    assert provider.requests == 2  # the breaker is open: no more calls


def test_the_breaker_closes_after_the_provider_recovers(alice_with_vectors, provider):
    provider.behaviour = "500"
    for _ in range(2):
        memory_search(agent=alice_with_vectors.agent, query=QUERY)
    provider.behaviour = "ok"
    assert memory_search(agent=alice_with_vectors.agent, query=QUERY).mode == "keyword"  # still cooling down
    assert provider.requests == 2
    _end_cool_down(provider)
    probe = memory_search(agent=alice_with_vectors.agent, query=QUERY)  # half-open: this search probes
    assert probe.mode == "hybrid" and provider.requests == 3
    after = memory_search(agent=alice_with_vectors.agent, query="Who leads the payments team?")
    assert after.mode == "hybrid" and provider.requests == 4  # closed again


def test_a_failed_probe_opens_the_breaker_for_another_cool_down(alice_with_vectors, provider):
    provider.behaviour = "500"
    for _ in range(2):
        memory_search(agent=alice_with_vectors.agent, query=QUERY)
    _end_cool_down(provider)
    assert memory_search(agent=alice_with_vectors.agent, query=QUERY).mode == "keyword"  # the probe failed
    assert provider.requests == 3
    memory_search(agent=alice_with_vectors.agent, query=QUERY)
    assert provider.requests == 3  # open again


def test_the_breaker_state_is_shared_through_redis(alice_with_vectors, provider, settings):
    provider.behaviour = "500"
    for _ in range(2):
        memory_search(agent=alice_with_vectors.agent, query=QUERY)
    # Another web process: no local state, its own Redis connection.
    QueryBreaker._local.success(provider.name)
    QueryBreaker._redis.clear()
    response = memory_search(agent=alice_with_vectors.agent, query=QUERY)
    assert "paused" in response.message and provider.requests == 2
    assert redis.Redis.from_url(settings.REDIS_URL).exists(f"{query_breaker.KEY_PREFIX}:{provider.name}:open")


def test_without_redis_each_process_keeps_its_own_breaker(alice_with_vectors, provider, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    provider.behaviour = "500"
    started = time.monotonic()
    for _ in range(4):
        response = memory_search(agent=alice_with_vectors.agent, query=QUERY)
        assert response.mode == "keyword" and response.results
    assert provider.requests == 2 and "paused" in response.message
    assert time.monotonic() - started < 15


def test_a_long_querys_embedding_gets_the_timeout_once_per_window(alice_with_vectors, provider, settings, monkeypatch):
    """A query of several windows is several inputs to embed: its time limit is the query timeout per
    window (within the search's deadline), so its slowness is not taken for the provider failing."""
    from search import query_breaker
    from search.query_windows import query_text_windows

    limits = []
    executor = query_breaker._executor

    class Recording:
        def submit(self, fn, **kwargs):
            future = executor.submit(fn, **kwargs)

            class Limited:
                def result(self, timeout):
                    limits.append(timeout)
                    return future.result(timeout=timeout)

                def cancel(self):
                    return future.cancel()

            return Limited()

    monkeypatch.setattr(query_breaker, "_executor", Recording())
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 40
    long_query = "\n".join(f"Ben: we talked about the billing deploy {i} and the blue-green script today." for i in range(8))
    windows = len(query_text_windows(long_query))
    assert 2 < windows <= 5
    assert memory_search(agent=alice_with_vectors.agent, query=long_query).mode == "hybrid"
    assert memory_search(agent=alice_with_vectors.agent, query=QUERY).mode == "hybrid"
    assert limits[0] == pytest.approx(1.0 * windows, abs=0.01)  # 1.0 s each (the fixture's), under the 6 s deadline
    assert limits[1] == pytest.approx(1.0)
    assert provider.requests == 2
