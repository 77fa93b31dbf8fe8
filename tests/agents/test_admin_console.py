"""The agent pages of the admin console: the list's index columns, token create / revoke / rotate from
the agent page (raw value shown once), and a first token for an agent created in the admin."""

import re

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agents.models import AgentToken
from indexing.models import IndexJob
from indexing.writes import file_ingest
from tests.indexing.conftest import eager_tasks, indexed  # noqa: F401 (fixtures; eager_tasks for every test here)

pytestmark = pytest.mark.django_db

RAW_TOKEN = re.compile(r"mh_[A-Za-z0-9_-]{43}")


@pytest.fixture
def operator(client):
    User.objects.create_superuser("operator", "op@example.com", "pw")
    client.login(username="operator", password="pw")
    return client


def api_client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_the_agent_list_shows_each_agents_index(operator, alice, bob, fake_embeddings, indexed):
    with indexed():
        file_ingest(agent=alice.agent, path="memory/a.md", content="# A\n\nAlice likes tea.\n\n# B\n\nAnd cake.")
        file_ingest(agent=alice.agent, path="memory/b.md", content="Alice went to Lisbon.")
    file_ingest(agent=alice.agent, path="memory/c.md", content="Not indexed yet.")  # on-commit never runs: pending
    IndexJob.objects.create(agent=bob.agent, trigger="upload", state="failed", error="boom")

    page = operator.get("/admin/agents/agent/")
    rows = {agent.slug: agent for agent in page.context["cl"].result_list}
    assert rows["alice"].file_count == 3 and rows["alice"].pending_count == 1 and rows["alice"].chunk_count == 3
    assert rows["alice"].failed_job_count == 0 and rows["alice"].active_job_count == 1
    assert rows["alice"].last_indexed_at is not None
    assert (rows["bob"].file_count, rows["bob"].chunk_count, rows["bob"].failed_job_count) == (0, 0, 1)
    assert rows["bob"].last_indexed_at is None
    html = page.content.decode()
    assert "Failed jobs" in html and "Last indexed" in html


