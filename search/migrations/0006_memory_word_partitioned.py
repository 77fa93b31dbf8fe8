"""Partition the memory's words by HASH (agent_id), as the chunk table is (indexing/partitions.py), into
MEMORYHUB_CHUNK_PARTITIONS tables (none when it is 0).

Why: an agent with enough words gets a partial HNSW index of its own over them (search/expansion.py,
``words_indexes_sync``). On one table the planner weighs every agent's index for every statement on it:
planning the nearest-word lookup took 7.9 ms with 250 such indexes and 45 ms with 1,000
(benchmarks/experiments/word_index_planning.py, docs/search.md). A statement naming its agent is pruned
to the agent's partition, and sees only that partition's indexes.

The rows are copied (the words table is at most MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS rows per agent),
the old table and its per-agent indexes dropped; the ``memory_words`` task builds the indexes again on
the partitions at its next run (migration 0005 has every agent's chunks read again, which marks every
agent for it). The primary key becomes (agent_id, id): a unique index on a partitioned table must hold
the partition key. Going back leaves the table partitioned (the columns are the same).
"""

from django.conf import settings
from django.db import migrations

WORDS = "search_memoryword"


def partition(apps, schema_editor):
    partitions = settings.MEMORYHUB_CHUNK_PARTITIONS
    if not partitions:
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'", [WORDS]
        )
        (foreign_key,) = cursor.fetchone()
        cursor.execute(f"ALTER TABLE {WORDS} RENAME TO {WORDS}_old")
        cursor.execute(f"ALTER TABLE {WORDS}_old RENAME CONSTRAINT {WORDS}_pkey TO {WORDS}_old_pkey")
        cursor.execute(f"ALTER TABLE {WORDS}_old RENAME CONSTRAINT memory_word_agent_word_uniq TO memory_word_old_uniq")
        cursor.execute(
            f"CREATE TABLE {WORDS} (LIKE {WORDS}_old INCLUDING DEFAULTS INCLUDING IDENTITY, "
            f"CONSTRAINT {WORDS}_pkey PRIMARY KEY (agent_id, id), "
            "CONSTRAINT memory_word_agent_word_uniq UNIQUE (agent_id, word), "
            f"CONSTRAINT {foreign_key} FOREIGN KEY (agent_id) REFERENCES agents_agent (id) DEFERRABLE INITIALLY DEFERRED"
            ") PARTITION BY HASH (agent_id)"
        )
        for remainder in range(partitions):
            cursor.execute(
                f"CREATE TABLE {WORDS}_p{remainder} PARTITION OF {WORDS} "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder})"
            )
        cursor.execute(f"INSERT INTO {WORDS} OVERRIDING SYSTEM VALUE SELECT * FROM {WORDS}_old")
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{WORDS}', 'id'), (SELECT coalesce(max(id), 0) + 1 FROM {WORDS}), false)"
        )
        cursor.execute(f"DROP TABLE {WORDS}_old")


class Migration(migrations.Migration):
    dependencies = [
        ("search", "0005_memory_lexemes"),
    ]

    operations = [migrations.RunPython(partition, migrations.RunPython.noop, elidable=False)]
