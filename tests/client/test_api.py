"""The client's HTTP layer against a scripted stand-in server: retries, and errors a person can read."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memoryhub_client.api import ApiClient, ServerError


@pytest.fixture
def scripted_server():
    """A server answering each request with the next (status, body, headers) of ``replies``."""
    replies: list[tuple[int, bytes, dict]] = []
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            seen.append(f"{self.command} {self.path}")
            status, body, headers = replies.pop(0)
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _reply

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.replies, server.seen = replies, seen
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


def error(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def test_a_busy_server_is_asked_again_and_the_retry_is_reported(scripted_server):
    ok = json.dumps({"job": None, "needed": [], "unchanged": 1, "changed": 0, "deleted": []}).encode()
    scripted_server.replies.extend([
        (503, error("unavailable", "Try later."), {"Retry-After": "0"}),
        (500, error("server_error", "Internal server error."), {}),
        (200, ok, {}),
    ])
    notes = []
    client = ApiClient(url=scripted_server.url, token="mh_x", retry_delays=(0.01, 0.01), on_retry=notes.append)

    outcome = client.sync(files=[{"path": "MEMORY.md", "hash": "0" * 64}])

    assert outcome["unchanged"] == 1
    assert scripted_server.seen == ["POST /api/v1/sync"] * 3
    assert notes == [
        "POST sync: 503 unavailable: Try later.; retrying in 0 s",
        "POST sync: 500 server_error: Internal server error.; retrying in 0.01 s",
    ]


def test_it_gives_up_after_the_retries_with_the_last_error(scripted_server):
    page = b"<html><body>Bad gateway</body></html>"
    scripted_server.replies.extend([(502, page, {"Content-Type": "text/html"})] * 3)
    client = ApiClient(url=scripted_server.url, token="mh_x", retry_delays=(0.01, 0.01))

    with pytest.raises(ServerError) as caught:
        client.status()

    assert str(caught.value) == "GET status: 502: Bad Gateway (not a MemoryHub error body)"
    assert len(scripted_server.seen) == 3


def test_a_client_error_is_not_retried(scripted_server):
    scripted_server.replies.append((400, error("invalid_path", "files[0]: The path may not contain '..'."), {}))
    client = ApiClient(url=scripted_server.url, token="mh_x", retry_delays=(0.01, 0.01))

    with pytest.raises(ServerError, match=r"POST sync: 400 invalid_path: files\[0\]: The path may not contain"):
        client.sync(files=[{"path": "../x.md", "hash": "0" * 64}])
    assert len(scripted_server.seen) == 1


def test_a_server_that_is_not_memoryhub_is_named(scripted_server):
    scripted_server.replies.append((200, b"<html>welcome to nginx</html>", {}))
    client = ApiClient(url=scripted_server.url, token="mh_x")

    with pytest.raises(ServerError, match="not JSON"):
        client.status()


def test_an_append_is_repeated_only_when_nothing_can_have_been_written(scripted_server):
    """After a 500 an append may have landed: repeating it would add the text twice. A 503 (write
    conflict, nothing written) is asked again."""
    written = json.dumps({"path": "log.md", "hash": "0" * 64, "size": 3, "status": "pending", "job": 1}).encode()
    scripted_server.replies.extend([
        (503, error("write_conflict", "Try again."), {"Retry-After": "0"}),
        (200, written, {}),
        (500, error("server_error", "Internal server error."), {}),
    ])
    client = ApiClient(url=scripted_server.url, token="mh_x", retry_delays=(0.01, 0.01))

    assert client.file_append(path="log.md", text="one")["job"] == 1
    with pytest.raises(ServerError, match="500 server_error"):
        client.file_append(path="log.md", text="two")
    assert scripted_server.seen == ["POST /api/v1/files/log.md/append"] * 3
