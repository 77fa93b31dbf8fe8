"""The first searches after a start with the `local` provider, and the memory of every process.

    .venv/bin/python benchmarks/warm_start.py            # MEMORYHUB_EMBEDDING_WARM_UP=1 (the default)
    .venv/bin/python benchmarks/warm_start.py --cold     # the model loads on first use, per process

Starts `python -m memoryhub.run` (gunicorn 2 processes + a Celery worker of 2 processes, the embedded
PostgreSQL of this checkout, Redis on REDIS_URL, a task queue of its own) with
MEMORYHUB_EMBEDDING_PROVIDER=local, uploads one memory file, waits until it is searchable, then sends
ten different searches one after the other and prints each one's wall time and mode (a query embedding
slower than MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT falls back to keywords). Then it prints RSS, USS
(memory only that process holds) and PSS (shared pages divided among their users; the PSS of all
processes adds up to what the service uses) of every process of the service, and stops it.
Needs `make install-local`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil

BASE_DIR = Path(__file__).resolve().parents[1]
KEY_PREFIX = "memoryhub:query-breaker"  # search/query_breaker.py
IDENTITY = "local:all-MiniLM-L6-v2:384"
NOTES = "\n".join(
    [
        "# Project notes",
        "",
        "The billing service deploys every Tuesday after the standup.",
        "Alice owns the database migration plan for the invoices table.",
        "We store the deploy key in the team vault, never in the repository.",
        "The quarterly roadmap review moved to the first Monday of the month.",
        "Bob prefers short status reports written in plain language.",
    ]
)
QUERIES = [
    "when does billing deploy", "who owns the migration plan", "where is the deploy key kept",
    "when is the roadmap review", "what kind of status reports does Bob like", "invoices table migration",
    "vault secrets policy", "standup schedule", "monthly review meeting", "plain language reports",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port: int, method: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="MEMORYHUB_EMBEDDING_WARM_UP=0")
    options = parser.parse_args()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYHUB_", "OPENAI_", "DJANGO_"))}
    env.update(
        PORT=str(port), MEMORYHUB_EMBEDDING_PROVIDER="local", HF_HUB_OFFLINE="1", MEMORYHUB_LOG_FORMAT="text",
        MEMORYHUB_EMBEDDING_WARM_UP="0" if options.cold else "1",
        MEMORYHUB_TASK_QUEUE=f"warm-start-{uuid.uuid4().hex[:8]}",  # no other worker on this Redis takes our jobs
    )
    # A breaker left open by an earlier run (its state lives in Redis for the cool-down) would skip the
    # query embedding altogether.
    import redis

    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    client.delete(*(f"{KEY_PREFIX}:{IDENTITY}:{key}" for key in ("failures", "open", "probe")))
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    started = time.monotonic()
    run = subprocess.Popen([sys.executable, "-m", "memoryhub.run"], cwd=BASE_DIR, env=env, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def output() -> str:
            return Path(log.name).read_text()

        while "serving on" not in output():
            if run.poll() is not None or time.monotonic() - started > 600:
                print(output()[-3000:])
                return 1
            time.sleep(0.2)
        lines = output().splitlines()
        token = next(lines[i + 1] for i, line in enumerate(lines) if "demo agent token" in line)
        while call(port, "GET", "/api/v1/status", token)[0] != 200 if _up(port) else True:
            time.sleep(0.2)
        ready = time.monotonic() - started
        # New text each run, so the worker embeds (nothing comes from the embedding cache).
        content = f"{NOTES}\nRun {uuid.uuid4().hex} of the warm-start benchmark."
        status, _ = call(port, "PUT", "/api/v1/files/memory/notes.md", token, {"content": content})
        assert status in (200, 201, 202), status
        while True:
            body = call(port, "GET", "/api/v1/status", token)[1]
            if body.get("pending") == 0 and body.get("awaiting_vectors", 0) == 0:
                break
            if body.get("failed"):
                print(f"indexing failed: {body}")
                return 1
            time.sleep(0.2)
        indexed = time.monotonic() - started
        assert body["embedding"]["vector_search"] and body["chunks"], body
        print(f"warm-up {'off' if options.cold else 'on'}: API answering {ready:.1f} s after launch, "
              f"file searchable with vectors {indexed:.1f} s after launch")
        for number, query in enumerate(QUERIES, 1):
            t0 = time.monotonic()
            status, body = call(port, "POST", "/api/v1/search", token, {"query": query})
            print(f"  search {number:2d}: {1000 * (time.monotonic() - t0):7.0f} ms  HTTP {status}  mode={body.get('mode')}"
                  f"  took_ms={body.get('took_ms')}")
        print("  process                                       RSS MB   USS MB   PSS MB")
        total = 0.0
        for process in [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]:
            try:
                info = process.memory_full_info()
                name = " ".join(process.cmdline()[1:5])[:44]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            total += info.pss
            print(f"  {process.pid:>7} {name:<36} {info.rss / 2**20:8.0f} {info.uss / 2**20:8.0f} {info.pss / 2**20:8.0f}")
        print(f"  total PSS: {total / 2**20:.0f} MB")
        return 0
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGTERM)
            try:
                run.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.unlink(log.name)


def _up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
