"""Local fakes of the native embedding APIs (Gemini, Voyage, Cohere, Ollama) on 127.0.0.1.

Each speaks its API's documented request and answer shapes and checks what a real server would check
(path, key header, required fields), so a provider that sends the wrong shape fails its tests. The
vector of a text is one-hot at ``len(text) % dimensions`` (already unit length), so tests can tell
which input a vector belongs to, even after a provider normalises it.

Scripting: ``script`` is a list of (status, extra) answers consumed one per request (``extra`` may hold
``message``, ``headers``, ``dimensions``, ``raw`` (a body sent as is) and ``sleep``); ``reject`` makes
any request containing that substring answer 400 as for an over-long input.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API_KEY = "test-key"


class NativeEmbeddingServer:
    def __init__(self, api: str, *, dimensions: int = 8) -> None:
        self.api = api
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
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with server.lock:
                    server.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                    status, extra = server.script.pop(0) if server.script else (200, {})
                if extra.get("sleep"):
                    time.sleep(extra["sleep"])
                if "raw" in extra:
                    return self._send(status, extra["raw"].encode(), extra.get("headers"))
                if status == 200:
                    status, answer = server.answer(self.path, dict(self.headers), body, extra)
                else:
                    answer = server.error_body(status, extra.get("message", f"status {status}"))
                self._send(status, json.dumps(answer).encode(), extra.get("headers"))

            def _send(self, status, raw, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(raw)
                except BrokenPipeError:  # the client gave up waiting (a timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.base_url = {"gemini": f"{root}/v1beta", "voyage": f"{root}/v1", "cohere": root, "ollama": root}[api]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> "NativeEmbeddingServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- what a test reads --------------------------------------------------------------------------

    def inputs_of(self, request: dict) -> list[str]:
        return self._parse(request["path"], request["body"])[0]

    def task_of(self, request: dict) -> str:
        """"document" or "query", in the API's own words translated back."""
        return self._parse(request["path"], request["body"])[1]

    def batches(self) -> list[list[str]]:
        return [self.inputs_of(r) for r in self.requests]

    def vector(self, text: str, dims: int) -> list[float]:
        return [1.0 if k == len(text) % dims else 0.0 for k in range(dims)]

    # --- the APIs -----------------------------------------------------------------------------------

    def _parse(self, path: str, body: dict) -> tuple[list[str], str, int | None]:
        """(inputs, task, requested dimensions) of a well-formed request; ValueError otherwise."""
        if self.api == "gemini":
            match = re.fullmatch(r"/v1beta/models/([^/:]+):(embedContent|batchEmbedContents)", path)
            if not match:
                raise ValueError(f"no such method {path}")
            requests = [body] if match.group(2) == "embedContent" else body["requests"]
            if not 1 <= len(requests) <= 100:
                raise ValueError("batchEmbedContents takes 1 to 100 requests")
            tasks = {r["taskType"] for r in requests}
            for r in requests:
                if r["model"] != f"models/{match.group(1)}":
                    raise ValueError("each request's model must match the path")
            [task] = tasks
            dims = {r.get("outputDimensionality") for r in requests}.pop()
            task = {"RETRIEVAL_DOCUMENT": "document", "RETRIEVAL_QUERY": "query"}[task]
            return [r["content"]["parts"][0]["text"] for r in requests], task, dims
        if self.api == "voyage":
            if path != "/v1/embeddings" or not 1 <= len(body["input"]) <= 1000:
                raise ValueError("bad request")
            return body["input"], body["input_type"], body.get("output_dimension")
        if self.api == "cohere":
            if path != "/v2/embed" or not 1 <= len(body["texts"]) <= 96 or body["embedding_types"] != ["float"]:
                raise ValueError("bad request")
            task = {"search_document": "document", "search_query": "query"}[body["input_type"]]
            return body["texts"], task, body.get("output_dimension")
        if path != "/api/embed":
            raise ValueError("bad request")
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return inputs, "none", body.get("dimensions")

    def _authorised(self, headers: dict) -> bool:
        headers = {k.lower(): v for k, v in headers.items()}
        if self.api == "gemini":
            return headers.get("x-goog-api-key") == API_KEY
        if self.api == "ollama":
            return True
        return headers.get("authorization") == f"Bearer {API_KEY}"

    def answer(self, path: str, headers: dict, body, extra: dict) -> tuple[int, dict]:
        if not self._authorised(headers):
            return (403 if self.api == "gemini" else 401), self.error_body(401, "invalid api key")
        try:
            inputs, task, requested = self._parse(path, body)
        except (ValueError, KeyError, TypeError) as exc:
            if self.api == "ollama" and path == "/api/embed" and isinstance(body, dict) and body.get("model") == "missing":
                return 404, self.error_body(404, 'model "missing" not found, try pulling it first')
            return 400, self.error_body(400, f"invalid request: {exc}")
        if self.api == "ollama" and body.get("model") == "missing":
            return 404, self.error_body(404, 'model "missing" not found, try pulling it first')
        if self.reject and any(self.reject in text for text in inputs):
            return 400, self.error_body(400, "input too long")
        dims = extra.get("dimensions", requested or self.dimensions)
        vectors = [self.vector(text, dims) for text in inputs]
        if self.api == "gemini":
            if path.endswith(":embedContent"):
                return 200, {"embedding": {"values": vectors[0]}}
            return 200, {"embeddings": [{"values": v} for v in vectors]}
        if self.api == "voyage":
            data = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)]
            return 200, {"object": "list", "data": data[::-1], "model": body["model"], "usage": {"total_tokens": 1}}
        if self.api == "cohere":
            return 200, {"id": "x", "embeddings": {"float": vectors}, "texts": inputs,
                         "meta": {"api_version": {"version": "2"}}, "response_type": "embeddings_by_type"}
        return 200, {"model": body["model"], "embeddings": vectors, "total_duration": 1, "prompt_eval_count": 1}

    def error_body(self, status: int, message: str) -> dict:
        if self.api == "gemini":
            return {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}
        if self.api == "voyage":
            return {"detail": message}
        if self.api == "cohere":
            return {"message": message}
        return {"error": message}
