"""The admin scoped to the user's teams: lists, pages, actions, the dashboard, the playground and the usage
page show one team's rows; another team's row by id in the URL is a 404; viewers only read; superusers
see every team."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agents.models import Agent, AgentToken, TeamMembership
from indexing.models import IndexJob
from indexing.writes import file_ingest

pytestmark = pytest.mark.django_db


def login(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="pw")
    return client


@pytest.fixture
def rows(team_cast):
    """A file, a failed job and a token per team."""
    red_file, _ = file_ingest(agent=team_cast.red_handbook.agent, path="memory/red-policies.md", content="Red rules.")
    blue_file, _ = file_ingest(agent=team_cast.blue_agent.agent, path="memory/blue-secrets.md", content="Blue plans.")
    red_job = IndexJob.objects.create(agent=team_cast.red_handbook.agent, trigger="upload", state="failed", error="red boom")
    blue_job = IndexJob.objects.create(agent=team_cast.blue_agent.agent, trigger="upload", state="failed", error="blue boom")
    return {
        "red_file": red_file, "blue_file": blue_file, "red_job": red_job, "blue_job": blue_job,
        "red_token": team_cast.red_handbook.token, "blue_token": team_cast.blue_agent.token,
    }


@pytest.mark.parametrize("username", ["red-admin", "red-viewer"])
def test_every_list_shows_only_the_users_team(team_cast, rows, username):
    client = login(username)
    for url, mine, theirs in [
        ("/admin/agents/agent/", "red-handbook", "blue-agent"),
        ("/admin/agents/agenttoken/", rows["red_token"].prefix, rows["blue_token"].prefix),
        ("/admin/indexing/memoryfile/", "red-policies.md", "blue-secrets.md"),
        ("/admin/indexing/indexjob/", "red boom", "blue boom"),
        ("/admin/agents/team/", ">red<", ">blue<"),
    ]:
        page = client.get(url)
        assert page.status_code == 200, url
        html = page.content.decode()
        assert mine in html and theirs not in html, url


@pytest.mark.parametrize("username", ["red-admin", "red-viewer"])
def test_another_teams_rows_by_id_are_404(team_cast, rows, username):
    client = login(username)
    blue = team_cast.blue_agent.agent
    urls = [
        f"/admin/agents/agent/{blue.pk}/change/",
        f"/admin/agents/agent/{blue.pk}/delete/",
        f"/admin/agents/agent/{blue.pk}/history/",
        f"/admin/agents/agent/{blue.pk}/search/?query=plans",
        f"/admin/agents/agent/{blue.pk}/tokens/{rows['blue_token'].pk}/revoke/",
        f"/admin/agents/agent/{blue.pk}/tokens/{rows['blue_token'].pk}/rotate/",
        f"/admin/agents/agenttoken/{rows['blue_token'].pk}/change/",
        f"/admin/indexing/memoryfile/{rows['blue_file'].pk}/change/",
        f"/admin/indexing/indexjob/{rows['blue_job'].pk}/change/",
        f"/admin/agents/team/{team_cast.blue.pk}/change/",
        f"/admin/usage/?agent={blue.pk}",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 404, url
        assert b"blue" not in response.content, url
    assert client.post(f"/admin/agents/agent/{blue.pk}/tokens/create/", {"label": "x", "scopes": ["read"]}).status_code == 404
    assert client.post(
        f"/admin/agents/agent/{blue.pk}/tokens/{rows['blue_token'].pk}/revoke/", {"confirmed": "yes"}
    ).status_code == 404
    assert not AgentToken.objects.filter(agent=blue, revoked_at__isnull=False).exists()
    assert AgentToken.objects.filter(agent=blue).count() == 1


def test_a_viewer_reads_but_cannot_change_anything(team_cast, rows):
    client = login("red-viewer")
    red = team_cast.red_handbook.agent
    page = client.get(f"/admin/agents/agent/{red.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert client.post(f"/admin/agents/agent/{red.pk}/change/", {"slug": "renamed", "team": red.team_id}).status_code == 403
    assert client.post(f"/admin/agents/agent/{red.pk}/tokens/create/", {"label": "x", "scopes": ["read"]}).status_code == 403
    token = rows["red_token"]
    assert client.post(f"/admin/agents/agent/{red.pk}/tokens/{token.pk}/revoke/", {"confirmed": "yes"}).status_code == 403
    assert client.get("/admin/agents/agent/add/").status_code == 403
    assert client.post(f"/admin/agents/agent/{red.pk}/delete/", {"post": "yes"}).status_code == 403
    # No state-changing action is offered, and posting one changes nothing.
    assert b"reindex_selected" not in client.get("/admin/indexing/memoryfile/").content
    assert b"retry_selected" not in client.get("/admin/indexing/indexjob/").content
    assert b"revoke_selected" not in client.get("/admin/agents/agenttoken/").content
    client.post("/admin/indexing/indexjob/", {"action": "retry_selected", "_selected_action": [rows["red_job"].pk]})
    client.post("/admin/agents/agenttoken/", {"action": "revoke_selected", "_selected_action": [token.pk], "confirmed": "yes"})
    rows["red_job"].refresh_from_db()
    token.refresh_from_db()
    assert rows["red_job"].state == "failed" and token.revoked_at is None
    # The playground is reading: allowed.
    assert client.get(f"/admin/agents/agent/{red.pk}/search/?query=rules").status_code == 200
    agent = Agent.objects.get(pk=red.pk)
    assert agent.slug == "red-handbook"


def test_an_admins_actions_never_reach_another_team(team_cast, rows, eager_tasks):
    client = login("red-admin")
    both_jobs = [rows["red_job"].pk, rows["blue_job"].pk]
    client.post("/admin/indexing/indexjob/", {"action": "retry_selected", "_selected_action": both_jobs})
    rows["blue_job"].refresh_from_db()
    assert rows["blue_job"].state == "failed" and rows["blue_job"].attempts == 0
    rows["red_job"].refresh_from_db()
    assert rows["red_job"].state != "failed" or rows["red_job"].attempts > 0

    both_tokens = [rows["red_token"].pk, rows["blue_token"].pk]
    client.post("/admin/agents/agenttoken/", {"action": "revoke_selected", "_selected_action": both_tokens, "confirmed": "yes"})
    assert AgentToken.objects.get(pk=rows["red_token"].pk).revoked_at is not None
    assert AgentToken.objects.get(pk=rows["blue_token"].pk).revoked_at is None


def test_an_admin_creates_agents_in_their_team_only(team_cast):
    client = login("red-admin")
    form = {"slug": "red-new", "name": "", "is_active": "on", "overrides": "{}"}
    page = client.get("/admin/agents/agent/add/").content.decode()
    assert ">red<" in page and ">blue<" not in page
    refused = client.post("/admin/agents/agent/add/", {**form, "team": team_cast.blue.pk})
    assert refused.status_code == 200 and not Agent.objects.filter(slug="red-new").exists()
    created = client.post("/admin/agents/agent/add/", form)  # blank: the admin's only team
    assert created.status_code == 302
    assert Agent.objects.get(slug="red-new").team == team_cast.red


def test_a_team_admin_manages_members_a_viewer_cannot(team_cast):
    newcomer = User.objects.create_user("newcomer", password="pw", is_staff=True)
    url = f"/admin/agents/team/{team_cast.red.pk}/change/"
    members = TeamMembership.objects.filter(team=team_cast.red)
    form = {
        "slug": "red", "name": "red",
        "memberships-TOTAL_FORMS": members.count() + 1, "memberships-INITIAL_FORMS": members.count(),
        "memberships-MIN_NUM_FORMS": 0, "memberships-MAX_NUM_FORMS": 1000,
    }
    for n, membership in enumerate(members):
        form.update({f"memberships-{n}-id": membership.pk, f"memberships-{n}-team": team_cast.red.pk,
                     f"memberships-{n}-user": membership.user_id, f"memberships-{n}-role": membership.role})
    last = members.count()
    form.update({f"memberships-{last}-team": team_cast.red.pk, f"memberships-{last}-user": newcomer.pk,
                 f"memberships-{last}-role": "viewer"})
    assert login("red-viewer").post(url, form).status_code == 403
    assert not TeamMembership.objects.filter(user=newcomer).exists()
    response = login("red-admin").post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert TeamMembership.objects.get(user=newcomer).team == team_cast.red
    assert login("newcomer").get("/admin/agents/agent/").content.decode().count("red-handbook") >= 1


def test_the_dashboard_and_usage_count_the_users_team_only(team_cast, rows):
    from indexing.models import EmbeddingBatch

    EmbeddingBatch.objects.create(  # blue's batch in flight: not red's to count
        agent=team_cast.blue_agent.agent, job=rows["blue_job"], provider="openai", model="m", dimensions=8,
        state=EmbeddingBatch.State.IN_FLIGHT, inputs=7,
    )
    dashboard = login("red-viewer").get("/admin/").context["dashboard"]
    assert dashboard["batches"]["in_flight"] == 0 and dashboard["batches"]["inputs"] == 0
    assert dashboard["agents"]["total"] == 2 and dashboard["files"]["total"] == 1 and dashboard["jobs"]["failed"] == 1
    assert dashboard["tokens"]["active"] == 2 and dashboard["cache"]["entries"] is None
    assert [job.error for job in dashboard["failed_jobs"]] == ["red boom"]
    everything = login_superuser().get("/admin/").context["dashboard"]
    assert everything["agents"]["total"] == 3 and everything["files"]["total"] == 2 and everything["jobs"]["failed"] == 2
    assert everything["batches"]["in_flight"] == 1


def test_a_staff_user_without_a_team_sees_nothing(team_cast, rows):
    User.objects.create_user("drifter", password="pw", is_staff=True)
    client = login("drifter")
    assert client.get("/admin/").context["dashboard"]["agents"]["total"] == 0
    assert client.get("/admin/agents/agent/").status_code == 403
    assert client.get(f"/admin/agents/agent/{team_cast.red_handbook.agent.pk}/change/").status_code in (403, 404)


def test_a_superuser_sees_every_team(team_cast, rows):
    client = login_superuser()
    html = client.get("/admin/agents/agent/").content.decode()
    assert "red-handbook" in html and "blue-agent" in html
    assert client.get(f"/admin/indexing/memoryfile/{rows['blue_file'].pk}/change/").status_code == 200


def login_superuser() -> Client:
    User.objects.create_superuser("root", "root@example.com", "pw")
    return login("root")


def test_grants_in_the_admin_same_team_at_once_across_teams_once_both_approved(team_cast):
    from agents.models import MemoryGrant

    red_admin = login("red-admin")
    assert login("red-viewer").post("/admin/agents/memorygrant/add/", {"reader_slug": "red-writer", "owner_slug": "red-handbook"}).status_code == 403
    assert red_admin.post("/admin/agents/memorygrant/add/", {"reader_slug": "red-writer", "owner_slug": "red-handbook"}).status_code == 302
    assert MemoryGrant.objects.get(reader__slug="red-writer").is_active

    red_admin.post("/admin/agents/memorygrant/add/", {"reader_slug": "blue-agent", "owner_slug": "red-handbook"})
    cross = MemoryGrant.objects.get(reader__slug="blue-agent")
    assert not cross.is_active and cross.owner_team_approved

    # The other team sees the grant waiting for it; its viewer cannot approve, its admin can.
    assert b"waiting for the reader" in login("blue-viewer").get("/admin/agents/memorygrant/").content
    login("blue-viewer").post("/admin/agents/memorygrant/", {"action": "approve_selected", "_selected_action": [cross.pk]})
    cross.refresh_from_db()
    assert not cross.is_active
    login("blue-admin").post("/admin/agents/memorygrant/", {"action": "approve_selected", "_selected_action": [cross.pk]})
    cross.refresh_from_db()
    assert cross.is_active

    # The blue team never sees the red team's internal grant.
    blue_list = login("blue-admin").get("/admin/agents/memorygrant/").content.decode()
    assert "red-writer" not in blue_list
    internal = MemoryGrant.objects.get(reader__slug="red-writer")
    assert login("blue-admin").get(f"/admin/agents/memorygrant/{internal.pk}/change/").status_code == 404


def test_an_admin_cannot_grant_between_two_other_teams_agents(team_cast):
    from agents.models import MemoryGrant
    from agents.services import agent_create

    agent_create(slug="blue-second", team=team_cast.blue)
    page = login("red-admin").post("/admin/agents/memorygrant/add/", {"reader_slug": "blue-second", "owner_slug": "blue-agent"})
    assert page.status_code == 200 and b"team you administer" in page.content
    assert not MemoryGrant.objects.exists()
