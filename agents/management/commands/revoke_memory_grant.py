from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from agents.services import Actor, memory_grant_revoke


class Command(BaseCommand):
    help = "Take back a grant: the reader's next request no longer sees the owner's memory."

    def add_arguments(self, parser):
        parser.add_argument("reader")
        parser.add_argument("owner")

    def handle(self, *args, reader, owner, **options):
        agents = {agent.slug: agent for agent in Agent.objects.filter(slug__in=[reader, owner])}
        for slug in (reader, owner):
            if slug not in agents:
                raise CommandError(f"No agent {slug!r}.")
        if not memory_grant_revoke(
            reader=agents[reader], owner=agents[owner], actor=Actor(label="manage.py revoke_memory_grant")
        ):
            raise CommandError(f"{reader!r} has no grant to read {owner!r}'s memory.")
        self.stdout.write(f"Revoked: {reader!r} may no longer read {owner!r}'s memory.")
