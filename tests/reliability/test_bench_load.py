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
    finally:
        process.stop()


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
