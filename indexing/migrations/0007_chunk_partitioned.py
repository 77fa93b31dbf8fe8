"""Partition the chunk table by HASH (agent_id) into MEMORYHUB_CHUNK_PARTITIONS tables (indexing/partitions.py).

Only an empty table is converted here (a new database, or one that never indexed anything): it takes
no time. A table holding chunks is left as it is, and everything works on it as before; rebuild it
online with ``python manage.py chunk_partition`` (docs/scale.md, "Partitioning by agent"), which a
migration cannot do: it copies in batches while the service runs.
"""

from django.conf import settings
from django.db import migrations


def _empty(schema_editor) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT NOT EXISTS (SELECT 1 FROM indexing_chunk)")
        return cursor.fetchone()[0]


def partition(apps, schema_editor):
    from indexing.partitions import chunk_partitions, chunk_table_rebuild

    wanted = settings.MEMORYHUB_CHUNK_PARTITIONS
    if chunk_partitions() == wanted:
        return
    if not _empty(schema_editor):
        print(
            "\n  indexing_chunk holds chunks: left unpartitioned. Run `python manage.py chunk_partition` "
            "to partition it online (docs/scale.md)."
        )
        return
    chunk_table_rebuild(partitions=wanted)


def unpartition(apps, schema_editor):
    from indexing.partitions import chunk_partitions, chunk_table_rebuild

    if chunk_partitions() == 0:
        return
    if not _empty(schema_editor):
        raise RuntimeError("indexing_chunk holds chunks: run `python manage.py chunk_partition --partitions 0` first")
    chunk_table_rebuild(partitions=0)


class Migration(migrations.Migration):
    dependencies = [
        ("indexing", "0006_embedding_batch"),
        ("search", "0002_keyword_stats"),
    ]

    operations = [migrations.RunPython(partition, unpartition, elidable=False)]
