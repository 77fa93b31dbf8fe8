"""Request rates per token (memoryhub/ratelimit.py) for the REST API, the tools and MCP.

Every request falls in one bucket by its method and path (``request_bucket``): ``search`` (POST search,
tool calls, MCP), ``write`` (PUT, DELETE and append of files), ``sync`` (the webhook), ``read`` (the rest).
A token past its rate is answered 429 by ``TokenRateThrottle`` after authentication; from then until
the wait is over, ``RateLimitedTokensMiddleware`` answers that token's requests of that bucket 429 at
the top of the stack, without a database query, so a client that ignores Retry-After costs the
other tenants as little as a request can. The same middleware caps the requests one token has in
progress in this process (MEMORYHUB_TOKEN_MAX_CONCURRENT): a rate bounds requests over time, the cap
bounds the threads one tenant can hold at any moment, so a burst of slow requests from one agent cannot
leave the others waiting for a thread. A token past its rate is a flood, not a burst: for a minute after
its last 429 it has MEMORYHUB_TOKEN_MAX_CONCURRENT_LIMITED requests in progress at most (1), so what the
rate still admits of it is served one request at a time beside the other tenants' requests.

A client that ignores Retry-After (keeps sending during the wait it was told) is told to wait twice as
long at its next refusal, and so on up to MEMORYHUB_RATE_LIMIT_MAX_PENALTY seconds, and the limiter
holds its calls for that long in every process: otherwise the limiter would admit a flood at the full
rate the moment each told wait is over, and that admitted work, not the refusals, is what costs the
other tenants. The one-at-a-time cap's 429 counts the same way for a token past its rate: a flood that
ignored it would stay under its rate (the cap lets one request through at a time) and be admitted for
as long as it flooded. A client that waits as told is never held longer than the limiter's own wait.
"""

import math
import threading
import time

from django.conf import settings
from django.http import JsonResponse
from rest_framework.throttling import BaseThrottle

from agents.models import Agent, AgentToken
from agents.services import token_digest
from memoryhub import metrics
from memoryhub.errors import ApiError, error_body, is_api_path
from memoryhub.gunicorn_worker import HOLD_ENVIRON_KEY, SENDER_ENVIRON_KEY
from memoryhub.ratelimit import Rate, ignored_waits, rate_limit_hit, rate_limit_hold

_penalties: dict[tuple[str, str], float] = {}  # (token digest, bucket) → monotonic time the wait ends
_penalties_lock = threading.Lock()
_in_progress: dict[str, int] = {}  # token digest → requests of it being served by this process
_in_progress_lock = threading.Lock()
_limited: dict[str, float] = {}  # token digest → monotonic time until which the token has the lower cap
LIMITED_SECONDS = 60.0
_early: dict[tuple[str, str], int] = {}  # (token digest, bucket) → requests refused here before their told wait ended


def request_bucket(method: str, path: str) -> str:
    api = path.removeprefix("/api/v1/")
    if path.startswith("/mcp") or (method == "POST" and (api == "search" or api.startswith("tools/"))):
        return "search"
    if api.startswith("files/") and (method in ("PUT", "DELETE") or (method == "POST" and api.endswith("/append"))):
        return "write"
    if method == "POST" and api == "sync":
        return "sync"
    return "read"


def retry_after(wait: float) -> int:
    """The whole seconds a refused client is told to wait (Retry-After takes no fractions)."""
    return max(1, math.ceil(wait))


class RateLimited(ApiError):
    def __init__(self, *, bucket: str, rate: Rate, wait: float):
        super().__init__(
            status_code=429,
            code="rate_limited",
            message=f"Too many {bucket} requests for this token (at most {rate}). Retry in {wait:.1f} s.",
        )
        self.wait = retry_after(wait)
        metrics.throttled_increment(scope=bucket)


def rate_limit_check(*, token: AgentToken, bucket: str) -> None:
    """RateLimited (429, Retry-After) when this token is past its ``bucket`` rate."""
    rate = settings.MEMORYHUB_RATE_LIMITS.get(bucket)
    wait = rate_limit_hit(bucket=bucket, subject=token.digest[:24], rate=rate)
    if wait is not None:
        raise RateLimited(bucket=bucket, rate=rate, wait=_told_to_wait(digest=token.digest, bucket=bucket, wait=wait))


def _told_to_wait(*, digest: str, bucket: str, wait: float) -> int:
    """The whole seconds a refused token is told to wait: at least ``wait``, longer when it ignored the
    waits it was told before (_held_for). Until then the middleware refuses it without a query."""
    key = (digest, bucket)
    told = retry_after(wait)
    with _penalties_lock:
        now = time.monotonic()
        if len(_penalties) > 10_000:
            for stale in [stale for stale, until in _penalties.items() if until <= now - _max_penalty()]:
                del _penalties[stale]
                _early.pop(stale, None)
            for stale in [stale for stale, until in _limited.items() if until <= now]:
                del _limited[stale]
        early, told_before = _early.pop(key, 0), _penalties.get(key, float("-inf"))
    # Redis is asked outside the lock: every token's refusals in this process share it.
    held = _held_for(key, early=early, told_before=told_before, now=now)
    if held > told:
        told = held
        rate = settings.MEMORYHUB_RATE_LIMITS.get(bucket)
        rate_limit_hold(bucket=bucket, subject=digest[:24], rate=rate, seconds=told)
    with _penalties_lock:
        # Until the Retry-After the client is told, not only until the limiter's own (often sub-second)
        # wait: a client that comes back sooner than told is refused by the middleware, before
        # authentication, the database and Redis. Under a flood that ignores Retry-After this is most
        # requests; the limiter still decides what is admitted once the wait is over.
        _penalties[key] = now + told
        _limited[digest] = now + LIMITED_SECONDS
    return told


