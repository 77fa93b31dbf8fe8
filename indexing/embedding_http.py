"""Native embedding APIs over plain HTTP (the standard library's urllib, no SDK): gemini, voyage, cohere
and ollama, behind the interface of indexing/embeddings.py.

Each speaks its own documented shape and says the document/query side where the API has one (Gemini
task types, Voyage and Cohere input types): a query vector and the document vectors of one index come
from the same model with the matching task. What they share is here, in ``HTTPEmbeddingProvider``:

- requests of at most the API's input count (Gemini 100, Voyage 1,000, Cohere 96) and
  ``batch_tokens`` cl100k tokens, inputs cut to the model's window first (BatchingProvider);
- each request bounded by ``timeout`` and retried on 408/409/429, 5xx, timeouts, connection errors and
  malformed answers with jittered backoff (honouring Retry-After), then ``ProviderTransientError``;
- 401/403/404 (and every other 4xx: a key, a model or an URL that is wrong) ``ProviderPermanentError``
  at once; 400/413/422 bisect the batch so one bad input never costs the rest (``ProviderInputsRejected``);
- ``embed_query`` makes one attempt of at most ``query_timeout`` seconds: a search is waiting, and the
  search falls back to keywords (search/query_breaker.py).
"""

from __future__ import annotations

import json
import logging
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import (
    BatchingProvider,
    ProviderPermanentError,
    ProviderTransientError,
    RetryPolicy,
    Vector,
    _MalformedAnswer,
    _RejectedRequest,
)

logger = logging.getLogger(__name__)

_TRANSIENT_STATUSES = {408, 409, 429}
_REJECTED_INPUT_STATUSES = {400, 413, 422}

# The most inputs one request may hold, per API (their documented limits).
GEMINI_MAX_BATCH = 100
VOYAGE_MAX_BATCH = 1000
COHERE_MAX_BATCH = 96


