"""A search's keyword half run beside its vector half, on a helper thread with a connection of its own.

The two halves of a hybrid search are independent queries of the same agent's chunks, each a few
milliseconds of database time. Run one after the other, the search waits for their sum; run at the same
time, for the longer of the two. ``run_beside(fn)`` starts ``fn`` on one of a few helper threads per
process (MEMORYHUB_SEARCH_PARALLEL_HALVES, 0 = never) and returns its future, or None when the caller
must run it itself:

- every helper is busy: under load the halves run in sequence again, so the helpers never queue work
  and a busy process does not trade throughput for one search's latency;
- the caller's connection is inside a transaction: another connection would not see what that
  transaction wrote (the tests' transactions, a caller's ``atomic`` block).

The helper reads where the caller reads (memoryhub/replicas.py keeps that in a context variable, copied
to the helper), under the caller's SearchDeadline. Its connection is Django's for that thread, kept
between searches (with the per-process pool, MEMORYHUB_DB_POOL_SIZE, one pooled connection per helper:
memoryhub/gunicorn_conf.py sizes the pool for the threads and the helpers, so a helper never waits for
one) and closed after a statement failed, so that a database restart costs one search's retry: the
caller runs the half itself when the helper's run failed (search/services.py).
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import connections

from memoryhub.replicas import current_read_alias

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor, threading.BoundedSemaphore] | None = None  # (size, executor, free helpers)


def _helpers() -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore] | None:
    global _pool
    size = settings.MEMORYHUB_SEARCH_PARALLEL_HALVES
    with _lock:
        replaced = None
        if _pool is not None and _pool[0] != size:  # the setting changed (tests): helpers of the new size
            replaced, _pool = _pool, None
        if _pool is None and size > 0:
            _pool = (size, ThreadPoolExecutor(max_workers=size, thread_name_prefix="search-half"), threading.BoundedSemaphore(size))
        current = _pool
    if replaced is not None:
        _close(replaced)
    return None if current is None else (current[1], current[2])


def run_beside(function) -> Future | None:
    """``function()`` started on a free helper thread, or None (the caller runs it): see the module."""
    alias = current_read_alias()
    # A connection made at run time in one thread (not in DATABASES) exists in that thread only.
    if alias not in connections.settings or connections[alias].in_atomic_block:
        return None
    helpers = _helpers()
    if helpers is None:
        return None
    executor, free = helpers
    if not free.acquire(blocking=False):
        return None
    context = contextvars.copy_context()
    try:
        return executor.submit(_run, context, function, alias, free)
    except RuntimeError:  # the interpreter is shutting down
        free.release()
        return None


def _run(context: contextvars.Context, function, alias: str, free: threading.BoundedSemaphore):
    connection = connections[alias]
    try:
        return context.run(function)
    finally:
        if connection.errors_occurred:  # a failed statement, or the database restarted: reconnect next time
            connection.close_if_unusable_or_obsolete()
        free.release()


def helpers_close() -> None:
    """Close the helpers' database connections and end their threads (the end of a test run, before its
    database is dropped; the next search starts new helpers)."""
    global _pool
    with _lock:
        closing, _pool = _pool, None
    if closing is not None:
        _close(closing)


def _close(helpers: tuple[int, ThreadPoolExecutor, threading.BoundedSemaphore]) -> None:
    size, executor, _ = helpers
    # One task per helper thread: each waits until all of them run, so that every thread closes its own.
    together = threading.Barrier(size)

    def close() -> None:
        try:
            together.wait(timeout=10)
        finally:
            connections.close_all()

    for _ in range(size):
        executor.submit(close)
    executor.shutdown(wait=True)
