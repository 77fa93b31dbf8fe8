"""Per-token request rates: a flood gets 429 rate_limited with Retry-After, while another agent's token,
and the same token's other kinds of request, are untouched; the allowance is spread evenly (a burst of
a tenth of the limit, then one call per interval), not spent at the start of a window; with Redis down
the limit still holds (per process)."""

import pytest

from memoryhub.ratelimit import Rate, rate_parse


pytestmark = pytest.mark.usefixtures("own_rate_limits", "frozen_clock")


@pytest.fixture
def tight(settings):
    # Bursts of a tenth of the limit: 5 searches, 3 writes, 2 syncs at once, then one per 1.2-3 s.
    settings.MEMORYHUB_RATE_LIMITS = {"search": Rate(50, 60), "write": Rate(30, 60), "sync": Rate(20, 60), "read": Rate(500, 60)}


def search(member):
    return member.client.post("/api/v1/search", {"query": "kettle"}, format="json")


@pytest.mark.django_db
def test_a_flood_of_searches_gets_429_with_retry_after_and_others_are_unaffected(alice, bob, tight):
    responses = [search(alice) for _ in range(8)]
    assert [r.status_code for r in responses] == [200] * 5 + [429] * 3

    refused = responses[5]
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "at most 50 per minute" in refused.json()["error"]["message"]
    assert 1 <= int(refused["Retry-After"]) <= 2

    assert search(bob).status_code == 200  # another agent's token
    assert alice.client.get("/api/v1/status").status_code == 200  # another kind of request


@pytest.mark.django_db
def test_writes_sync_and_tool_calls_have_their_own_limits(alice, tight):
    writes = [alice.client.put(f"/api/v1/files/notes/{i}.md", "x", content_type="text/markdown").status_code for i in range(4)]
    assert writes == [201, 201, 201, 429]
    append = alice.client.post("/api/v1/files/notes/0.md/append", {"text": "more"}, format="json")
    assert append.status_code == 429  # an append is a write
    syncs = [alice.client.post("/api/v1/sync", {"files": []}, format="json").status_code for _ in range(3)]
    assert syncs == [200, 200, 429]
    tools = [alice.client.post("/api/v1/tools/memory_search", {"query": "x"}, format="json").status_code for _ in range(6)]
    assert tools == [200] * 5 + [429]


@pytest.mark.django_db
def test_mcp_tool_calls_count_as_searches(alice, tight):
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_search", "arguments": {"query": "x"}}}
    statuses = [alice.client.post("/mcp", call, format="json").status_code for _ in range(6)]
    assert statuses == [200] * 5 + [429]
    assert alice.client.get("/api/v1/status").status_code == 200


@pytest.mark.django_db
def test_a_token_told_to_wait_is_refused_before_any_database_query(alice, tight, django_assert_num_queries):
    for _ in range(6):
        search(alice)
    with django_assert_num_queries(0):
        refused = search(alice)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert refused["Retry-After"] == "2"  # the next call is allowed 1.2 s on: told in whole seconds, rounded up
    assert alice.client.get("/api/v1/status").status_code == 200  # other buckets go through


@pytest.mark.django_db
def test_a_client_that_comes_back_sooner_than_told_is_refused_cheaply_until_then(
    alice, settings, frozen_clock, django_assert_num_queries
):
    # 600 a minute: a burst of 60, then one call each 0.1 s. The limiter's own wait is a tenth of a
    # second, the client is told 1 s, and that second is what the cheap refusal covers: a flood that
    # ignores Retry-After reaches authentication and the limiter about once a second, not ten times.
    settings.MEMORYHUB_RATE_LIMITS = {**settings.MEMORYHUB_RATE_LIMITS, "search": Rate(600, 60)}
    assert [search(alice).status_code for _ in range(61)] == [200] * 60 + [429]
    frozen_clock.advance(0.5)  # the limiter would admit the next call already
    with django_assert_num_queries(0):
        refused = search(alice)
    assert refused.status_code == 429 and refused["Retry-After"] == "1"
    frozen_clock.advance(0.6)  # past the second the client was told
    assert search(alice).status_code == 200


