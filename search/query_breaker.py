"""The query embedding's fast fallback: a hard time limit on each call and a circuit breaker.

A search must not wait on a sick embedding provider: the indexing timeouts (60 s, five retries) are
right for a worker and wrong for a person waiting for an answer. So each query embedding gets one
attempt of at most MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT seconds (enforced here, whatever the
provider does: the call runs in a small thread pool and the search stops waiting for it), and after
MEMORYHUB_SEARCH_BREAKER_FAILURES consecutive failures the breaker opens: for
MEMORYHUB_SEARCH_BREAKER_COOLDOWN seconds searches skip the provider and go to keywords at once. Then
it is half-open: one search (whichever claims the probe) tries the provider; success closes the breaker,
failure opens it for another cool-down.

The state lives in Redis (REDIS_URL), so every gunicorn worker and every web container sees the same
breaker; when Redis does not answer, each process keeps its own state meanwhile.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.conf import settings

from indexing.embeddings import ProviderTransientError
from search.query_windows import query_text_windows, query_vectors

logger = logging.getLogger(__name__)

KEY_PREFIX = "memoryhub:query-breaker"
# Redis is asked with short timeouts, and not asked again for a while after it failed: a search never
# waits on it longer than this.
REDIS_TIMEOUT = 0.25
REDIS_RETRY_AFTER = 5.0

# Calls that outlive their time limit keep a thread until the provider's own timeout ends them; the
# breaker opens long before this pool can fill up (a queued call is cancelled when its search gives up).
_executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="query-embedding")


class BreakerOpen(Exception):
    """The provider failed too often lately: vector search is skipped for now."""


class _LocalStore:
    """The breaker state of this process alone (when Redis is unreachable)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.states: dict[str, dict[str, float]] = {}

    def _state(self, name: str) -> dict[str, float]:
        return self.states.setdefault(name, {"failures": 0, "open_until": 0.0, "probe_until": 0.0})

    def read(self, name: str) -> tuple[bool, int]:
        with self.lock:
            state = self._state(name)
            return time.monotonic() < state["open_until"], int(state["failures"])

    def claim_probe(self, name: str, ttl: float) -> bool:
        with self.lock:
            state, now = self._state(name), time.monotonic()
            if now < state["probe_until"]:
                return False
            state["probe_until"] = now + ttl
            return True

    def failure(self, name: str, *, threshold: int, cooldown: float) -> int:
        with self.lock:
            state = self._state(name)
            state["failures"] += 1
            if state["failures"] >= threshold:
                state["open_until"], state["probe_until"] = time.monotonic() + cooldown, 0.0
            return int(state["failures"])

    def success(self, name: str) -> None:
        with self.lock:
            self.states.pop(name, None)


