"""The shared provider suite: gemini, voyage, cohere and ollama, each against a local server that speaks
its API (tests/indexing/native_embedding_servers.py). No network."""

import time

import pytest
from django.test import override_settings

from indexing.chunking import count_tokens
from indexing.embedding_http import CohereProvider, GeminiProvider, OllamaProvider, VoyageProvider
from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import (
    ProviderInputsRejected,
    ProviderPermanentError,
    ProviderTransientError,
    RetryPolicy,
    get_provider,
)
from tests.indexing.native_embedding_servers import API_KEY, NativeEmbeddingServer

FAST_RETRIES = RetryPolicy(max_retries=3, base_delay=0.001, max_delay=0.01)
PROVIDERS = {"gemini": GeminiProvider, "voyage": VoyageProvider, "cohere": CohereProvider, "ollama": OllamaProvider}
MODELS = {"gemini": "gemini-embedding-001", "voyage": "voyage-3.5", "cohere": "embed-v4.0", "ollama": "nomic-embed-text"}
API_MAX_BATCH = {"gemini": 100, "voyage": 1000, "cohere": 96}


@pytest.fixture(params=sorted(PROVIDERS))
def api(request):
    return request.param


@pytest.fixture
def server(api):
    server = NativeEmbeddingServer(api).start()
    yield server
    server.stop()


def provider_for(server, *, dimensions=8, model=None, api_key=API_KEY, **options):
    options.setdefault("retry", FAST_RETRIES)
    return PROVIDERS[server.api](
        EmbeddingIdentity(provider=server.api, model=model or MODELS[server.api], dimensions=dimensions),
        api_key=api_key,
        base_url=server.base_url,
        timeout=5,
        **options,
    )


def hot(vector) -> int:
    return max(range(len(vector)), key=vector.__getitem__)


def test_it_embeds_documents_in_input_order_as_documents(server):
    vectors = provider_for(server).embed_documents(["a", "bbb", "cc"])
    assert [hot(v) for v in vectors] == [1, 3, 2]
    assert all(len(v) == 8 for v in vectors)
    [request] = server.requests
    assert server.inputs_of(request) == ["a", "bbb", "cc"]
    assert server.task_of(request) in {"document", "none"}  # ollama's API has no document/query side


def test_a_query_is_embedded_as_a_query(server):
    vector = provider_for(server).embed_query("hello")
    assert hot(vector) == 5 and len(vector) == 8
    [request] = server.requests
    assert server.task_of(request) in {"query", "none"}
    if server.api == "gemini":
        assert request["path"].endswith(":embedContent")  # one query: the single-input method


def test_query_windows_go_in_one_request(server):
    vectors = provider_for(server).embed_query_windows(["first window", "second one"])
    assert [hot(v) for v in vectors] == [12 % 8, 10 % 8]
    assert len(server.requests) == 1 and server.task_of(server.requests[0]) in {"query", "none"}


def test_batches_respect_the_apis_input_limit(server):
    provider = provider_for(server, batch_size=2048)
    limit = API_MAX_BATCH.get(server.api)
    assert provider.batch_size == (limit or 2048)
    provider = provider_for(server, batch_size=3)
    texts = [f"text {i}" for i in range(7)]
    assert len(provider.embed_documents(texts)) == 7
    assert [len(b) for b in server.batches()] == [3, 3, 1]
    assert sum(server.batches(), []) == texts


def test_batches_respect_the_token_budget_and_inputs_are_cut_to_the_window(server):
    texts = ["word " * 50, "word " * 50, "word " * 50, "short"]
    provider_for(server, batch_tokens=120).embed_documents(texts)
    assert [len(b) for b in server.batches()] == [2, 2]
    server.requests.clear()
    provider_for(server, max_input_tokens=10).embed_documents(["one two three four five six seven eight nine ten eleven"])
    [[sent]] = server.batches()
    assert count_tokens(sent) == 10 and sent.startswith("one two")


def test_a_429_and_a_503_are_retried(server):
    server.script = [(429, {"message": "quota"}), (503, {}), (200, {})]
    assert len(provider_for(server).embed_documents(["hello"])) == 1
    assert len(server.requests) == 3


def test_retry_after_is_honoured(server, monkeypatch):
    import indexing.embedding_http as embedding_http

    slept = []
    monkeypatch.setattr(embedding_http.time, "sleep", slept.append)
    server.script = [(429, {"headers": {"Retry-After": "0.3"}}), (200, {})]
    provider_for(server, retry=RetryPolicy(max_retries=2, base_delay=0.001, max_delay=1.0)).embed_documents(["x"])
    assert slept == [pytest.approx(0.3)]


def test_a_lasting_500_gives_up_after_bounded_attempts_as_transient(server):
    server.script = [(500, {"message": "internal boom"})] * 10
    with pytest.raises(ProviderTransientError, match=r"HTTP 500.*internal boom.*after 4 attempts"):
        provider_for(server).embed_documents(["hello"])
    assert len(server.requests) == 4


def test_a_bad_key_is_permanent_and_not_retried(server):
    if server.api == "ollama":
        pytest.skip("ollama takes no key")
    with pytest.raises(ProviderPermanentError, match=r"HTTP 40[13].*invalid api key"):
        provider_for(server, api_key="wrong").embed_documents(["hello"])
    assert len(server.requests) == 1


def test_a_404_is_permanent(server):
    server.script = [(404, {"message": "model not found"})]
    with pytest.raises(ProviderPermanentError, match="HTTP 404.*model not found"):
        provider_for(server).embed_documents(["hello"])
    assert len(server.requests) == 1


