"""A web delete racing a worker's chunk replacement of the same agent must not deadlock.

The interleaving seen under `make run` with a 2-process worker, reproduced step by step on two real
database connections: the worker has locked a file row and deleted its old chunks (it is now building
the new ones); the web process then deletes that file (sync with ``delete_missing``, or DELETE
/files/<path>); then the worker writes the new chunks and commits. Before the fix the web side held a
plain FOR UPDATE lock on the agent row and deleted the chunks before locking the file, while the
worker's commit needed a FOR KEY SHARE lock on the agent row (the chunks' foreign-key check):
Postgres detected a deadlock after ``deadlock_timeout`` and the request answered 500.
"""

import threading
import time

import psycopg
import pytest
from django.db import OperationalError, connection, connections

from indexing import services, writes
from indexing.models import Chunk, IndexJob, MemoryFile

pytestmark = pytest.mark.usefixtures("fake_embeddings")

KEEP = "# Keep\n\nThis note stays.\n"
GONE = "# Gone\n\nThis note is deleted while a worker re-indexes it.\n"


def _lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted AND a.datname = current_database()")
        return cursor.fetchone()[0]


def _in_thread(target, results: dict, key: str) -> threading.Thread:
    def run():
        try:
            results[key] = target()
        except Exception as exc:  # reported by the test, not lost in the thread
            results[key] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=key, daemon=True)
    thread.start()
    return thread


def _web_sync(alice):
    return alice.client.post(
        "/api/v1/sync", {"files": [{"path": "keep.md", "content": KEEP}], "delete_missing": True}, format="json"
    )


def _web_delete(alice):
    return alice.client.delete("/api/v1/files/gone.md")


@pytest.mark.parametrize("web_call", [_web_sync, _web_delete], ids=["sync-delete-missing", "file-delete"])
def test_a_web_delete_during_a_workers_chunk_replacement_does_not_deadlock(transactional_db, alice, monkeypatch, web_call):
    for path, content in (("keep.md", KEEP), ("gone.md", GONE)):
        assert alice.client.put(f"/api/v1/files/{path}", content, content_type="text/markdown").status_code in (200, 201)
    gone = MemoryFile.objects.get(agent=alice.agent, path="gone.md")
    assert gone.state == MemoryFile.State.INDEXED and Chunk.objects.filter(file=gone).exists()
    MemoryFile.objects.filter(pk=gone.pk).update(indexed_hash="", state=MemoryFile.State.PENDING)  # re-chunk it

    # The worker pauses inside its chunk write (_files_chunks_write): file row locked, old chunks deleted, new ones not yet written.
    paused, resume = threading.Event(), threading.Event()
    original = services.keyword_document

    def gated_keyword_document(text):
        if threading.current_thread().name == "worker" and not paused.is_set():
            paused.set()
            resume.wait(10)
        return original(text)

    monkeypatch.setattr(services, "keyword_document", gated_keyword_document)
    results: dict = {}
    worker = _in_thread(lambda: services.files_index(file_ids=[gone.pk]), results, "worker")
    assert paused.wait(10), "the worker never reached the chunk write"
    web = _in_thread(lambda: web_call(alice), results, "web")
    deadline = time.monotonic() + 10
    while _lock_waiters() == 0 and time.monotonic() < deadline:  # the web request now waits for the worker
        time.sleep(0.02)
    assert _lock_waiters() > 0, "the web request did not wait for the worker's locks"
    resume.set()
    worker.join(20)
    web.join(20)
    assert not worker.is_alive() and not web.is_alive()

    response = results["web"]
    assert not isinstance(response, Exception), response
    assert response.status_code == 200, response.content
    assert not isinstance(results["worker"], Exception), results["worker"]
    assert list(MemoryFile.objects.filter(agent=alice.agent).values_list("path", flat=True)) == ["keep.md"]
    assert not Chunk.objects.filter(file_id=gone.pk).exists()  # nothing of the deleted file survives
    assert not IndexJob.objects.filter(agent=alice.agent, state=IndexJob.State.FAILED).exists()


def _deadlock() -> OperationalError:
    error = OperationalError("deadlock detected")
    error.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    return error


def test_a_sync_that_meets_a_deadlock_is_retried_in_a_new_transaction(transactional_db, alice, monkeypatch):
    original, calls = writes._existing_files, []

    def flaky(**kwargs):
        calls.append(1)
        if len(calls) == 1:
            MemoryFile.objects.create(agent=alice.agent, path="half.md", content="x", content_hash="x", size=1)
            raise _deadlock()
        return original(**kwargs)

    monkeypatch.setattr(writes, "_existing_files", flaky)
    response = alice.client.post("/api/v1/sync", {"files": [{"path": "a.md", "content": "# A\n"}]}, format="json")
    assert response.status_code == 200, response.content
    assert len(calls) == 2
    assert list(MemoryFile.objects.filter(agent=alice.agent).values_list("path", flat=True)) == ["a.md"]


def test_a_sync_that_keeps_meeting_deadlocks_answers_503_and_writes_nothing(transactional_db, alice, monkeypatch):
    def always(**kwargs):
        MemoryFile.objects.create(agent=alice.agent, path="half.md", content="x", content_hash="x", size=1)
        raise _deadlock()

    monkeypatch.setattr(writes, "_existing_files", always)
    response = alice.client.post("/api/v1/sync", {"files": [{"path": "a.md", "content": "# A\n"}]}, format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "write_conflict"
    assert response["Retry-After"]
    assert not MemoryFile.objects.filter(agent=alice.agent).exists()


def test_any_api_view_that_meets_a_deadlock_answers_503_not_500(db, alice, monkeypatch):
    from indexing import apis

    def deadlocked(**kwargs):
        raise _deadlock()

    monkeypatch.setattr(apis, "file_delete", deadlocked)
    response = alice.client.delete("/api/v1/files/notes.md")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "write_conflict"
