"""Request rates per token, and the admin login lockout: counters in Redis, shared by every web process,
with a per-process fallback so that Redis being down never fails a request (it only makes the limit
per process for a while).

A rate (``"600/min"``) is enforced evenly, not per clock window (the generic cell rate algorithm: one
call every window/limit seconds, with a burst of a tenth of the limit allowed on top): a fixed window
would let a flood spend a whole minute's allowance in its first second, all of it at the cost of the
other tenants. Past the rate the answer is ``429 rate_limited`` with ``Retry-After`` = the seconds until
the next call is allowed. The defaults are far above what an agent in normal use sends (a search every
0.1 s, all minute long) and far below what a runaway loop or a flood sends.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

KEY_PREFIX = "memoryhub:rl"  # tests give themselves a prefix of their own
REDIS_TIMEOUT = 0.25  # seconds: a limiter that waits on Redis would slow every request
REDIS_RETRY_AFTER = 5.0  # seconds without asking Redis after it failed
_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


@dataclass(frozen=True)
class Rate:
    limit: int
    window: int  # seconds

    def __str__(self) -> str:
        unit = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}.get(self.window, f"{self.window} s")
        return f"{self.limit} per {unit}"


def rate_parse(value: str, *, name: str) -> Rate | None:
    """``"600/min"`` → Rate(600, 60); ``"0"`` or ``""`` → None (no limit)."""
    text = (value or "").strip().lower()
    if text in ("", "0", "off", "none"):
        return None
    try:
        count, unit = text.split("/")
        rate = Rate(int(count), _UNITS[unit.strip()])
    except (ValueError, KeyError):
        raise ImproperlyConfigured(f"{name}={value!r} is not a rate such as 600/min (units: s, min, hour, day; 0 = off)") from None
    if rate.limit < 1:
        raise ImproperlyConfigured(f"{name}={value!r}: the count must be at least 1 (0 = off)")
    return rate


# GCRA in one round trip: KEYS[1] holds the theoretical arrival time (ms). Returns the ms to wait (0 = allowed).
_GCRA = """
local now, interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allowed_at = tat + interval - tolerance
if allowed_at > now then return math.ceil(allowed_at - now) end
redis.call('SET', KEYS[1], tat + interval, 'PX', math.ceil(tat + interval - now) + 1000)
return 0
"""

# A hold: the theoretical arrival time pushed to ARGV[1] (ms) unless it is later already. Calls are refused
# until ARGV[1] - interval + tolerance, then admitted one per interval, without the burst of a quiet subject.
_GCRA_HOLD = """
local held, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or 0)
if held > tat then redis.call('SET', KEYS[1], held, 'PX', math.ceil(held - now) + 1000) end
return 0
"""


_NO_ANSWER = object()  # _Store._script: Redis did not answer


class _Store:
    """Counters in Redis when it answers, in this process otherwise."""

    def __init__(self) -> None:
        self._client = None
        self._redis_down_until = 0.0
        self._lock = threading.Lock()
        self._local: dict[str, tuple[int, float]] = {}  # key → (count, expiry on the monotonic clock)
        self._local_tat: dict[str, float] = {}  # key → GCRA's theoretical arrival time (ms)
        self._scripts: dict[str, object] = {}  # Lua source → the script registered with Redis

    def _redis(self):
        if time.monotonic() < self._redis_down_until:
            return None
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT)
        return self._client

    def _redis_failed(self, exc: Exception) -> None:
        logger.warning("rate limits: Redis does not answer (%s); counting in this process for %g s", exc.__class__.__name__, REDIS_RETRY_AFTER)
        self._redis_down_until = time.monotonic() + REDIS_RETRY_AFTER

    def _script(self, source: str, *, keys: list, args: list):
        """What the Lua ``source`` answers in Redis (registered once), or _NO_ANSWER when Redis does not
        answer: the caller then counts in this process."""
        client = self._redis()
        if client is None:
            return _NO_ANSWER
        try:
            if source not in self._scripts:
                self._scripts[source] = client.register_script(source)
            return self._scripts[source](keys=keys, args=args)
        except Exception as exc:
            self._redis_failed(exc)
            return _NO_ANSWER

    def gcra(self, key: str, *, interval_ms: float, tolerance_ms: float) -> float:
        """Milliseconds until a call under ``key`` is allowed (0: allowed, and counted)."""
        now = time.time() * 1000
        answer = self._script(_GCRA, keys=[key], args=[int(now), interval_ms, tolerance_ms])
        if answer is not _NO_ANSWER:
            return float(answer)
        with self._lock:
            tat = max(self._local_tat.get(key, now), now)
            allowed_at = tat + interval_ms - tolerance_ms
            if allowed_at > now:
                return allowed_at - now
            self._local_tat[key] = tat + interval_ms
            if len(self._local_tat) > 100_000:  # bounded memory: forget keys already back to a full burst
                self._local_tat = {k: v for k, v in self._local_tat.items() if v > now}
            return 0.0

    def gcra_hold(self, key: str, *, tat_ms: float) -> None:
        """Move ``key``'s theoretical arrival time on to ``tat_ms`` (never back)."""
        now = time.time() * 1000
        if self._script(_GCRA_HOLD, keys=[key], args=[int(tat_ms), int(now)]) is not _NO_ANSWER:
            return
        with self._lock:
            self._local_tat[key] = max(self._local_tat.get(key, now), tat_ms)

    def incr(self, key: str, *, ttl: int, extend: bool) -> tuple[int, float]:
        """Add one to ``key``; returns (count, seconds until it expires). A new key lives ``ttl`` seconds;
        ``extend`` restarts that on every call (a lockout), else the first call fixes it (a window)."""
        client = self._redis()
        if client is not None:
            try:
                pipe = client.pipeline()
                pipe.incr(key)
                pipe.expire(key, ttl, nx=not extend)
                pipe.ttl(key)
                count, _, remaining = pipe.execute()
                return int(count), float(max(remaining, 1))
            except Exception as exc:
                self._redis_failed(exc)
        now = time.monotonic()
        with self._lock:
            count, expires = self._local.get(key, (0, now + ttl))
            if expires <= now:
                count, expires = 0, now + ttl
            if extend:
                expires = now + ttl
            self._local[key] = (count + 1, expires)
            if len(self._local) > 100_000:  # bounded memory: drop what has expired
                self._local = {k: v for k, v in self._local.items() if v[1] > now}
            return count + 1, expires - now

    def get(self, key: str) -> tuple[int, float]:
        client = self._redis()
        if client is not None:
            try:
                pipe = client.pipeline()
                pipe.get(key)
                pipe.ttl(key)
                count, remaining = pipe.execute()
                return int(count or 0), float(max(remaining, 0))
            except Exception as exc:
                self._redis_failed(exc)
        now = time.monotonic()
        with self._lock:
            count, expires = self._local.get(key, (0, now))
            return (count, expires - now) if expires > now else (0, 0.0)

    def delete(self, key: str) -> None:
        client = self._redis()
        if client is not None:
            try:
                client.delete(key)
            except Exception as exc:
                self._redis_failed(exc)
        with self._lock:
            self._local.pop(key, None)


