"""A hybrid search runs its keyword half on a helper thread, beside its vector half (search/beside.py):
the same answer as one after the other, on a connection of the helper's own, and back on the request's
thread whenever that is the right thing (no helper free, a caller's transaction, a failed helper).

These tests commit (transactional_db): a helper's connection sees only committed rows, which is also
why a search inside a transaction never uses one.
"""

import threading

import pytest
from django.db import OperationalError, transaction

import search.services as services
from search import beside
from search.deadline import SearchTimedOut
from search.services import memory_search
from tests.search.conftest import NOTES

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def notes(alice, index_files):
    index_files(alice, {"MEMORY.md": NOTES, "memory/2026-03-02.md": "Caroline reviewed the ledger migration plan.\n"})
    return alice


@pytest.fixture
def keyword_threads(monkeypatch):
    """The name of the thread each keyword half ran on, in order."""
    names = []
    real = services.keyword_candidates

    def recorded(**kwargs):
        names.append(threading.current_thread().name)
        return real(**kwargs)

    monkeypatch.setattr(services, "keyword_candidates", recorded)
    return names


def answer(member, query="When do we deploy the billing service?"):
    response = memory_search(agent=member.agent, query=query, explain=True)
    return response.mode, [(r.path, r.start_line, r.end_line, r.score, r.explain) for r in response.results], response.message


def test_the_keyword_half_runs_on_a_helper_and_the_answer_is_the_one_in_sequence(notes, keyword_threads, settings):
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 0
    in_sequence = answer(notes)
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 2
    beside_it = answer(notes)
    assert keyword_threads[0] == threading.current_thread().name
    assert keyword_threads[1].startswith("search-half")
    assert beside_it == in_sequence and beside_it[0] == "hybrid" and beside_it[1]
    assert beside_it[1][0][0] == "MEMORY.md"


def test_a_keyword_search_and_a_search_in_a_transaction_stay_on_the_requests_thread(notes, keyword_threads):
    memory_search(agent=notes.agent, query="billing deploy", mode="keyword")
    with transaction.atomic():  # a helper's connection would not see this transaction's writes
        memory_search(agent=notes.agent, query="billing deploy")
    assert keyword_threads == [threading.current_thread().name] * 2


def test_with_every_helper_busy_the_halves_run_one_after_the_other(notes, keyword_threads, settings):
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 1
    _, free = beside._helpers()
    assert free.acquire(blocking=False)  # the one helper is taken
    try:
        in_sequence = answer(notes)
    finally:
        free.release()
    assert keyword_threads == [threading.current_thread().name]
    assert answer(notes) == in_sequence and keyword_threads[1].startswith("search-half")


def test_a_helper_whose_statement_fails_leaves_the_half_to_the_request_and_reconnects(notes, monkeypatch):
    real = services.keyword_candidates
    failed = []

    def broken_on_helpers(**kwargs):
        if threading.current_thread().name.startswith("search-half") and not failed:
            failed.append(True)
            from django.db import connection

            with connection.cursor() as cursor:  # a real error on the helper's connection
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return real(**kwargs)

    monkeypatch.setattr(services, "keyword_candidates", broken_on_helpers)
    mode, results, _ = answer(notes)
    assert failed and mode == "hybrid" and results[0][0] == "MEMORY.md"
    # The helper's broken connection was closed after the failure: the next search uses a new one.
    assert answer(notes)[:2] == (mode, results)


def test_a_keyword_half_that_runs_out_of_time_on_a_helper_leaves_the_vector_half_answering(notes, monkeypatch):
    def too_slow(**kwargs):
        raise SearchTimedOut

    monkeypatch.setattr(services, "keyword_candidates", too_slow)
    mode, results, _ = answer(notes)
    assert mode == "vector" and results


def test_run_beside_reads_where_the_caller_reads_and_under_its_context(settings):
    import contextvars

    marker = contextvars.ContextVar("marker", default="unset")
    marker.set("the caller's")
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 1
    future = beside.run_beside(lambda: (marker.get(), threading.current_thread().name))
    assert future is not None
    assert future.result(timeout=10) == ("the caller's", "search-half_0")
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 0
    assert beside.run_beside(lambda: None) is None


def test_the_helpers_connections_are_closed_when_they_are_replaced_or_closed(settings):
    from django.db import connection

    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 1

    def backend_pid():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    pid = beside.run_beside(backend_pid).result(timeout=10)

    def alive(pid):
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0] == 1

    assert alive(pid) and pid != backend_pid()
    settings.MEMORYHUB_SEARCH_PARALLEL_HALVES = 2  # replaced: the old helper closed its connection
    second = beside.run_beside(backend_pid).result(timeout=10)
    assert not alive(pid) and alive(second)
    beside.helpers_close()
    assert not alive(second)


def test_gunicorn_sizes_the_pool_for_its_threads_and_the_helpers(monkeypatch):
    import importlib
    import os

    real = {k: v for k, v in os.environ.items() if k not in ("MEMORYHUB_DB_POOL_SIZE", "MEMORYHUB_SEARCH_PARALLEL_HALVES")}

    def configured(**environ):
        # The config writes to the environment for its workers: a copy here, also for its first import.
        monkeypatch.setattr(os, "environ", real | environ)
        from memoryhub import gunicorn_conf

        importlib.reload(gunicorn_conf)
        return os.environ["MEMORYHUB_DB_POOL_SIZE"], os.environ["MEMORYHUB_SEARCH_PARALLEL_HALVES"]

    assert configured(MEMORYHUB_WEB_THREADS="8") == ("10", "2")
    assert configured(MEMORYHUB_WEB_THREADS="4", MEMORYHUB_SEARCH_PARALLEL_HALVES="0") == ("4", "0")
    # A pool given too small for the helpers: they get what the threads leave, here none.
    assert configured(MEMORYHUB_WEB_THREADS="8", MEMORYHUB_DB_POOL_SIZE="8") == ("8", "0")
    assert configured(MEMORYHUB_WEB_THREADS="8", MEMORYHUB_DB_POOL_SIZE="9") == ("9", "1")
    # The container's .env, from .env.example: empty is unset; 0 is no pool, and the helpers stay.
    assert configured(MEMORYHUB_WEB_THREADS="8", MEMORYHUB_DB_POOL_SIZE="", MEMORYHUB_SEARCH_PARALLEL_HALVES="") == ("10", "2")
    assert configured(MEMORYHUB_WEB_THREADS="8", MEMORYHUB_DB_POOL_SIZE="0") == ("0", "2")


def test_a_hybrid_search_starts_its_keyword_half_before_its_checks(notes, monkeypatch):
    # The keyword half needs neither the checks nor the query embedding: it runs beside them too. The
    # checks here wait until the keyword half has started (on a helper), which they never did before.
    started = threading.Event()
    real_keyword, real_checks = services.keyword_candidates, services._search_checks
    seen = []

    def keyword(**kwargs):
        started.set()
        return real_keyword(**kwargs)

    def checks(**kwargs):
        seen.append(started.wait(timeout=10))
        return real_checks(**kwargs)

    monkeypatch.setattr(services, "keyword_candidates", keyword)
    monkeypatch.setattr(services, "_search_checks", checks)
    mode, results, _ = answer(notes)
    assert seen == [True] and mode == "hybrid" and results[0][0] == "MEMORY.md"
