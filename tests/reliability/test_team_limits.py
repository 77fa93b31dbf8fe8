"""Per-team limits: files and bytes stored by all a team's agents, agents in the team, and requests of all
its agents, with defaults from settings and per-team overrides; each refused with a 4xx JSON error that
names the limit, and another team untouched."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from agents.models import Agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("own_rate_limits", "frozen_clock")]


def put(member, path, content="x"):
    return member.client.put(f"/api/v1/files/{path}", content, content_type="text/markdown")


def test_the_teams_file_limit_counts_all_its_agents(team_cast):
    team_cast.red.max_files = 2
    team_cast.red.save()
    assert put(team_cast.red_handbook, "a.md").status_code == 201
    assert put(team_cast.red_writer, "b.md").status_code == 201
    refused = put(team_cast.red_writer, "c.md")
    assert refused.status_code == 413
    error = refused.json()["error"]
    assert error["code"] == "team_file_quota_exceeded" and "team_max_files" in error["message"]
    assert put(team_cast.red_writer, "b.md", "changed").status_code == 200  # not a new file
    assert put(team_cast.blue_agent, "c.md").status_code == 201  # another team


def test_the_teams_byte_limit_from_settings(team_cast, settings):
    settings.MEMORYHUB_TEAM_MAX_BYTES = 10
    assert put(team_cast.red_handbook, "a.md", "12345678").status_code == 201
    refused = put(team_cast.red_writer, "b.md", "1234")
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "team_byte_quota_exceeded"
    assert "team_max_bytes" in refused.json()["error"]["message"]


def test_the_teams_agent_limit(team_cast, settings):
    team_cast.red.max_agents = 2
    team_cast.red.save()
    with pytest.raises(CommandError, match="team_max_agents"):
        call_command("create_agent", "red-third", "--team", "red", stdout=StringIO())
    call_command("create_agent", "blue-second", "--team", "blue", stdout=StringIO())

    client = Client()
    client.login(username="red-admin", password="pw")
    page = client.post("/admin/agents/agent/add/", {"slug": "red-third", "name": "", "is_active": "on", "overrides": "{}"})
    assert page.status_code == 200 and b"team_max_agents" in page.content
    assert not Agent.objects.filter(slug="red-third").exists()


def test_the_teams_request_rate_counts_all_its_agents(team_cast, frozen_clock):
    team_cast.red.rate_limit = "20/min"  # a burst of 2, then one per 3 s
    team_cast.red.save()
    answers = [
        team_cast.red_handbook.client.get("/api/v1/status").status_code,
        team_cast.red_writer.client.get("/api/v1/status").status_code,
    ]
    refused = team_cast.red_writer.client.post("/api/v1/search", {"query": "x"}, format="json")
    assert answers == [200, 200] and refused.status_code == 429
    assert refused.json()["error"]["code"] == "team_rate_limited" and "team_rate_limit" in refused.json()["error"]["message"]
    assert int(refused["Retry-After"]) >= 1
    mcp = team_cast.red_handbook.client.post(
        "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_search", "arguments": {"query": "x"}}},
        format="json",
    )
    assert mcp.status_code == 429
    assert team_cast.blue_agent.client.get("/api/v1/status").status_code == 200  # another team
    frozen_clock.advance(3.5)
    assert team_cast.red_writer.client.get("/api/v1/status").status_code == 200


def test_only_a_superuser_changes_a_teams_limits(team_cast):
    from django.contrib.auth.models import User

    client = Client()
    client.login(username="red-admin", password="pw")
    page = client.get(f"/admin/agents/team/{team_cast.red.pk}/change/").content.decode()
    assert 'name="max_files"' not in page and "Limits in force" in page
    User.objects.create_superuser("root", "root@example.com", "pw")
    client.login(username="root", password="pw")
    form = {"slug": "red", "name": "red", "max_files": "5", "rate_limit": "lots",
            "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0}
    page = client.post(f"/admin/agents/team/{team_cast.red.pk}/change/", form)
    assert page.status_code == 200 and b"such as" in page.content
    form["rate_limit"] = "100/min"
    assert client.post(f"/admin/agents/team/{team_cast.red.pk}/change/", form).status_code == 302
    team_cast.red.refresh_from_db()
    assert (team_cast.red.max_files, team_cast.red.rate_limit) == (5, "100/min")


def test_the_default_team_keeps_working_without_limits_and_0_means_none(alice, team_cast, settings):
    settings.MEMORYHUB_TEAM_MAX_FILES = 1
    settings.MEMORYHUB_TEAM_MAX_AGENTS = 1
    assert alice.agent.team.slug == "default"  # the team of the agents from before teams
    assert [put(alice, f"{n}.md").status_code for n in range(3)] == [201, 201, 201]
    call_command("create_agent", "another-default", stdout=StringIO())

    assert put(team_cast.red_handbook, "a.md").status_code == 201
    assert put(team_cast.red_handbook, "b.md").status_code == 413  # the settings' default of 1
    team_cast.red.max_files = 0
    team_cast.red.save()
    assert put(team_cast.red_handbook, "b.md").status_code == 201
