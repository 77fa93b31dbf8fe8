"""PostgreSQL stopped under a running server: the API and /mcp answer 503 with Retry-After in the JSON
error shape (never a 500 or an HTML page), /healthz says the database is down, and once PostgreSQL is
back the same server process answers normally again, without a restart.

A real server (gunicorn, DEBUG off, as deployed: bare, and with memoryhub/gunicorn_conf.py's pool of
connections) on its own throwaway embedded PostgreSQL, so stopping that database does not disturb the rest
of the test session.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from memoryhub import embedded_postgres
from memoryhub.postgresql.reachable import REACHABLE_PROBE_SECONDS
from tests.reliability.processes import BASE_DIR, free_port, postgres_hung



def call(url: str, *, token: str | None = None, method: str = "GET", body: bytes | None = None, content_type="application/json"):
    request = urllib.request.Request(url, data=body, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


# How gunicorn is started: bare (a persistent connection per thread), or as `make run` and the container
# start it (memoryhub/gunicorn_conf.py: a pool of connections per process, whose wait is shortened here,
# though kept well above the try (at most 2 s) of memoryhub/postgresql/reachable.py).
POOL_WAIT_SECONDS = 6
# The longest a request waits for one answer of the database (MEMORYHUB_DB_ANSWER_TIMEOUT, 30 s by default).
ANSWER_LIMIT_SECONDS = 3
# "embedded" is `make run`'s form: no DATABASE_URL, the embedded server's own backend (memoryhub/embedded_db).
POOLED = (["-c", "python:memoryhub.gunicorn_conf"], {"MEMORYHUB_DB_POOL_TIMEOUT": str(POOL_WAIT_SECONDS), "MEMORYHUB_WEB_WORKERS": "1"})
# "pooled-patient": the pooled server with an answer limit longer than the test client waits (30 s), and a
# longer pool wait.
PATIENT_POOL_WAIT_SECONDS = 12
PATIENT = (POOLED[0], {
    **POOLED[1], "MEMORYHUB_DB_ANSWER_TIMEOUT": "60", "MEMORYHUB_DB_POOL_TIMEOUT": str(PATIENT_POOL_WAIT_SECONDS),
})
SERVERS = {"unpooled": ([], {}), "pooled": POOLED, "embedded": POOLED, "pooled-patient": PATIENT}


def server_env(kind: str, data_dir: Path, params: dict) -> dict:
    """The environment of a server of this kind on the database in ``data_dir``."""
    if kind == "embedded":
        database = {"MEMORYHUB_EMBEDDED_POSTGRES_DIR": str(data_dir)}
    else:
        database = {"DATABASE_URL": f"postgresql://postgres@localhost:{params['port']}/{params['dbname']}?host={params['host']}"}
    return {
        **{name: value for name, value in os.environ.items() if name != "DATABASE_URL"},
        **database,
        "DEBUG": "0",
        "SECRET_KEY": "test-only-secret-key-for-the-database-down-test",
        "MEMORYHUB_TASKS_EAGER": "1",
        "MEMORYHUB_DB_ANSWER_TIMEOUT": str(ANSWER_LIMIT_SECONDS),
        "MEMORYHUB_EMBEDDING_PROVIDER": "none",
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        **SERVERS[kind][1],
    }


@contextlib.contextmanager
def gunicorn(kind: str, env: dict, log_dir: Path, *, answers: tuple = (200,)):
    """A server of this kind, once its /healthz answers one of ``answers``: its URL."""
    port = free_port()
    log = open(log_dir / "gunicorn.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *SERVERS[kind][0], "memoryhub.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--threads", "2", "--timeout", "60"],
        cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if call(f"{url}/healthz")[0] in answers:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            pytest.fail(f"the server did not start: {Path(log.name).read_text()}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("pgdown")
    params = embedded_postgres.ensure_running(data_dir)
    env = server_env(request.param, data_dir, params)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=BASE_DIR, env=env, check=True, timeout=300)
    created = subprocess.run([*manage, "create_agent", "db-down"], cwd=BASE_DIR, env=env, check=True, capture_output=True, text=True)
    token = created.stdout.strip().splitlines()[-1]
    try:
        with gunicorn(request.param, env, tmp_path_factory.mktemp("log")) as url:
            yield url, token, data_dir, request.param
    finally:
        embedded_postgres.stop(data_dir)


@pytest.mark.parametrize("server", ["unpooled", "pooled", "embedded"], indirect=True)
def test_with_the_database_stopped_the_api_answers_503_and_recovers_by_itself(server):
    url, token, data_dir, _ = server
    assert call(f"{url}/api/v1/status", token=token)[0] == 200

    embedded_postgres.stop(data_dir)
    try:
        for method, path, body in [
            ("GET", "/api/v1/status", None),
            ("GET", "/api/v1/files", None),
            ("POST", "/api/v1/search", b'{"query": "anything"}'),
            ("PUT", "/api/v1/files/notes/a.md", b'{"content": "hello"}'),
            ("POST", "/api/v1/tools/memory_search", b'{"query": "anything"}'),
        ]:
            status, headers, content = call(f"{url}{path}", token=token, method=method, body=body)
            assert status == 503, (path, status, content)
            assert headers["Retry-After"].isdigit(), path
            assert json.loads(content)["error"]["code"] == "database_unavailable", path

        mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        status, headers, content = call(f"{url}/mcp", token=token, method="POST", body=json.dumps(mcp).encode())
        assert status == 503 and headers["Content-Type"].startswith("application/json"), content
        assert json.loads(content)["error"]["code"] == "database_unavailable"

        status, _, content = call(f"{url}/healthz")
        assert status == 503 and json.loads(content)["database"] != "ok"
    finally:
        embedded_postgres.ensure_running(data_dir)

    deadline = time.monotonic() + 30
    statuses = []
    while time.monotonic() < deadline:
        statuses.append(call(f"{url}/api/v1/status", token=token)[0])
        if statuses[-1] == 200:
            break
        time.sleep(0.5)
    assert statuses[-1] == 200, statuses
    status, _, content = call(f"{url}/api/v1/files/notes/b.md", token=token, method="PUT", body=b'{"content": "back"}')
    assert status == 201, content


# Long enough for psycopg_pool's own spacing of its attempts (1, 2, 4, 8, 16, 32 s … after the first failure,
# up to its reconnect_timeout) to leave its next attempt well after the database's return.
LONG_OUTAGE_SECONDS = 70
BACK_WITHIN_SECONDS = 15


def answers_again_soon(url: str, token: str) -> None:
    """The database has just been started again: the server answers within BACK_WITHIN_SECONDS."""
    back = time.monotonic()
    while call(f"{url}/api/v1/status", token=token)[0] != 200:
        assert time.monotonic() - back < BACK_WITHIN_SECONDS, "the server still answers 503"
        time.sleep(0.5)


def searches_unavailable(url: str, token: str, count: int = 3) -> list[float]:
    """``count`` searches, one after the other, each answered ``503 database_unavailable``: how long each took."""
    waits = []
    for _ in range(count):
        started = time.monotonic()
        status, _, content = call(f"{url}/api/v1/search", token=token, method="POST", body=b'{"query": "anything"}')
        waits.append(round(time.monotonic() - started, 1))
        assert status == 503 and json.loads(content)["error"]["code"] == "database_unavailable", content
    return waits


@pytest.mark.parametrize("server", ["pooled"], indirect=True)  # a bare server connects at each request
def test_after_a_long_outage_the_pooled_server_answers_soon_after_the_database_is_back(server):
    """With psycopg_pool's defaults, after 70 s without a database the pooled server still answered 503 17 s
    after the database was back (the test's bound: 15 s), waiting for the pool's next spaced-out attempt. The
    pool now gives an attempt up after POOL_RECONNECT_SECONDS (memoryhub/settings.py) and starts a new one,
    its first try at once, when a request waits: the first request after the restart was answered (2026-11-29)."""
    url, token, data_dir, _ = server
    assert call(f"{url}/api/v1/status", token=token)[0] == 200
    embedded_postgres.stop(data_dir)
    stopped = time.monotonic()
    try:
        while time.monotonic() - stopped < LONG_OUTAGE_SECONDS:
            assert call(f"{url}/api/v1/status", token=token)[0] == 503
            time.sleep(1)
    finally:
        embedded_postgres.ensure_running(data_dir)
    answers_again_soon(url, token)


@pytest.mark.parametrize("server", ["pooled", "embedded"], indirect=True)
def test_while_the_database_is_down_the_pooled_server_waits_for_its_pool_once_then_answers_at_once(server):
    """Before, every request of a pooled server waited the pool's whole timeout for a connection that could
    not open (10 s by default, seen under make run), holding one of its threads all that time. Now the first
    request's wait finds the database down, and the next ones are answered 503 at once, with one connection
    try of the process's own every REACHABLE_PROBE_SECONDS (memoryhub/postgresql/reachable.py) telling when
    the database is back."""
    url, token, data_dir, _ = server
    assert call(f"{url}/api/v1/status", token=token)[0] == 200
    embedded_postgres.stop(data_dir)
    try:
        assert call(f"{url}/api/v1/status", token=token)[0] == 503  # the pool's wait, then a try
        waits = []
        for _ in range(8):  # over 8 s: past REACHABLE_PROBE_SECONDS, so a new try is among them
            started = time.monotonic()
            status, headers, content = call(f"{url}/api/v1/search", token=token, method="POST", body=b'{"query": "x"}')
            waits.append(round(time.monotonic() - started, 2))
            assert status == 503 and headers["Retry-After"].isdigit(), content
            assert json.loads(content)["error"]["code"] == "database_unavailable"
            time.sleep(1)
        assert max(waits) < POOL_WAIT_SECONDS / 2, waits
    finally:
        embedded_postgres.ensure_running(data_dir)
    answers_again_soon(url, token)


@pytest.mark.parametrize("server", ["unpooled", "pooled"], indirect=True)
def test_a_database_that_hangs_is_answered_503_within_seconds_and_the_server_recovers(server):
    """Every process of the database stopped (SIGSTOP): connections are accepted and nothing is answered,
    as with a hung server or a network that drops the replies. Before, a search and /healthz waited without
    end (neither answered within the client's 30 s). Now each wait for the database ends after
    MEMORYHUB_DB_ANSWER_TIMEOUT (2 s for /healthz), and new connections after their connect timeout
    (memoryhub/postgresql/wait_limit.py). The first request's wait finds the database down, and the next ones
    are answered at once: the bare server's /healthz and next search waited their connect timeout (10 s) too
    until its timed-out connection counted as a try that found the database down
    (memoryhub/postgresql/reachable.py)."""
    url, token, data_dir, _ = server
    search = {"token": token, "method": "POST", "body": b'{"query": "anything"}'}
    assert call(f"{url}/api/v1/search", **search)[0] == 200
    with postgres_hung(data_dir):
        waits = []
        for path, options in [("/api/v1/search", search), ("/healthz", {}), ("/api/v1/search", search)]:
            started = time.monotonic()
            status, headers, content = call(f"{url}{path}", **options)
            waits.append(round(time.monotonic() - started, 1))
            assert status == 503, (path, status, content)
            if path != "/healthz":
                assert json.loads(content)["error"]["code"] == "database_unavailable", content
                assert headers["Retry-After"].isdigit()
        assert waits[0] < 25 and max(waits[1:]) < 1, waits
    answers_again_soon(url, token)


@pytest.mark.parametrize("server", ["pooled-patient"], indirect=True)
def test_a_hung_database_costs_a_pooled_process_its_pool_wait_not_the_whole_answer_limit(server):
    """The pool checks each connection it hands out (an empty query). During a hang that check waited the
    request's whole answer limit (30 s by default: the first search of each web process under make run
    answered 503 after 32 s; here the limit is 60 s, and the client gave up at 30 s). The check now waits
    POOL_CHECK_SECONDS (memoryhub/postgresql/base.py), so the first request waits the pool's wait, as it does
    when the database is stopped, and the next ones are answered at once."""
    url, token, data_dir, _ = server
    search = {"token": token, "method": "POST", "body": b'{"query": "anything"}'}
    assert call(f"{url}/api/v1/search", **search)[0] == 200
    with postgres_hung(data_dir):
        waits = searches_unavailable(url, token)
        assert waits[0] < PATIENT_POOL_WAIT_SECONDS + 10 and max(waits[1:]) < 1, waits
    answers_again_soon(url, token)


@pytest.mark.parametrize("server", ["pooled-patient"], indirect=True)
def test_healthz_tells_a_hung_database_within_seconds_and_the_next_requests_are_answered_at_once(server):
    """/healthz as a web process's first request of a hang answered after the pool's wait (10.1 s under make run),
    though it waits 2 s for the database's answer: the pool's wait came first. It now tries a connection of its
    own first (memoryhub/postgresql/reachable.py, at most one every 5 s), which finds the database down within
    2 s, and the process's next requests are answered at once."""
    url, token, data_dir, _ = server
    assert call(f"{url}/healthz")[0] == 200
    time.sleep(REACHABLE_PROBE_SECONDS)  # the last try's answer ("up") no longer holds
    with postgres_hung(data_dir):
        started = time.monotonic()
        status, _, content = call(f"{url}/healthz")
        took = time.monotonic() - started
        assert status == 503 and json.loads(content)["database"] == "unreachable", content
        assert took < PATIENT_POOL_WAIT_SECONDS / 2, f"/healthz answered after {took:.1f} s"
        started = time.monotonic()
        status, _, content = call(f"{url}/api/v1/search", token=token, method="POST", body=b'{"query": "x"}')
        assert status == 503 and time.monotonic() - started < 1, content
    answers_again_soon(url, token)


@pytest.mark.parametrize("server", ["embedded"], indirect=True)
def test_a_web_process_started_during_a_hang_answers_at_once_after_its_first_wait(server, tmp_path):
    """Under make run a web process that starts while the database hangs (a worker recycled, or a restart) had
    not connected yet, so each of its requests first asked the embedded server whether the service's database
    exists: a connection that waited its whole connect timeout (10 s) every time, before the "known down"
    answer (memoryhub/postgresql/reachable.py) could apply, and /healthz's try waited as long. Now the backend
    asks no such question of a server that runs (embedded_postgres.connection_params): /healthz finds the
    database down within its try's 2 s, and the requests after it are answered at once."""
    url, token, data_dir, kind = server
    assert call(f"{url}/healthz")[0] == 200
    with postgres_hung(data_dir):
        env = server_env(kind, data_dir, {})
        with gunicorn(kind, env, tmp_path, answers=(200, 503)) as second:
            time.sleep(REACHABLE_PROBE_SECONDS)  # the answer of the try made by the first /healthz no longer holds
            started = time.monotonic()
            status, _, content = call(f"{second}/healthz")
            assert status == 503 and time.monotonic() - started < 5, (status, time.monotonic() - started)
            waits = searches_unavailable(second, token)
            assert max(waits) < 1, waits
    answers_again_soon(url, token)
