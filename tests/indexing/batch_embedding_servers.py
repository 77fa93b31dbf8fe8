"""Local fakes of the asynchronous batch embedding APIs on 127.0.0.1: OpenAI's Batch API and Gemini's
batch mode, with the synchronous endpoints next to them (so a test can prove they were not called, or
that a fallback used them).

OpenAI (``api="openai"``, base URL ``.../v1``): ``POST /v1/files`` (multipart, purpose ``batch``, a JSONL
file of ``{custom_id, method, url, body}`` lines), ``POST /v1/batches`` (``input_file_id``, endpoint
``/v1/embeddings``, completion_window ``24h``), ``GET /v1/batches/{id}``, ``GET /v1/files/{id}/content``
(the output and error files: ``{id, custom_id, response: {status_code, request_id, body}, error}``
lines), and the synchronous ``POST /v1/embeddings``.

Gemini (``api="gemini"``, base URL ``.../v1beta``): ``POST /v1beta/models/{model}:asyncBatchEmbedContent``
(``{batch: {model, displayName, inputConfig: {requests: {requests: [{request, metadata}]}}}}``) answers
an operation named ``batches/{id}``; ``GET /v1beta/batches/{id}`` answers it with ``metadata.state``
and, once done, ``response.inlinedResponses.inlinedResponses``; the synchronous
``:batchEmbedContents`` is served too.

Batches stay in progress until the test moves them: ``complete(id)``, ``expire(id, keep=n)`` (only the
first n requests answered), ``fail(id, message)``; ``auto_complete=True`` completes each one the first
time it is polled; ``hold_downloads()`` makes result downloads wait. The vector of a text is the fake provider's (deterministic, unit length, words close).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from email.parser import BytesParser
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from indexing.embedding_identity import EmbeddingIdentity
from indexing.embeddings import FakeProvider

API_KEY = "test-key"


class BatchEmbeddingServer:
    def __init__(self, api: str, *, dimensions: int = 16, auto_complete: bool = False) -> None:
        self.api = api
        self.dimensions = dimensions
        self.auto_complete = auto_complete
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}  # id → {"requests": [(key, text, dims)], "state": ..., ...}
        self.sync_inputs: list[str] = []  # texts embedded through the synchronous endpoint
        self.submitted_inputs: list[str] = []  # texts sent in batches
        self.polls = 0
        self.cancelled: list[str] = []  # batch ids a cancel was asked for
        self.cancel_failures = 0  # the next n cancels answer 500
        self.cancels_arrived = 0  # cancel requests received, answered or not
        # hold_cancels(): a cancel waits unanswered (the lock not taken) until release_cancels().
        self.cancels_held: threading.Event | None = None
        self.poll_failures = 0  # the next n polls answer 503
        # hold_downloads(): result downloads wait until release_downloads(); downloads_waiting is set
        # when one is held (a test kills the worker collecting a batch there).
        self.downloads_held: threading.Event | None = None
        self.downloads_waiting = threading.Event()
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if server.downloads_held is not None and "/content" in self.path:
                    server.downloads_waiting.set()
                    server.downloads_held.wait(timeout=120)
                with server.lock:
                    status, answer = server.get(self.path, dict(self.headers))
                self._send(status, answer)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path.endswith("cancel"):
                    with server.lock:
                        server.cancels_arrived += 1
                    if server.cancels_held is not None:
                        server.cancels_held.wait(timeout=120)
                with server.lock:
                    status, answer = server.post(self.path, dict(self.headers), raw)
                self._send(status, answer)

            def _send(self, status, answer):
                raw = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if not isinstance(answer, bytes) else "application/octet-stream")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                try:
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):  # the client died waiting (a killed worker)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.base_url = f"{root}/v1" if api == "openai" else f"{root}/v1beta"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> "BatchEmbeddingServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release_cancels()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- what a test does -----------------------------------------------------------------------------

    def vector(self, text: str, dims: int) -> list[float]:
        return FakeProvider(EmbeddingIdentity("fake", "fake-hash", dims))._vector(text)

    def hold_cancels(self) -> None:
        self.cancels_held = threading.Event()

    def release_cancels(self) -> None:
        if self.cancels_held is not None:
            self.cancels_held.set()

    def complete(self, batch_id: str | None = None) -> None:
        with self.lock:
            for key in [batch_id] if batch_id else list(self.batches):
                if self.batches[key]["state"] == "in_progress":
                    self._finish(key, "completed", keep=None)

    def hold_downloads(self) -> None:
        self.downloads_held = threading.Event()

    def release_downloads(self) -> None:
        held, self.downloads_held = self.downloads_held, None
        if held is not None:
            held.set()

    def expire(self, batch_id: str, *, keep: int) -> None:
        with self.lock:
            self._finish(batch_id, "expired", keep=keep)

    def fail(self, batch_id: str, message: str = "the batch could not be processed") -> None:
        with self.lock:
            self._finish(batch_id, "failed", keep=0, message=message)

    # --- OpenAI ---------------------------------------------------------------------------------------

    def _authorised(self, headers: dict) -> bool:
        headers = {k.lower(): v for k, v in headers.items()}
        if self.api == "gemini":
            return headers.get("x-goog-api-key") == API_KEY
        return headers.get("authorization") == f"Bearer {API_KEY}"

    def post(self, path: str, headers: dict, raw: bytes):
        if not self._authorised(headers):
            return 401, self._error("invalid api key")
        cancel = re.fullmatch(r"/v1/batches/([\w-]+)/cancel" if self.api == "openai" else r"/v1beta/(batches/[\w-]+):cancel", path)
        if cancel:
            return self._cancel(cancel.group(1))
        try:
            if self.api == "openai":
                if path == "/v1/files":
                    return self._openai_upload(headers, raw)
                if path == "/v1/batches":
                    return self._openai_batch_create(json.loads(raw))
                if path == "/v1/embeddings":
                    return self._openai_embeddings(json.loads(raw))
            else:
                match = re.fullmatch(r"/v1beta/models/([^/:]+):(asyncBatchEmbedContent|batchEmbedContents)", path)
                if match and match.group(2) == "asyncBatchEmbedContent":
                    return self._gemini_batch_create(match.group(1), json.loads(raw))
                if match:
                    return self._gemini_embed(json.loads(raw))
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            return 400, self._error(f"invalid request: {exc.__class__.__name__}: {exc}")
        return 404, self._error(f"no route {path}")

    def get(self, path: str, headers: dict):
        if not self._authorised(headers):
            return 401, self._error("invalid api key")
        if self.poll_failures and "batches/" in path:
            self.poll_failures -= 1
            return 503, self._error("the service is overloaded")
        if self.api == "openai":
            match = re.fullmatch(r"/v1/batches/([\w-]+)", path)
            if match and match.group(1) in self.batches:
                self.polls += 1
                self._maybe_auto_complete(match.group(1))
                return 200, self._openai_batch(match.group(1))
            match = re.fullmatch(r"/v1/files/([\w-]+)/content", path)
            if match and match.group(1) in self.files:
                return 200, self.files[match.group(1)]
        else:
            match = re.fullmatch(r"/v1beta/(batches/[\w-]+)", path)
            if match and match.group(1) in self.batches:
                self.polls += 1
                self._maybe_auto_complete(match.group(1))
                return 200, self._gemini_operation(match.group(1))
        return 404, self._error(f"no such resource {path}")

    def _error(self, message: str) -> dict:
        if self.api == "gemini":
            return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
        return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}

    def _openai_upload(self, headers: dict, raw: bytes):
        content_type = next(v for k, v in headers.items() if k.lower() == "content-type")
        message = BytesParser(policy=email_policy).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        assert message.is_multipart(), "a multipart/form-data upload"
        fields = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        assert fields["purpose"].get_content() .strip() == "batch", "purpose must be batch"
        content = fields["file"].get_payload(decode=True)
        for line in content.decode().splitlines():  # what OpenAI validates in a batch input file
            item = json.loads(line)
            assert item["method"] == "POST" and item["url"] == "/v1/embeddings" and item["custom_id"]
            assert isinstance(item["body"]["input"], (str, list)) and item["body"]["model"]
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = content
        return 200, {"id": file_id, "object": "file", "bytes": len(content), "created_at": 1, "filename": "input.jsonl",
                     "purpose": "batch", "status": "processed"}

    def _openai_batch_create(self, body: dict):
        assert body["endpoint"] == "/v1/embeddings" and body["completion_window"] == "24h"
        content = self.files[body["input_file_id"]]
        requests = []
        custom_ids = set()
        for line in content.decode().splitlines():
            item = json.loads(line)
            assert item["custom_id"] not in custom_ids, "custom_id must be unique in a batch"
            custom_ids.add(item["custom_id"])
            inputs = item["body"]["input"] if isinstance(item["body"]["input"], list) else [item["body"]["input"]]
            assert len(inputs) == 1, "one input per line here"
            requests.append((item["custom_id"], inputs[0], item["body"].get("dimensions", self.dimensions)))
            self.submitted_inputs.append(inputs[0])
        batch_id = f"batch_{next(self._ids)}"
        self.batches[batch_id] = {"requests": requests, "state": "in_progress", "input_file_id": body["input_file_id"],
                                  "output_file_id": None, "error_file_id": None, "errors": None, "metadata": body.get("metadata")}
        return 200, self._openai_batch(batch_id) | {"status": "validating"}

    def _openai_batch(self, batch_id: str) -> dict:
        batch = self.batches[batch_id]
        total = len(batch["requests"])
        done = total if batch["state"] == "completed" else batch.get("kept", 0)
        return {
            "id": batch_id, "object": "batch", "endpoint": "/v1/embeddings", "errors": batch["errors"],
            "input_file_id": batch["input_file_id"], "completion_window": "24h", "status": batch["state"],
            "output_file_id": batch["output_file_id"], "error_file_id": batch["error_file_id"], "created_at": 1,
            "request_counts": {"total": total, "completed": done, "failed": 0}, "metadata": batch["metadata"],
        }

    def _openai_embeddings(self, body: dict):
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.sync_inputs.extend(inputs)
        dims = body.get("dimensions", self.dimensions)
        data = [{"object": "embedding", "index": i, "embedding": self.vector(text, dims)} for i, text in enumerate(inputs)]
        return 200, {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}

    # --- Gemini ---------------------------------------------------------------------------------------

    def _gemini_batch_create(self, model: str, body: dict):
        batch = body["batch"]
        assert batch["model"] == f"models/{model}"
        requests = []
        for item in batch["inputConfig"]["requests"]["requests"]:
            request = item["request"]
            assert request["model"] == f"models/{model}" and request["taskType"] == "RETRIEVAL_DOCUMENT"
            text = request["content"]["parts"][0]["text"]
            requests.append((item.get("metadata"), text, request.get("outputDimensionality", self.dimensions)))
            self.submitted_inputs.append(text)
        name = f"batches/{next(self._ids)}"
        self.batches[name] = {"requests": requests, "state": "in_progress", "display": batch.get("displayName"), "model": model}
        return 200, self._gemini_operation(name)

    _GEMINI_STATES = {"in_progress": "BATCH_STATE_RUNNING", "completed": "BATCH_STATE_SUCCEEDED",
                      "expired": "BATCH_STATE_EXPIRED", "failed": "BATCH_STATE_FAILED",
                      "cancelled": "BATCH_STATE_CANCELLED"}

    def _gemini_operation(self, name: str) -> dict:
        batch = self.batches[name]
        metadata = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.EmbedContentBatch",
            "model": f"models/{batch['model']}", "name": name, "displayName": batch["display"],
            "state": self._GEMINI_STATES[batch["state"]],
        }
        operation = {"name": name, "metadata": metadata, "done": batch["state"] != "in_progress"}
        if batch["state"] == "failed":
            operation["error"] = {"code": 13, "message": batch["message"]}
        elif batch["state"] != "in_progress":
            responses = []
            for index, (meta, text, dims) in enumerate(batch["requests"]):
                if batch.get("kept") is not None and index >= batch["kept"]:
                    responses.append({"metadata": meta, "error": {"code": 4, "message": "batch expired before this request ran"}})
                else:
                    responses.append({"metadata": meta, "response": {"embedding": {"values": self.vector(text, dims)}}})
            operation["response"] = {
                "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.EmbedContentBatchOutput",
                "inlinedResponses": {"inlinedResponses": responses},
            }
        return operation

    def _gemini_embed(self, body: dict):
        texts = [r["content"]["parts"][0]["text"] for r in body["requests"]]
        self.sync_inputs.extend(texts)
        dims = body["requests"][0].get("outputDimensionality", self.dimensions)
        return 200, {"embeddings": [{"values": self.vector(text, dims)} for text in texts]}

    # --- finishing a batch ----------------------------------------------------------------------------

    def _cancel(self, batch_id: str):
        if self.cancel_failures:
            self.cancel_failures -= 1
            return 500, self._error("the service had an internal error")
        if batch_id not in self.batches:  # the handler holds self.lock
            return 404, self._error(f"no such batch {batch_id}")
        self.cancelled.append(batch_id)
        if self.batches[batch_id]["state"] == "in_progress":
            self._finish(batch_id, "cancelled", keep=0)
        return 200, (self._openai_batch(batch_id) if self.api == "openai" else {})

    def _maybe_auto_complete(self, batch_id: str) -> None:
        if self.auto_complete and self.batches[batch_id]["state"] == "in_progress":
            self._finish(batch_id, "completed", keep=None)

    def _finish(self, batch_id: str, state: str, *, keep: int | None, message: str = "") -> None:
        batch = self.batches[batch_id]
        batch["state"], batch["kept"], batch["message"] = state, keep, message
        if self.api != "openai":
            return
        answered = batch["requests"] if keep is None else batch["requests"][:keep]
        if state == "failed":
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": message, "param": None, "line": None}]}
            return
        lines = [
            json.dumps({"id": f"req_{i}", "custom_id": key, "error": None, "response": {
                "status_code": 200, "request_id": f"r{i}",
                "body": {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": self.vector(text, dims)}],
                         "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}}})
            for i, (key, text, dims) in enumerate(answered)
        ]
        output_id = f"file-{next(self._ids)}"
        self.files[output_id] = ("\n".join(lines) + "\n").encode()
        batch["output_file_id"] = output_id
        if keep is not None and keep < len(batch["requests"]):
            errors = [
                json.dumps({"id": f"req_{i}", "custom_id": key, "response": None,
                            "error": {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}})
                for i, (key, _, _) in enumerate(batch["requests"][keep:], start=keep)
            ]
            error_id = f"file-{next(self._ids)}"
            self.files[error_id] = ("\n".join(errors) + "\n").encode()
            batch["error_file_id"] = error_id
