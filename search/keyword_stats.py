"""Document frequencies of the lexemes of large agents, refreshed in the background.

Why: BM25 needs each query word's document frequency (df) in the agent. Counting it at query time
over a 100k-chunk agent reads the whole posting list of a common word in the (all-agent) GIN index and
then its rows (search/keyword.py's fallback counts up to RARE_DF_CAP and estimates common words from a
sample: ~30 ms of a ~40 ms search at 100k chunks). One pass over the agent's tsvectors counts every
lexeme of the agent, in the periodic `keyword_stats` task, and a search then reads a few rows by primary
key. With each df come the largest count of the lexeme in one chunk and the shortest chunk holding it,
which bound what the lexeme can add to a chunk's score: search/keyword.py skips the chunks that cannot
reach its top.

Only agents above MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS get stats (smaller ones are counted exactly
at query time, which is fast). They are refreshed when the chunk count moved by more than
MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT since the last refresh, and dropped when the agent shrinks to the
threshold. Stale stats shift IDF slightly; they never hide a chunk: words unknown to the stats are
counted at query time (search/keyword.py). The term bounds of the chunks written since the last run are
added at each run (keyword_bounds_catch_up): until then a search reads every such chunk holding a query
word whatever the bounds (search/keyword.py), so the catch-up keeps that read short.

The same agents get a partial GIN index of their own, ``chunk_gin_a<agent id>`` (``USING gin
(search_vector) WHERE agent_id = X``), built CONCURRENTLY here and dropped with the stats. Why: the
all-agent index ``chunk_search_vector_gin`` returns every chunk of every agent holding a query word,
and the agent condition is applied afterwards; at 1M chunks a common word's posting list has ~250k
entries, and building that bitmap alone took ~90 ms for the 100k-chunk agent of bench_scale (its own
index: ~2 ms). Search needs no code to pick it: Django sends the agent id as a literal, so the
planner matches the partial index's predicate. Until it exists, searches use the all-agent index.
"""

import logging
import re
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from indexing.partitions import agent_chunk_table, chunk_tables_condition
from indexing.tables import AGENT_LIVE, CHUNK
from search.ddl import advisory_lock, concurrently_clause
from search.models import KeywordAgentStats, KeywordTermStats

TERM_STATS = KeywordTermStats._meta.db_table
AGENT_STATS = KeywordAgentStats._meta.db_table

logger = logging.getLogger(__name__)

# Held while stats are refreshed, so two runs of the task never rebuild the same agent at once.
ADVISORY_LOCK_KEY = 0x6D68_6B77  # "mhkw"
GIN_INDEX_NAME_PATTERN = re.compile(r"^chunk_gin_a(\d+)$")


def agent_keyword_index_name(agent_id: int) -> str:
    return f"chunk_gin_a{int(agent_id)}"


def agent_keyword_index_create(*, agent_id: int, concurrently: str = "") -> str:
    """Build the agent's GIN index (``concurrently``: concurrently_clause()) and return its name."""
    name = agent_keyword_index_name(agent_id)
    with connection.cursor() as cursor:
        # Serves search/keyword.py: search_vector @@ query AND agent_id = X, for this agent only; on the
        # agent's partition (indexing/partitions.py), so the build reads that partition only.
        cursor.execute(
            f'CREATE INDEX{concurrently} IF NOT EXISTS "{name}" ON {agent_chunk_table(agent_id=agent_id)} '
            f"USING gin (search_vector) WHERE agent_id = {int(agent_id)}"
        )
    return name


def keyword_indexes() -> dict[str, bool]:
    """The per-agent GIN indexes: name → usable (False after an interrupted CREATE INDEX CONCURRENTLY)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid AND i.indisready FROM pg_class c "
            "JOIN pg_index i ON i.indexrelid = c.oid JOIN pg_class t ON t.oid = i.indrelid "
            f"WHERE {chunk_tables_condition('t')} AND c.relname LIKE 'chunk\\_gin\\_a%'"
        )
        return {name: bool(valid) for name, valid in cursor.fetchall() if GIN_INDEX_NAME_PATTERN.match(name)}


@dataclass
class KeywordStatsOutcome:
    refreshed: list[int] = field(default_factory=list)  # agent ids
    caught_up: list[int] = field(default_factory=list)  # kept, with the term bounds of their newer chunks added
    dropped: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    seconds: dict[int, float] = field(default_factory=dict)
    indexes_created: list[str] = field(default_factory=list)
    indexes_dropped: list[str] = field(default_factory=list)
    index_seconds: dict[str, float] = field(default_factory=dict)
    skipped: str = ""


# Each lexeme once per chunk of the agent that holds it (those with an id in ``{ids}``): its df, and the
# bounds of its BM25 term-frequency factor (the most positions in one chunk, the shortest chunk) that let
# a search skip chunks that cannot reach its top (search/keyword.py). The full count and the catch-up of
# newer chunks read the bounds from this one statement, so they cannot disagree on what a bound is.
_TERM_COUNTS_SQL = (
    "SELECT u.lexeme, count(*) AS df, max(coalesce(array_length(u.positions, 1), 1)) AS max_tf, "
    "min(GREATEST(c.token_count, 1)) AS min_tokens "
    f"FROM {CHUNK} c CROSS JOIN LATERAL unnest(c.search_vector) u "
    "WHERE c.agent_id = %s {ids} GROUP BY u.lexeme"
)


def keyword_stats_refresh(*, agent_id: int) -> None:
    """Recount every lexeme's df, the chunk count and average length of one agent (one transaction)."""
    agent_id = int(agent_id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TERM_STATS} WHERE agent_id = %s", [agent_id])
        # 0.86 s for 100k chunks, where ts_stat (the df alone) took 0.65 s.
        cursor.execute(
            f"INSERT INTO {TERM_STATS} (agent_id, lexeme, df, max_tf, min_tokens) "
            f"SELECT %s, n.lexeme, n.df, n.max_tf, n.min_tokens FROM ({_TERM_COUNTS_SQL.format(ids='')}) n",
            [agent_id, agent_id],
        )
        cursor.execute(
            f"INSERT INTO {AGENT_STATS} (agent_id, chunks, avg_tokens, last_chunk_id, refreshed_at) "
            f"SELECT %s, count(*), GREATEST(coalesce(avg(token_count), 1), 1), max(id), %s FROM {CHUNK} WHERE agent_id = %s "
            "ON CONFLICT (agent_id) DO UPDATE SET chunks = EXCLUDED.chunks, avg_tokens = EXCLUDED.avg_tokens, "
            "last_chunk_id = EXCLUDED.last_chunk_id, refreshed_at = EXCLUDED.refreshed_at",
            [agent_id, timezone.now(), agent_id],
        )


