"""The audit trail: who did what, when and from where, for tokens, grants, memberships, agents and the
re-index and retry actions; read-only, shown to the team's admins only, kept after the object is gone."""

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from agents.deletion import agent_purge
from agents.models import Agent, AuditEvent, TeamMembership
from indexing.models import IndexJob
from indexing.writes import file_ingest

pytestmark = pytest.mark.django_db

Action = AuditEvent.Action


def login(username: str) -> Client:
    client = Client(REMOTE_ADDR="203.0.113.7")
    assert client.login(username=username, password="pw")
    return client


def actions(**filters) -> list[str]:
    return list(AuditEvent.objects.filter(**filters).order_by("created_at", "id").values_list("action", flat=True))


def test_token_life_is_recorded_with_who_and_from_where(team_cast):
    red = team_cast.red_handbook.agent
    admin = login("red-admin")
    admin.post(f"/admin/agents/agent/{red.pk}/tokens/create/", {"label": "laptop", "scopes": ["read"]})
    token = red.tokens.get(label="laptop")
    admin.post(f"/admin/agents/agent/{red.pk}/tokens/{token.pk}/rotate/", {"confirmed": "yes"})
    replacement = red.tokens.get(label="laptop", revoked_at__isnull=True)
    admin.post(f"/admin/agents/agent/{red.pk}/tokens/{replacement.pk}/revoke/", {"confirmed": "yes"})

    events = AuditEvent.objects.filter(agent_id=red.pk, actor="red-admin").order_by("id")
    assert [e.action for e in events] == [Action.TOKEN_CREATED, Action.TOKEN_ROTATED, Action.TOKEN_REVOKED]
    assert {e.ip for e in events} == {"203.0.113.7"} and all(e.team_ids == [team_cast.red.pk] for e in events)
    assert events[0].target.startswith(token.prefix) and events[2].target.startswith(replacement.prefix)


def test_a_tokens_first_use_is_recorded_once_with_the_agents_address(team_cast):
    member = team_cast.red_writer
    member.client.get("/api/v1/status", REMOTE_ADDR="198.51.100.4")
    member.client.get("/api/v1/status", REMOTE_ADDR="198.51.100.5")
    first = AuditEvent.objects.filter(action=Action.TOKEN_FIRST_USED, agent_id=member.agent.pk)
    assert [(e.actor, e.ip) for e in first] == [("agent red-writer", "198.51.100.4")]


def test_grants_memberships_and_agents_are_recorded_and_kept_after_deletion(team_cast):
    call_command("grant_memory", "red-writer", "red-handbook", stdout=StringIO())
    call_command("revoke_memory_grant", "red-writer", "red-handbook", stdout=StringIO())
    assert actions(agent_slug="red-handbook", action__startswith="grant") == [Action.GRANT_GIVEN, Action.GRANT_REVOKED]
    assert AuditEvent.objects.filter(action=Action.GRANT_GIVEN).get().actor == "manage.py grant_memory"

    newcomer = User.objects.create_user("newcomer", password="pw", is_staff=True)
    admin = login("red-admin")
    members = list(TeamMembership.objects.filter(team=team_cast.red))
    form = {"slug": "red", "name": "red", "memberships-TOTAL_FORMS": len(members) + 1,
            "memberships-INITIAL_FORMS": len(members), "memberships-MIN_NUM_FORMS": 0, "memberships-MAX_NUM_FORMS": 1000}
    for n, m in enumerate(members):
        form.update({f"memberships-{n}-id": m.pk, f"memberships-{n}-team": team_cast.red.pk,
                     f"memberships-{n}-user": m.user_id, f"memberships-{n}-role": m.role})
        if m.user.username == "red-viewer":
            form[f"memberships-{n}-role"] = "admin"
    form.update({f"memberships-{len(members)}-team": team_cast.red.pk, f"memberships-{len(members)}-user": newcomer.pk,
                 f"memberships-{len(members)}-role": "viewer"})
    assert admin.post(f"/admin/agents/team/{team_cast.red.pk}/change/", form).status_code == 302
    members_events = {(e.action, e.target, e.details.get("role")) for e in AuditEvent.objects.filter(action__startswith="member")}
    assert members_events == {(Action.MEMBER_ADDED, "newcomer", "viewer"), (Action.MEMBER_CHANGED, "red-viewer", "admin")}

    writer = team_cast.red_writer.agent
    form = {"slug": writer.slug, "name": writer.name, "team": writer.team_id, "overrides": "{}", "webhook_secret": ""}
    admin.post(f"/admin/agents/agent/{writer.pk}/change/", form)  # is_active unticked
    admin.post(f"/admin/agents/agent/{writer.pk}/delete/", {"post": "yes"})
    assert agent_purge(agent_id=writer.pk).finished  # the background deletion's batches
    assert not Agent.objects.filter(pk=writer.pk).exists()
    kept = actions(agent_id=writer.pk)
    assert kept[0] == Action.AGENT_CREATED and kept[-2:] == [Action.AGENT_DEACTIVATED, Action.AGENT_DELETED]
    assert AuditEvent.objects.filter(agent_id=writer.pk, action=Action.AGENT_DELETED).get().agent_slug == "red-writer"


def test_reindex_and_retry_actions_are_recorded(team_cast, eager_tasks):
    red = team_cast.red_handbook.agent
    memory_file, _ = file_ingest(agent=red, path="memory/a.md", content="A note.")
    job = IndexJob.objects.create(agent=red, trigger="upload", state="failed", error="boom")
    admin = login("red-admin")
    admin.post("/admin/indexing/memoryfile/", {"action": "reindex_selected", "_selected_action": [memory_file.pk]})
    admin.post("/admin/indexing/indexjob/", {"action": "retry_selected", "_selected_action": [job.pk]})
    assert set(actions(actor="red-admin")) == {Action.FILES_REINDEXED, Action.JOBS_RETRIED}


def test_the_trail_is_read_only_and_shown_to_the_teams_admins_only(team_cast):
    call_command("grant_memory", "red-writer", "red-handbook", stdout=StringIO())
    call_command("grant_memory", "blue-agent", "red-handbook", stdout=StringIO())
    event = AuditEvent.objects.get(action=Action.GRANT_GIVEN, details__reader="red-writer")
    cross = AuditEvent.objects.get(action=Action.GRANT_GIVEN, details__reader="blue-agent")

    red_page = login("red-admin").get("/admin/agents/auditevent/").content.decode()
    assert "red-writer may read red-handbook" in red_page and "blue-agent may read red-handbook" in red_page
    blue_page = login("blue-admin").get("/admin/agents/auditevent/").content.decode()
    assert "blue-agent may read red-handbook" in blue_page and "red-writer may read" not in blue_page
    assert login("blue-admin").get(f"/admin/agents/auditevent/{event.pk}/change/").status_code == 404
    assert login("blue-admin").get(f"/admin/agents/auditevent/{cross.pk}/change/").status_code == 200
    assert login("red-viewer").get("/admin/agents/auditevent/").status_code == 403

    admin = login("red-admin")
    page = admin.get(f"/admin/agents/auditevent/{event.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    admin.post(f"/admin/agents/auditevent/{event.pk}/change/", {"actor": "someone else"})
    assert admin.post(f"/admin/agents/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    event.refresh_from_db()
    assert event.actor == "manage.py grant_memory"