@pytest.mark.django_db
def test_the_allowance_comes_back_one_call_per_interval(alice, settings, frozen_clock):
    settings.MEMORYHUB_RATE_LIMITS = {**settings.MEMORYHUB_RATE_LIMITS, "search": Rate(120, 60)}  # burst 12, then 2/s
    assert [search(alice).status_code for _ in range(14)] == [200] * 12 + [429] * 2
    frozen_clock.advance(1.1)
    assert [search(alice).status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.django_db
def test_with_redis_down_the_limit_still_holds_in_this_process(alice, tight, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    statuses = [search(alice).status_code for _ in range(7)]
    assert statuses == [200] * 5 + [429] * 2


def test_rates_are_parsed_and_bad_ones_refused():
    from django.core.exceptions import ImproperlyConfigured

    assert rate_parse("600/min", name="X") == Rate(600, 60)
    assert rate_parse("10/s", name="X") == Rate(10, 1)
    assert rate_parse("0", name="X") is None
    for bad in ("600", "ten/min", "5/fortnight", "-1/min"):
        with pytest.raises(ImproperlyConfigured):
            rate_parse(bad, name="X")


@pytest.mark.django_db
def test_the_default_limits_are_far_above_normal_use(alice):
    assert all(search(alice).status_code == 200 for _ in range(60))  # a search a second for a minute


@pytest.fixture
def per_second(settings):
    settings.MEMORYHUB_RATE_LIMITS = {**settings.MEMORYHUB_RATE_LIMITS, "search": Rate(600, 60)}  # burst 60, then 10/s
    settings.MEMORYHUB_TOKEN_MAX_CONCURRENT = 4
    settings.MEMORYHUB_RATE_LIMIT_MAX_PENALTY = 16


def told_wait(member, frozen_clock, *, early: int) -> int:
    """Search until refused, send ``early`` more searches during the told wait, and wait it out; the
    told wait in seconds."""
    for _ in range(100):
        refused = search(member)
        if refused.status_code == 429:
            break
    else:
        raise AssertionError("never refused")
    told = int(refused["Retry-After"])
    for _ in range(early):
        assert search(member).status_code == 429
    frozen_clock.advance(told)
    return told


@pytest.mark.django_db
@pytest.mark.parametrize("redis_up", [True, False])
def test_a_client_that_ignores_retry_after_is_told_longer_waits_and_held_in_every_process(
    alice, bob, per_second, settings, frozen_clock, redis_up
):
    from agents import throttles

    if not redis_up:
        settings.REDIS_URL = "redis://127.0.0.1:1/0"  # the in-process fallback holds it the same way
    assert [search(alice).status_code for _ in range(61)] == [200] * 60 + [429]
    for _ in range(20):
        assert search(alice).status_code == 429  # a flood: it keeps sending during the second it was told
    frozen_clock.advance(1)
    waits = [told_wait(alice, frozen_clock, early=20) for _ in range(5)]
    assert waits == [2, 4, 8, 16, 16]  # doubled at each refusal, up to MEMORYHUB_RATE_LIMIT_MAX_PENALTY

    # Held by the limiter, not only by this process's memory: another web process (no penalty known
    # to it) refuses the token too until the hold is over, and then admits one call, not a burst.
    assert [search(alice).status_code for _ in range(2)] == [200, 429]
    throttles._penalties.clear()
    frozen_clock.advance(8)
    assert search(alice).status_code == 429
    throttles._penalties.clear()
    frozen_clock.advance(8)
    assert [search(alice).status_code for _ in range(2)] == [200, 429]
    assert search(bob).status_code == 200  # another agent's token is never held


@pytest.mark.django_db
def test_a_client_that_waits_as_told_is_never_held_longer(alice, per_second, frozen_clock):
    search(alice)
    # Up to MEMORYHUB_TOKEN_MAX_CONCURRENT requests during a told wait were on their way before the 429
    # reached a client with that many in flight: they do not count as ignoring it.
    waits = [told_wait(alice, frozen_clock, early=early) for early in (0, 4, 0, 4, 0)]
    assert waits == [1, 1, 1, 1, 1]


@pytest.mark.django_db
def test_a_client_that_starts_waiting_as_told_is_forgiven(alice, per_second, frozen_clock):
    waits = [told_wait(alice, frozen_clock, early=early) for early in (20, 20, 20, 0, 0)]
    assert waits == [1, 2, 4, 8, 1]  # the wait after a kept one is the limiter's own again


@pytest.mark.django_db
def test_longer_waits_can_be_turned_off(alice, per_second, settings, frozen_clock):
    settings.MEMORYHUB_RATE_LIMIT_MAX_PENALTY = 0
    waits = [told_wait(alice, frozen_clock, early=20) for _ in range(4)]
    assert waits == [1, 1, 1, 1]


@pytest.mark.django_db
def test_a_restarted_worker_goes_on_from_the_waits_the_token_ignored_before(alice, per_second, frozen_clock):
    from agents import throttles

    assert [told_wait(alice, frozen_clock, early=20) for _ in range(3)] == [1, 2, 4]
    throttles._penalties.clear()  # gunicorn recycled the worker (or another one answers): its memory is gone
    throttles._early.clear()
    # The first refusal of the new process is the limiter's own wait (it told this token nothing yet);
    # the next one goes on from the count the limiter kept: 8 s, not 2 s again.
    assert [told_wait(alice, frozen_clock, early=20) for _ in range(2)] == [1, 8]
