"""With a webhook secret, every write is signed (method, path, query, body and a timestamp), and a
signature outside the replay window, or made for another request, is refused with 401 and nothing is
written. Reads need no signature. The sync client signs what it sends."""

import time

import pytest

from agents.signatures import signature_header
from indexing.models import MemoryFile

SECRET = "s3cret-webhook-key"


@pytest.fixture
def signed(alice):
    alice.agent.webhook_secret = SECRET
    alice.agent.save(update_fields=["webhook_secret"])
    return alice


def send(member, method, path, body=b"", *, query="", content_type="text/markdown", sign=True, signed_as=None, age=0):
    """Send a request signed for itself, or for what ``signed_as`` says instead, ``age`` seconds ago."""
    headers = {}
    if sign:
        fields = {"secret": SECRET, "method": method, "path": path, "query": query, "body": body, **(signed_as or {})}
        headers["HTTP_X_MEMORYHUB_SIGNATURE"] = signature_header(**fields, timestamp=int(time.time()) - age)
    return member.client.generic(method, path, body, content_type=content_type, QUERY_STRING=query, **headers)


@pytest.mark.django_db
def test_signed_put_and_delete_are_accepted(signed):
    put = send(signed, "PUT", "/api/v1/files/notes/a b.md", b"hello", query="mtime=1714557600")
    assert put.status_code == 201, put.content
    assert MemoryFile.objects.get().path == "notes/a b.md"

    delete = send(signed, "DELETE", "/api/v1/files/notes/a b.md")
    assert delete.status_code == 200, delete.content
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("method,path", [("PUT", "/api/v1/files/notes/a.md"), ("POST", "/api/v1/sync")])
def test_an_unsigned_write_is_401_and_writes_nothing(signed, method, path):
    body = b"hello" if method == "PUT" else b'{"files": [{"path": "notes/a.md", "content": "hello"}]}'
    response = send(signed, method, path, body, content_type="text/markdown" if method == "PUT" else "application/json", sign=False)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
def test_an_unsigned_delete_is_401_and_the_file_stays(signed):
    send(signed, "PUT", "/api/v1/files/notes/a.md", b"hello")
    response = send(signed, "DELETE", "/api/v1/files/notes/a.md", sign=False)
    assert response.status_code == 401
    assert MemoryFile.objects.filter(path="notes/a.md").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "signed_as,age",
    [
        ({}, 310),  # captured more than five minutes ago: a replay
        ({}, -310),
        ({"path": "/api/v1/files/notes/other.md"}, 0),  # a signature made for another file
        ({"method": "DELETE"}, 0),
        ({"query": "mtime=1"}, 0),
        ({"body": b"something else"}, 0),
        ({"secret": "another-secret"}, 0),
    ],
    ids=["old", "future", "other-path", "other-method", "other-query", "other-body", "other-secret"],
)
def test_a_signature_for_another_request_or_time_is_refused(signed, signed_as, age):
    response = send(signed, "PUT", "/api/v1/files/notes/a.md", b"hello", signed_as=signed_as, age=age)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
def test_the_replay_window_is_a_setting(signed, settings):
    settings.MEMORYHUB_WEBHOOK_TOLERANCE_SECONDS = 3600
    response = send(signed, "PUT", "/api/v1/files/notes/a.md", b"hello", age=1800)
    assert response.status_code == 201


@pytest.mark.django_db
def test_reads_need_no_signature(signed):
    send(signed, "PUT", "/api/v1/files/notes/a.md", b"hello")
    assert signed.client.get("/api/v1/files/notes/a.md").status_code == 200
    assert signed.client.get("/api/v1/files").status_code == 200
    assert signed.client.post("/api/v1/search", {"query": "hello"}, format="json").status_code == 200


@pytest.mark.django_db
def test_agents_without_a_secret_write_unsigned(alice):
    assert send(alice, "PUT", "/api/v1/files/notes/a.md", b"hello", sign=False).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_the_sync_client_signs_its_sync_and_its_deletes(signed, live_server, tmp_path):
    from memoryhub_client.api import ApiClient

    client = ApiClient(url=live_server.url, token=signed.raw_token, webhook_secret=SECRET, retry_delays=())
    client.sync(files=[{"path": "notes/a.md", "content": "hello"}, {"path": "notes/b.md", "content": "bye"}])
    client.file_delete(path="notes/b.md")
    assert sorted(MemoryFile.objects.values_list("path", flat=True)) == ["notes/a.md"]

    unsigned = ApiClient(url=live_server.url, token=signed.raw_token, retry_delays=())
    with pytest.raises(Exception, match="401 invalid_signature"):
        unsigned.file_delete(path="notes/a.md")
