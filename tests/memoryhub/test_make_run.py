"""`make run` as a newcomer meets it: `python -m memoryhub.run` (what the target starts) on a database of
its own, started twice. The banner says search is keyword-only and how to get vectors; the second start
hands out a new demo token and the first one stops working; an unknown API route answers the JSON error
shape although make run serves with DEBUG=1."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from memoryhub.run import search_mode_lines
from tests.reliability.processes import free_port, unique_queue, wait_for

BASE_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_database(django_db_setup, django_db_blocker):
    """A fresh database on the test server, dropped afterwards: make run migrates and writes its demo agent."""
    with django_db_blocker.unblock():
        connection.ensure_connection()  # the embedded server's socket is known once it is connected
    db = connection.settings_dict
    params = {"host": db["HOST"], "port": db["PORT"] or "5432", "user": db["USER"], "password": db["PASSWORD"]}
    name = f"memoryhub_run_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**params, dbname="postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    if params["host"].startswith("/"):
        url = f"postgresql://{credentials}@localhost:{params['port']}/{name}?host={quote(params['host'])}"
    else:
        url = f"postgresql://{credentials}@{params['host']}:{params['port']}/{name}"
    yield url
    with psycopg.connect(**params, dbname="postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class MakeRun:
    def __init__(self, *, database_url: str | None, port: int, log: Path, **extra_env: str):
        """``database_url`` None: the embedded database (give MEMORYHUB_EMBEDDED_POSTGRES_DIR)."""
        self.port, self.log = port, log
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYHUB_", "OPENAI_", "DJANGO_", "DATABASE_"))}
        if database_url:
            env["DATABASE_URL"] = database_url
        env.update(
            PORT=str(port), DEBUG="1", MEMORYHUB_EMBEDDING_PROVIDER="none",
            REDIS_URL="redis://127.0.0.1:1/0",  # no broker: tasks run in the web process, no worker to start
            MEMORYHUB_WEB_WORKERS="1", MEMORYHUB_LOG_FORMAT="text",
        )
        env.update(extra_env)
        self._out = open(log, "w")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "memoryhub.run"], cwd=BASE_DIR, env=env, stdout=self._out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for(lambda: "serving on" in self.output() or self.popen.poll() is not None, timeout=180, what="make run")
        assert self.popen.poll() is None, self.output()

    def output(self) -> str:
        return self.log.read_text()

    def token(self) -> str:
        lines = self.output().splitlines()
        return next(lines[i + 1] for i, line in enumerate(lines) if "demo agent token" in line)

    def get(self, path: str, token: str, *, method: str = "GET", body: bytes | None = None) -> tuple[int, str, str]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=body, method=method,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "text/markdown"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.headers["Content-Type"], response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # no answer (yet)
            return 0, "", ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)  # as Ctrl-C: run.py stops what it started
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait()
        self._out.close()


def test_make_run_twice_keeps_one_demo_token_and_says_search_is_keyword_only(run_database, tmp_path):
    first = MakeRun(database_url=run_database, port=free_port(), log=tmp_path / "first.log")
    try:
        old_token = first.token()
        wait_for(lambda: first.get("/api/v1/status", old_token)[0] == 200, timeout=60, what="the web server")
        banner = first.output()
        assert "search is keyword-only" in banner
        assert "OPENAI_API_KEY" in banner and "make install-local" in banner
        assert "MEMORYHUB_EMBEDDING_PROVIDER=local" in banner

        status, content_type, body = first.get("/api/v1/no-such-route", old_token)
        assert (status, content_type) == (404, "application/json")
        assert json.loads(body)["error"]["code"] == "not_found"
    finally:
        first.stop()

    second = MakeRun(database_url=run_database, port=free_port(), log=tmp_path / "second.log")
    try:
        new_token = second.token()
        assert new_token != old_token
        assert "the one an earlier `make run` printed is now revoked" in second.output()
        wait_for(lambda: second.get("/api/v1/status", new_token)[0] == 200, timeout=60, what="the web server")
        assert second.get("/api/v1/status", old_token)[0] == 401
    finally:
        second.stop()


def _worker_pids(parent: int) -> set[int]:
    """The Celery worker main processes make run started (its direct children running celery)."""
    found = subprocess.run(["pgrep", "-P", str(parent), "-f", "celery"], capture_output=True, text=True)
    return {int(pid) for pid in found.stdout.split()}


@pytest.mark.worker
def test_make_run_starts_a_killed_worker_again_and_the_new_one_indexes(run_database, tmp_path):
    run = MakeRun(
        database_url=run_database, port=free_port(), log=tmp_path / "run.log",
        REDIS_URL=settings.REDIS_URL, MEMORYHUB_TASK_QUEUE=unique_queue(),
    )
    try:
        assert "Celery worker started" in run.output()
        token = run.token()
        wait_for(lambda: len(_worker_pids(run.popen.pid)) == 1, timeout=30, what="the worker process")
        (first,) = _worker_pids(run.popen.pid)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: "starting it again" in run.output(), timeout=30, what=f"the restart:\n{run.output()[-2000:]}")
        wait_for(lambda: len(_worker_pids(run.popen.pid)) == 1, timeout=30, what="the new worker process")
        assert _worker_pids(run.popen.pid) != {first} and run.popen.poll() is None

        status, _, body = run.get("/api/v1/files/notes/after-restart.md", token, method="PUT", body=b"Indexed by the new worker.")
        assert status == 201, body
        wait_for(
            lambda: json.loads(run.get("/api/v1/status", token)[2]).get("pending") == 0,
            timeout=120, what=f"the new worker to index the upload:\n{run.output()[-3000:]}",
        )
    finally:
        run.stop()


@pytest.mark.parametrize("how", ["stopped by hand", "killed"])
def test_make_run_starts_its_embedded_database_again_when_it_exits(tmp_path_factory, tmp_path, how):
    """Before, make run watched its web server and worker but not the embedded database: once its server exited,
    every request answered 503 until some process opening its first connection happened to start it again."""
    from memoryhub import embedded_postgres

    data_dir = tmp_path_factory.mktemp("pg")  # short: the server's socket lives there
    run = MakeRun(database_url=None, port=free_port(), log=tmp_path / "run.log", MEMORYHUB_EMBEDDED_POSTGRES_DIR=str(data_dir))
    try:
        token = run.token()
        wait_for(lambda: run.get("/api/v1/status", token)[0] == 200, timeout=60, what="the web server")
        if how == "killed":
            os.kill(int((data_dir / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)
        else:
            embedded_postgres.stop(data_dir)
        time.sleep(1)
        wait_for(lambda: run.get("/api/v1/status", token)[0] == 200, timeout=60,
                 what=f"the web server to answer again:\n{run.output()[-2000:]}")
        assert "the embedded PostgreSQL exited; starting it again" in run.output()
        status, _, body = run.get("/api/v1/files/notes/after-restart.md", token, method="PUT", body=b"Written after the restart.")
        assert status == 201, body
    finally:
        run.stop()
    assert "embedded PostgreSQL stopped" in run.output()  # Ctrl-C stops the server it started again
    assert not embedded_postgres.postmaster_alive(data_dir)


def test_the_banner_names_an_active_provider_and_its_model():
    (line,) = search_mode_lines(provider="openai", model="text-embedding-3-small", dimensions=1536)
    assert "hybrid" in line and "openai" in line and "text-embedding-3-small" in line and "1536" in line


def test_the_banner_says_when_the_models_window_will_be_measured():
    line, probe = search_mode_lines(provider="openai", model="my-embedder", dimensions=384, window_probed=True)
    assert "my-embedder" in probe and "measures its input window" in probe
    assert len(search_mode_lines(provider="openai", model="all-MiniLM-L6-v2", dimensions=384)) == 1
