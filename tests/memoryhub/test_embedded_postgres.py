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
