"""python manage.py chunk_partition — rebuild the chunk table partitioned by agent, online (indexing/partitions.py)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from indexing.partitions import chunk_partitions, chunk_table_rebuild


class Command(BaseCommand):
    help = (
        "Rebuild indexing_chunk with N hash partitions by agent (default MEMORYHUB_CHUNK_PARTITIONS; 0 = one "
        "table) while the service runs: batches copied, writes meanwhile captured by a trigger, a short lock at the swap."
    )

    def add_arguments(self, parser):
        parser.add_argument("--partitions", type=int, default=None, help="Partitions (default MEMORYHUB_CHUNK_PARTITIONS).")
        parser.add_argument("--batch-size", type=int, default=5000, help="Rows copied per transaction (default 5,000).")
        parser.add_argument("--force", action="store_true", help="Rebuild even when the table has this many partitions.")

    def handle(self, *args, partitions=None, batch_size=5000, force=False, **options):
        partitions = settings.MEMORYHUB_CHUNK_PARTITIONS if partitions is None else partitions
        if partitions < 0 or batch_size < 1:
            raise CommandError("--partitions must be 0 or more and --batch-size at least 1")
        current = chunk_partitions()
        if current == partitions and not force:
            self.stdout.write(f"indexing_chunk already has {partitions} partitions: nothing to do (--force rebuilds it)")
            return
        batches = 0

        def progress(last_id: int) -> None:
            nonlocal batches
            batches += 1
            if batches % 20 == 0:
                self.stdout.write(f"  copied up to id {last_id:,}")

        outcome = chunk_table_rebuild(partitions=partitions, batch_size=batch_size, on_batch=progress)
        self.stdout.write(
            f"indexing_chunk: {current} -> {partitions} partitions; {outcome.rows_copied:,} rows copied in "
            f"{outcome.batches:,} batches, {len(outcome.agent_indexes)} per-agent indexes rebuilt, swapped at attempt "
            f"{outcome.swap_attempts}; " + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in outcome.seconds.items())
        )
