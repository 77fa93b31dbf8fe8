"""The server `make run` and the container start (gunicorn with memoryhub/gunicorn_conf.py) under more
clients than it has threads: no 5xx, database connections bounded by workers x threads, and when the
pool is exhausted for longer than its timeout a clear 503 server_busy with Retry-After — after which
it answers normally again by itself."""

import concurrent.futures
import json
import sys
import time
import urllib.error
import urllib.request

import pytest
from django.db import connection

from tests.reliability.processes import BASE_DIR, Process, free_port, service_env, unique_queue, wait_for


APPLICATION_NAME = "memoryhub-load-test"


def start_gunicorn(tmp_path, *args, **extra):
    """gunicorn as `make run` starts it; `args` are more command-line options (they override the config)."""
    port = free_port()
    # One token floods here on purpose: the per-token cap on requests in progress (its own test:
    # test_concurrency_cap.py) would answer 429 before the pool is ever reached.
    extra = {"MEMORYHUB_TOKEN_MAX_CONCURRENT": "0", **extra}
    env = service_env(queue=unique_queue(), DEBUG="0", SECRET_KEY="test-only-key", MEMORYHUB_TASKS_EAGER="1", **extra)
    # Its connections are told apart from every other client of the test database by their name.
    env["DATABASE_URL"] += f"&application_name={APPLICATION_NAME}" if "?" in env["DATABASE_URL"] else f"?application_name={APPLICATION_NAME}"
    process = Process(
        [sys.executable, "-m", "gunicorn", "-c", "python:memoryhub.gunicorn_conf", "--bind", f"127.0.0.1:{port}", *args, "memoryhub.wsgi:application"],
        env, tmp_path / "gunicorn.log",
    )
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _status(f"{url}/healthz") != 0, timeout=60, what="gunicorn")
    return process, url


def _status(url, token=None, body=None):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return (exc.code, exc.headers.get("Retry-After"), json.loads(exc.read())["error"]["code"]) if exc.code >= 500 else exc.code
    except OSError:
        return 0


def server_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APPLICATION_NAME])
        return cursor.fetchone()[0]


def flood(url, token, *, clients: int, seconds: float) -> list:
    body = json.dumps({"query": "spare key drawer"}).encode()
    stop = time.monotonic() + seconds

    def client():
        answers = []
        while time.monotonic() < stop:
            answers.append(_status(f"{url}/api/v1/search", token, body))
        return answers

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return [answer for answers in pool.map(lambda _: client(), range(clients)) for answer in answers]


@pytest.mark.django_db(transaction=True)
def test_more_clients_than_threads_get_answers_not_errors_and_connections_stay_bounded(alice, tmp_path, settings):
    alice.client.put("/api/v1/files/notes/a.md", "The spare key is in the drawer.", content_type="text/markdown")
    process, url = start_gunicorn(tmp_path, MEMORYHUB_WEB_WORKERS=2, MEMORYHUB_WEB_THREADS=3, MEMORYHUB_RATE_LIMIT_SEARCH="0")
    try:
        peak = 0
        with concurrent.futures.ThreadPoolExecutor(1) as watcher:
            future = watcher.submit(flood, url, alice.raw_token, clients=24, seconds=4)
            while not future.done():
                peak = max(peak, server_connections())
                time.sleep(0.1)
            answers = future.result()
        assert answers and set(answers) == {200}, {a for a in answers if a != 200}
        # Per worker one connection per thread and one per search helper (search/beside.py, 2 by default).
        assert peak <= 2 * (3 + 2), f"{peak} connections for 2 workers x (3 threads + 2 search helpers)"
        assert _status(f"{url}/api/v1/status", alice.raw_token) == 200
    finally:
        process.stop()


@pytest.mark.django_db(transaction=True)
def test_an_exhausted_pool_answers_503_server_busy_and_recovers(alice, tmp_path):
    alice.client.put("/api/v1/files/notes/a.md", "The spare key is in the drawer.", content_type="text/markdown")
    # One connection for 32 threads, and little patience: the flood must exhaust it. One token floods,
    # so its cap on requests in progress is off (else that cap answers 429 before the pool is reached).
    process, url = start_gunicorn(
        tmp_path, MEMORYHUB_WEB_WORKERS=1, MEMORYHUB_WEB_THREADS=32, MEMORYHUB_DB_POOL_SIZE=1,
        MEMORYHUB_DB_POOL_TIMEOUT=0.1, MEMORYHUB_RATE_LIMIT_SEARCH="0", MEMORYHUB_TOKEN_MAX_CONCURRENT="0",
    )
    try:
        answers = flood(url, alice.raw_token, clients=48, seconds=4)
        busy = [a for a in answers if a != 200]
        assert busy, "the pool was never exhausted"
        assert {a[0] for a in busy} == {503} and {a[2] for a in busy} == {"server_busy"}, set(busy)
        assert all(a[1] and a[1].isdigit() for a in busy)
        assert 200 in answers
        time.sleep(0.5)
        assert [_status(f"{url}/api/v1/status", alice.raw_token) for _ in range(5)] == [200] * 5
    finally:
        process.stop()
