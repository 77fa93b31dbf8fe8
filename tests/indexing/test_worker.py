"""End to end with a real Celery worker process on Redis: upload → job done → vectors in Postgres.

The worker runs as a subprocess against this test database (DATABASE_URL built from the test
connection) and consumes a queue of its own, so it cannot collide with any other worker on the same
Redis. Without Redis at REDIS_URL the test is skipped with that reason — unless
MEMORYHUB_REQUIRE_WORKER_TESTS=1 (CI), where a missing Redis is a failure.
"""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.tasks import index_job_task
from memoryhub.celery import app as celery_app

BASE_DIR = Path(__file__).resolve().parents[2]


def redis_or_skip():
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
    except Exception as exc:
        reason = f"no Redis answers at REDIS_URL={settings.REDIS_URL} ({exc.__class__.__name__}: {exc})"
        if os.environ.get("MEMORYHUB_REQUIRE_WORKER_TESTS") == "1":
            pytest.fail(f"MEMORYHUB_REQUIRE_WORKER_TESTS=1 but {reason}")
        pytest.skip(reason)


def test_database_url() -> str:
    connection.ensure_connection()  # the embedded server's socket and port are known once connected
    db = connection.settings_dict
    host, port = db["HOST"], db["PORT"] or "5432"
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    if host.startswith("/"):  # Unix socket (the embedded Postgres)
        return f"postgresql://{credentials}@localhost:{port}/{quote(db['NAME'])}?host={quote(host)}"
    return f"postgresql://{credentials}@{host}:{port}/{quote(db['NAME'])}"


test_database_url.__test__ = False  # a helper, not a test


@pytest.fixture
def worker(tmp_path, settings):
    redis_or_skip()
    queue = f"memoryhub-test-{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        "DATABASE_URL": test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "MEMORYHUB_EMBEDDING_PROVIDER": "fake",
        "MEMORYHUB_EMBEDDING_MODEL": "fake-hash",
        "MEMORYHUB_EMBEDDING_DIMENSIONS": "64",
        "MEMORYHUB_TASKS_EAGER": "0",
        "MEMORYHUB_TASK_QUEUE": queue,  # the worker reads it and its background queue (settings.CELERY_TASK_QUEUES)
    }
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--pool", "solo",
                "--hostname", f"{queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
                "--loglevel", "INFO",
            ],
            cwd=BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    task = index_job_task._get_current_object()
    try:
        # This process publishes for real, to the worker's queue only (the autouse eager fixture
        # restores the eager switch afterwards).
        celery_app.conf.task_always_eager = False
        task.queue = queue
        task._exec_options = None  # Celery caches a task's routing options on first use
        yield process, log
    finally:
        task.__dict__.pop("queue", None)
        task._exec_options = None
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        import redis

        redis.Redis.from_url(settings.REDIS_URL).delete(queue, f"{queue}.background")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_an_upload_is_indexed_by_a_real_worker(alice, worker, settings):
    process, log = worker
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "fake"
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash"
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 64
    content = "# Trip\n\nWe fly to Lisbon on the 3rd.\n\n## Hotel\n\nThe hotel is near the river.\n"
    response = alice.client.generic("PUT", "/api/v1/files/memory/trip.md", content.encode(), content_type="text/markdown")
    assert response.status_code == 201, response.content
    job_id = response.json()["job"]

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = IndexJob.objects.get(pk=job_id).state
        if state in ("done", "failed") or process.poll() is not None:
            break
        time.sleep(0.3)
    worker_log = log.read_text()
    job = IndexJob.objects.get(pk=job_id)
    assert job.state == "done", f"job {job.state} ({job.error}); worker exit={process.poll()}; log:\n{worker_log[-3000:]}"
    assert job.chunks_embedded == job.chunks_added == 2

    memory_file = MemoryFile.objects.get(agent=alice.agent, path="memory/trip.md")
    assert memory_file.state == "indexed"
    chunks = Chunk.objects.filter(file=memory_file)
    assert chunks.count() == 2
    assert all(c.embedding is not None and len(c.embedding) == 64 for c in chunks)
    assert set(chunks.values_list("embedding_identity", flat=True)) == {"fake:fake-hash:64"}
    assert alice.client.get("/api/v1/status").json()["pending"] == 0
    assert "index_job_task" in worker_log


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_large_sync_fans_out_to_batch_tasks_on_the_workers_queue(alice, worker, settings):
    process, log = worker
    files = [{"path": f"notes/n{i:03}.md", "content": f"Note {i}: the spare key is in drawer {i}."} for i in range(250)]
    response = alice.client.post("/api/v1/sync", {"files": files}, format="json")
    assert response.status_code == 200, response.content
    job_id = response.json()["job"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if IndexJob.objects.get(pk=job_id).state in ("done", "failed"):
            break
        time.sleep(0.3)
    worker_log = log.read_text()
    job = IndexJob.objects.get(pk=job_id)
    assert job.state == "done", f"job {job.state} ({job.error}); log:\n{worker_log[-3000:]}"
    assert (job.files_changed, job.chunks_added, job.chunks_embedded) == (250, 250, 250)
    assert worker_log.count("index_batch_task") >= 3  # 250 files = 3 batches of at most 100
    assert not Chunk.objects.filter(agent=alice.agent, embedding=None).exists()
