"""python manage.py serve_embeddings — an OpenAI-compatible embeddings endpoint for benchmarks.

Serves ``POST /v1/embeddings`` (OpenAI's request and answer shapes) from a model in this process, so
that MemoryHub's `openai` provider can be measured the way deployments reach a self-hosted model
(TEI, vLLM, Infinity, LocalAI...): through ``OPENAI_BASE_URL``. With the local all-MiniLM-L6-v2
(``make install-local``) it is the configuration the search-quality targets are judged in:

    HF_HUB_OFFLINE=1 python manage.py serve_embeddings --port 8089 &
    MEMORYHUB_EMBEDDING_PROVIDER=openai OPENAI_BASE_URL=http://127.0.0.1:8089/v1 OPENAI_API_KEY=unused \\
        MEMORYHUB_EMBEDDING_MODEL=all-MiniLM-L6-v2 python manage.py bench_search

Like such servers it truncates each input to the model's window (sentence-transformers' max_seq_length)
instead of refusing it, and it answers the model name it was asked for. ``--provider fake`` serves the
test suite's deterministic vectors (no model needed). One request is encoded at a time.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.core.management.base import BaseCommand, CommandError

from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import FakeProvider, LocalProvider

MAX_BODY = 32 * 1024 * 1024


def embedding_server(*, provider: str, model: str, dimensions: int, host: str = "127.0.0.1", port: int = 0):
    """A ThreadingHTTPServer (not started) serving /v1/embeddings from ``provider`` ("local" or "fake")."""
    identity = EmbeddingIdentity(provider=provider, model=model, dimensions=dimensions)
    embedder = LocalProvider(identity) if provider == "local" else FakeProvider(identity)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet: a benchmark sends thousands of requests
            pass

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._answer(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_POST(self):
            if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                return self._error(404, f"no route {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                return self._error(413, "request too large")
            try:
                request = json.loads(self.rfile.read(length))
                texts = request["input"]
            except (ValueError, KeyError, TypeError):
                return self._error(400, "body must be JSON with an `input`")
            texts = [texts] if isinstance(texts, str) else texts
            if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
                return self._error(400, "`input` must be a string or a non-empty list of strings")
            with lock:
                vectors = embedder.embed_documents(texts)
            self._answer(200, {
                "object": "list",
                "model": request.get("model") or model,
                "data": [{"object": "embedding", "index": i, "embedding": list(map(float, v))} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            })

    return ThreadingHTTPServer((host, port), Handler)


class Command(BaseCommand):
    help = "Serve an OpenAI-compatible /v1/embeddings endpoint from the local model (or the fake one)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8089, help="0: any free port (printed)")
        parser.add_argument("--provider", choices=["local", "fake"], default="local")
        parser.add_argument("--model", default="all-MiniLM-L6-v2", help="the model the local provider loads")
        parser.add_argument("--dimensions", type=int, default=384)

    def handle(self, *args, **options):
        try:
            server = embedding_server(
                provider=options["provider"], model=options["model"], dimensions=options["dimensions"],
                host=options["host"], port=options["port"],
            )
        except OSError as exc:
            raise CommandError(f"cannot listen on {options['host']}:{options['port']}: {exc}") from None
        host, port = server.server_address[:2]
        self.stdout.write(f"serving {options['provider']} {options['model']} on http://{host}:{port}/v1", ending="\n")
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
