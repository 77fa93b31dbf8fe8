"""The chunk table's key to its file names the agent: FOREIGN KEY (agent_id, file_id) REFERENCES
indexing_memoryfile (agent_id, id), in place of Django's FOREIGN KEY (file_id) (see Chunk.file).

Why: when a file is deleted, Postgres checks that no chunk still references it. With the one-column key
that check is ``… WHERE file_id = $1``, which plans, locks and probes every partition of the chunk table
(indexing/partitions.py); with the agent in the key it is pruned to the agent's partition. Django no
longer cascades from a file to its chunks either: whoever deletes a file deletes its chunks first, with
the agent named (indexing/writes.py, ``files_remove``); the key refuses a file deleted with chunks left.

Online on a database that holds chunks (the migration runs outside a transaction): the unique index it
references is built CONCURRENTLY, and the key is added NOT VALID and then validated on each partition
(validating takes no lock that blocks writes), then declared on the partitioned table, which adopts the
partitions' validated keys without reading any row. Only then is the old key dropped.
"""

from django.db import migrations, models

FK = "chunk_agent_file_fk"
FK_DEFINITION = (
    "FOREIGN KEY (agent_id, file_id) REFERENCES indexing_memoryfile (agent_id, id) DEFERRABLE INITIALLY DEFERRED"
)
UNIQUE = "memoryfile_agent_id_uniq"
# Django's name for the one-column key (migration indexing/0001), restored by the reverse.
OLD_FK = "indexing_chunk_file_id_e7070038_fk_indexing_memoryfile_id"
OLD_FK_DEFINITION = "FOREIGN KEY (file_id) REFERENCES indexing_memoryfile (id) DEFERRABLE INITIALLY DEFERRED"


def _constraint_exists(cursor, table: str, name: str) -> bool:
    cursor.execute("SELECT 1 FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s", [table, name])
    return cursor.fetchone() is not None


def forward(apps, schema_editor):
    connection = schema_editor.connection
    # In a transaction block (a test migrating inside one) CONCURRENTLY cannot run; nothing waits there.
    concurrently = "" if connection.in_atomic_block else " CONCURRENTLY"
    with connection.cursor() as cursor:
        if not _constraint_exists(cursor, "indexing_memoryfile", UNIQUE):
            # A CONCURRENTLY build that was interrupted leaves an invalid index: built again.
            cursor.execute(f"DROP INDEX{concurrently} IF EXISTS {UNIQUE}")
            cursor.execute(f"CREATE UNIQUE INDEX{concurrently} {UNIQUE} ON indexing_memoryfile (agent_id, id)")
            cursor.execute(f"ALTER TABLE indexing_memoryfile ADD CONSTRAINT {UNIQUE} UNIQUE USING INDEX {UNIQUE}")
        if not _constraint_exists(cursor, "indexing_chunk", FK):
            cursor.execute(
                "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'indexing_chunk'::regclass ORDER BY 1"
            )
            partitions = [name for (name,) in cursor.fetchall()]
            for table in partitions or ["indexing_chunk"]:
                if not _constraint_exists(cursor, table, FK):
                    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {FK} {FK_DEFINITION} NOT VALID")
                cursor.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {FK}")
            if partitions:  # adopts the partitions' validated keys (Postgres 16 cannot add it NOT VALID here)
                cursor.execute(f"ALTER TABLE indexing_chunk ADD CONSTRAINT {FK} {FK_DEFINITION}")
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'indexing_chunk'::regclass AND contype = 'f' "
            "AND confrelid = 'indexing_memoryfile'::regclass AND conname <> %s",
            [FK],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'ALTER TABLE indexing_chunk DROP CONSTRAINT "{name}"')


def backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        if not _constraint_exists(cursor, "indexing_chunk", OLD_FK):
            cursor.execute(f"ALTER TABLE indexing_chunk ADD CONSTRAINT {OLD_FK} {OLD_FK_DEFINITION}")
        cursor.execute(f"ALTER TABLE indexing_chunk DROP CONSTRAINT IF EXISTS {FK}")
        cursor.execute(f"ALTER TABLE indexing_memoryfile DROP CONSTRAINT IF EXISTS {UNIQUE}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY, and each partition's key committed on its own

    dependencies = [
        ("agents", "0007_default_team_without_limits"),
        ("indexing", "0007_chunk_partitioned"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="chunk",
                    name="file",
                    field=models.ForeignKey(
                        db_constraint=False, db_index=False, on_delete=models.DO_NOTHING, related_name="chunks",
                        to="indexing.memoryfile",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="memoryfile",
                    constraint=models.UniqueConstraint(fields=("agent", "id"), name=UNIQUE),
                ),
            ],
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
        ),
    ]
