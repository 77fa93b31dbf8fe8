"""python manage.py keyword_stats — recount the keyword stats of large agents and build their GIN indexes now
(the periodic task's work)."""

from django.core.management.base import BaseCommand

from search.keyword_stats import keyword_stats_sync


class Command(BaseCommand):
    help = (
        "Count the per-lexeme document frequencies of agents with more than MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS "
        "chunks (refreshing those that drifted) and give them a GIN index of their own; drop the stats and indexes of the others."
    )

    def add_arguments(self, parser):
        parser.add_argument("--min-chunks", type=int, default=None, help="Override MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS.")

    def handle(self, *args, min_chunks=None, **options):
        outcome = keyword_stats_sync(min_chunks=min_chunks)
        if outcome.skipped:
            self.stdout.write(f"note: {outcome.skipped}")
        for agent_id in outcome.refreshed:
            self.stdout.write(f"agent {agent_id}: counted in {outcome.seconds[agent_id]:.1f} s")
        for agent_id in outcome.dropped:
            self.stdout.write(f"agent {agent_id}: stats dropped")
        for name in outcome.indexes_created:
            self.stdout.write(f"{name}: built in {outcome.index_seconds[name]:.1f} s")
        for name in outcome.indexes_dropped:
            self.stdout.write(f"{name}: dropped")
        self.stdout.write(f"{len(outcome.refreshed)} counted, {len(outcome.dropped)} dropped, {len(outcome.kept)} kept")
