"""Teams above agents: every existing agent moves into the default team (0003 then makes the team required;
a separate migration because Postgres refuses to alter a table with the update's pending FK checks)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DEFAULT_TEAM_SLUG = "default"  # agents.models.DEFAULT_TEAM_SLUG, frozen here as migrations must be


def agents_into_default_team(apps, schema_editor):
    Team = apps.get_model("agents", "Team")
    Agent = apps.get_model("agents", "Agent")
    team, _ = Team.objects.get_or_create(slug=DEFAULT_TEAM_SLUG, defaults={"name": "Default team"})
    Agent.objects.filter(team__isnull=True).update(team=team)


class Migration(migrations.Migration):

    dependencies = [
        ("agents", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Team",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slug", models.SlugField(max_length=64, unique=True)),
                ("name", models.CharField(blank=True, max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"ordering": ["slug"]},
        ),
        migrations.CreateModel(
            name="TeamMembership",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("admin", "Admin (manage agents, tokens, grants and members)"),
                            ("viewer", "Viewer (read-only)"),
                        ],
                        default="viewer",
                        max_length=8,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="agents.team"
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="team_memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["team__slug", "user__username"],
                "indexes": [models.Index(fields=["user", "team"], name="teammembership_user_team_idx")],
                "constraints": [models.UniqueConstraint(fields=("team", "user"), name="teammembership_team_user_unique")],
            },
        ),
        migrations.AddField(
            model_name="agent",
            name="team",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.PROTECT, related_name="agents", to="agents.team"
            ),
        ),
        migrations.RunPython(agents_into_default_team, migrations.RunPython.noop),
    ]
