"""The admin login locks a username out from an address after repeated failures: 30 wrong passwords
and then the right one no longer logs in (it did before), other users are unaffected, and the lock
lifts by itself."""

import pytest
from django.contrib.auth import get_user_model

from memoryhub import ratelimit


pytestmark = pytest.mark.usefixtures("own_rate_limits")


@pytest.fixture
def operators(db):
    User = get_user_model()
    User.objects.create_superuser("root", "root@example.com", "right-password")
    User.objects.create_superuser("other", "other@example.com", "other-password")


def login(client, username, password):
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password})


@pytest.mark.django_db
def test_thirty_wrong_passwords_lock_out_even_the_right_one(client, operators, settings):
    statuses = [login(client, "root", f"guess-{i}").status_code for i in range(30)]
    assert statuses[: settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES] == [200] * settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES
    assert set(statuses[settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES :]) == {429}

    response = login(client, "root", "right-password")
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert b"Too many failed logins" in response.content
    assert client.get("/admin/").status_code == 302  # still not logged in

    assert login(client, "other", "other-password").status_code == 302  # another operator logs in


@pytest.mark.django_db
def test_a_success_before_the_limit_clears_the_count(client, operators, settings):
    for i in range(settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES - 1):
        login(client, "root", f"guess-{i}")
    assert login(client, "root", "right-password").status_code == 302
    client.logout()
    for i in range(settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES - 1):
        assert login(client, "root", f"again-{i}").status_code == 200


@pytest.mark.django_db
def test_the_lockout_lifts_by_itself(client, operators, settings, frozen_clock):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # the in-process counters, on the test's clock
    settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES = 3
    settings.MEMORYHUB_ADMIN_LOGIN_LOCKOUT_SECONDS = 60
    for i in range(3):
        login(client, "root", f"guess-{i}")
    frozen_clock.advance(59)
    assert login(client, "root", "right-password").status_code == 429
    frozen_clock.advance(2)
    assert login(client, "root", "right-password").status_code == 302


@pytest.mark.django_db
def test_in_redis_the_lockout_is_a_key_that_expires(client, operators, settings):
    settings.MEMORYHUB_ADMIN_LOGIN_MAX_FAILURES = 3
    settings.MEMORYHUB_ADMIN_LOGIN_LOCKOUT_SECONDS = 60
    for i in range(3):
        login(client, "root", f"guess-{i}")
    assert login(client, "root", "right-password").status_code == 429
    ttl = ratelimit.store._redis().ttl(ratelimit._login_key("root", "127.0.0.1"))
    assert 0 < ttl <= 60  # Redis drops it by itself (expire); each failure restarts it, a success deletes it