def test_a_bad_input_does_not_lose_the_rest_of_its_batch(server):
    server.reject = "POISON"
    texts = [f"good text {i}" for i in range(7)] + ["POISON " * 5] + ["good tail"]
    with pytest.raises(ProviderInputsRejected) as excinfo:
        provider_for(server).embed_documents(texts)
    assert list(excinfo.value.rejected) == [7] and "input too long" in excinfo.value.rejected[7]
    assert all(v is not None for i, v in enumerate(excinfo.value.vectors) if i != 7)


def test_a_request_rejected_for_every_input_is_permanent(server):
    server.reject = " "  # every input has a space
    with pytest.raises(ProviderPermanentError) as excinfo:
        provider_for(server).embed_documents(["one a", "two b", "three c"])
    assert not isinstance(excinfo.value, ProviderInputsRejected)


def test_vectors_of_the_wrong_size_are_a_permanent_error(server):
    server.script = [(200, {"dimensions": 5})] * (FAST_RETRIES.max_retries + 1)
    with pytest.raises(ProviderPermanentError, match="returned 5-dimensional vectors.*is 8"):
        provider_for(server).embed_documents(["hello"])


@pytest.mark.parametrize("raw", ['{"embeddings": [', "[1, 2]", '{"unexpected": true}'])
def test_a_malformed_answer_is_retried_then_transient(server, raw):
    server.script = [(200, {"raw": raw})] * 10
    with pytest.raises(ProviderTransientError, match="malformed answer"):
        provider_for(server).embed_documents(["hello"])
    assert len(server.requests) == 4
    server.script = [(200, {"raw": raw}), (200, {})]
    assert len(provider_for(server).embed_documents(["hello"])) == 1


def test_a_query_gets_one_short_attempt(server):
    server.script = [(200, {"sleep": 3.0})]
    started = time.monotonic()
    with pytest.raises(ProviderTransientError, match="timed out"):
        provider_for(server, query_timeout=0.3).embed_query("hello")
    assert time.monotonic() - started < 2.0  # the 0.3 s attempt, with room for a loaded machine; not the 3 s answer
    assert len(server.requests) == 1


def test_the_windows_of_a_long_query_get_the_query_timeout_per_window(server):
    server.script = [(200, {"sleep": 0.6})]  # under one window's 0.25 s this timed out
    vectors = provider_for(server, query_timeout=0.25).embed_query_windows([f"window {i}" for i in range(8)])
    assert len(vectors) == 8 and len(server.requests) == 1


def test_an_unreachable_server_is_transient(api):
    provider = PROVIDERS[api](
        EmbeddingIdentity(provider=api, model=MODELS[api], dimensions=8),
        api_key=API_KEY, base_url="http://127.0.0.1:9", timeout=2,
        retry=RetryPolicy(max_retries=1, base_delay=0.001, max_delay=0.001),
    )
    with pytest.raises(ProviderTransientError, match="cannot reach"):
        provider.embed_documents(["hello"])


def test_get_provider_builds_it_from_the_settings(server):
    api = server.api
    key_settings = {"gemini": "GEMINI_API_KEY", "voyage": "VOYAGE_API_KEY", "cohere": "COHERE_API_KEY"}
    overrides = {f"{api.upper()}_BASE_URL": server.base_url}
    if api in key_settings:
        overrides[key_settings[api]] = API_KEY
    with override_settings(
        MEMORYHUB_EMBEDDING_PROVIDER=api, MEMORYHUB_EMBEDDING_MODEL=MODELS[api], MEMORYHUB_EMBEDDING_DIMENSIONS=8,
        MEMORYHUB_EMBEDDING_MAX_RETRIES=0, **overrides,
    ):
        provider = get_provider()
        assert isinstance(provider, PROVIDERS[api]) and get_provider() is provider
        assert provider.identity == EmbeddingIdentity(api, MODELS[api], 8)
        assert len(provider.embed_documents(["from settings"])) == 1


# --- what only one API has ----------------------------------------------------------------------------


def test_gemini_asks_for_the_configured_size_and_normalises():
    server = NativeEmbeddingServer("gemini").start()
    try:
        server.script = [(200, {"raw": '{"embeddings": [{"values": [3.0, 4.0]}]}'})]
        [vector] = provider_for(server, dimensions=2).embed_documents(["x"])
        assert vector == [pytest.approx(0.6), pytest.approx(0.8)]
        body = server.requests[0]["body"]
        assert body["requests"][0]["outputDimensionality"] == 2  # 2 differs from the native 3072
        assert {k.lower(): v for k, v in server.requests[0]["headers"].items()}["x-goog-api-key"] == API_KEY
        assert "key=" not in server.requests[0]["path"]  # never the key in the URL (it would be logged)
    finally:
        server.stop()


def test_voyage_and_cohere_send_dimensions_only_when_they_differ_from_the_native_size():
    for api, native in (("voyage", 1024), ("cohere", 1536)):
        server = NativeEmbeddingServer(api).start()
        try:
            server.script = [(200, {"dimensions": native})]
            provider_for(server, dimensions=native).embed_documents(["x"])
            provider_for(server, dimensions=8).embed_documents(["x"])
            provider_for(server, dimensions=8, model="some-other-model").embed_documents(["x"])
            field = {"voyage": "output_dimension", "cohere": "output_dimension"}[api]
            assert [r["body"].get(field) for r in server.requests] == [None, 8, None]
        finally:
            server.stop()


def test_ollama_says_a_missing_model_must_be_pulled():
    server = NativeEmbeddingServer("ollama").start()
    try:
        with pytest.raises(ProviderPermanentError, match="try pulling it first"):
            provider_for(server, model="missing").embed_documents(["x"])
        assert len(server.requests) == 1
    finally:
        server.stop()
