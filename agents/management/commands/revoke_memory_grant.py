from django.core.management.base import BaseCommand, CommandError

from agents.selectors import agent_by_slug
from agents.services import Actor, memory_grant_revoke
from memoryhub.domain import DomainError


class Command(BaseCommand):
    help = "Take back a grant: the reader's next request no longer sees the owner's memory."

    def add_arguments(self, parser):
        parser.add_argument("reader")
        parser.add_argument("owner")

    def handle(self, *args, reader, owner, **options):
        try:
            agents = {slug: agent_by_slug(slug=slug) for slug in (reader, owner)}
        except DomainError as exc:
            raise CommandError(exc.message) from None
        if not memory_grant_revoke(
            reader=agents[reader], owner=agents[owner], actor=Actor(label="manage.py revoke_memory_grant")
        ):
            raise CommandError(f"{reader!r} has no grant to read {owner!r}'s memory.")
        self.stdout.write(f"Revoked: {reader!r} may no longer read {owner!r}'s memory.")
