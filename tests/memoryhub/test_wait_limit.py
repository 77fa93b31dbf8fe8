"""memoryhub/postgresql/wait_limit.py: within a limit, a wait for the database's answer ends with an
OperationalError and the connection closed; outside one (Celery tasks, commands) a query takes its time.
The hung database itself, under a real server: tests/reliability/test_database_down.py."""

import time

import pytest
from django.db import OperationalError, connection

from memoryhub.postgresql.wait_limit import LimitedConnection, wait_limit


@pytest.mark.django_db
def test_a_wait_past_the_limit_ends_and_closes_the_connection():
    connection.ensure_connection()
    assert isinstance(connection.connection, LimitedConnection)
    with wait_limit(5), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.1)")  # within the limit: answered
    started = time.monotonic()
    with pytest.raises(OperationalError, match="did not answer within 0.5 s"), wait_limit(0.5):
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
