"""Reliability tests: what the service does with hostile input and failing dependencies."""

import pytest


@pytest.fixture(autouse=True)
def eager_tasks(eager_tasks):  # tests/conftest.py's: indexing runs in the test process, on commit
    return eager_tasks


@pytest.fixture(autouse=True)
def fake_embeddings(fake_embeddings):
    return fake_embeddings


class FrozenClock:
    """The clocks the rate limits read (memoryhub/ratelimit.py, agents/throttles.py), standing still
    until a test moves them: a limit's window is then counted in the test's seconds, not in how long
    its requests took on a busy machine."""

    def __init__(self):
        import time

        self._wall, self._mono, self._offset = time.time(), time.monotonic(), 0.0

    def time(self) -> float:
        return self._wall + self._offset

    def monotonic(self) -> float:
        return self._mono + self._offset

    def advance(self, seconds: float) -> None:
        self._offset += seconds


@pytest.fixture
def frozen_clock(monkeypatch):
    from agents import throttles
    from memoryhub import ratelimit

    clock = FrozenClock()
    monkeypatch.setattr(ratelimit, "time", clock)
    monkeypatch.setattr(throttles, "time", clock)
    return clock


@pytest.fixture
def queue(settings):
    """A queue of the test's own for real workers (tests/reliability/processes.py), with index jobs
    published to it from this process instead of run eagerly."""
    from indexing.tasks import index_job_task
    from memoryhub.celery import app
    from tests.reliability.processes import unique_queue

    queue = unique_queue()
    task = index_job_task._get_current_object()
    task.queue, task._exec_options = queue, None  # this process publishes to the workers' queue
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield queue
    app.conf.task_always_eager = eager
    task.__dict__.pop("queue", None)
    task._exec_options = None
