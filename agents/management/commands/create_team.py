from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from agents.services import Actor, team_create


class Command(BaseCommand):
    help = "Create a team (agents join it with `create_agent <slug> --team <team>`)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug, name, **options):
        if slugify(slug) != slug:
            raise CommandError(f"{slug!r} is not a valid slug (lowercase letters, digits, '-' and '_').")
        try:
            with transaction.atomic():
                team = team_create(slug=slug, name=name, actor=Actor(label="manage.py create_team"))
        except IntegrityError:
            raise CommandError(f"Team {slug!r} already exists.") from None
        self.stdout.write(f"Created team {team.slug!r}.")
