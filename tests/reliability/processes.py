"""Real processes for the failure tests: a Celery worker (with beat), a gunicorn web server and a Redis
of their own, each a subprocess on this test database, stopped or killed when a test says so."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
from django.conf import settings

from tests.indexing.test_worker import redis_or_skip, test_database_url

BASE_DIR = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, *, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class Process:
    def __init__(self, args: list[str], env: dict, log: Path):
        self.log = log
        self._out = open(log, "w")
        # A session of its own: stop() and kill() reach its children too (a worker's beat, gunicorn's workers).
        self.popen = subprocess.Popen(
            args, cwd=BASE_DIR, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.popen.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL to the process and everything it started, as when a machine loses it."""
        self._signal_group(signal.SIGKILL)
        self.popen.wait()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets (the kernel still accepts connections) and answers nothing."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)  # whatever is left of the group
        self.popen.wait()
        self._out.close()

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text()[-4000:]


def service_env(*, queue: str, redis_url: str | None = None, **extra) -> dict:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        "DATABASE_URL": test_database_url(),
        "REDIS_URL": redis_url or settings.REDIS_URL,
        "MEMORYHUB_TASK_QUEUE": queue,
        "MEMORYHUB_TASKS_EAGER": "0",
        "MEMORYHUB_EMBEDDING_PROVIDER": "fake",
        "MEMORYHUB_EMBEDDING_MODEL": "fake-hash",
        "MEMORYHUB_EMBEDDING_DIMENSIONS": "64",
        **{key: str(value) for key, value in extra.items()},
    }


def start_worker(tmp_path: Path, env: dict, *, name: str = "worker") -> Process:
    """A solo-pool worker with the beat scheduler. It reads the queues the settings define for the env's
    MEMORYHUB_TASK_QUEUE (that queue and its background queue), as `make run` and the compose file's worker do."""
    queue = env["MEMORYHUB_TASK_QUEUE"]
    return Process(
        [
            sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--beat", "--schedule", str(tmp_path / f"{name}-beat"),
            "--pool", "solo", "--hostname", f"{name}-{queue}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
        ],
        env,
        tmp_path / f"{name}.log",
    )


@contextlib.contextmanager
def postgres_hung(data_dir: Path):
    """Every process of the embedded PostgreSQL in ``data_dir`` stopped (SIGSTOP) for the block: the server
    accepts connections and answers nothing, as a hung server or a network that drops its replies."""
    postmaster = psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))
    postmaster.send_signal(signal.SIGSTOP)  # first: it starts no process after the list is read
    processes = [postmaster, *postmaster.children(recursive=True)]
    _signal_each(processes[1:], signal.SIGSTOP)
    try:
        yield
    finally:
        _signal_each(processes, signal.SIGCONT)


def _signal_each(processes: list, sig: int) -> None:
    """A process that ended since the list was read (a backend whose client had just closed) is passed over:
    signalling it raised NoSuchProcess, and the test failed now and then."""
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(sig)


def start_web(tmp_path: Path, env: dict) -> tuple[Process, str]:
    """gunicorn as `make run` and the container start it (memoryhub/gunicorn_conf.py: its worker class and
    a pool of database connections per process), with one process of four threads."""
    port = free_port()
    env = {
        "MEMORYHUB_WEB_WORKERS": "1", "MEMORYHUB_WEB_THREADS": "4",
        **env, "DEBUG": "0", "SECRET_KEY": "test-only-secret-key-for-the-reliability-tests",
    }
    process = Process(
        [sys.executable, "-m", "gunicorn", "-c", "python:memoryhub.gunicorn_conf", "memoryhub.wsgi:application",
         "--bind", f"127.0.0.1:{port}"],
        env,
        tmp_path / "web.log",
    )
    return process, f"http://127.0.0.1:{port}"


def web_answers(url: str) -> bool:
    """Whether the web server at ``url`` answers /healthz at all (a 503 while a dependency settles is an answer)."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def api_call(url: str, token: str, method: str = "GET", body=None, content_type: str = "application/json"):
    """(status, JSON body, or the raw body of an error) of one request with ``token``; a dict body is sent as JSON."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url, data=data, method=method, headers={"Authorization": f"Bearer {token}"})
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def start_redis(tmp_path: Path, port: int) -> Process:
    return Process(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        dict(os.environ),
        tmp_path / f"redis-{port}-{uuid.uuid4().hex[:6]}.log",
    )


def unique_queue() -> str:
    redis_or_skip()
    return f"memoryhub-test-{uuid.uuid4().hex[:12]}"


def statement_running(marker: str, params: dict) -> bool:
    """Whether a statement holding ``marker`` still runs in the server, asked by a connection of its own
    (``params``: psycopg's)."""
    import psycopg

    with psycopg.connect(**params, autocommit=True) as other:
        return other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s AND pid <> pg_backend_pid()",
            [f"%{marker}%"],
        ).fetchone()[0] > 0
