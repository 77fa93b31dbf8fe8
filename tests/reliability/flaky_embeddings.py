"""A local OpenAI-compatible ``POST /v1/embeddings`` server that can be told to misbehave, for tests
that drive the real ``openai`` SDK (through indexing.embeddings.OpenAIProvider) against it.

Each request takes the next behaviour from ``script`` or, when it is empty, ``behaviour``:
``ok`` (one deterministic unit vector per input, from the fake provider's bag of words, so texts that
share words are close), ``hang`` (no answer until the server is stopped, or until ``release()``: then the
request is answered ``ok``), an HTTP status (``429``,
``500``), or a malformed 200: ``truncated`` (JSON cut off), ``html`` (a proxy's error page),
``no_data``, ``one_vector_short`` (a vector fewer than inputs), ``nan`` and ``wrong_size`` (the first
vector one value too long).

``swapped`` stands for another model served under the same name: every vector comes out reversed, so
it has nothing in common with the one the same text had before.

``words`` makes the model read only the first ``words`` words of each input (a model's window, cut without a
word, as sentence-transformers servers do), or with ``refuse_longer`` answer 413 for a longer input, as
servers that do not truncate do.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import FakeProvider

DIMENSIONS = 8
MALFORMED = ("truncated", "html", "no_data", "one_vector_short", "nan", "wrong_size")


class FlakyEmbeddings:
    def __init__(self, dimensions: int = DIMENSIONS) -> None:
        self.dimensions = dimensions
        self.behaviour = "ok"
        self.script: list[str] = []
        self.requests = 0
        self.words: int | None = None
        self.refuse_longer = False
        self.swapped = False
        self.texts = 0  # inputs answered
        self.stopping = threading.Event()
        self.released = threading.Event()
        self.hanging = 0  # requests waiting in a hang right now
        self.lock = threading.Lock()
        self.vectors = FakeProvider(EmbeddingIdentity(provider="fake", model="flaky", dimensions=dimensions))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                    behaviour = server.script.pop(0) if server.script else server.behaviour
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if behaviour == "hang":
                    with server.lock:
                        server.hanging += 1
                    deadline = time.monotonic() + 600
                    while not server.stopping.is_set() and not server.released.is_set() and time.monotonic() < deadline:
                        server.released.wait(0.05)
                    with server.lock:
                        server.hanging -= 1
                    if not server.released.is_set():
                        return
                    behaviour = "ok"
                if behaviour.isdigit():
                    self._send(int(behaviour), json.dumps({"error": {"message": f"status {behaviour}", "type": "x"}}))
                    return
                if server.words is not None:
                    if server.refuse_longer and any(len(text.split()) > server.words for text in inputs):
                        self._send(413, json.dumps({"error": {"message": "input too long", "type": "x"}}))
                        return
                    inputs = [" ".join(text.split()[: server.words]) for text in inputs]
                vectors = [server.vectors._vector(text) for text in inputs]
                if server.swapped:
                    vectors = [vector[::-1] for vector in vectors]
                with server.lock:
                    server.texts += len(inputs)
                if behaviour == "one_vector_short":
                    vectors = vectors[:-1]
                elif behaviour == "nan":
                    vectors[0][0] = float("nan")
                elif behaviour == "wrong_size":
                    vectors[0] = vectors[0] + [0.0]
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                answer = json.dumps({"object": "list", "data": data, "model": body["model"],
                                     "usage": {"prompt_tokens": 1, "total_tokens": 1}})
                if behaviour == "truncated":
                    answer = answer[: len(answer) // 2]
                elif behaviour == "html":
                    answer = "<html><body>502 Bad Gateway</body></html>"
                elif behaviour == "no_data":
                    answer = json.dumps({"object": "list"})
                self._send(200, answer)

            def _send(self, status: int, raw: str) -> None:
                payload = raw.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client is gone (a killed worker's request, released later)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def release(self) -> None:
        """Answer the hanging requests (``ok``) and stop hanging."""
        with self.lock:
            self.behaviour = "ok"
            self.script = [b for b in self.script if b != "hang"]
        self.released.set()

    def __enter__(self) -> FlakyEmbeddings:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def use_flaky_provider(settings, server: FlakyEmbeddings) -> str:
    """Point the configured openai provider at ``server``, under a model name of this test's own (so no
    cached provider, query vector or breaker state of another test applies). Returns the model."""
    model = f"flaky-{uuid.uuid4().hex[:8]}"
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "openai"
    settings.MEMORYHUB_EMBEDDING_MODEL = model
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = server.dimensions
    settings.OPENAI_BASE_URL = server.base_url
    settings.OPENAI_API_KEY = "sk-test"
    settings.MEMORYHUB_EMBEDDING_RETRY_BASE_DELAY = 0.001
    settings.MEMORYHUB_EMBEDDING_RETRY_MAX_DELAY = 0.01
    return model
