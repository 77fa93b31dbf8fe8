"""The chunk table, hash-partitioned by agent, and the online rebuild that gets an existing table there.

Why: every large agent has partial indexes of its own (``chunk_gin_a<agent>``, search/keyword_stats.py;
``chunk_hnsw_a<agent>_d<dims>``, search/vector_index.py). On one table the planner weighs all of them for
every statement (12 ms of planning per statement at 2,000 of them), every insert checks every one's
predicate, and every build reads the whole table. With ``indexing_chunk`` partitioned by
``HASH (agent_id)`` into MEMORYHUB_CHUNK_PARTITIONS tables, each agent's indexes are built on the
partition that holds its rows: a statement that says ``agent_id = <literal>`` is pruned to that partition
at plan time (Django sends parameters as literals), so it plans, locks and opens only that partition's
indexes, and a build reads only that partition. Figures: docs/benchmarks.md, "The catalog".

The primary key is ``(agent_id, id)`` in the database (a unique index on a partitioned table must hold
the partition key); Django keeps ``id`` as the model's primary key, which the identity sequence keeps
unique. Nothing references a chunk by foreign key.

New databases get the partitioned table from migration indexing/0007 (which converts the table only
while it is empty). An existing table is rebuilt online by ``python manage.py chunk_partition``
(`chunk_table_rebuild`): a shadow table with the new layout is filled in batches while a trigger on the
old table copies every write made meanwhile, the per-agent indexes are built on it, and the two are
swapped under a short exclusive lock. The same rebuild changes the partition count, or goes back to one
table (``--partitions 0``). How to run it: docs/scale.md, "Partitioning by agent".
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError, connection, transaction

from indexing.tables import CHUNK

logger = logging.getLogger(__name__)

SHADOW = f"{CHUNK}_rebuild"
SHADOW_SUFFIX = "_rb"  # suffix of the shadow's index and constraint names until the swap
CAPTURE_FUNCTION = f"{CHUNK}_rebuild_capture"
# The per-agent indexes (search/keyword_stats.py, search/vector_index.py): rebuilt on the agent's
# partition, never on the parent (there they would exist once per partition).
PER_AGENT_INDEX = re.compile(r"^chunk_(gin_a(\d+)|hnsw_a(\d+)_d\d+)$")
INDEX_DEFINITION = re.compile(r"^CREATE (UNIQUE )?INDEX (\S+) ON (?:ONLY )?(\S+) (USING .*)$")
# How long a DDL statement of the rebuild may wait for a lock before it gives up and tries again:
# while it waits, every write queued behind it waits too.
LOCK_TIMEOUT = "2s"
LOCK_ATTEMPTS = 30


def chunk_partitions() -> int:
    """How many hash partitions the chunk table has (0: one plain table)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass", [CHUNK])
        return cursor.fetchone()[0]


def _partition_of(cursor, *, table: str, agent_id: int) -> str | None:
    """The partition of hash-partitioned ``table`` that holds ``agent_id``'s rows (None: not partitioned)."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), 'modulus (\\d+), remainder (\\d+)') b "
        "WHERE i.inhparent = %s::regclass AND satisfies_hash_partition(i.inhparent, b[1]::int, b[2]::int, %s::bigint)",
        [table, int(agent_id)],
    )
    row = cursor.fetchone()
    return row[0] if row else None


def agent_chunk_table(*, agent_id: int) -> str:
    """The table holding this agent's chunks: its partition, or the chunk table when it is not
    partitioned. Per-agent indexes are created on it."""
    return agent_table(table=CHUNK, agent_id=agent_id)


def agent_table(*, table: str, agent_id: int) -> str:
    """The table holding this agent's rows of ``table`` (partitioned by HASH (agent_id), as the chunk table
    and the memory's words are): its partition, or ``table`` when it is not partitioned."""
    with connection.cursor() as cursor:
        return _partition_of(cursor, table=table, agent_id=agent_id) or table


def table_and_partitions(table: str) -> str:
    """A subquery: the oids of ``table`` and of its partitions, where its rows and per-agent indexes live."""
    return f"SELECT '{table}'::regclass UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = '{table}'::regclass"


CHUNK_TABLES = table_and_partitions(CHUNK)


def chunk_tables_condition(alias: str = "t") -> str:
    """SQL true for the pg_class row ``alias`` when it is the chunk table or one of its partitions: where
    the per-agent indexes live."""
    return f"{alias}.oid IN ({CHUNK_TABLES})"


# --- the online rebuild ----------------------------------------------------------------------------


