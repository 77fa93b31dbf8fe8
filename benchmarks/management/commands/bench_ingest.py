"""Ingest benchmark: chunks/s into Postgres with a zero-latency embedder, and the server time of an
unchanged 1,000-file re-sync (which must make zero embedding calls).

    python manage.py bench_ingest [--files 1000] [--sections 6] [--repeat 3]

Runs against the configured database with a throw-away agent (deleted afterwards) and the fake
provider under a model name of its own, so nothing it embeds is ever served from, or left in, the
embedding cache. The worker side runs in this process (``index_job_run``, exactly what the Celery task
calls); the API calls go through Django's full request stack in-process (no network).
"""

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import statistics
import time
import uuid
from unittest import mock
from urllib.parse import quote

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

from agents.deletion import agent_delete_here
from agents.services import agent_create, agent_token_create
from indexing.chunking import count_tokens
from indexing.embeddings import FakeProvider
from indexing.models import Chunk, EmbeddingCache, IndexJob, MemoryFile
from indexing.services import index_job_run
from indexing.tasks import index_job_task
from memoryhub.celery import app as celery_app

WORDS = (
    "project meeting decided budget launch customer feedback release roadmap design review hiring "
    "travel invoice contract deadline migration database latency incident postmortem onboarding"
).split()


def daily_note(run: str, index: int, sections: int) -> str:
    lines = [f"# Notes {index} ({run})", ""]
    for s in range(sections):
        lines += [f"## Topic {s}", ""]
        for p in range(3):
            words = [WORDS[(index * 7 + s * 3 + p + k) % len(WORDS)] for k in range(40)]
            lines += [f"Paragraph {p} of topic {s} in note {index}: " + " ".join(words) + ".", ""]
    return "\n".join(lines)


def database_url() -> str:
    """The configured database as a DATABASE_URL, for a worker subprocess."""
    connection.ensure_connection()  # the embedded server's socket and port are known once connected
    db = connection.settings_dict
    host, port = db["HOST"], db["PORT"] or "5432"
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    if host.startswith("/"):  # Unix socket (the embedded Postgres)
        return f"postgresql://{credentials}@localhost:{port}/{quote(db['NAME'])}?host={quote(host)}"
    return f"postgresql://{credentials}@{host}:{port}/{quote(db['NAME'])}"


@contextlib.contextmanager
def celery_worker(*, run: str, model: str, concurrency: int):
    """A real `celery worker` on a queue of its own; yields wait_for_job(job_id)."""
    queue = f"memoryhub-bench-{run}"
    env = {
        **os.environ, "DATABASE_URL": database_url(), "MEMORYHUB_EMBEDDING_PROVIDER": "fake",
        "MEMORYHUB_EMBEDDING_MODEL": model, "MEMORYHUB_EMBEDDING_DIMENSIONS": "64", "MEMORYHUB_TASKS_EAGER": "0",
        "MEMORYHUB_TASK_QUEUE": queue,  # the worker reads it and its background queue
    }
    log = tempfile.NamedTemporaryFile("w+", prefix="bench-worker-", suffix=".log", delete=False)
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--concurrency", str(concurrency),
         "--hostname", f"{queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"],
        cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    task = index_job_task._get_current_object()
    always_eager = celery_app.conf.task_always_eager
    try:
        celery_app.conf.task_always_eager = False
        task.queue = queue
        task._exec_options = None

        def wait_for_job(job_id: int) -> None:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if IndexJob.objects.filter(pk=job_id, state__in=["done", "failed"]).exists():
                    return
                if process.poll() is not None:
                    raise RuntimeError(f"the worker exited; see {log.name}")
                time.sleep(0.05)
            raise RuntimeError(f"job {job_id} did not finish in 10 minutes; see {log.name}")

        wait_for_job.concurrency = concurrency
        yield wait_for_job
    finally:
        task.__dict__.pop("queue", None)
        task._exec_options = None
        celery_app.conf.task_always_eager = always_eager
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        import redis

        redis.Redis.from_url(settings.REDIS_URL).delete(queue)