def keyword_bounds_catch_up(*, agent_id: int, after_id: int, last_id: int) -> None:
    """Widen the term bounds (max_tf, min_tokens) of an agent's stats with its chunks whose id is in
    (after_id, last_id], written since they were counted, and move the stats' last chunk id to last_id.
    Between full refreshes (which the chunk count's drift decides) this keeps the bounds that
    search/keyword.py prunes with true of every chunk but those written since the last run; a lexeme
    the stats do not know has no bound at all (search/keyword.py counts it at query time)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TERM_STATS} t SET max_tf = GREATEST(t.max_tf, n.max_tf), min_tokens = LEAST(t.min_tokens, n.min_tokens) "
            f"FROM ({_TERM_COUNTS_SQL.format(ids='AND c.id > %s AND c.id <= %s')}) n "
            "WHERE t.agent_id = %s AND t.lexeme = n.lexeme",
            [agent_id, after_id, last_id, agent_id],
        )
        cursor.execute(f"UPDATE {AGENT_STATS} SET last_chunk_id = %s WHERE agent_id = %s", [last_id, agent_id])


def keyword_stats_sync(*, min_chunks: int | None = None) -> KeywordStatsOutcome:
    """Give every agent with more than ``min_chunks`` chunks fresh stats; drop the stats of the others.

    Safe to run twice at once: the second run returns with ``skipped`` set.
    """
    concurrently = concurrently_clause()
    min_chunks = settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS if min_chunks is None else min_chunks
    drift = settings.MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT
    outcome = KeywordStatsOutcome()
    with advisory_lock(ADVISORY_LOCK_KEY) as acquired, connection.cursor() as cursor:
        if not acquired:
            outcome.skipped = "another run is refreshing keyword stats"
            return outcome
        cursor.execute(
            f"SELECT agent_id, count(*), max(id) FROM {CHUNK} WHERE {AGENT_LIVE} GROUP BY agent_id HAVING count(*) > %s", [min_chunks]
        )
        rows = cursor.fetchall()
        sizes = {agent_id: count for agent_id, count, _ in rows}
        last_ids = {agent_id: last for agent_id, _, last in rows}
        cursor.execute(f"SELECT agent_id, chunks, last_chunk_id FROM {AGENT_STATS}")
        rows = cursor.fetchall()
        existing = {agent_id: chunks for agent_id, chunks, _ in rows}
        bounded_to = {agent_id: last for agent_id, _, last in rows}
        for agent_id in sorted(set(existing) - set(sizes)):
            with transaction.atomic():
                cursor.execute(f"DELETE FROM {TERM_STATS} WHERE agent_id = %s", [agent_id])
                cursor.execute(f"DELETE FROM {AGENT_STATS} WHERE agent_id = %s", [agent_id])
            outcome.dropped.append(agent_id)
        for agent_id, count in sorted(sizes.items()):
            known = existing.get(agent_id)
            # Stats without term bounds (written before they existed) are refreshed as if stale.
            if known is not None and bounded_to[agent_id] is not None and abs(count - known) <= drift * max(known, 1):
                outcome.kept.append(agent_id)
                if last_ids[agent_id] > bounded_to[agent_id]:
                    keyword_bounds_catch_up(agent_id=agent_id, after_id=bounded_to[agent_id], last_id=last_ids[agent_id])
                    outcome.caught_up.append(agent_id)
                continue
            started = time.monotonic()
            keyword_stats_refresh(agent_id=agent_id)
            outcome.seconds[agent_id] = time.monotonic() - started
            outcome.refreshed.append(agent_id)
            logger.info("keyword stats of agent %d (%d chunks) in %.1f s", agent_id, count, outcome.seconds[agent_id])
        # Per-agent GIN indexes for the same agents (see the module docstring).
        kept_indexes = set()
        for name, valid in keyword_indexes().items():
            if valid and int(GIN_INDEX_NAME_PATTERN.match(name)[1]) in sizes:
                kept_indexes.add(name)
            else:
                cursor.execute(f'DROP INDEX{concurrently} IF EXISTS "{name}"')
                outcome.indexes_dropped.append(name)
        for agent_id in sorted(sizes):
            name = agent_keyword_index_name(agent_id)
            if name in kept_indexes:
                continue
            started = time.monotonic()
            agent_keyword_index_create(agent_id=agent_id, concurrently=concurrently)
            outcome.index_seconds[name] = time.monotonic() - started
            outcome.indexes_created.append(name)
            logger.info("built %s (%d chunks) in %.1f s", name, sizes[agent_id], outcome.index_seconds[name])
    return outcome
