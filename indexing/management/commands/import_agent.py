import gzip
import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from agents.selectors import agent_by_slug
from agents.services import agent_create
from indexing.export import agent_import
from memoryhub.domain import DomainError
from memoryhub.errors import CLIENT_ERRORS, error_message


class Command(BaseCommand):
    help = (
        "Read a MemoryHub export (from export_agent or GET /api/v1/export; .gz accepted) into an agent, "
        "creating it if needed, and queue the indexing of its files. Files the export does not list are kept."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("file", help="The export file, or - for standard input.")

    def handle(self, *args, slug, file, **options):
        if slugify(slug) != slug:
            raise CommandError(f"{slug!r} is not a valid slug (lowercase letters, digits, '-' and '_').")
        try:
            agent = agent_by_slug(slug=slug, missing_ok=True)
            created = agent is None
            if created:
                try:
                    with transaction.atomic():
                        agent = agent_create(slug=slug)
                except IntegrityError:  # created meanwhile by someone else: fill it
                    agent, created = agent_by_slug(slug=slug), False
        except DomainError as exc:
            raise CommandError(exc.message) from None
        try:
            if file == "-":
                outcome = agent_import(agent=agent, lines=sys.stdin)
            else:
                opener = gzip.open if file.endswith(".gz") else open
                with opener(file, "rt", encoding="utf-8") as lines:
                    outcome = agent_import(agent=agent, lines=lines)
        except OSError as exc:  # includes a .gz that is not gzip
            raise CommandError(f"Cannot read {file}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"{file} is not UTF-8 text: {exc}") from None
        except CLIENT_ERRORS as exc:
            raise CommandError(f"{file}: {error_message(exc)}") from None
        verb = "Created agent" if created else "Agent"
        self.stdout.write(
            f"{verb} {slug!r}: {outcome.files} file(s) read, {outcome.changed} stored, {outcome.unchanged} unchanged; "
            f"indexing queued ({len(outcome.jobs)} job(s))."
        )
