from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from agents.models import Team
from agents.selectors import agent_by_slug
from memoryhub.domain import DomainError, TooLarge
from agents.services import Actor, agent_create, agent_token_create, agent_tokens_revoke, team_default


class Command(BaseCommand):
    help = "Create an agent with a read/write token. The raw token is the last line of the output."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--team", default="", help="The team's slug (default: the default team).")
        parser.add_argument("--label", default="created by create_agent")
        parser.add_argument(
            "--existing-ok", action="store_true", help="Issue a new token if the agent already exists."
        )
        parser.add_argument(
            "--rotate", action="store_true",
            help="Revoke the agent's earlier tokens with the same label, so one token per label stays valid "
            "(`make run` rotates its demo token this way).",
        )

    def handle(self, *args, slug, name, team, label, existing_ok, rotate, **options):
        actor = Actor(label="manage.py create_agent")
        if slugify(slug) != slug:
            raise CommandError(f"{slug!r} is not a valid slug (lowercase letters, digits, '-' and '_').")
        if team:
            found = Team.objects.filter(slug=team).first()
            if found is None:
                raise CommandError(f"No team {team!r} (create it with `manage.py create_team {team}`).")
        else:
            found = team_default()
        try:
            with transaction.atomic():
                agent = agent_create(slug=slug, name=name, team=found, actor=actor)
                created = True
        except TooLarge as exc:
            raise CommandError(exc.message) from None
        except IntegrityError:
            try:
                agent, created = agent_by_slug(slug=slug), False
            except DomainError as exc:  # being deleted
                raise CommandError(exc.message) from None
            if not existing_ok:
                raise CommandError(f"Agent {slug!r} already exists (use --existing-ok to issue another token).")
            if team and agent.team_id != found.pk:
                raise CommandError(f"Agent {slug!r} belongs to team {agent.team.slug!r}, not {team!r}.")
        with transaction.atomic():
            revoked = agent_tokens_revoke(agent=agent, label=label, actor=actor) if rotate else []
            token, raw = agent_token_create(agent=agent, label=label, actor=actor)
        verb = "Created agent" if created else "Agent"
        self.stdout.write(f"{verb} {agent.slug!r} in team {agent.team.slug!r}; token {token.prefix}… (scopes: {', '.join(token.scopes)}).")
        if revoked:
            prefixes = ", ".join(f"{t.prefix}…" for t in revoked)
            self.stdout.write(f"Revoked {len(revoked)} earlier token(s) labelled {label!r}: {prefixes}")
        self.stdout.write("Store the token now: it will not be shown again.")
        self.stdout.write(raw)
