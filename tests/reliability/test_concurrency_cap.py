"""One token may have at most MEMORYHUB_TOKEN_MAX_CONCURRENT requests in progress in a web process:
beyond it 429 rate_limited with Retry-After, at the top of the stack, while other tokens are served.
A rate bounds requests over time; this bounds the threads one tenant holds at any moment (a burst of
slow requests from one agent left the others waiting for a thread)."""

import json
import threading

import pytest
from django.http import JsonResponse
from django.test import RequestFactory

from agents import throttles
from agents.throttles import RateLimitedTokensMiddleware


pytestmark = pytest.mark.usefixtures("own_rate_limits")


class Held:
    """A view that holds its thread until released: a slow request."""

    def __init__(self):
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def __call__(self, request):
        self.entered.release()
        self.release.wait(10)
        return JsonResponse({"ok": True})


def request(token: str, path: str = "/api/v1/search"):
    return RequestFactory().post(path, {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_token_past_its_requests_in_progress_gets_429_and_others_are_served(settings):
    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT = 3
    held = Held()
    middleware = RateLimitedTokensMiddleware(held)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(middleware(request("mh_loud")))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in threads:
        assert held.entered.acquire(timeout=5)

    refused = middleware(request("mh_loud"))  # the fourth at once
    assert refused.status_code == 429
    assert refused["Retry-After"] == "1"
    body = json.loads(refused.content)["error"]
    assert body["code"] == "rate_limited" and "at most 3 at once" in body["message"]

    quiet = threading.Thread(target=lambda: answers.append(middleware(request("mh_quiet"))))
    quiet.start()
    assert held.entered.acquire(timeout=5)  # another token is served while the loud one is capped

    held.release.set()
    for thread in threads + [quiet]:
        thread.join(5)
    assert [a.status_code for a in answers] == [200] * 4
    assert throttles._in_progress == {}  # every slot given back
    assert middleware(request("mh_loud")).status_code == 200  # and the token is served again


def test_a_failing_request_gives_its_slot_back(settings):
    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT = 1

    def boom(request):
        raise RuntimeError("view failed")

    with pytest.raises(RuntimeError):
        RateLimitedTokensMiddleware(boom)(request("mh_a"))
    assert throttles._in_progress == {}
    assert RateLimitedTokensMiddleware(lambda r: JsonResponse({}))(request("mh_a")).status_code == 200


def test_zero_turns_the_cap_off_and_non_api_paths_are_never_counted(settings):
    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT = 0
    held = Held()
    held.release.set()
    assert RateLimitedTokensMiddleware(held)(request("mh_a")).status_code == 200
    assert throttles._in_progress == {}
    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT = 1
    seen = []
    inner = RateLimitedTokensMiddleware(lambda r: seen.append(dict(throttles._in_progress)) or JsonResponse({}))
    inner(request("mh_a", path="/admin/"))
    assert seen == [{}]


def test_a_token_past_its_rate_is_served_one_request_at_a_time_for_a_minute(settings, frozen_clock):
    """A flood that the rate still admits part of: those requests run one at a time beside the other
    tenants' instead of several at once among them."""
    from types import SimpleNamespace

    from agents.services import token_digest
    from memoryhub.ratelimit import Rate

    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT = 4
    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT_LIMITED = 1
    settings.MEMORYHUB_RATE_LIMITS = {**settings.MEMORYHUB_RATE_LIMITS, "write": Rate(10, 60)}
    loud = SimpleNamespace(digest=token_digest("mh_loud"))
    with pytest.raises(throttles.RateLimited):
        for _ in range(2):  # a burst of one write, then the second is past the rate
            throttles.rate_limit_check(token=loud, bucket="write")

    held = Held()
    middleware = RateLimitedTokensMiddleware(held)
    answers = []
    first = threading.Thread(target=lambda: answers.append(middleware(request("mh_loud"))))  # a search: another bucket
    first.start()
    assert held.entered.acquire(timeout=5)
    refused = middleware(request("mh_loud"))
    assert refused.status_code == 429
    assert "at most 1 at once while it is over its rate limit" in json.loads(refused.content)["error"]["message"]
    quiet = [threading.Thread(target=lambda: answers.append(middleware(request("mh_quiet")))) for _ in range(2)]
    for thread in quiet:
        thread.start()
    for _ in quiet:
        assert held.entered.acquire(timeout=5)  # a token within its rate keeps its 4
    held.release.set()
    for thread in [first, *quiet]:
        thread.join(5)
    assert [a.status_code for a in answers] == [200] * 3

    frozen_clock.advance(throttles.LIMITED_SECONDS + 1)  # a minute without a 429: the usual cap again
    held.release.clear()
    again = [threading.Thread(target=lambda: answers.append(middleware(request("mh_loud")))) for _ in range(2)]
    for thread in again:
        thread.start()
    for _ in again:
        assert held.entered.acquire(timeout=5)
    held.release.set()
    for thread in again:
        thread.join(5)
    assert [a.status_code for a in answers] == [200] * 5


def test_a_token_past_its_rate_that_keeps_sending_past_its_one_at_a_time_is_held_longer(settings, frozen_clock):
    """The cap's Retry-After counts like the limiter's: a flood that ignores it is told 2 s, then 4 s...
    and held by the limiter in every process, so its admitted share falls instead of staying at what one
    request at a time gets through."""
    from types import SimpleNamespace

    from agents.services import token_digest
    from memoryhub.ratelimit import Rate

    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT = 4
    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT_LIMITED = 1
    settings.MEMORYHUB_RATE_LIMIT_MAX_PENALTY = 60
    settings.MEMORYHUB_RATE_LIMITS = {**settings.MEMORYHUB_RATE_LIMITS, "search": Rate(600, 60)}
    loud = SimpleNamespace(digest=token_digest("mh_loud"))
    with pytest.raises(throttles.RateLimited):
        for _ in range(61):  # the burst of 60, then past the rate
            throttles.rate_limit_check(token=loud, bucket="search")
    frozen_clock.advance(1)

    held = Held()
    middleware = RateLimitedTokensMiddleware(held)
    first = threading.Thread(target=lambda: middleware(request("mh_loud")))
    first.start()
    assert held.entered.acquire(timeout=5)  # one search in progress
    try:
        told = []
        for _ in range(2):
            statuses = [middleware(request("mh_loud")) for _ in range(20)]  # sending on during the told wait
            assert {r.status_code for r in statuses} == {429}
            told.append(int(statuses[0]["Retry-After"]))
            frozen_clock.advance(told[-1])
        refused = middleware(request("mh_loud"))
        assert told == [1, 2] and refused["Retry-After"] == "4"

        throttles._penalties.clear()  # another web process, which never saw this token
        with pytest.raises(throttles.RateLimited):
            throttles.rate_limit_check(token=loud, bucket="search")
    finally:
        held.release.set()
        first.join(5)
    quiet = middleware(request("mh_quiet"))
    assert quiet.status_code == 200
