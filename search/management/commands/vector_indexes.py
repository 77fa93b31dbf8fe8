"""python manage.py vector_indexes — build or drop the per-agent HNSW indexes now (the periodic task's work)."""

from django.core.management.base import BaseCommand

from search.vector_index import vector_indexes_list, vector_indexes_sync


class Command(BaseCommand):
    help = "Build HNSW indexes for agents with MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS embedded chunks or more; drop the others."

    def add_arguments(self, parser):
        parser.add_argument("--min-chunks", type=int, default=None, help="Override MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS.")
        parser.add_argument("--list", action="store_true", help="Only list the existing indexes.")

    def handle(self, *args, min_chunks=None, list=False, **options):
        if not list:
            outcome = vector_indexes_sync(min_chunks=min_chunks)
            if outcome.skipped:
                self.stdout.write(f"note: {outcome.skipped}")
            for name in outcome.created:
                self.stdout.write(f"created {name} in {outcome.seconds[name]:.1f} s")
            for name in outcome.dropped:
                self.stdout.write(f"dropped {name}")
            self.stdout.write(f"{len(outcome.created)} created, {len(outcome.dropped)} dropped, {len(outcome.kept)} kept")
            return
        for index in vector_indexes_list():
            state = "valid" if index.valid else "INVALID"
            self.stdout.write(f"{index.name}: agent {index.agent_id}, {index.dimensions} dims, ~{index.rows} chunks, {state}")