def _max_penalty() -> int:
    return settings.MEMORYHUB_RATE_LIMIT_MAX_PENALTY


def _held_for(key: tuple[str, str], *, early: int, told_before: float, now: float) -> int:
    """The seconds a token refused now is held for, beyond the limiter's own wait: 2, 4, 8... up to
    MEMORYHUB_RATE_LIMIT_MAX_PENALTY for each told wait in a row that it ignored, 0 once it kept one.
    Ignoring means sending more requests (``early``) during the wait that ended at ``told_before`` than
    it may have in progress at once (MEMORYHUB_TOKEN_MAX_CONCURRENT): those may have been sent before the
    429 reached the client.

    Only the process that told the wait saw what came during it. The count of ignored waits is kept with
    the limiter (Redis), so that every web process, and one restarted meanwhile (gunicorn recycles its
    workers), goes on from it; a process that told this token nothing holds it no longer than the
    limiter's own wait, which is the hold another process placed."""
    if not _max_penalty() or now - told_before >= _max_penalty():
        return 0
    digest, bucket = key
    tolerated = settings.MEMORYHUB_TOKEN_MAX_CONCURRENT or 4
    ignored = ignored_waits(bucket=bucket, subject=digest[:24], ignored=early > tolerated, ttl=2 * _max_penalty())
    return min(2**ignored, _max_penalty()) if ignored else 0


class TeamRateLimited(ApiError):
    def __init__(self, *, team_slug: str, rate: Rate, wait: float):
        super().__init__(
            status_code=429,
            code="team_rate_limited",
            message=f"Too many requests for this agent's team {team_slug} (team_rate_limit: at most {rate}). "
            f"Retry in {wait:.1f} s.",
        )
        self.wait = retry_after(wait)
        metrics.throttled_increment(scope="team")


def team_rate_limit_check(*, agent: Agent) -> None:
    """TeamRateLimited (429, Retry-After) when the agent's team is past its rate: every request of every
    agent of the team counts, whatever its kind."""
    team = agent.team
    rate = team.request_rate
    wait = rate_limit_hit(bucket="team", subject=str(team.pk), rate=rate)
    if wait is not None:
        raise TeamRateLimited(team_slug=team.slug, rate=rate, wait=wait)


class TokenRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        if isinstance(request.auth, AgentToken):  # unauthenticated: the permission check answers 401
            rate_limit_check(token=request.auth, bucket=request_bucket(request.method, request.path))
            team_rate_limit_check(agent=request.user)
        return True


class RateLimitedTokensMiddleware:
    """429 at once for a token still inside a wait this process gave it (see the module docstring)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer" or not raw.strip() or not is_api_path(request.path):
            return self.get_response(request)
        digest = token_digest(raw.strip())
        request.META[SENDER_ENVIRON_KEY] = digest[:24]  # gunicorn's worker holds no connection two senders share
        bucket = request_bucket(request.method, request.path)
        now = time.monotonic()
        wait = _penalties.get((digest, bucket), 0.0) - now if _penalties else 0.0
        if wait > 0:
            _limited[digest] = now + LIMITED_SECONDS  # still sending before the told wait: still a flood
            _early[(digest, bucket)] = _early.get((digest, bucket), 0) + 1  # counted loosely: no lock on this path
            if settings.MEMORYHUB_RATE_LIMIT_HOLD_SECONDS:
                # gunicorn's worker reads this connection again only when the wait is over (gunicorn_worker.py).
                request.META[HOLD_ENVIRON_KEY] = min(wait, settings.MEMORYHUB_RATE_LIMIT_HOLD_SECONDS)
            return _too_many(bucket, f"Too many {bucket} requests for this token. Retry in {wait:.1f} s.", wait)
        cap, why = settings.MEMORYHUB_TOKEN_MAX_CONCURRENT, ""
        if _limited and _limited.get(digest, 0.0) > now and settings.MEMORYHUB_TOKEN_MAX_CONCURRENT_LIMITED:
            limited_cap = settings.MEMORYHUB_TOKEN_MAX_CONCURRENT_LIMITED
            cap = min(cap, limited_cap) if cap else limited_cap
            why = " while it is over its rate limit"
        if not cap:
            return self.get_response(request)
        with _in_progress_lock:
            busy = _in_progress.get(digest, 0)
            if busy < cap:
                _in_progress[digest] = busy + 1
        if busy >= cap:
            # A token past its rate that sends faster than its one request at a time is told to wait like
            # one refused by the limiter (and held longer if it ignores that); any other token only 1 s.
            wait = _told_to_wait(digest=digest, bucket=bucket, wait=1) if why else 1
            return _too_many(
                bucket, f"Too many requests in progress for this token (at most {cap} at once{why}). Retry in {wait} s.", wait
            )
        try:
            return self.get_response(request)
        finally:
            with _in_progress_lock:
                if _in_progress[digest] <= 1:
                    del _in_progress[digest]
                else:
                    _in_progress[digest] -= 1


def _too_many(bucket: str, message: str, wait: float) -> JsonResponse:
    metrics.throttled_increment(scope=bucket)
    response = JsonResponse(error_body("rate_limited", message), status=429)
    response["Retry-After"] = str(retry_after(wait))
    return response