def test_the_agent_list_costs_the_same_queries_for_many_agents(operator, make_member, django_assert_max_num_queries):
    make_member("first")
    with django_assert_max_num_queries(8) as few:
        operator.get("/admin/agents/agent/")
    for n in range(30):
        member = make_member(f"agent-{n}")
        file_ingest(agent=member.agent, path="MEMORY.md", content=f"note {n}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = operator.get("/admin/agents/agent/")
    assert page.status_code == 200 and "agent-29" in page.content.decode()


def test_an_agent_created_in_the_admin_gets_a_token_shown_once(operator):
    response = operator.post(
        "/admin/agents/agent/add/", {"slug": "helper", "name": "Helper", "is_active": "on", "overrides": "{}"}, follow=True
    )
    assert response.status_code == 200
    assert response.redirect_chain[-1][0].endswith("/change/")
    shown = RAW_TOKEN.findall(response.content.decode())
    assert len(shown) == 1
    assert api_client(shown[0]).get("/api/v1/status").json()["agent"] == "helper"

    again = operator.get(response.redirect_chain[-1][0])
    assert shown[0] not in again.content.decode()
    token = AgentToken.objects.get(agent__slug="helper")
    assert token.prefix in again.content.decode()  # listed by prefix only


def test_a_token_created_on_the_agent_page_is_shown_once_with_its_scopes(operator, alice):
    page = f"/admin/agents/agent/{alice.agent.pk}/change/"
    response = operator.post(
        f"/admin/agents/agent/{alice.agent.pk}/tokens/create/", {"label": "reader", "scopes": ["read"]}, follow=True
    )
    assert response.redirect_chain[-1][0].startswith(page)
    shown = RAW_TOKEN.findall(response.content.decode())
    assert len(shown) == 1
    token = AgentToken.objects.get(label="reader")
    assert token.scopes == ["read"] and shown[0].startswith(token.prefix)
    reader = api_client(shown[0])
    assert reader.get("/api/v1/status").status_code == 200
    assert reader.put("/api/v1/files/MEMORY.md", "x", content_type="text/plain").status_code == 403
    assert shown[0] not in operator.get(page).content.decode()


def test_a_token_without_scopes_is_refused_with_a_message(operator, alice):
    response = operator.post(f"/admin/agents/agent/{alice.agent.pk}/tokens/create/", {"label": "none"}, follow=True)
    assert "No token created" in response.content.decode()
    assert not AgentToken.objects.filter(label="none").exists()


CONFIRMED = {"confirmed": "yes"}


def test_revoking_on_the_agent_page_stops_the_token(operator, alice):
    response = operator.post(f"/admin/agents/agent/{alice.agent.pk}/tokens/{alice.token.pk}/revoke/", CONFIRMED, follow=True)
    assert "revoked" in response.content.decode()
    assert alice.client.get("/api/v1/status").status_code == 401


@pytest.mark.parametrize("action", ["revoke", "rotate"])
def test_the_agent_page_asks_before_revoking_or_rotating(operator, alice, action):
    url = f"/admin/agents/agent/{alice.agent.pk}/tokens/{alice.token.pk}/{action}/"
    agent_page = operator.get(f"/admin/agents/agent/{alice.agent.pk}/change/").content.decode()
    assert f'href="{url}"' in agent_page  # a link to the question, not a form that acts

    question = operator.get(url)
    html = question.content.decode()
    assert question.status_code == 200
    assert f"{action.capitalize()} token <code>{alice.token.prefix}…</code>" in html
    assert "refused" in html and f'id="confirm-{action}"' in html and "No, take me back" in html

    unconfirmed = operator.post(url)  # a POST without the answer only asks again
    assert unconfirmed.status_code == 200 and f'id="confirm-{action}"' in unconfirmed.content.decode()
    alice.token.refresh_from_db()
    assert alice.token.revoked_at is None and AgentToken.objects.filter(agent=alice.agent).count() == 1
    assert alice.client.get("/api/v1/status").status_code == 200


def test_the_one_time_token_has_a_copy_button_for_exactly_it(operator, alice):
    response = operator.post(f"/admin/agents/agent/{alice.agent.pk}/tokens/create/", {"label": "x", "scopes": ["read"]}, follow=True)
    html = response.content.decode()
    (raw,) = RAW_TOKEN.findall(html)
    target = re.search(r'<code class="raw-token" id="([^"]+)">' + re.escape(raw) + "</code>", html).group(1)
    assert f'<button type="button" class="button mh-copy" data-copy-target="{target}">Copy</button>' in html
    assert "navigator.clipboard" in html  # the script the button runs


def test_rotating_replaces_the_token_with_one_of_the_same_scopes(operator, alice):
    response = operator.post(f"/admin/agents/agent/{alice.agent.pk}/tokens/{alice.token.pk}/rotate/", CONFIRMED, follow=True)
    shown = RAW_TOKEN.findall(response.content.decode())
    assert len(shown) == 1
    assert alice.client.get("/api/v1/status").status_code == 401
    replacement = api_client(shown[0])
    assert replacement.get("/api/v1/status").json()["agent"] == "alice"
    new = AgentToken.objects.get(agent=alice.agent, revoked_at__isnull=True)
    assert new.scopes == alice.token.scopes and new.label == alice.token.label


def test_token_actions_need_a_confirmed_post_and_the_tokens_own_agent(operator, alice, bob):
    assert operator.delete(f"/admin/agents/agent/{alice.agent.pk}/tokens/{alice.token.pk}/revoke/").status_code == 405
    wrong = operator.post(f"/admin/agents/agent/{bob.agent.pk}/tokens/{alice.token.pk}/revoke/", CONFIRMED)
    assert wrong.status_code == 404
    alice.token.refresh_from_db()
    assert alice.token.revoked_at is None


def test_token_pages_need_a_staff_login(client, alice):
    response = client.post(f"/admin/agents/agent/{alice.agent.pk}/tokens/{alice.token.pk}/revoke/", {"confirmed": "yes"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    alice.token.refresh_from_db()
    assert alice.token.revoked_at is None


def _agent_form(agent, **changes) -> dict:
    form = {"slug": agent.slug, "team": agent.team_id, "name": agent.name, "is_active": "on", "webhook_secret": "", "overrides": "{}"}
    form.update(changes)
    return form


def test_the_webhook_secret_is_write_only_on_the_agent_page(operator, alice):
    agent = alice.agent
    agent.webhook_secret = "s3cret-value-never-shown"
    agent.save()
    url = f"/admin/agents/agent/{agent.pk}/change/"

    page = operator.get(url).content.decode()
    assert "s3cret-value-never-shown" not in page and "A secret is set." in page

    # Saving the page with the field left blank keeps the secret.
    assert operator.post(url, _agent_form(agent, name="renamed")).status_code == 302
    agent.refresh_from_db()
    assert agent.name == "renamed" and agent.webhook_secret == "s3cret-value-never-shown"

    operator.post(url, _agent_form(agent, webhook_secret="a-new-secret"))
    agent.refresh_from_db()
    assert agent.webhook_secret == "a-new-secret"

    operator.post(url, _agent_form(agent, clear_webhook_secret="on"))
    agent.refresh_from_db()
    assert agent.webhook_secret == ""
    assert "No secret is set." in operator.get(url).content.decode()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ('{"chunk_token": 256}', "Unknown override key(s): chunk_token. Known keys: chunk_tokens, chunk_overlap."),
        ('{"chunk_tokens": "256"}', "chunk_tokens must be a whole number from 32 to 8000 (got &#x27;256&#x27;)."),
        ('{"chunk_tokens": 10}', "chunk_tokens must be a whole number from 32 to 8000 (got 10)."),
        ('{"chunk_tokens": 100, "chunk_overlap": 100}', "chunk_overlap (100) must be smaller than chunk_tokens (100)."),
        ('[256]', "Overrides must be a JSON object"),
        ('{"chunk_tokens": 256', "Enter a valid JSON."),
    ],
)
def test_overrides_the_indexer_would_ignore_are_a_form_error(operator, alice, overrides, message):
    agent = alice.agent
    response = operator.post(f"/admin/agents/agent/{agent.pk}/change/", _agent_form(agent, overrides=overrides))
    assert response.status_code == 200  # the form again, with the error
    assert message in response.content.decode()
    agent.refresh_from_db()
    assert agent.overrides == {}


def test_valid_overrides_are_saved_and_used_for_chunking(operator, alice):
    from indexing.services import chunk_sizes

    agent = alice.agent
    form = _agent_form(agent, overrides='{"chunk_tokens": 120, "chunk_overlap": 20}')
    assert operator.post(f"/admin/agents/agent/{agent.pk}/change/", form).status_code == 302
    agent.refresh_from_db()
    assert agent.overrides == {"chunk_tokens": 120, "chunk_overlap": 20}
    assert chunk_sizes(agent=agent) == (120, 20)


def test_the_header_links_the_api_docs_instead_of_a_view_site_that_is_a_404(operator, client):
    html = operator.get("/admin/").content.decode()
    assert "View site" not in html
    link = re.search(r'<a href="([^"]+)" id="api-docs-link">API docs</a>', html).group(1)
    assert client.get(link).status_code == 200