class Command(BaseCommand):
    help = "Measure ingest throughput (chunks/s) and the unchanged re-sync time of a workspace."

    def add_arguments(self, parser):
        parser.add_argument("--files", type=int, default=1000)
        parser.add_argument("--sections", type=int, default=6, help="## sections per file (about one chunk each)")
        parser.add_argument("--repeat", type=int, default=3, help="timed repetitions of the unchanged re-sync")
        parser.add_argument(
            "--workers", type=int, default=0,
            help="index with a real Celery worker of this many processes (on a queue of its own) instead of in-process",
        )

    def handle(self, *args, files: int, sections: int, repeat: int, workers: int, **options):
        run = uuid.uuid4().hex[:8]
        model = f"bench-{run}"
        with override_settings(
            MEMORYHUB_EMBEDDING_PROVIDER="fake",
            MEMORYHUB_EMBEDDING_MODEL=model,
            MEMORYHUB_EMBEDDING_DIMENSIONS=64,
            MEMORYHUB_EMBEDDING_FAKE_LATENCY=0.0,
            ALLOWED_HOSTS=["*"],
        ):
            agent = agent_create(slug=f"bench-{run}")
            try:
                if workers:
                    with celery_worker(run=run, model=model, concurrency=workers) as wait_for_job:
                        self._bench(agent, run, files, sections, repeat, wait_for_job=wait_for_job)
                else:
                    # The job is run right here; nothing is sent to the broker.
                    with mock.patch("indexing.writes._enqueue"):
                        self._bench(agent, run, files, sections, repeat)
            finally:
                agent_delete_here(agent_id=agent.pk)
                EmbeddingCache.objects.filter(model=model).delete()

    def _bench(self, agent, run, files, sections, repeat, wait_for_job=None):
        _, raw_token = agent_token_create(agent=agent, label="bench")
        client = APIClient(SERVER_NAME="localhost")
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_token}")
        contents = {f"memory/2026-{i // 28 % 12 + 1:02}-{i % 28 + 1:02}-{i:04}.md": daily_note(run, i, sections) for i in range(files)}
        payload = {"files": [{"path": p, "content": c} for p, c in contents.items()]}
        body = json.dumps(payload).encode()
        out = self.stdout.write
        out("load average before: %.2f %.2f %.2f (machine has %d CPUs)" % (*os.getloadavg(), os.cpu_count()))
        out(f"database: PostgreSQL {connection.cursor().connection.info.server_version}, {files} files, "
            f"{len(body) / 1e6:.1f} MB of JSON, provider fake (zero latency, 64 dims)")

        count_tokens("warm up the tokenizer, as a running worker has")
        if wait_for_job:  # let the worker start and every process load the tokenizer, as a running one has
            warmup = {"files": [{"path": f"warmup/{i}.md", "content": f"warm up {i} {run}"} for i in range(250)]}
            wait_for_job(client.post("/api/v1/sync", warmup, format="json").json()["job"])
        # 1. First sync (web side) and indexing (worker side).
        FakeProvider.reset_counts()
        t0 = time.perf_counter()
        response = client.generic("POST", "/api/v1/sync", body, content_type="application/json")
        sync_seconds = time.perf_counter() - t0
        assert response.status_code == 200, response.content[:500]
        job_id = response.json()["job"]
        t0 = time.perf_counter()
        if wait_for_job:
            wait_for_job(job_id)
        else:
            index_job_run(job_id=job_id)
        index_seconds = time.perf_counter() - t0
        job = IndexJob.objects.get(pk=job_id)
        chunks = Chunk.objects.filter(agent=agent, file__path__startswith="memory/").count()
        assert job.state == "done", job.error
        where = f"Celery worker, {wait_for_job.concurrency} processes" if wait_for_job else "in-process"
        out(f"first sync, web side (store {files} files + enqueue): {sync_seconds * 1000:.0f} ms")
        out(f"indexing, worker side ({where}): {chunks} chunks in {index_seconds:.2f} s = {chunks / index_seconds:,.0f} chunks/s"
            + ("" if wait_for_job else f" ({FakeProvider.texts_embedded} texts embedded in {FakeProvider.calls} provider calls)"))
        out(f"end to end (sync + index): {chunks / (sync_seconds + index_seconds):,.0f} chunks/s")

        # 2. Unchanged re-sync: hash-only, and with full content.
        hashes = json.dumps(
            {"files": [{"path": p, "hash": hashlib.sha256(c.encode()).hexdigest()} for p, c in contents.items()]}
        ).encode()
        for label, request_body in (("hash-only", hashes), ("full content", body)):
            timings = []
            FakeProvider.reset_counts()
            for _ in range(repeat):
                t0 = time.perf_counter()
                response = client.generic("POST", "/api/v1/sync", request_body, content_type="application/json")
                timings.append(time.perf_counter() - t0)
                result = response.json()
                assert response.status_code == 200 and result["job"] is None and result["unchanged"] == files, result
            out(f"unchanged re-sync of {files} files ({label}, {len(request_body) / 1e6:.1f} MB): "
                f"median {statistics.median(timings) * 1000:.0f} ms, max {max(timings) * 1000:.0f} ms over {repeat} runs; "
                f"jobs 0, embedding calls {FakeProvider.calls}")

        # 3. Edit one paragraph in 10 files: only those chunks are embedded.
        edited = list(contents)[:10]
        edit = {"files": [{"path": p, "content": contents[p].replace("Paragraph 1 of topic 2", "Edited paragraph of topic 2")} for p in edited]}
        FakeProvider.reset_counts()
        response = client.post("/api/v1/sync", edit, format="json")
        if wait_for_job:
            wait_for_job(response.json()["job"])
        else:
            index_job_run(job_id=response.json()["job"])
        job = IndexJob.objects.get(pk=response.json()["job"])
        out(f"edit one paragraph in 10 files: {job.chunks_embedded} texts embedded "
            f"(chunks added {job.chunks_added}, reused {job.cache_hits})")
        assert not MemoryFile.objects.filter(agent=agent).exclude(state="indexed").exists()
        out("load average after: %.2f %.2f %.2f" % os.getloadavg())
