"""memoryhub/postgresql/wait_limit.py: within a limit, a wait for the database's answer ends with an
OperationalError and the connection closed; outside one (Celery tasks, commands) a query takes its time.
The hung database itself, under a real server: tests/reliability/test_database_down.py."""

import time

import pytest
from django.db import OperationalError, connection

from memoryhub.postgresql.wait_limit import LimitedConnection, wait_limit, wait_limit_at_most
from tests.reliability.processes import statement_running, wait_for


@pytest.mark.django_db
def test_a_wait_past_the_limit_ends_and_closes_the_connection():
    connection.ensure_connection()
    assert isinstance(connection.connection, LimitedConnection)
    with wait_limit(5), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.1)")  # within the limit: answered
    started = time.monotonic()
    with pytest.raises(OperationalError, match=r"did not answer within 0.5 s \(MEMORYHUB_DB_ANSWER_TIMEOUT\)"), wait_limit(0.5):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(3)")
    assert time.monotonic() - started < 2.5
    assert connection.connection.closed


@pytest.mark.django_db
def test_without_a_limit_a_query_takes_its_time():
    with wait_limit(None), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.6)")
    with connection.cursor() as cursor:  # no limit set at all: a task's or a command's query
        cursor.execute("SELECT pg_sleep(0.6)")
        assert cursor.fetchone() == ("",)  # pg_sleep's void: answered


@pytest.mark.django_db
def test_a_shorter_limit_for_one_wait_names_itself():
    """The pool's check of a connection (memoryhub/postgresql/base.py) waits a shorter time than its request."""
    with wait_limit(30), wait_limit_at_most(5, why="a check"), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.1)")
    with pytest.raises(OperationalError, match=r"did not answer within 0.5 s \(a check\)"):
        with wait_limit(30), wait_limit_at_most(0.5, why="a check"), connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(3)")


@pytest.mark.django_db
def test_a_shorter_limit_for_one_wait_keeps_a_shorter_one_and_adds_none_where_there_was_none():
    with wait_limit_at_most(0.5, why="a check"), connection.cursor() as cursor:  # no limit: none added
        cursor.execute("SELECT pg_sleep(0.7)")
    with pytest.raises(OperationalError, match=r"within 0.5 s \(MEMORYHUB_DB_ANSWER_TIMEOUT\)"):
        with wait_limit(0.5), wait_limit_at_most(5, why="a check"), connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(3)")


@pytest.mark.django_db(transaction=True)
def test_a_statement_cut_by_the_limit_does_not_run_on_in_the_server(settings):
    """The limit closes the connection, and the server's backend went on with the statement until it ended (it
    notices a client gone only when it next reads or writes): a request that gave up still held the database's
    work. Each connection now asks the server to check its client every MEMORYHUB_DB_CLIENT_CHECK_SECONDS
    (PostgreSQL's client_connection_check_interval), which ends the statement within that time."""
    settings.MEMORYHUB_DB_CLIENT_CHECK_SECONDS = 1
    connection.close()
    connection.ensure_connection()  # a connection of its own, configured as the service's are
    marker = "cut-by-the-limit-test"
    try:
        with pytest.raises(OperationalError), wait_limit(0.5), connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_sleep(20) /* {marker} */")
        assert connection.connection.closed
        params = connection.get_connection_params()
        wait_for(lambda: not statement_running(marker, params), timeout=4, what="the statement to end")
    finally:
        connection.close()  # the test's teardown gets a connection of its own


@pytest.mark.django_db
def test_the_statement_of_a_killed_process_ends_in_the_server():
    """A process killed in the middle of a statement (gunicorn ends a worker whose request outlives its timeout)
    leaves its statement to the server, which noticed only at its end; with the check, within a second or two."""
    import os
    import subprocess
    import sys

    from django.conf import settings

    params = connection.get_connection_params()
    url = f"postgresql://{params['user']}@localhost:{params['port']}/{params['dbname']}?host={params['host']}"
    env = {**os.environ, "DATABASE_URL": url, "MEMORYHUB_DB_CLIENT_CHECK_SECONDS": "1", "DJANGO_SETTINGS_MODULE": "memoryhub.settings"}
    marker = "killed-process-test"
    code = f"from django.db import connection\nconnection.cursor().execute('SELECT pg_sleep(30) /* {marker} */')"
    process = subprocess.Popen([sys.executable, "manage.py", "shell", "-c", code], cwd=settings.BASE_DIR, env=env)
    try:
        wait_for(lambda: statement_running(marker, params) or process.poll() is not None, timeout=30, what="the statement")
        assert process.poll() is None, "the process ended before its statement started"
        process.kill()
        process.wait(timeout=10)
        wait_for(lambda: not statement_running(marker, params), timeout=4, what="the statement to end")
    finally:
        process.kill()
