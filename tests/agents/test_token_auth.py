from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentToken
from agents.services import agent_token_revoke

pytestmark = pytest.mark.django_db

STATUS = "/api/v1/status"


def assert_error(response, status: int, code: str):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body


def test_valid_token_acts_as_its_agent(alice):
    response = alice.client.get(STATUS)
    assert response.status_code == 200
    assert response.json()["agent"] == "alice"


def test_missing_token_is_401_with_a_challenge(anonymous_client):
    response = anonymous_client.get(STATUS)
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer not-a-token", "Token mh_" + "a" * 43, "Basic dXNlcjpwYXNz", "Bearer mh_short", "Bearer mh_" + "!" * 43],
)
def test_malformed_authorization_is_401(anonymous_client, header, django_assert_num_queries):
    anonymous_client.credentials(HTTP_AUTHORIZATION=header)
    with django_assert_num_queries(0):  # rejected before the database is touched
        response = anonymous_client.get(STATUS)
    assert_error(response, 401, "invalid_token")


def test_unknown_token_is_401(anonymous_client):
    anonymous_client.credentials(HTTP_AUTHORIZATION="Bearer mh_" + "A" * 43)
    assert_error(anonymous_client.get(STATUS), 401, "invalid_token")


def test_revoked_token_is_401(alice):
    agent_token_revoke(token=alice.token)
    assert_error(alice.client.get(STATUS), 401, "token_revoked")


def test_expired_token_is_401(alice):
    AgentToken.objects.filter(pk=alice.token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert_error(alice.client.get(STATUS), 401, "token_expired")


def test_token_of_a_deactivated_agent_is_401(alice):
    alice.agent.is_active = False
    alice.agent.save()
    assert_error(alice.client.get(STATUS), 401, "agent_inactive")


def test_write_only_token_cannot_read(make_member):
    writer = make_member("writer", scopes=["write"])
    assert_error(writer.client.get(STATUS), 403, "insufficient_scope")


def test_last_used_time_is_recorded(alice):
    assert alice.token.last_used_at is None
    alice.client.get(STATUS)
    alice.token.refresh_from_db()
    assert alice.token.last_used_at is not None


def test_only_a_digest_and_prefix_are_stored(alice):
    row = AgentToken.objects.get(pk=alice.token.pk)
    assert alice.raw_token.startswith("mh_") and len(alice.raw_token) == 46
    assert alice.raw_token not in (row.digest, row.prefix, row.label)
    assert alice.raw_token.startswith(row.prefix)
    assert len(row.digest) == 64


def test_unknown_api_path_answers_json_404(alice):
    response = alice.client.get("/api/v1/no-such-thing")
    assert_error(response, 404, "not_found")
