import re

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agents.models import AgentToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client):
    User.objects.create_superuser("operator", "op@example.com", "pw")
    client.login(username="operator", password="pw")
    return client


def test_a_token_created_in_the_admin_is_shown_once_and_works(operator_client, alice):
    response = operator_client.post(
        "/admin/agents/agenttoken/add/",
        {"agent": alice.agent.pk, "label": "from admin", "scopes": "read", "expires_at_0": "", "expires_at_1": ""},
        follow=True,
    )
    assert response.status_code == 200
    shown = re.findall(r"mh_[A-Za-z0-9_-]{43}", response.content.decode())
    assert len(shown) == 1
    raw = shown[0]

    token = AgentToken.objects.get(label="from admin")
    assert token.scopes == ["read"] and raw.startswith(token.prefix) and raw not in token.digest

    again = operator_client.get(f"/admin/agents/agenttoken/{token.pk}/change/")
    assert raw not in again.content.decode()
    assert raw not in operator_client.get("/admin/agents/agenttoken/").content.decode()

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/status").json()["agent"] == "alice"


def test_revoking_from_the_admin_asks_first_then_stops_the_token(operator_client, alice):
    selection = {"action": "revoke_selected", "_selected_action": [alice.token.pk]}
    question = operator_client.post("/admin/agents/agenttoken/", selection)
    html = question.content.decode()
    assert question.status_code == 200 and f"<code>{alice.token.prefix}…</code>" in html and 'id="confirm-revoke"' in html
    assert alice.client.get("/api/v1/status").status_code == 200

    answer = operator_client.post("/admin/agents/agenttoken/", {**selection, "confirmed": "yes"}, follow=True)
    assert "Revoked 1 token(s)." in answer.content.decode()
    assert alice.client.get("/api/v1/status").status_code == 401
