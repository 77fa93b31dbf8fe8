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
