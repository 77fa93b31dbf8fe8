"""python manage.py bench_long_line — one keyword search of an agent holding a file that is one long line.

For each size (``--sizes``, characters): a throw-away agent gets one ``.json`` file of that many
characters on a single line (records of words, the query word in one record of 200), indexed in this
process with the fake provider under a model name of its own. Then a real web process — gunicorn, one
sync worker, ``DEBUG=0``, as the container runs it — serves ``POST /api/v1/search`` for that agent:
after a warm-up search (a word the file does not hold, so the process has loaded everything a search
needs), it reports the time of one keyword search (``--query``, default max_results), the number of
results, and the web worker's peak resident memory (VmHWM) before and after it. The agent is deleted at
the end and the server stopped; a search still running after ``--timeout`` seconds is reported as such.

    python manage.py bench_long_line                          # 2.4 MB and 5 MB
    python manage.py bench_long_line --sizes 500000 --timeout 60
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from unittest import mock

from django.conf import settings
from django.core.management.base import BaseCommand
from django.test import override_settings

from agents.deletion import agent_delete_here
from agents.services import agent_create, agent_token_create
from indexing.models import Chunk, EmbeddingCache, IndexJob
from indexing.writes import file_ingest
from indexing.services import index_job_run
from benchmarks.management.commands.bench_ingest import database_url

WORDS = ["harbour", "ledger", "quartz", "meadow", "copper", "violet", "summit", "lantern", "orchard", "pebble"]


def one_line_json(chars: int, query: str) -> str:
    """A JSON array of records on one line, ``chars`` long, with ``query`` in one record of 200."""
    records, size, i = [], 2, 0
    while size < chars:
        text = query if i % 200 == 0 else " ".join(WORDS[(i * 7 + k) % len(WORDS)] + str((i + k) % 997) for k in range(6))
        record = json.dumps({"id": i, "note": text})
        records.append(record)
        size += len(record) + 2
        i += 1
    return ("[" + ", ".join(records) + "]")[:chars]


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def web_server(*, model: str, timeout: int):
    """gunicorn with one sync worker on a free port; yields (base URL, the worker's pid)."""
    port = free_port()
    env = {
        **os.environ, "DATABASE_URL": database_url(), "DEBUG": "0", "SECRET_KEY": "bench-long-line",
        "MEMORYHUB_EMBEDDING_PROVIDER": "fake", "MEMORYHUB_EMBEDDING_MODEL": model, "MEMORYHUB_EMBEDDING_DIMENSIONS": "64",
    }
    log = tempfile.NamedTemporaryFile("w+", prefix="bench-long-line-web-", suffix=".log", delete=False)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "memoryhub.wsgi", "--workers", "1", "--bind", f"127.0.0.1:{port}",
         "--timeout", str(timeout + 60)],
        cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(base + "/healthz", timeout=5)
                break
            if process.poll() is not None:
                raise RuntimeError(f"the web server exited; see {log.name}")
            time.sleep(0.1)
        with open(f"/proc/{process.pid}/task/{process.pid}/children") as children:
            worker = int(children.read().split()[0])
        yield base, worker
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def search(base: str, token: str, query: str, timeout: int) -> tuple[float, int | None, dict | None]:
    """(seconds, HTTP status or None when the client gave up, body) of one keyword search."""
    request = urllib.request.Request(
        base + "/api/v1/search", data=json.dumps({"query": query, "mode": "keyword"}).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return time.perf_counter() - started, response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return time.perf_counter() - started, exc.code, json.loads(exc.read() or b"null")
    except (TimeoutError, urllib.error.URLError):
        return time.perf_counter() - started, None, None


class Command(BaseCommand):
    help = "Time one keyword search and the web process's peak memory for an agent holding a one-line file."

    def add_arguments(self, parser):
        parser.add_argument("--sizes", default="2400000,5000000", help="File sizes in characters, comma-separated.")
        parser.add_argument("--query", default="zanzibar")
        parser.add_argument("--timeout", type=int, default=240, help="Seconds the client waits for the search.")

    def handle(self, *args, sizes: str, query: str, timeout: int, **options):
        out = self.stdout.write
        out("load average: %.2f %.2f %.2f (%d CPUs)" % (*os.getloadavg(), os.cpu_count()))
        for size in [int(s) for s in sizes.split(",")]:
            run = uuid.uuid4().hex[:8]
            model = f"bench-{run}"
            with override_settings(MEMORYHUB_EMBEDDING_PROVIDER="fake", MEMORYHUB_EMBEDDING_MODEL=model,
                                   MEMORYHUB_EMBEDDING_DIMENSIONS=64, MEMORYHUB_EMBEDDING_FAKE_LATENCY=0.0):
                agent = agent_create(slug=f"bench-long-line-{run}")
                try:
                    _, token = agent_token_create(agent=agent, label="bench")
                    with mock.patch("indexing.writes._enqueue"):  # indexed right here, not by a worker
                        file_ingest(agent=agent, path="workspace/dump.json", content=one_line_json(size, query))
                    for job in IndexJob.objects.filter(agent=agent, state="queued"):
                        index_job_run(job_id=job.pk)
                    chunks = Chunk.objects.filter(agent=agent).count()
                    with web_server(model=model, timeout=timeout) as (base, worker):
                        search(base, token, "warmup", timeout)
                        before = peak_rss_mb(worker)
                        seconds, status, body = search(base, token, query, timeout)
                        after = peak_rss_mb(worker)
                    if status is None:
                        answer = f"no answer within {timeout} s (client gave up)"
                    elif status == 200:
                        answer = f"200, {len(body['results'])} result(s), took_ms {body['took_ms']}"
                    else:
                        answer = f"{status} {body}"
                    out(f"{size / 1e6:.1f} MB one-line file ({chunks} chunks): keyword search {seconds:.2f} s, {answer}; "
                        f"web worker peak RSS {before:.0f} MB before, {after:.0f} MB after")
                finally:
                    agent_delete_here(agent_id=agent.pk)
                    EmbeddingCache.objects.filter(model=model).delete()