class _HTTPStatus(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class HTTPEmbeddingProvider(BatchingProvider):
    """One native embedding API; subclasses say where to POST and how the bodies look."""

    name = ""

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
        query_timeout: float = 2.5,
        send_dimensions: str = "auto",
    ) -> None:
        self.identity = identity
        self.api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = timeout
        self.batch_size = min(batch_size, self.max_batch)
        self.batch_tokens = batch_tokens
        self.max_input_tokens = max_input_tokens
        self.retry = retry
        self.query_timeout = query_timeout
        self.send_dimensions = send_dimensions

    default_base_url = ""
    max_batch = 2048

    # --- what each API defines --------------------------------------------------------------------

    def _url(self, *, count: int, query: bool) -> str:
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _body(self, inputs: list[str], *, query: bool) -> dict:
        raise NotImplementedError

    def _vectors(self, answer: dict, count: int, *, query: bool) -> list[Vector]:
        """The vectors of a 200 answer in input order (KeyError/TypeError/... mean a malformed answer)."""
        raise NotImplementedError

    def _wants_dimensions(self, native: dict[str, int]) -> bool:
        """Send the configured size for ``always``, or for ``auto`` when the model is known to shorten
        its vectors and the configured size differs from its native one."""
        if self.send_dimensions == "always":
            return True
        model_native = native.get(self.identity.model)
        return self.send_dimensions == "auto" and model_native is not None and model_native != self.identity.dimensions

    # --- the shared part --------------------------------------------------------------------------

    def embed_query(self, text: str) -> Vector:
        inputs, _ = self._prepared([text])
        try:
            return self._request(inputs, query=True, timeout=self.query_timeout, retry=RetryPolicy(max_retries=0))[0]
        except _RejectedRequest as exc:
            raise ProviderPermanentError(f"the query embedding was rejected: {exc}") from None

    def embed_query_windows(self, texts: list[str]) -> list[Vector]:
        """One request for the windows of a long query, allowed ``query_timeout`` per window."""
        inputs, _ = self._prepared(texts)
        try:
            timeout = self.query_timeout * len(inputs)
            return self._request(inputs, query=True, timeout=timeout, retry=RetryPolicy(max_retries=0))
        except _RejectedRequest as exc:
            raise ProviderPermanentError(f"the query embedding was rejected: {exc}") from None

    def _request(
        self, inputs: list[str], *, query: bool = False, timeout: float | None = None, retry: RetryPolicy | None = None
    ) -> list[Vector]:
        retry = retry or self.retry
        url = self._url(count=len(inputs), query=query)
        data = json.dumps(self._body(inputs, query=query)).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self._headers()}
        for attempt in range(retry.max_retries + 1):
            retry_after = status = None
            try:
                answer = self._post(url, data, headers, timeout or self.timeout)
                vectors = self._vectors(answer, len(inputs), query=query)
                if len(vectors) != len(inputs):
                    raise _MalformedAnswer(f"{len(vectors)} vectors for {len(inputs)} inputs")
                vectors = self._validated([[float(value) for value in vector] for vector in vectors])
                break
            except _HTTPStatus as exc:
                status = exc.status
                message = f"HTTP {status} from the {self.name} embedding endpoint: {exc}"
                if status in _REJECTED_INPUT_STATUSES:
                    raise _RejectedRequest(message) from None
                if status not in _TRANSIENT_STATUSES and status < 500:
                    raise ProviderPermanentError(message) from None
                retry_after = exc.retry_after
            except (TimeoutError, socket.timeout):
                message = f"the {self.name} embedding request timed out"
            except (urllib.error.URLError, ConnectionError, OSError) as exc:
                message = f"cannot reach the {self.name} embedding endpoint {self.base_url}: {exc}"
            except ProviderPermanentError as exc:  # vectors of another size than configured
                if retry.gives_up(attempt, status):
                    raise
                message = str(exc)
            except (_MalformedAnswer, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
                message = f"malformed answer from the {self.name} embedding endpoint: {exc.__class__.__name__}: {exc}"
            if retry.gives_up(attempt, status):
                raise ProviderTransientError(f"{message} (after {attempt + 1} attempts)")
            delay = retry.delay(attempt, retry_after)
            logger.info("%s embedding request failed (%s); retry %d in %.2fs", self.name, message, attempt + 1, delay)
            time.sleep(delay)
        return vectors

    @staticmethod
    def _post(url: str, data: bytes, headers: dict[str, str], timeout: float) -> dict:
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                raw = exc.read()
            raise _HTTPStatus(exc.code, _error_message(raw) or exc.reason or "", _retry_after(exc.headers)) from None
        answer = json.loads(body)
        if not isinstance(answer, dict):
            raise _MalformedAnswer(f"a JSON {type(answer).__name__} instead of an object")
        return answer


def _error_message(raw: bytes) -> str:
    """The message of an error body in any of the four APIs' shapes: Gemini ``{"error": {"message"}}``,
    Ollama ``{"error": "..."}``, Cohere ``{"message"}``, Voyage ``{"detail"}``."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", "replace").strip()
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for value in (error, body.get("message"), body.get("detail")):
            if value:
                return str(value)[:500]
    return str(body)[:200]


def _retry_after(headers) -> float | None:
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except ValueError:  # an HTTP date: the backoff applies
        return None


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(float(v) * float(v) for v in vector))
    return [float(v) / norm for v in vector] if norm else vector


# --- gemini ----------------------------------------------------------------------------------------

GEMINI_NATIVE_DIMENSIONS = {"gemini-embedding-001": 3072, "text-embedding-004": 768}


class GeminiProvider(HTTPEmbeddingProvider):
    """Google's Gemini API: ``models/{model}:batchEmbedContents`` for documents (task type
    RETRIEVAL_DOCUMENT, up to 100 per request), ``models/{model}:embedContent`` for one query
    (RETRIEVAL_QUERY); key in the ``x-goog-api-key`` header. gemini-embedding-001 is trained to be
    shortened (768 / 1536 / 3072): ``outputDimensionality`` asks for the configured size, and the
    shortened vectors, which Gemini does not normalise, are normalised here."""

    name = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    max_batch = GEMINI_MAX_BATCH

    def _model_path(self) -> str:
        model = self.identity.model
        return model if model.startswith("models/") else f"models/{model}"

    def _url(self, *, count: int, query: bool) -> str:
        method = "embedContent" if query and count == 1 else "batchEmbedContents"
        return f"{self.base_url}/{urllib.parse.quote(self._model_path())}:{method}"

    def _headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self.api_key} if self.api_key else {}

    def _one(self, text: str, *, query: bool) -> dict:
        request = {
            "model": self._model_path(),
            "content": {"parts": [{"text": text}]},
            "taskType": "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT",
        }
        if self._wants_dimensions(GEMINI_NATIVE_DIMENSIONS):
            request["outputDimensionality"] = self.identity.dimensions
        return request

    def _body(self, inputs: list[str], *, query: bool) -> dict:
        if query and len(inputs) == 1:
            return self._one(inputs[0], query=True)
        return {"requests": [self._one(text, query=query) for text in inputs]}

    def _vectors(self, answer: dict, count: int, *, query: bool) -> list[Vector]:
        if query and count == 1:
            embeddings = [answer["embedding"]]
        else:
            embeddings = answer["embeddings"]
        return [_normalised(item["values"]) for item in embeddings]


# --- voyage ----------------------------------------------------------------------------------------

VOYAGE_NATIVE_DIMENSIONS = {
    "voyage-3.5": 1024, "voyage-3.5-lite": 1024, "voyage-3-large": 1024, "voyage-code-3": 1024,
    "voyage-4": 1024, "voyage-4-lite": 1024, "voyage-4-large": 1024,
}


class VoyageProvider(HTTPEmbeddingProvider):
    """Voyage AI's ``POST /v1/embeddings``: ``input_type`` document or query, up to 1,000 inputs a
    request (and 120k-1M tokens by model: MEMORYHUB_EMBEDDING_BATCH_TOKENS stays under the smallest),
    ``output_dimension`` for the models that offer 256/512/1024/2048."""

    name = "voyage"
    default_base_url = "https://api.voyageai.com/v1"
    max_batch = VOYAGE_MAX_BATCH

    def _url(self, *, count: int, query: bool) -> str:
        return f"{self.base_url}/embeddings"

    def _body(self, inputs: list[str], *, query: bool) -> dict:
        body = {"input": inputs, "model": self.identity.model, "input_type": "query" if query else "document",
                "truncation": True}
        if self._wants_dimensions(VOYAGE_NATIVE_DIMENSIONS):
            body["output_dimension"] = self.identity.dimensions
        return body

    def _vectors(self, answer: dict, count: int, *, query: bool) -> list[Vector]:
        data = sorted(answer["data"], key=lambda item: item["index"])
        if [item["index"] for item in data] != list(range(count)):
            raise _MalformedAnswer(f"{len(data)} vectors for {count} inputs")
        return [item["embedding"] for item in data]


# --- cohere ----------------------------------------------------------------------------------------

COHERE_NATIVE_DIMENSIONS = {"embed-v4.0": 1536}


class CohereProvider(HTTPEmbeddingProvider):
    """Cohere's Embed v2, ``POST /v2/embed``: ``input_type`` search_document or search_query, float
    embeddings, up to 96 texts a request, ``output_dimension`` for embed-v4.0 (256/512/1024/1536)."""

    name = "cohere"
    default_base_url = "https://api.cohere.com"
    max_batch = COHERE_MAX_BATCH

    def _url(self, *, count: int, query: bool) -> str:
        return f"{self.base_url}/v2/embed"

    def _body(self, inputs: list[str], *, query: bool) -> dict:
        body = {"model": self.identity.model, "texts": inputs,
                "input_type": "search_query" if query else "search_document",
                "embedding_types": ["float"], "truncate": "END"}
        if self._wants_dimensions(COHERE_NATIVE_DIMENSIONS):
            body["output_dimension"] = self.identity.dimensions
        return body

    def _vectors(self, answer: dict, count: int, *, query: bool) -> list[Vector]:
        return answer["embeddings"]["float"]


# --- ollama ----------------------------------------------------------------------------------------


class OllamaProvider(HTTPEmbeddingProvider):
    """A local Ollama server's ``POST /api/embed`` (a list of inputs, ``truncate`` on: Ollama cuts what
    exceeds the model's context). No key. Ollama has no document/query distinction in the API; a 404
    means the model is not pulled (``ollama pull <model>``), which retrying does not fix."""

    name = "ollama"
    default_base_url = "http://127.0.0.1:11434"

    def _url(self, *, count: int, query: bool) -> str:
        return f"{self.base_url}/api/embed"

    def _body(self, inputs: list[str], *, query: bool) -> dict:
        body = {"model": self.identity.model, "input": inputs, "truncate": True}
        if self.send_dimensions == "always":
            body["dimensions"] = self.identity.dimensions
        return body

    def _vectors(self, answer: dict, count: int, *, query: bool) -> list[Vector]:
        return answer["embeddings"]


HTTP_PROVIDERS: dict[str, type[HTTPEmbeddingProvider]] = {
    "gemini": GeminiProvider,
    "voyage": VoyageProvider,
    "cohere": CohereProvider,
    "ollama": OllamaProvider,
}