store = _Store()


def rate_limit_hit(*, bucket: str, subject: str, rate: Rate | None) -> float | None:
    """Count one call of ``bucket`` by ``subject`` (a token); None when allowed, else the seconds to
    wait before the next call is."""
    if rate is None:
        return None
    interval_ms, tolerance_ms = _gcra_spacing(rate)
    wait_ms = store.gcra(f"{KEY_PREFIX}:{bucket}:{subject}", interval_ms=interval_ms, tolerance_ms=tolerance_ms)
    return None if wait_ms <= 0 else wait_ms / 1000


def rate_limit_hold(*, bucket: str, subject: str, rate: Rate | None, seconds: float) -> None:
    """Refuse ``subject``'s calls of ``bucket`` for ``seconds`` from now, in every web process alike; after
    that they are admitted at the rate again, one per interval, without the burst a quiet subject has."""
    if rate is None:
        return
    interval_ms, tolerance_ms = _gcra_spacing(rate)
    # rate_limit_hit admits a call once now >= tat + interval - tolerance.
    tat_ms = time.time() * 1000 + seconds * 1000 + tolerance_ms - interval_ms
    store.gcra_hold(f"{KEY_PREFIX}:{bucket}:{subject}", tat_ms=tat_ms)


def ignored_waits(*, bucket: str, subject: str, ignored: bool, ttl: int) -> int:
    """How many told waits in a row ``subject`` ignored, one more (``ignored``) or none (it kept this
    one), shared by every web process; forgotten ``ttl`` seconds after the last one ignored."""
    key = f"{KEY_PREFIX}:ignored:{bucket}:{subject}"
    if ignored:
        return store.incr(key, ttl=ttl, extend=True)[0]
    store.delete(key)
    return 0


def _gcra_spacing(rate: Rate) -> tuple[float, float]:
    """(ms between calls, ms of burst allowed on top): one call per window/limit, a tenth of the limit at once."""
    interval_ms = rate.window * 1000 / rate.limit
    return interval_ms, interval_ms * max(1, rate.limit // 10)


# --- Admin login lockout -------------------------------------------------------------------------


def _login_key(username: str, address: str) -> str:
    return f"{KEY_PREFIX}:login:{username.strip().lower()}:{address}"


def login_locked_for(*, username: str, address: str) -> float:
    """Seconds this username may not log in from this address (0 = not locked)."""
    count, remaining = store.get(_login_key(username, address))
    return remaining if count >= settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES else 0.0


def login_failed(*, username: str, address: str) -> None:
    store.incr(_login_key(username, address), ttl=settings.MEMORYHUB_ADMIN_LOGIN_LOCKOUT_SECONDS, extend=True)


def login_succeeded(*, username: str, address: str) -> None:
    store.delete(_login_key(username, address))
