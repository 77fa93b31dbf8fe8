"""The embedded PostgreSQL starts from an empty folder and from an existing one, with pgvector."""

import psycopg
import pytest

from memoryhub import embedded_postgres


def vector_version(params: dict) -> str:
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]


@pytest.fixture
def data_dir(tmp_path_factory):
    # Unix socket paths are short; a fresh folder per test under the pytest temp root.
    path = tmp_path_factory.mktemp("pg")
    yield path
    embedded_postgres.stop(path)


def test_it_starts_from_an_empty_folder_and_again_from_the_existing_one(data_dir):
    assert not embedded_postgres.is_running(data_dir)
    params = embedded_postgres.ensure_running(data_dir)
    assert (data_dir / "PG_VERSION").exists()
    assert vector_version(params)
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (value text)")
        conn.execute("INSERT INTO kept VALUES ('still here')")

    assert embedded_postgres.stop(data_dir) is True
    assert not embedded_postgres.is_running(data_dir)
    assert embedded_postgres.stop(data_dir) is False

    params = embedded_postgres.ensure_running(data_dir)  # existing folder: no initdb, data kept
    with psycopg.connect(**params) as conn:
        assert conn.execute("SELECT value FROM kept").fetchone() == ("still here",)


def test_a_running_server_is_reused(data_dir):
    first = embedded_postgres.ensure_running(data_dir)
    second = embedded_postgres.ensure_running(data_dir)
    assert first == second


def _django(data_dir, code: str) -> str:
    import os
    import subprocess
    import sys

    from django.conf import settings

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", "MEMORYHUB_EMBEDDED_POSTGRES_DIR": str(data_dir)}
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_importing_the_settings_starts_no_server_and_the_first_connection_does(data_dir):
    _django(data_dir, "from django.conf import settings; assert settings.DATABASES['default']['HOST'] == ''")
    assert not embedded_postgres.is_running(data_dir)
    assert not (data_dir / "PG_VERSION").exists()

    out = _django(data_dir, "from django.db import connection\nwith connection.cursor() as c:\n    c.execute('SELECT current_database()')\n    print(c.fetchone()[0])")
    assert out.strip() == "memoryhub"
    assert embedded_postgres.is_running(data_dir)


def test_on_a_hung_server_the_check_of_the_database_gives_up_within_its_connect_timeout(data_dir, monkeypatch):
    """ensure_running (make run's first step, the command line) checks that the service's database exists. With
    the server hung (every process stopped), that check waited psycopg's default 130 s; it now gives up after
    CONNECT_TIMEOUT_SECONDS."""
    import time

    from tests.reliability.processes import postgres_hung

    embedded_postgres.ensure_running(data_dir)
    monkeypatch.setattr(embedded_postgres, "CONNECT_TIMEOUT_SECONDS", 2)
    with postgres_hung(data_dir):
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            embedded_postgres.ensure_running(data_dir)
        assert time.monotonic() - started < 10


def test_a_first_connection_to_a_hung_server_ends_with_djangos_error_within_the_connect_timeout(data_dir, django_db_blocker):
    """A process's first connection (memoryhub/embedded_db) checked that the service's database exists, with a
    connection of its own. With the server hung, that check waited psycopg's default 130 s, and its raw psycopg
    error escaped Django's wrapping when a pool was first made: a web request answered 500 after 130 s (seen
    under make run). Bounded since, it still cost each request of a process that had not connected yet its
    whole wait, before the "known down" answer could apply. Now the backend makes no connection of its own to a
    server that runs (embedded_postgres.connection_params): its parameters come at once, and the connection
    itself ends with Django's OperationalError (a 503 for the API) after its connect_timeout."""
    import time

    from django.db import OperationalError

    from memoryhub.embedded_db.base import DatabaseWrapper
    from tests.reliability.processes import postgres_hung

    embedded_postgres.ensure_running(data_dir)
    wrapper = DatabaseWrapper({
        "ENGINE": "memoryhub.embedded_db", "NAME": "memoryhub", "USER": "", "PASSWORD": "", "HOST": "", "PORT": "",
        "OPTIONS": {"connect_timeout": 2}, "EMBEDDED_DATA_DIR": str(data_dir), "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": False, "AUTOCOMMIT": True, "ATOMIC_REQUESTS": False, "TIME_ZONE": None, "TEST": {},
    }, alias="hung")
    with postgres_hung(data_dir):
        started = time.monotonic()
        assert wrapper.get_connection_params()["dbname"] == "memoryhub"
        assert time.monotonic() - started < 1
        with pytest.raises(OperationalError), django_db_blocker.unblock():
            wrapper.ensure_connection()
        assert time.monotonic() - started < 10
