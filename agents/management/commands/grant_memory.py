from django.core.management.base import BaseCommand, CommandError

from agents.selectors import agent_by_slug
from agents.services import Actor, memory_grant_give
from memoryhub.domain import DomainError


class Command(BaseCommand):
    help = (
        "Let the reader agent search and read the owner agent's memory (never write it). From the command "
        "line the grant is approved for both teams at once, also across teams."
    )

    def add_arguments(self, parser):
        parser.add_argument("reader", help="The agent that may read (slug).")
        parser.add_argument("owner", help="The agent whose memory it may read (slug).")

    def handle(self, *args, reader, owner, **options):
        try:
            agents = {slug: agent_by_slug(slug=slug) for slug in (reader, owner)}
            grant = memory_grant_give(
                reader=agents[reader], owner=agents[owner], actor=Actor(label="manage.py grant_memory")
            )
        except DomainError as exc:
            raise CommandError(exc.message) from None
        across = "" if grant.reader.team_id == grant.owner.team_id else (
            f" (across teams: {grant.reader.team.slug} reads {grant.owner.team.slug})"
        )
        self.stdout.write(
            f"Granted: {reader!r} may read {owner!r}'s memory{across}; search with scope \"shared\" or "
            f"[\"{owner}\"], cited as {owner}:<path>."
        )
