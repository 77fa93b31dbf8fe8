"""The domain raises DomainError kinds without HTTP; the API layer answers each with its status and the
one error shape, details included."""

import pytest
from rest_framework.test import APIRequestFactory

from memoryhub import domain
from memoryhub.errors import HTTP_STATUS, api_exception_handler


def test_every_kind_of_domain_error_has_a_status():
    kinds = {kind for kind in vars(domain).values() if isinstance(kind, type) and issubclass(kind, domain.DomainError)}
    assert kinds - {domain.DomainError} == set(HTTP_STATUS)


@pytest.mark.parametrize(
    "error, status",
    [
        (domain.InvalidInput("bad path", code="invalid_path"), 400),
        (domain.NotFound("No file 'x'.", code="not_found"), 404),
        (domain.PreconditionFailed("stale", code="hash_mismatch", current_hash="abc"), 412),
        (domain.TooLarge("too big", code="file_too_large"), 413),
        (domain.UnsupportedContent("binary", code="binary_content"), 415),
        (domain.Inconsistent("session is for jsonl", code="inconsistent_source"), 422),
        (domain.Busy("try again", code="write_conflict"), 503),
    ],
)
def test_the_api_answers_a_domain_error_with_its_status_and_body(error, status):
    response = api_exception_handler(error, {"request": APIRequestFactory().get("/api/v1/x")})
    assert response.status_code == status
    assert response.data["error"]["code"] == error.code and response.data["error"]["message"] == error.message
    for key, value in error.details.items():
        assert response.data["error"][key] == value
    assert (response.get("Retry-After") == "1") == (status == 503)


@pytest.fixture
def database_probe(monkeypatch):
    """memoryhub/postgresql/reachable.py with a clock the test moves and a database the test stops: its
    connection tries (their timeouts) are listed."""
    from types import SimpleNamespace

    from memoryhub.postgresql import reachable

    probe = SimpleNamespace(clock=1000.0, tries=[], up=True)

    def connect(**params):
        probe.tries.append(params["connect_timeout"])
        if not probe.up:
            raise OSError("connection refused")
        return SimpleNamespace(close=lambda: None)

    monkeypatch.setattr(reachable, "_clock", lambda: probe.clock)
    monkeypatch.setattr(reachable.psycopg, "connect", connect)
    monkeypatch.setattr(reachable, "_probe", {"at": -reachable.math.inf, "reachable": True})
    # On the class: each thread has its own connection object.
    backend = type(reachable.connections[reachable.DEFAULT_DB_ALIAS])
    monkeypatch.setattr(backend, "get_connection_params", lambda self: {"host": "h"})
    return probe


def test_a_busy_pool_is_told_from_a_database_that_does_not_answer_by_one_try_every_few_seconds(database_probe):
    """A pool's timeout is server_busy only while a connection of its own opens; the try is made at most
    once every REACHABLE_PROBE_SECONDS per process (the real server's cases: tests/reliability/
    test_database_down.py and test_load_server.py)."""
    from django.db import OperationalError

    from memoryhub import errors
    from memoryhub.postgresql import reachable

    class PoolTimeout(Exception):  # psycopg_pool's, by name
        pass

    timed_out = OperationalError("couldn't get a connection")
    timed_out.__cause__ = PoolTimeout()
    probe = database_probe

    assert errors.database_unavailable_body(timed_out)["error"]["code"] == "server_busy"
    probe.up = False
    assert errors.database_unavailable_body(timed_out)["error"]["code"] == "server_busy"  # the last answer
    assert probe.tries == [reachable.REACHABLE_PROBE_TIMEOUT]
    probe.clock += reachable.REACHABLE_PROBE_SECONDS
    assert errors.database_unavailable_body(timed_out)["error"]["code"] == "database_unavailable"
    assert len(probe.tries) == 2
    # Not a pool's timeout: the database is down, without a try.
    assert errors.database_unavailable_body(OperationalError("server closed"))["error"]["code"] == "database_unavailable"
    assert len(probe.tries) == 2


def test_a_database_found_down_is_known_down_until_a_later_try_finds_it_back(database_probe, caplog):
    """What a pooled process asks before it waits for the pool (memoryhub/postgresql/base.py): no try while
    the last one found the database up; while it found it down, a new try every REACHABLE_PROBE_SECONDS. The
    log says when the database stops answering (with the reason) and when it answers again, once each."""
    from memoryhub.postgresql import reachable

    probe = database_probe
    assert not reachable.known_down() and probe.tries == []  # the usual case costs nothing
    probe.up = False
    assert not reachable.database_reachable() and len(probe.tries) == 1  # after a pool's timeout
    assert reachable.known_down() and len(probe.tries) == 1  # the last answer, no new try
    probe.clock += reachable.REACHABLE_PROBE_SECONDS
    assert reachable.known_down() and len(probe.tries) == 2  # still down
    probe.up = True
    probe.clock += reachable.REACHABLE_PROBE_SECONDS - 0.1
    assert reachable.known_down() and len(probe.tries) == 2
    probe.clock += 0.1
    assert not reachable.known_down() and len(probe.tries) == 3
    assert not reachable.known_down() and len(probe.tries) == 3
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == reachable.__name__]
    assert said == [
        ("ERROR", "the database does not answer a new connection: connection refused"),
        ("WARNING", "the database answers a new connection again"),
    ]


def test_a_request_that_comes_while_a_try_runs_waits_for_its_answer(database_probe, monkeypatch):
    """Before, a second request during a process's first try was given the answer from before the try
    ("reachable": server_busy to a database that was down)."""
    import threading

    from memoryhub.postgresql import reachable

    trying, finish = threading.Event(), threading.Event()

    def slow_refusal(**params):
        database_probe.tries.append(params["connect_timeout"])
        trying.set()
        finish.wait(5)
        raise OSError("connection refused")

    monkeypatch.setattr(reachable.psycopg, "connect", slow_refusal)
    answers = []
    first = threading.Thread(target=lambda: answers.append(reachable.database_reachable()))
    first.start()
    assert trying.wait(5)
    second = threading.Thread(target=lambda: answers.append(reachable.database_reachable()))
    second.start()
    second.join(0.2)
    assert second.is_alive()  # waiting for the first one's try, not answering from before it
    finish.set()
    first.join(5), second.join(5)
    assert answers == [False, False] and len(database_probe.tries) == 1


def test_a_connection_of_its_own_that_timed_out_counts_as_a_try_that_found_the_database_down(database_probe, caplog):
    """A bare server's request connects by itself: its connect timeout (a hung database) is the answer a try
    would give, so the requests after it are answered at once until a try finds the database back."""
    import psycopg

    from memoryhub.postgresql import reachable

    probe = database_probe
    reachable.found_down(psycopg.errors.ConnectionTimeout("connection timeout expired"))
    assert reachable.known_down() and probe.tries == []  # no try of its own
    reachable.found_down(psycopg.errors.ConnectionTimeout("connection timeout expired"))  # said once
    probe.clock += reachable.REACHABLE_PROBE_SECONDS
    assert not reachable.known_down() and len(probe.tries) == 1  # the database answers again
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == reachable.__name__]
    assert said == [
        ("ERROR", "the database does not answer a new connection: connection timeout expired"),
        ("WARNING", "the database answers a new connection again"),
    ]
