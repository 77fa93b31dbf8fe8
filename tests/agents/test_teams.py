"""Teams: every agent belongs to exactly one team; existing agents were moved into the default team;
create_team and create_agent --team for scripts."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from agents.models import DEFAULT_TEAM_SLUG, Agent, Team


def command(name: str, *args) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_create_team_then_an_agent_in_it_with_a_working_token():
    assert command("create_team", "handbook-team") == "Created team 'handbook-team'.\n"
    output = command("create_agent", "writer", "--team", "handbook-team")
    assert "Created agent 'writer' in team 'handbook-team'" in output
    assert Agent.objects.get(slug="writer").team.slug == "handbook-team"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {output.strip().splitlines()[-1]}")
    assert client.get("/api/v1/status").status_code == 200


@pytest.mark.django_db
def test_without_team_an_agent_joins_the_default_team():
    output = command("create_agent", "loner")
    assert f"in team '{DEFAULT_TEAM_SLUG}'" in output
    assert Agent.objects.get(slug="loner").team.slug == DEFAULT_TEAM_SLUG


@pytest.mark.django_db
def test_unknown_or_duplicate_teams_are_refused():
    with pytest.raises(CommandError, match="No team 'nowhere'"):
        command("create_agent", "lost", "--team", "nowhere")
    assert not Agent.objects.filter(slug="lost").exists()
    command("create_team", "red")
    with pytest.raises(CommandError, match="already exists"):
        command("create_team", "red")
    with pytest.raises(CommandError, match="not a valid slug"):
        command("create_team", "Red Team")


@pytest.mark.django_db
def test_an_existing_agent_is_not_moved_to_another_team_by_existing_ok():
    command("create_team", "red")
    command("create_team", "blue")
    command("create_agent", "scout", "--team", "red")
    with pytest.raises(CommandError, match="belongs to team 'red'"):
        command("create_agent", "scout", "--team", "blue", "--existing-ok")
    assert Agent.objects.get(slug="scout").team.slug == "red"


@pytest.mark.django_db
def test_an_agent_cannot_be_without_a_team():
    with pytest.raises(IntegrityError):
        Agent.objects.create(slug="orphan")


@pytest.mark.django_db(transaction=True)
def test_the_migration_puts_existing_agents_in_the_default_team():
    executor = MigrationExecutor(connection)
    executor.migrate([("agents", "0001_initial")])
    old_apps = executor.loader.project_state([("agents", "0001_initial")]).apps
    old_apps.get_model("agents", "Agent").objects.create(slug="veteran", name="veteran")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    veteran = Agent.objects.select_related("team").get(slug="veteran")
    assert veteran.team.slug == DEFAULT_TEAM_SLUG
    # Agents from before teams had no team limits: their team starts without any.
    assert (veteran.team.file_limit, veteran.team.byte_limit, veteran.team.agent_limit, veteran.team.request_rate) == (None,) * 4
    assert Team.objects.filter(slug=DEFAULT_TEAM_SLUG).count() == 1


def test_team_member_command_adds_changes_lists_and_removes_members_with_an_audit_trail(db):
    from io import StringIO

    from django.contrib.auth.models import User
    from django.core.management import CommandError, call_command

    from agents.models import AuditEvent, TeamMembership
    from agents.services import team_create

    team = team_create(slug="research")
    User.objects.create_user("ana", password="pw", is_staff=True)
    User.objects.create_user("ben", password="pw")

    def run(*args) -> str:
        out = StringIO()
        call_command("team_member", *args, stdout=out)
        return out.getvalue()

    assert "added" in run("research", "ana", "--role", "admin")
    assert "unchanged" in run("research", "ana", "--role", "admin")
    assert "changed" in run("research", "ana", "--role", "viewer")
    with pytest.raises(CommandError, match="not staff"):
        run("research", "ben")
    assert "added" in run("research", "ben", "--make-staff")
    assert User.objects.get(username="ben").is_staff
    assert run("research").splitlines() == ["ana\tviewer", "ben\tviewer"]
    assert "Removed" in run("research", "ben", "--remove")
    with pytest.raises(CommandError, match="not a member"):
        run("research", "ben", "--remove")
    with pytest.raises(CommandError, match="No team"):
        run("nope", "ana")
    with pytest.raises(CommandError, match="No user"):
        run("research", "nobody")
    assert list(TeamMembership.objects.values_list("user__username", "role")) == [("ana", "viewer")]
    actions = list(AuditEvent.objects.filter(team_ids__contains=[team.pk]).order_by("id").values_list("action", "target"))
    assert actions == [
        ("team_created", "research"), ("member_added", "ana"), ("member_changed", "ana"),
        ("member_added", "ben"), ("member_removed", "ben"),
    ]