class _RedisStore:
    """The same state in Redis: ``<prefix>:failures`` (consecutive failures), ``<prefix>:open`` (exists
    while open, expires with the cool-down) and ``<prefix>:probe`` (the half-open probe's claim)."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)

    @staticmethod
    def _keys(name: str) -> tuple[str, str, str]:
        return f"{KEY_PREFIX}:{name}:failures", f"{KEY_PREFIX}:{name}:open", f"{KEY_PREFIX}:{name}:probe"

    def read(self, name: str) -> tuple[bool, int]:
        failures, opened, _ = self._keys(name)
        is_open, count = self.client.mget(opened, failures)
        return is_open is not None, int(count or 0)

    def claim_probe(self, name: str, ttl: float) -> bool:
        return bool(self.client.set(self._keys(name)[2], 1, nx=True, px=max(1, int(ttl * 1000))))

    def failure(self, name: str, *, threshold: int, cooldown: float) -> int:
        failures, opened, probe = self._keys(name)
        with self.client.pipeline() as pipe:
            # Consecutive failures that long apart are not one outage: the count is forgotten.
            count, _ = pipe.incr(failures).expire(failures, max(600, math.ceil(cooldown * 10))).execute()
        if count >= threshold:
            with self.client.pipeline() as pipe:
                pipe.set(opened, 1, px=max(1, int(cooldown * 1000))).delete(probe).execute()
        return count

    def success(self, name: str) -> None:
        self.client.delete(*self._keys(name))


class QueryBreaker:
    """The breaker of one embedding identity, in Redis while it answers, else in this process."""

    # A breaker seen closed with no failure is taken as closed for this long without asking Redis
    # again: searches then cost Redis nothing, and another process's failures count here a second late.
    CLOSED_FOR = 1.0
    _closed_until: dict[str, float] = {}
    _local = _LocalStore()
    _redis: dict[str, _RedisStore] = {}
    _redis_down_until: dict[str, float] = {}
    _lock = threading.Lock()

    def __init__(self, name: str) -> None:
        self.name = name

    def _call(self, operation: str, *args, **kwargs):
        import redis

        url = settings.REDIS_URL
        with QueryBreaker._lock:
            down = time.monotonic() < QueryBreaker._redis_down_until.get(url, 0.0)
            store = None if down else QueryBreaker._redis.get(url)
            if store is None and not down:
                store = QueryBreaker._redis[url] = _RedisStore(url)
        if store is not None:
            try:
                result = getattr(store, operation)(self.name, *args, **kwargs)
            except redis.RedisError as exc:
                logger.warning("query breaker: Redis unavailable (%s); keeping the state in this process", exc)
                with QueryBreaker._lock:
                    QueryBreaker._redis_down_until[url] = time.monotonic() + REDIS_RETRY_AFTER
            else:
                with QueryBreaker._lock:
                    if QueryBreaker._redis_down_until.pop(url, None) is not None:
                        QueryBreaker._local = _LocalStore()  # Redis is back: the interim state is stale
                return result
        return getattr(QueryBreaker._local, operation)(self.name, *args, **kwargs)

    def before_call(self, *, probe_ttl: float) -> int:
        """The consecutive failures so far; raises BreakerOpen unless the provider may be called now
        (closed, or this call is the half-open probe)."""
        threshold, cooldown = settings.MEMORYHUB_SEARCH_BREAKER_FAILURES, settings.MEMORYHUB_SEARCH_BREAKER_COOLDOWN
        if time.monotonic() < QueryBreaker._closed_until.get(self.name, 0.0):
            return 0
        is_open, failures = self._call("read")
        if failures == 0 and not is_open:
            QueryBreaker._closed_until[self.name] = time.monotonic() + self.CLOSED_FOR
        if failures < threshold and not is_open:
            return failures
        if not is_open and self._call("claim_probe", probe_ttl):
            return failures  # half-open: this search probes the provider
        raise BreakerOpen(
            f"The embedding provider failed {failures} time(s) in a row; vector search is paused "
            f"(retried after {cooldown:g} s)."
        )

    def failed(self) -> None:
        threshold, cooldown = settings.MEMORYHUB_SEARCH_BREAKER_FAILURES, settings.MEMORYHUB_SEARCH_BREAKER_COOLDOWN
        QueryBreaker._closed_until.pop(self.name, None)
        if self._call("failure", threshold=threshold, cooldown=cooldown) == threshold:
            logger.warning("query embedding failed %d times in a row: vector search paused for %g s", threshold, cooldown)

    def succeeded(self, *, after_failures: bool) -> None:
        if after_failures:  # the common case (nothing to forget) costs no write
            self._call("success")


def embed_query_bounded(*, provider, text: str, timeout: float, words: tuple[str, ...] = ()) -> list[list[float]]:
    """The provider's vectors for ``text`` (one per window of a long query: search/query_windows.py),
    then one per word of ``words`` (keyword expansion's, search/expansion.py: in the same request),
    within ``timeout`` seconds (at most the configured query timeout per window: a query of eight
    windows is eight inputs to embed, and its slowness must not count as the provider failing), through
    the breaker. Raises BreakerOpen, or the provider's error (a timeout is a ProviderTransientError); a
    vector of the wrong size or with NaN counts as a failure too."""
    windows = query_text_windows(text)
    timeout = max(0.0, min(timeout, settings.MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT * len(windows)))
    breaker = QueryBreaker(provider.identity.key)
    failures_before = breaker.before_call(probe_ttl=timeout + 1)
    future = _executor.submit(query_vectors, provider=provider, windows=windows, words=words)
    try:
        vectors = [[float(value) for value in vector] for vector in future.result(timeout=timeout)]
        for vector in vectors or [[]]:
            if len(vector) != provider.identity.dimensions or not all(math.isfinite(value) for value in vector):
                raise ProviderTransientError(
                    f"the embedding endpoint returned an unusable query vector ({len(vector)} values, "
                    f"{provider.identity.dimensions} expected, or not finite)"
                )
    except FutureTimeout:
        future.cancel()
        breaker.failed()
        raise ProviderTransientError(f"the query embedding took longer than {timeout:g} s") from None
    except Exception:
        breaker.failed()
        raise
    breaker.succeeded(after_failures=failures_before > 0)
    return vectors