@dataclass
class RebuildOutcome:
    partitions_before: int = 0
    partitions: int = 0
    rows_copied: int = 0  # by the backfill (the trigger copies the writes made meanwhile)
    batches: int = 0
    agent_indexes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # per phase
    swap_attempts: int = 0


def _columns(cursor, table: str) -> list[str]:
    """The columns a row is written with (generated ones are computed by the table)."""
    cursor.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
        "AND attgenerated = '' ORDER BY attnum",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def _with_lock_retries(statements: Callable[[object], None], *, what: str) -> int:
    """Run ``statements(cursor)`` in one transaction whose lock waits are bounded by LOCK_TIMEOUT,
    again until it gets its locks (a long transaction on the chunk table makes it wait). Returns the attempts."""
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                statements(cursor)
            return attempt
        except DatabaseError as error:
            if getattr(getattr(error, "__cause__", None), "sqlstate", None) != "55P03":  # lock_not_available
                raise
            logger.warning("%s: lock not granted within %s (attempt %d), trying again", what, LOCK_TIMEOUT, attempt)
    raise RuntimeError(f"{what}: no lock on {CHUNK} after {LOCK_ATTEMPTS} attempts; is a long transaction holding it?")


def _shadow_create(cursor, *, partitions: int) -> None:
    """An empty copy of the chunk table's columns, constraints and shared indexes, with ``partitions``
    hash partitions by agent (0: a plain table), its index and constraint names suffixed until the swap."""
    cursor.execute(f"DROP TABLE IF EXISTS {SHADOW}")
    layout = " PARTITION BY HASH (agent_id)" if partitions else ""
    cursor.execute(
        f"CREATE TABLE {SHADOW} (LIKE {CHUNK} INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS "
        f"INCLUDING STORAGE INCLUDING IDENTITY){layout}"
    )
    for remainder in range(partitions):
        cursor.execute(
            f"CREATE TABLE {CHUNK}_p{remainder}{SHADOW_SUFFIX} PARTITION OF {SHADOW} "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder})"
        )
    key = "agent_id, id" if partitions else "id"
    cursor.execute(f"ALTER TABLE {SHADOW} ADD CONSTRAINT {CHUNK}_pkey{SHADOW_SUFFIX} PRIMARY KEY ({key})")
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
        [CHUNK],
    )
    for name, definition in cursor.fetchall():
        cursor.execute(f'ALTER TABLE {SHADOW} ADD CONSTRAINT "{name}{SHADOW_SUFFIX}" {definition}')
    cursor.execute(
        "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
        [CHUNK],
    )
    for name, definition in cursor.fetchall():
        if PER_AGENT_INDEX.match(name):
            continue  # rebuilt per partition later (a plain table may have them on itself)
        unique, _, _, rest = INDEX_DEFINITION.match(definition).groups()
        if unique and partitions:
            raise RuntimeError(f"{name} is unique without agent_id: it cannot exist on a table partitioned by agent")
        cursor.execute(f'CREATE {unique or ""}INDEX "{name}{SHADOW_SUFFIX}" ON {SHADOW} {rest}')


def _capture_install(cursor, *, partitions: int) -> None:
    """A trigger on the old table that applies every row it writes to the shadow, from now on.
    CREATE TRIGGER waits for every transaction that wrote to the table without it (its lock conflicts
    with theirs), so once it returns each row is either committed already (the backfill copies it) or
    written with the trigger in place."""
    columns = _columns(cursor, CHUNK)
    listed = ", ".join(columns)
    values = ", ".join(f"NEW.{column}" for column in columns)
    key = "agent_id, id" if partitions else "id"
    updates = ", ".join(f"{column} = EXCLUDED.{column}" for column in columns)
    cursor.execute(
        f"""
        CREATE OR REPLACE FUNCTION {CAPTURE_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'TRUNCATE' THEN
                TRUNCATE {SHADOW};
                RETURN NULL;
            END IF;
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                DELETE FROM {SHADOW} WHERE agent_id = OLD.agent_id AND id = OLD.id;
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                INSERT INTO {SHADOW} ({listed}) VALUES ({values})
                ON CONFLICT ({key}) DO UPDATE SET {updates};
            END IF;
            RETURN NULL;
        END $$
        """
    )

    def install(cursor):
        cursor.execute(f"DROP TRIGGER IF EXISTS {CAPTURE_FUNCTION} ON {CHUNK}")
        cursor.execute(
            f"CREATE TRIGGER {CAPTURE_FUNCTION} AFTER INSERT OR UPDATE OR DELETE ON {CHUNK} "
            f"FOR EACH ROW EXECUTE FUNCTION {CAPTURE_FUNCTION}()"
        )
        cursor.execute(
            f"CREATE TRIGGER {CAPTURE_FUNCTION}_truncate AFTER TRUNCATE ON {CHUNK} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {CAPTURE_FUNCTION}()"
        )

    _with_lock_retries(install, what="installing the capture trigger")


