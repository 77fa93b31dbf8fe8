"""bench_load runs end to end against a live gunicorn (a few seconds), so the benchmark the README's
figures come from cannot rot."""

import io
import json

import pytest
from django.core.management import call_command

from tests.reliability.test_load_server import start_gunicorn


@pytest.mark.django_db(transaction=True)
def test_bench_load_mixed_and_noisy_runs_report_latencies_and_no_server_errors(tmp_path):
    process, url = start_gunicorn(tmp_path, MEMORYHUB_WEB_WORKERS=1, MEMORYHUB_WEB_THREADS=4)
    try:
        out = io.StringIO()
        call_command("bench_load", url=url, clients=4, duration=2, agents=3, notes=3, json=True, stdout=out)
        report = json.loads(out.getvalue())
        assert report["total"]["requests"] > 0 and report["total"]["server_errors"] == 0, report
        assert {"search", "upload"} <= set(report)
        assert report["search"]["p50_ms"] <= report["search"]["p95_ms"] <= report["search"]["p99_ms"]

        out = io.StringIO()
        call_command("bench_load", url=url, clients=4, duration=2, notes=3, noisy=True, rounds=2, json=True, stdout=out)
        noisy = json.loads(out.getvalue())
        assert noisy["quiet"]["victim_search"]["requests"] > 0
        assert noisy["noisy"]["victim_search"]["server_errors"] == 0
        for phase in ("quiet", "noisy"):  # the victim's own token: every search answered
            assert set(noisy[phase]["victim_search"]["statuses"]) == {"200"}, noisy
        assert noisy["victim_p95_ratio"] > 0

        out = io.StringIO()
        call_command(
            "bench_load", url=url, clients=3, duration=2, notes=2, noisy_indexing=True, victim_rate=2, flood_rate=10,
            json=True, stdout=out,
        )
        indexing = json.loads(out.getvalue())
        for phase in ("quiet", "noisy"):
            victim = indexing[phase]["victim_indexed"]
            # Every timed upload ended with its job done (a job that failed or never finished counts as 0).
            assert victim["requests"] > 0 and "0" not in victim["statuses"], indexing
        assert indexing["noisy"]["noisy_upload"]["server_errors"] == 0
        assert indexing["victim_p95_ratio"] > 0

        # Tasks run eagerly here: the backlog is worked off as it is queued, the run only has to complete.
        out = io.StringIO()
        call_command("bench_load", url=url, notes=2, reindex_backlog=3, victim_rate=4, duration=1, json=True, stdout=out)
        backlog = json.loads(out.getvalue())
        assert backlog["backlog_jobs"] == 3 and backlog["backlog_worked_off_s"] is not None, backlog
        for phase in ("quiet", "backlog"):
            victim = backlog[phase]["victim_indexed"]
            assert victim["requests"] > 0 and "0" not in victim["statuses"], backlog
        assert len(backlog["backlog_waiting_at_upload"]) == backlog["backlog"]["victim_indexed"]["requests"]
    finally:
        process.stop()


def test_a_reindex_backlog_queues_each_agents_reembedding_in_the_background_and_it_calls_the_provider(
    alice, bob, fake_embeddings, monkeypatch, django_capture_on_commit_callbacks
):
    """--reindex-backlog's model change: the named files' chunks under another identity and none of their
    texts in the cache, then one re-embedding job per agent, sent to the background queue; running the
    jobs embeds every chunk again (a backlog answered from the cache would measure nothing)."""
    from django.conf import settings

    from benchmarks.management.commands.bench_load import reembedding_backlog_queue
    from indexing import recovery
    from indexing.models import Chunk, IndexJob, MemoryFile
    from indexing.tasks import index_job_task
    from indexing.writes import file_ingest

    paths = ["notes/n000.md", "notes/n001.md"]
    with django_capture_on_commit_callbacks(execute=True):  # indexed eagerly, on commit
        for member in (alice, bob):
            for path in [*paths, "memory/left-alone.md"]:
                file_ingest(agent=member.agent, path=path, content=f"{member.agent.slug} wrote {path} about the blue tent")
    assert set(MemoryFile.objects.values_list("state", flat=True)) == {"indexed"}
    fake_embeddings.reset_counts()
    published: list[tuple[int, str]] = []
    monkeypatch.setattr(recovery, "_publish", lambda job_id, queue: published.append((job_id, queue)))

    with django_capture_on_commit_callbacks(execute=True):
        jobs = reembedding_backlog_queue(agent_ids=[alice.agent.pk, bob.agent.pk], paths=paths)

    background = f"{settings.CELERY_TASK_DEFAULT_QUEUE}.background"
    assert published == [(job, background) for job in jobs] and len(jobs) == 2
    queued = IndexJob.objects.filter(pk__in=jobs)
    assert sorted(queued.values_list("agent_id", "trigger", "state", "files_seen")) == sorted(
        (member.agent.pk, "reindex", "queued", 2) for member in (alice, bob)
    )
    assert set(MemoryFile.objects.filter(path__in=paths).values_list("state", flat=True)) == {"pending"}
    assert MemoryFile.objects.get(agent=alice.agent, path="memory/left-alone.md").state == "indexed"
    assert fake_embeddings.calls == 0

    for job in jobs:
        index_job_task(job)
    assert set(queued.values_list("state", flat=True)) == {"done"}
    assert (fake_embeddings.calls, fake_embeddings.texts_embedded) == (2, 4)  # one call per job, every chunk
    assert set(Chunk.objects.values_list("embedding_identity", flat=True)) == {"fake:fake-hash:64"}


def test_a_reindex_backlog_refuses_chunks_of_another_identity_than_the_checkouts(alice, settings, fake_embeddings, django_capture_on_commit_callbacks):
    """The command publishes the jobs itself: run with other embedding settings than the server's, it
    would relabel and queue under an identity the server does not have."""
    from django.core.management.base import CommandError

    from benchmarks.management.commands.bench_load import reembedding_backlog_queue
    from indexing.models import IndexJob
    from indexing.writes import file_ingest

    with django_capture_on_commit_callbacks(execute=True):
        file_ingest(agent=alice.agent, path="notes/n000.md", content="the blue tent")
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 32
    with pytest.raises(CommandError, match="fake:fake-hash:32"):
        reembedding_backlog_queue(agent_ids=[alice.agent.pk], paths=["notes/n000.md"])
    assert not IndexJob.objects.filter(trigger="reindex").exists()


def test_a_flood_that_obeys_retry_after_waits_as_told():
    """--flood-obeys-retry-after: a client answered 429 waits its Retry-After; the default flood sends on."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from benchmarks.management.commands.bench_load import Command

    class TooMany(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": {"code": "rate_limited"}}'
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), TooMany)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        def pick():
            return ("flood", "POST", "/api/v1/search", "token", b"{}", "application/json", 0)

        polite = Command()._run(url, [pick] * 2, 1.5, 5, obey_retry_after=True)["flood"]
        rude = Command()._run(url, [pick] * 2, 1.5, 5)["flood"]
    finally:
        server.shutdown()
    assert set(polite.statuses) == {429} and len(polite.latencies) <= 4  # two clients, one try a second each
    assert len(rude.latencies) > 20
