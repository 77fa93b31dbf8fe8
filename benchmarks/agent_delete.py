"""The cost of deleting a large agent: builds one in the configured database with SQL (BENCH_FILES files
of BENCH_PER_FILE chunks with 384-dimension vectors, a done job per file, 2,000 search rows), times the
admin's POST to its delete page (Django's test client, as the superuser "bench-root", created if needed,
after two warm-up requests), then, where agents/deletion.py exists, the background deletion's run and its
batches. Runs on the code before the background deletion too (the request then deletes everything).

    MEMORYHUB_TASK_QUEUE=bench-delete BENCH_FILES=5000 .venv/bin/python manage.py shell < benchmarks/agent_delete.py

(a queue of its own: the request publishes the deletion task, which this script runs itself.)
"""

import os
import statistics
import time

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from agents.models import Agent
from agents.services import agent_create

FILES = int(os.environ.get("BENCH_FILES", 5000))
PER_FILE = int(os.environ.get("BENCH_PER_FILE", 20))
VECTOR = "[" + ",".join(f"{(i * 37 % 101) / 101:.4f}" for i in range(384)) + "]"
JOBS = (
    "INSERT INTO indexing_indexjob (agent_id, trigger, state, files_seen, files_changed, files_removed, chunks_added, "
    "chunks_removed, chunks_embedded, cache_hits, malformed_lines, attempts, error, created_at, awaiting_dispatch) "
    "SELECT %s, 'upload', 'done', 1, 1, 0, 20, 0, 20, 0, 0, 1, '', now(), false FROM generate_series(1, %s)"
)
FILES_SQL = (
    "INSERT INTO indexing_memoryfile (agent_id, path, source, content, content_hash, size, attributes, state, indexed_hash, "
    "last_error, failures, job_id, created_at, updated_at) SELECT %s, 'memory/f' || g || '.md', 'memory', repeat('note text ', 200), "
    "md5(g::text), 2000, '{}', 'indexed', md5(g::text), '', 0, %s + g - 1, now(), now() FROM generate_series(1, %s) g"
)
CHUNKS = (
    "INSERT INTO indexing_chunk (agent_id, file_id, ordinal, start_line, end_line, text, text_hash, token_count, search_text, "
    "embedding, embedding_identity, embedding_dimensions, created_at) "
    "SELECT f.agent_id, f.id, o, o + 1, o + 1, 'chunk ' || f.id || ' ' || o || ' about the weather and the budget', "
    "md5(f.id || ':' || o), 12, 'chunk ' || f.id || ' ' || o || ' about the weather and the budget', %s::vector, "
    "'fake:bench:384', 384, now() FROM indexing_memoryfile f CROSS JOIN generate_series(0, %s - 1) o "
    "WHERE f.agent_id = %s AND f.id >= %s AND f.id < %s"
)


def agent_build():
    agent = agent_create(slug=f"bench-del-{time.time_ns()}")
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(JOBS, [agent.pk, FILES])
        cursor.execute("SELECT min(id) FROM indexing_indexjob WHERE agent_id = %s", [agent.pk])
        cursor.execute(FILES_SQL, [agent.pk, cursor.fetchone()[0], FILES])
        cursor.execute("ANALYZE indexing_memoryfile")  # the chunks' key check looks files up by (agent_id, id)
        cursor.execute("SELECT min(id), max(id) FROM indexing_memoryfile WHERE agent_id = %s", [agent.pk])
        low, high = cursor.fetchone()
        for start in range(low, high + 1, 5000):  # 5,000 files' chunks per statement, as a bulk load would
            cursor.execute(CHUNKS, [VECTOR, PER_FILE, agent.pk, start, start + 5000])
        cursor.execute("INSERT INTO usage_searchevent (agent_id, created_at, mode, results, took_ms) "
                       "SELECT %s, now(), 'hybrid', 5, 10 FROM generate_series(1, 2000)", [agent.pk])
        for table in ("indexing_chunk", "indexing_memoryfile", "indexing_indexjob"):
            cursor.execute(f"ANALYZE {table}")
    print(f"built {agent.slug}: {FILES} files, {FILES * PER_FILE} chunks in {time.monotonic() - started:.1f} s")
    return agent


def chunks_of(agent_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM indexing_chunk WHERE agent_id = %s", [agent_id])
        return cursor.fetchone()[0]


def request_timed(agent) -> None:
    if not User.objects.filter(username="bench-root").exists():
        User.objects.create_superuser("bench-root", "root@example.com", "pw")
    client = Client(SERVER_NAME="localhost")
    assert client.login(username="bench-root", password="pw")
    for _ in range(2):  # the first requests of a process build the URL map and load the templates
        started = time.monotonic()
        client.get(f"/admin/agents/agent/{agent.pk}/delete/")
        print(f"warm-up GET of the delete page: {time.monotonic() - started:.3f} s")
    started = time.monotonic()
    response = client.post(f"/admin/agents/agent/{agent.pk}/delete/", {"post": "yes"})
    print(f"admin delete request: {response.status_code} in {time.monotonic() - started:.3f} s")
    print("chunks left after the request:", chunks_of(agent.pk))


def task_timed(agent) -> None:
    try:
        from agents import deletion
    except ImportError:
        return  # the code before the background deletion: the request did it all
    stamps = []
    count = deletion.PurgeOutcome.count

    def timed(self, table, rows):
        stamps.append((time.monotonic(), table))
        count(self, table, rows)

    deletion.PurgeOutcome.count = timed
    started = time.monotonic()
    outcome = deletion.agent_purge(agent_id=agent.pk)
    print(f"task: finished={outcome.finished} in {time.monotonic() - started:.2f} s, {outcome.batches} batches, {outcome.deleted}")
    per_table, last = {}, started
    for at, table in stamps:
        per_table.setdefault(table, []).append(at - last)
        last = at
    for table, seconds in per_table.items():
        print(f"  {table}: {len(seconds)} batches, median {statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms")


agent = agent_build()
request_timed(agent)
task_timed(agent)