def _backfill(*, batch_size: int, outcome: RebuildOutcome, on_batch: Callable[[int], None] | None) -> None:
    """Copy every row committed before the trigger, in id order, one batch per transaction. The batch's
    rows are read FOR SHARE, so an update or delete of one of them waits until the copy is committed and
    then reaches the shadow through the trigger; a row the trigger copied first is left as it is."""
    with connection.cursor() as cursor:
        columns = ", ".join(_columns(cursor, CHUNK))
        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {CHUNK}")
        (last_id,) = cursor.fetchone()
    after = 0
    while after < last_id:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"WITH batch AS (SELECT {columns} FROM {CHUNK} WHERE id > %s AND id <= %s ORDER BY id LIMIT %s FOR SHARE), "
                f"copied AS (INSERT INTO {SHADOW} ({columns}) SELECT {columns} FROM batch ON CONFLICT DO NOTHING) "
                "SELECT max(id), count(*) FROM batch",
                [after, last_id, batch_size],
            )
            highest, count = cursor.fetchone()
        outcome.batches += 1
        outcome.rows_copied += count
        after = last_id if highest is None else highest
        if on_batch is not None:
            on_batch(after)


def _per_agent_indexes_build(*, outcome: RebuildOutcome) -> list[str]:
    """Build each valid per-agent index of the old table on the shadow (on the agent's partition), under
    a suffixed name, CONCURRENTLY where possible. Returns their final names."""
    from search.ddl import concurrently_clause

    concurrently = concurrently_clause()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            f"JOIN pg_class t ON t.oid = i.indrelid WHERE {chunk_tables_condition()} AND i.indisvalid AND i.indisready"
        )
        found = [(name, definition) for name, definition in cursor.fetchall() if PER_AGENT_INDEX.match(name)]
        built = []
        for name, definition in sorted(found):
            match = PER_AGENT_INDEX.match(name)
            target = _partition_of(cursor, table=SHADOW, agent_id=int(match[2] or match[3])) or SHADOW
            rest = INDEX_DEFINITION.match(definition)[4]
            cursor.execute(f'CREATE INDEX{concurrently} IF NOT EXISTS "{name}{SHADOW_SUFFIX}" ON {target} {rest}')
            built.append(name)
            outcome.agent_indexes.append(name)
    return built


def _swap(*, agent_indexes: list[str], outcome: RebuildOutcome) -> None:
    """Under an exclusive lock on the old table (every write to it committed, none running): carry the
    id sequence over, drop the old table (and with it the trigger) and give the shadow its names."""

    def swap(cursor):
        cursor.execute(f"LOCK TABLE {CHUNK} IN ACCESS EXCLUSIVE MODE")
        # Ids go on from the old sequence (and from the highest id, when one table's primary key index
        # answers that at once; a partitioned table's key starts with agent_id).
        highest = f"(SELECT coalesce(max(id), 0) FROM {CHUNK})" if not outcome.partitions_before else "0"
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence(%s, 'id'), GREATEST({highest}, "
            "(SELECT coalesce(last_value, 0) FROM pg_sequences WHERE schemaname || '.' || sequencename = "
            "pg_get_serial_sequence(%s, 'id')), 1))",
            [SHADOW, CHUNK],
        )
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
            [SHADOW],
        )
        shared = [name for (name,) in cursor.fetchall()]
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype IN ('p', 'f')", [SHADOW]
        )
        constraints = [name for (name,) in cursor.fetchall()]
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [SHADOW],
        )
        shadow_partitions = [name for (name,) in cursor.fetchall()]
        cursor.execute(f"DROP TABLE {CHUNK}")  # its partitions, indexes and the capture trigger with it
        cursor.execute(f"DROP FUNCTION IF EXISTS {CAPTURE_FUNCTION}()")
        cursor.execute(f"ALTER TABLE {SHADOW} RENAME TO {CHUNK}")
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [CHUNK])
        (sequence,) = cursor.fetchone()
        if sequence and sequence.rsplit(".", 1)[-1] != f"{CHUNK}_id_seq":
            cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {CHUNK}_id_seq")
        for name in shadow_partitions:
            cursor.execute(f'ALTER TABLE "{name}" RENAME TO "{name.removesuffix(SHADOW_SUFFIX)}"')
        # Once each: rebuilt into one table, the per-agent indexes are on the shadow itself, among `shared`.
        for name in dict.fromkeys(shared + [f"{n}{SHADOW_SUFFIX}" for n in agent_indexes]):
            if name.endswith(SHADOW_SUFFIX):
                cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{name.removesuffix(SHADOW_SUFFIX)}"')
        for name in constraints:
            cursor.execute(f'ALTER TABLE {CHUNK} RENAME CONSTRAINT "{name}" TO "{name.removesuffix(SHADOW_SUFFIX)}"')
        # The partitions' own copies (named after the shadow's names by Postgres): the same names as a
        # table partitioned by migration 0007 has.
        cursor.execute(
            "SELECT t.relname, c.conname FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
            "WHERE c.conrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass) AND c.conname LIKE %s",
            [CHUNK, f"%{SHADOW_SUFFIX}%"],
        )
        for table, name in cursor.fetchall():
            cursor.execute(f'ALTER TABLE "{table}" RENAME CONSTRAINT "{name}" TO "{name.replace(SHADOW_SUFFIX, "", 1)}"')
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass) AND c.relname LIKE %s",
            [CHUNK, f"%{SHADOW_SUFFIX}%"],
        )
        for (name,) in cursor.fetchall():
            if not PER_AGENT_INDEX.match(name.removesuffix(SHADOW_SUFFIX)):  # renamed above
                cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{name.replace(SHADOW_SUFFIX, "", 1)}"')

    outcome.swap_attempts = _with_lock_retries(swap, what="swapping in the rebuilt chunk table")


