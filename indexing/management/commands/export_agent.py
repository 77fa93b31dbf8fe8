import gzip
import sys

from django.core.management.base import BaseCommand, CommandError

from agents.selectors import agent_by_slug
from indexing.export import agent_export_lines
from memoryhub.domain import DomainError


class Command(BaseCommand):
    help = "Write one agent's files as a MemoryHub export (JSON Lines; gzip when the output ends in .gz)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--output", "-o", default="-", help="File to write (default: standard output).")

    def handle(self, *args, slug, output, **options):
        try:
            agent = agent_by_slug(slug=slug)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        if output == "-":
            for line in agent_export_lines(agent=agent):
                sys.stdout.write(line)
            return
        opener = gzip.open if output.endswith(".gz") else open
        try:
            with opener(output, "wt", encoding="utf-8") as out:
                files = -1  # the header is not a file
                for line in agent_export_lines(agent=agent):
                    out.write(line)
                    files += 1
        except OSError as exc:
            raise CommandError(f"Cannot write {output}: {exc}") from None
        self.stderr.write(f"Exported {files} file(s) of agent {slug!r} to {output}.")