def chunk_table_rebuild(
    *, partitions: int, batch_size: int = 5000, on_batch: Callable[[int], None] | None = None
) -> RebuildOutcome:
    """Rebuild the chunk table with ``partitions`` hash partitions by agent (0: one plain table), online:
    reads and writes go on meanwhile, and are blocked only for the swap at the end (a catalog change,
    milliseconds once the lock is granted). ``on_batch(last id copied)`` is called after each backfill batch.

    Runs outside a transaction (each step commits; the per-agent indexes are built CONCURRENTLY); in a
    transaction block (a migration of an empty table, tests) the same steps run in it. Holds the index
    tasks' advisory locks throughout, so they neither build nor drop per-agent indexes meanwhile."""
    from search import keyword_stats, vector_index
    from search.ddl import advisory_lock

    if partitions < 0:
        raise ValueError("partitions must be 0 (one table) or more")
    outcome = RebuildOutcome(partitions_before=chunk_partitions(), partitions=partitions)
    started = time.monotonic()
    deadline = started + 600
    while True:
        with advisory_lock(vector_index.ADVISORY_LOCK_KEY) as vector_lock, advisory_lock(keyword_stats.ADVISORY_LOCK_KEY) as keyword_lock:
            if vector_lock and keyword_lock:
                _rebuild_locked(partitions=partitions, batch_size=batch_size, on_batch=on_batch, outcome=outcome)
                break
        if time.monotonic() > deadline:
            raise RuntimeError("the vector index or keyword stats task has held its lock for 10 minutes; try again later")
        time.sleep(1)  # an index task is building; it finishes its current run first
    outcome.seconds["total"] = time.monotonic() - started
    return outcome


def _rebuild_locked(*, partitions: int, batch_size: int, on_batch, outcome: RebuildOutcome) -> None:
    phase = time.monotonic()

    def lap(name: str) -> None:
        nonlocal phase
        now = time.monotonic()
        outcome.seconds[name] = now - phase
        phase = now
        logger.info("chunk table rebuild: %s in %.1f s", name, outcome.seconds[name])

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            _shadow_create(cursor, partitions=partitions)
        with connection.cursor() as cursor:
            _capture_install(cursor, partitions=partitions)
        lap("shadow table and capture trigger")
        _backfill(batch_size=batch_size, outcome=outcome, on_batch=on_batch)
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {SHADOW}")
        lap("backfill")
        agent_indexes = _per_agent_indexes_build(outcome=outcome)
        lap("per-agent indexes")
        _swap(agent_indexes=agent_indexes, outcome=outcome)
        lap("swap")
    except BaseException:
        if not connection.in_atomic_block:  # leave the old table as it was: no trigger, no shadow
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TRIGGER IF EXISTS {CAPTURE_FUNCTION} ON {CHUNK}")
                cursor.execute(f"DROP TRIGGER IF EXISTS {CAPTURE_FUNCTION}_truncate ON {CHUNK}")
                cursor.execute(f"DROP TABLE IF EXISTS {SHADOW}")
                cursor.execute(f"DROP FUNCTION IF EXISTS {CAPTURE_FUNCTION}()")
        raise
