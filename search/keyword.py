"""The keyword half of search: BM25 over Chunk.search_vector, for one agent.

Why not ``plainto_tsquery``/``websearch_to_tsquery`` as is: both AND every word, and a natural-language
question ("when did Caroline go to the support group?") then matches almost nothing. We turn the query
into its lexemes with the column's own configuration (``to_tsvector(KEYWORD_CONFIG, …)``: same
stemming, same stop words, CJK bigrams added as the indexer adds them) and search for an OR of them.
Each lexeme reaches SQL as a quoted tsquery literal in a bound parameter, so no query string can
inject tsquery operators or SQL.

Why BM25 and not ``ts_rank_cd``: ts_rank has no IDF (a match on "went" counts as much as a match on
"Caroline") and is not normalised. Scores here are Okapi BM25 with the IDF of each lexeme computed
from this agent's chunks only, scaled so the best hit of the query scores 1.0.

Term frequency without unnesting every matched tsvector: for a single-lexeme query whose positions all
carry the same weight, ``ts_rank('{1,1,1,1}', v, q, 0)`` is exactly ``H(tf) / (pi^2/6)`` with
``H(n) = sum(1/i^2, i=1..n)`` (Postgres's calc_rank_or), and ``pi^2/6 - H(n)`` is ``1/n - 1/(2n^2) + …``,
so ``tf = round(1 / (pi^2/6 * (1 - r)) - 0.5)`` recovers the count exactly (tsvector keeps at most 256
positions per lexeme; float4 is precise enough far beyond that). That is one C call per row and
lexeme instead of a set-returning unnest of the whole vector per row.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.conf import settings

from indexing.keyword_document import KEYWORD_CONFIG, keyword_document
from indexing.tables import CHUNK, FILE
from memoryhub.replicas import read_connection as connection  # the search's database: a replica or the primary
from search.models import KeywordAgentStats, KeywordTermStats
from search.types import SearchFilters

TERM_STATS = KeywordTermStats._meta.db_table
AGENT_STATS = KeywordAgentStats._meta.db_table

# A pasted stretch of dialogue is a legitimate query, and its telling words may come anywhere in it:
# keeping only its first 64 lexemes lost the keyword half 0.10 of recall on the dialogue-shaped dev set
# (docs/search.md). Small agents score every lexeme (their cost is bounded by the agent's size); large
# agents score the MAX_SCORED_LEXEMES rarest ones (see keyword_candidates).
MAX_QUERY_LEXEMES = 256
MAX_SCORED_LEXEMES = 64


@dataclass(frozen=True)
class KeywordHit:
    chunk_id: int
    score: float  # BM25 / best BM25 of this query: 0..1, the best hit is 1.0
    bm25: float
    # Where the chunk sits, read with the row the search scores anyway (snippets need no second fetch).
    file_id: int = 0
    start_line: int = 0
    end_line: int = 0
    # The part of ``score`` that keyword expansion gave (search/expansion.py), or None.
    expansion_score: float | None = None


@dataclass(frozen=True)
class KeywordResult:
    hits: list[KeywordHit]
    lexemes: list[str]  # the query's lexemes, as the column stores them
    idf: dict[str, float]  # per-agent IDF of each lexeme that matched something
    # Whether the first min(limit, EXACT_DEPTH) hits are proven to be those of an unbounded BM25 with the
    # same IDFs: always, but for a large agent whose search reached MAX_SCORED_ROWS (see SCORE_BUDGET).
    exact: bool = True
    # Keyword expansion (search/expansion.py): each expanded question word → the memory words it searched.
    expansion: dict[str, list[str]] = field(default_factory=dict)


# The query's lexemes in query order (parameters: KEYWORD_CONFIG, keyword_document(query)).
_QUERY_LEXEMES_SQL = (
    "SELECT lexeme, positions[1] AS first_position FROM unnest(to_tsvector(%s::regconfig, %s)) ORDER BY positions[1], lexeme"
)


def query_lexemes(query: str) -> list[str]:
    """The distinct lexemes of ``query`` under the keyword index's configuration, in query order."""
    if not query.strip():
        return []
    with connection.cursor() as cursor:
        cursor.execute(_QUERY_LEXEMES_SQL, [KEYWORD_CONFIG, keyword_document(query)])
        return [row[0] for row in cursor.fetchall()][:MAX_QUERY_LEXEMES]


def lexeme_tsquery(lexeme: str) -> str:
    """A tsquery literal matching exactly this lexeme (quoted, so operators inside it are plain text)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def lines_lexemes(lines: list[str]) -> list[set[str]]:
    """The lexemes of each line, with the same configuration (snippets pick lines with these)."""
    if not lines:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array(SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, t.line))) "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS t(line, i) ORDER BY t.i",
            [KEYWORD_CONFIG, [keyword_document(line) for line in lines]],
        )
        return [set(row[0]) for row in cursor.fetchall()]


# Small agents (at most MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS chunks): the agent's chunks are read
# through its btree index and filtered by the query, df per lexeme is counted over these matches (every
# chunk that contains a lexeme matches the OR query, so the count is the agent's true df), then each
# match is scored. The OFFSET 0 fence keeps the planner off chunk_search_vector_gin: that index holds
# every agent's chunks, and the bitmap of a common word's posting list at 1M chunks took 50-100 ms for a
# 3k-5k-chunk agent, against 10-25 ms to read and filter the agent's own rows (docs/benchmarks.md, "Search at
# scale"). The file table is joined only when filters are set, after scoring, so unfiltered searches
# never touch it and the IDF stays the agent's whatever the filter.
# Terms past the query's own (%(own)s of them) are words searched with it (keyword expansion's): a chunk's
# score is its own BM25 scaled so the best is 1 (if among the best %(limit)s by it), plus %(also_weight)s
# times its BM25 for those words scaled the same way (if among the best %(limit)s by that): what
# search/expansion.py's ``lifted`` gives of the two queries, in one statement ({tail}: _EXACT_LIFTED_SQL;
# without such words, _EXACT_TOP_SQL).
_EXACT_SQL = """
WITH terms AS (
    SELECT t.q, t.i FROM unnest(%(terms)s::tsquery[]) WITH ORDINALITY AS t(q, i)
),
tf AS MATERIALIZED (
    SELECT m.id, m.file_id, m.start_line, m.end_line, m.token_count, r.i,
           round(1.0 / (1.6449340668482264 * (1.0 - LEAST(r.rank, 0.999999)::float8)) - 0.5) AS tf
    FROM (
        SELECT c.id, c.file_id, c.start_line, c.end_line, c.token_count, c.search_vector
        FROM {chunk} c
        WHERE c.agent_id = %(agent)s
        OFFSET 0
    ) m
    CROSS JOIN LATERAL (SELECT t.i, ts_rank('{{1,1,1,1}}', m.search_vector, t.q, 0) AS rank FROM terms t) r
    WHERE m.search_vector @@ %(query)s::tsquery AND r.rank > 0
),
df AS (
    SELECT i, count(*) AS df FROM tf GROUP BY i
),
stats AS (
    SELECT count(*) AS n, GREATEST(avg(token_count), 1)::float8 AS avgdl FROM {chunk} WHERE agent_id = %(agent)s
),
idf AS (
    SELECT df.i, ln(1 + GREATEST(stats.n - df.df + 0.5, 0.5)::float8 / (df.df + 0.5)::float8) AS idf, stats.avgdl
    FROM df CROSS JOIN stats
),
term_scores AS (
    SELECT tf.id, tf.file_id, tf.start_line, tf.end_line, tf.i,
           idf.idf * tf.tf * (%(k1)s::float8 + 1)
           / (tf.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * GREATEST(tf.token_count, 1) / idf.avgdl)) AS score
    FROM tf JOIN idf USING (i)
),
scored AS (
    SELECT id, file_id, start_line, end_line,
           sum(score) FILTER (WHERE i <= %(own)s) AS bm25, sum(score) FILTER (WHERE i > %(own)s) AS also
    FROM term_scores
    GROUP BY id, file_id, start_line, end_line
)
{tail}
"""
# The best %(limit)s by the query's own BM25: the search without words searched with it.
_EXACT_TOP_SQL = """
SELECT s.id, s.bm25, s.file_id, s.start_line, s.end_line, NULL::float8, s.bm25,
       (SELECT json_object_agg(i, df) FROM df WHERE i <= %(own)s), (SELECT n FROM stats)
FROM scored s {file_join}
{file_where}
ORDER BY s.bm25 DESC, s.id
LIMIT %(limit)s
"""
# Each chunk lifted by the words searched with the query, as ``lifted`` does (see above _EXACT_SQL): two
# window sorts of every match, which a search without such words does not pay for (_EXACT_TOP_SQL).
_EXACT_LIFTED_SQL = """
, ranked AS (
    SELECT s.id, s.file_id, s.start_line, s.end_line, s.bm25, s.also,
           max(s.bm25) OVER () AS own_best, max(s.also) OVER () AS also_best,
           row_number() OVER (ORDER BY s.bm25 DESC NULLS LAST, s.id) AS own_rank,
           row_number() OVER (ORDER BY s.also DESC NULLS LAST, s.id) AS also_rank
    FROM scored s {file_join}
    {file_where}
),
lifted AS (
    SELECT id, file_id, start_line, end_line, bm25,
           CASE WHEN bm25 IS NOT NULL AND own_rank <= %(limit)s THEN bm25 / own_best END AS own_part,
           CASE WHEN also IS NOT NULL AND also_rank <= %(limit)s THEN %(also_weight)s::float8 * also / also_best END AS also_part
    FROM ranked
)
SELECT id, coalesce(own_part, 0) + coalesce(also_part, 0) AS score, file_id, start_line, end_line, also_part,
       CASE WHEN own_part IS NOT NULL THEN bm25 END,
       (SELECT json_object_agg(i, df) FROM df WHERE i <= %(own)s), (SELECT n FROM stats)
FROM lifted
WHERE own_part IS NOT NULL OR also_part IS NOT NULL
ORDER BY score DESC, bm25 DESC NULLS LAST, id
LIMIT %(limit)s
"""

# Large agents: the IDF of each lexeme is known beforehand (see below), so each match is scored in one
# pass, without grouping: the matches come from the agent's own partial GIN index
# (search/keyword_stats.py) restricted to the tsquery that keyword_candidates builds for this pass
# (the sets of lexemes whose chunks could reach the top, see below SCORE_BUDGET). Each match
# is scored with every lexeme of the query, so its score is its exact BM25. The last column counts the
# matches read (before the file filter; one row of NULLs carries it when no match passes the filter):
# when it reaches the pass's row limit, some were left unread.
# {columns} and {score} (_scoring_sql) spell the sum out term by term: a correlated subquery over the
# terms' arrays (a function scan and an aggregate per row) cost ~2 µs per row, as much as reading the row
# (a pass over 923 cached rows: 3.2 → 2.3 ms). {match}: the pass's condition on search_vector (_pass).
_GIVEN_IDF_SQL = """
WITH scored AS (
    SELECT m.id, m.file_id, m.start_line, m.end_line, {score} AS bm25
    FROM (
        SELECT c.id, c.file_id, c.start_line, c.end_line, {columns}
        FROM {chunk} c
        WHERE c.agent_id = %(agent)s AND {{match}}
        {match_limit}
    ) m
)
SELECT s.id, s.bm25, s.file_id, s.start_line, s.end_line, n.matched
FROM (SELECT count(*) AS matched FROM scored) n
LEFT JOIN LATERAL (
    SELECT s.id, s.bm25, s.file_id, s.start_line, s.end_line
    FROM scored s {file_join}
    {file_where}
    ORDER BY s.bm25 DESC, s.id
    LIMIT %(limit)s
) s ON true
ORDER BY s.bm25 DESC, s.id
"""

# Term frequency of query term i in a chunk from one ts_rank (see the module docstring), and BM25's
# length normalisation of the chunk: computed once per row in the inner query, read by every term's score.
_TF = "round(1.0 / (1.6449340668482264 * (1.0 - LEAST(ts_rank('{{1,1,1,1}}', c.search_vector, %(term_{i})s::tsquery, 0), 0.999999)::float8)) - 0.5) AS tf{i}"
_NORM = "%(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * GREATEST(c.token_count, 1) / %(avgdl)s::float8) AS norm"
_TERM_SCORE = "CASE WHEN m.tf{i} > 0 THEN %(idf_{i})s::float8 * m.tf{i} * (%(k1)s::float8 + 1) / (m.tf{i} + m.norm) ELSE 0 END"


def _scoring_sql(idfs: list[float | None]) -> tuple[str, str, dict]:
    """(the columns the inner query computes, the BM25 sum over them, their parameters) for the scored terms."""
    scored = [i for i, idf in enumerate(idfs) if idf is not None]
    columns = ", ".join([_NORM, *(_TF.format(i=i) for i in scored)])
    score = " + ".join(_TERM_SCORE.format(i=i) for i in scored)
    return columns, score or "0::float8", {f"idf_{i}": idfs[i] for i in scored}


def bm25_idf(*, n: int, df: int) -> float:
    return math.log(1 + max(n - df + 0.5, 0.5) / (df + 0.5))


# Large agents: each lexeme's df comes from the agent's background keyword stats (_stats_plan,
# search/keyword_stats.py); until they exist it is counted exactly up to RARE_DF_CAP (a GIN scan stopped
# early) and the df of a more common lexeme estimated from a sample of the agent's chunks. Reading
# every chunk that contains a common word costs seconds at 100k chunks (measured: ~1.1 s to read 100k
# search vectors), so the chunks are read in two passes (MaxScore-style pruning, exact where it can prove
# it). Each lexeme adds at most idf * tf_factor_bound to a chunk's score (BM25's term frequency factor for
# the lexeme's largest count in one chunk and the shortest chunk holding it, from the stats; k1 + 1, its
# limit, where the stats do not say). So a chunk scores above a threshold only if it holds one of the
# threshold's reaching sets: the minimal sets of the query's lexemes whose bounds add up to more than it.
#
# 1. A threshold is guessed from the dfs alone: the highest one whose reaching sets the agent's chunks are
#    expected to hold about SCORE_BUDGET times (as if lexemes occurred independently). The chunks holding
#    one of its sets are read (one GIN bitmap per set, each an intersection of posting lists before any
#    row is read, at most FIRST_PASS_LIMIT times the budget), each scored with every lexeme: its exact
#    BM25. Every chunk scoring above the guess is among them. (When the guess has more than
#    MAX_REACHING_SETS sets, the chunks of the rarest lexemes whose dfs add up to the budget instead.)
# 2. The EXACT_DEPTH-th best score of pass 1 is the bar: only a chunk holding one of the bar's reaching
#    sets could still enter the top, and pass 2 reads those not read yet (a set holding one of pass 1's
#    is skipped: its chunks were all read). When ten chunks scored above the guess, none is left and the
#    search is one pass.
# The stats' bounds hold for the chunks they counted (id up to their last_chunk_id); a chunk written since
# may hold a lexeme more often, or be shorter. So pass 1 also reads every newer chunk holding a scored
# lexeme (a range of the agent's primary key: the chunk table is partitioned by agent), and pass 2 leaves
# them out, or reads them again when pass 1 stopped at its row limit before reading them all.
#
# The top EXACT_DEPTH of the two passes is then the unbounded BM25's, unless a pass reached its row limit
# (MAX_SCORED_ROWS for both passes together: the hard cap on a search's work), which KeywordResult.exact
# reports. Reading the rarest lexemes' chunks first instead (up to 1,000 of them, then the sets the bar
# left) read 896 chunks per search at the median where this reads 367, for the same proven top 10
# (bench_scale's 100k-chunk agent). How the budget was chosen: docs/benchmarks.md, "Search at scale".
RARE_DF_CAP = 500
SAMPLE_CHUNKS = 500
SCORE_BUDGET = 300
FIRST_PASS_LIMIT = 4  # the estimate's independence fails for words that go together: a bound on pass 1
THRESHOLD_STEPS = 10  # bisection steps of the guess: within 1/1024 of the bounds' sum
EXACT_DEPTH = 10
MAX_SCORED_ROWS = 12_000
# More sets than this (long queries of similar words): a pass reads the chunks of any lexeme.
MAX_REACHING_SETS = 64


def minimal_sets(bounds: list[float], threshold: float) -> Iterator[list[int]]:
    """The minimal sets of indexes of ``bounds`` whose bounds add up to more than ``threshold`` (each
    sorted), one at a time, so that a caller may stop early. A chunk whose lexemes' bounds add up to no
    more than the threshold cannot score above it; every other one holds one of these sets."""
    order = sorted(range(len(bounds)), key=lambda i: (-bounds[i], i))
    left = [0.0] * (len(order) + 1)  # left[k]: the bounds of order[k:], added up
    for k in range(len(order) - 1, -1, -1):
        left[k] = left[k + 1] + bounds[order[k]]

    def grow(start: int, chosen: list[int], total: float) -> Iterator[list[int]]:
        # Largest bounds first: a set is given as soon as it reaches, so dropping any of its members
        # (each at least as large as the last one added) falls back below the threshold.
        for k in range(start, len(order)):
            if total + left[k] <= threshold:
                return
            i = order[k]
            if total + bounds[i] > threshold:
                yield sorted([*chosen, i])
            else:
                yield from grow(k + 1, [*chosen, i], total + bounds[i])

    return grow(0, [], 0.0)


def reaching_sets(bounds: list[float], threshold: float, *, at_most: int) -> list[list[int]] | None:
    """The minimal_sets of ``bounds`` above ``threshold``, sorted, or None when there are more than
    ``at_most`` of them."""
    found = list(itertools.islice(minimal_sets(bounds, threshold), at_most + 1))
    return sorted(found) if len(found) <= at_most else None


_LARGE_AGENT_STATS_SQL = """
WITH terms AS (
    SELECT t.q, t.i FROM unnest(%(terms)s::tsquery[]) WITH ORDINALITY AS t(q, i)
),
sample AS MATERIALIZED (
    SELECT search_vector, token_count FROM {chunk} WHERE agent_id = %(agent)s LIMIT %(sample)s
)
SELECT t.i,
       (SELECT count(*) FROM (SELECT 1 FROM {chunk} c
                              WHERE c.agent_id = %(agent)s AND c.search_vector @@ t.q LIMIT %(cap)s) x),
       (SELECT count(*) FROM sample s WHERE s.search_vector @@ t.q),
       (SELECT count(*) FROM sample),
       (SELECT GREATEST(avg(token_count), 1) FROM sample)
FROM terms t ORDER BY t.i
"""


@dataclass(frozen=True)
class _Plan:
    """What a large agent's search knows of the query's lexemes before reading a chunk."""

    dfs: list[int]
    n: int  # the agent's chunks
    avgdl: float
    tf_bounds: list[tuple[int, int] | None]  # per lexeme (max_tf, min_tokens) from the stats, or None
    bounded_to: int | None = None  # the last chunk id the tf_bounds counted (None: no bounds)


def bm25_parameters(lexeme_count: int) -> tuple[float, float]:
    """BM25's (k1, b) for a query of ``lexeme_count`` distinct lexemes. A long query (a pasted stretch of
    dialogue) shares words with any long chunk by chance, so it normalises length fully and lets repeats
    count longer: MEMORYHUB_SEARCH_BM25_LONG_K1 / _B from MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES on."""
    long_from = settings.MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES
    if long_from and lexeme_count >= long_from:
        return settings.MEMORYHUB_SEARCH_BM25_LONG_K1, settings.MEMORYHUB_SEARCH_BM25_LONG_B
    return settings.MEMORYHUB_SEARCH_BM25_K1, settings.MEMORYHUB_SEARCH_BM25_B


def tf_factor_bound(bound: tuple[int, int] | None, *, avgdl: float, k1: float, b: float) -> float:
    """The largest BM25 term-frequency factor a lexeme can have in a chunk, given (its largest count in
    one chunk, the shortest chunk holding it), or k1 + 1 (the factor's limit) without them. ``k1`` and
    ``b`` are the scoring's own (bm25_parameters)."""
    if bound is None:
        return k1 + 1
    tf, tokens = bound
    return tf * (k1 + 1) / (tf + k1 * (1 - b + b * max(tokens, 1) / avgdl))


def _large_agent_plan(*, agent_id: int, terms: list[str]) -> _Plan:
    """The plan of a large agent without keyword stats yet: dfs below RARE_DF_CAP counted exactly,
    larger ones estimated from a sample, no term bounds."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {CHUNK} WHERE agent_id = %s", [agent_id])
        n = cursor.fetchone()[0]
        cursor.execute(
            _LARGE_AGENT_STATS_SQL.format(chunk=CHUNK), {"terms": terms, "agent": agent_id, "sample": SAMPLE_CHUNKS, "cap": RARE_DF_CAP}
        )
        rows = cursor.fetchall()
    dfs = []
    avgdl = float(rows[0][4] or 1) if rows else 1.0
    for _, capped, in_sample, sample_size, _ in rows:
        dfs.append(capped if capped < RARE_DF_CAP else max(RARE_DF_CAP, round(n * in_sample / max(sample_size, 1))))
    return _Plan(dfs=dfs, n=n, avgdl=avgdl, tf_bounds=[None] * len(dfs))


def _capped_dfs(*, agent_id: int, terms: list[str]) -> list[int]:
    """Each term's df in the agent, counted no further than RARE_DF_CAP."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT count(*) FROM (SELECT 1 FROM {CHUNK} c "
            "        WHERE c.agent_id = %(agent)s AND c.search_vector @@ t.q LIMIT %(cap)s) x) "
            "FROM unnest(%(terms)s::tsquery[]) WITH ORDINALITY AS t(q, i) ORDER BY t.i",
            {"terms": terms, "agent": agent_id, "cap": RARE_DF_CAP},
        )
        return [row[0] for row in cursor.fetchall()]


# query_lexemes and the agent's keyword stats for them (search/keyword_stats.py; NULLs when it has none) in
# one round trip: the search needs both before it reads a chunk (0.7 → 0.5 ms against two statements).
# Parameters: the configuration and the query (for q), the agent and a count, the agent. The last column:
# without stats, the agent's chunks counted no further than that count (cheap for a small agent; a subquery
# in a CASE branch not taken is not run).
_LEXEMES_AND_STATS_SQL = f"""
WITH q AS MATERIALIZED ({_QUERY_LEXEMES_SQL} LIMIT {MAX_QUERY_LEXEMES})
SELECT array(SELECT lexeme FROM q ORDER BY first_position, lexeme), a.chunks, a.avg_tokens, a.last_chunk_id,
       (SELECT json_object_agg(t.lexeme, json_build_array(t.df, t.max_tf, t.min_tokens)) FROM {TERM_STATS} t
        WHERE t.agent_id = a.agent_id AND t.lexeme IN (SELECT lexeme FROM q)),
       CASE WHEN a.agent_id IS NULL
            THEN (SELECT count(*) FROM (SELECT 1 FROM {CHUNK} WHERE agent_id = %s LIMIT %s) x) END
FROM (SELECT 1) one LEFT JOIN {AGENT_STATS} a ON a.agent_id = %s
"""


def _lexemes_and_stats(*, agent_id: int, query: str, size_up_to: int) -> tuple[list[str], tuple | None, int | None]:
    """(query_lexemes(query), the agent's keyword stats row for them or None, and when there is none its
    chunk count up to ``size_up_to``) in one statement."""
    if not query.strip():
        return [], None, None
    with connection.cursor() as cursor:
        cursor.execute(
            _LEXEMES_AND_STATS_SQL, [KEYWORD_CONFIG, keyword_document(query), agent_id, size_up_to, agent_id]
        )
        lexemes, *stats, size = cursor.fetchone()
    return lexemes, (tuple(stats) if stats[0] is not None else None), size


def _stats_plan(*, agent_id: int, lexemes: list[str], terms: list[str], row: tuple | None) -> _Plan | None:
    """Like _large_agent_plan, from the agent's background keyword stats ``row`` (_lexemes_and_stats), or
    None when it has none. A lexeme the stats do not know (new since the last count, or absent) is
    counted now, up to RARE_DF_CAP: if it is new, the chunks holding it must stay findable."""
    if row is None:
        return None
    n, avgdl, bounded_to, known = row[0], float(row[1] or 1), row[2], row[3] or {}
    unknown = [i for i, lexeme in enumerate(lexemes) if lexeme not in known]
    counted = dict(zip(unknown, _capped_dfs(agent_id=agent_id, terms=[terms[i] for i in unknown]))) if unknown else {}
    dfs = [known[lexeme][0] if i not in counted else counted[i] for i, lexeme in enumerate(lexemes)]
    tf_bounds = [
        (known[lexeme][1], known[lexeme][2]) if bounded_to is not None and i not in counted and None not in known[lexeme] else None
        for i, lexeme in enumerate(lexemes)
    ]
    return _Plan(dfs=dfs, n=max(n, 1), avgdl=avgdl, tf_bounds=tf_bounds, bounded_to=bounded_to)


def keyword_candidates(
    *, agent_id: int, query: str, filters: SearchFilters, limit: int, also: Callable[[], list[str]] | None = None,
    also_weight: float = 0.0,
) -> KeywordResult:
    """The agent's chunks matching any lexeme of ``query``, best BM25 first (at most ``limit``).

    ``also`` (keyword expansion, search/services.py): for an agent searched exactly, called once that is
    known (after the first statement), it gives more lexemes to search with the query's, in the same
    statement: a chunk's score is then lifted by ``also_weight`` times its BM25 for them, scaled so that
    their best is 1, and the best score is 1 again (search/expansion.py's ``lifted`` of the two queries,
    at most ``limit`` hits too). It is not called for a large agent. The result's lexemes and IDFs are the
    query's own."""
    large_from = settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS
    lexemes, stats, size = _lexemes_and_stats(agent_id=agent_id, query=query, size_up_to=large_from + 1)
    if not lexemes:
        return KeywordResult(hits=[], lexemes=[], idf={})
    terms = [lexeme_tsquery(lexeme) for lexeme in lexemes]
    k1, b = bm25_parameters(len(lexemes))
    params = {"terms": terms, "agent": agent_id, "query": " | ".join(terms), "limit": limit, "k1": k1, "b": b}
    file_join = file_where = ""
    if not filters.is_empty:
        clause, filter_params = filters.file_sql("f")
        # file_sql uses %s placeholders; name them so they mix with the named ones above.
        for number, value in enumerate(filter_params):
            clause = clause.replace("%s", f"%(filter_{number})s", 1)
            params[f"filter_{number}"] = value
        file_join = f"JOIN {FILE} f ON f.agent_id = %(agent)s AND f.id = s.file_id"  # the agent's shard only
        file_where = f"WHERE {clause}"

    plan = _stats_plan(agent_id=agent_id, lexemes=lexemes, terms=terms, row=stats)
    # ``size`` is read only when there are no stats; without a plan from stats that exist (bench_scale's
    # exact baseline patches _stats_plan), the agent is searched exactly.
    if plan is None and size is not None and size > large_from:
        plan = _large_agent_plan(agent_id=agent_id, terms=terms)  # until the background stats exist
    exact = True
    if plan is None:
        # The lexemes searched with the query are more terms, after its own (their part kept apart).
        more = also() if also is not None and also_weight > 0 else []
        every = terms + [lexeme_tsquery(lexeme) for lexeme in more]
        params.update(terms=every, query=" | ".join(every), own=len(terms), also_weight=also_weight)
        tail = (_EXACT_LIFTED_SQL if more else _EXACT_TOP_SQL).format(file_join=file_join, file_where=file_where)
        sql = _EXACT_SQL.format(chunk=CHUNK, tail=tail)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if not rows:
            return KeywordResult(hits=[], lexemes=lexemes, idf={})
        dfs, n = rows[0][7] or {}, rows[0][8] or 0
        idf = {lexemes[int(i) - 1]: bm25_idf(n=n, df=df) for i, df in dfs.items()}
        return KeywordResult(hits=_hits(rows, exact=True), lexemes=lexemes, idf=idf)
    else:
        dfs = plan.dfs
        scored = set(sorted((i for i, df in enumerate(dfs) if df > 0), key=lambda i: (dfs[i], i))[:MAX_SCORED_LEXEMES])
        idfs = [bm25_idf(n=plan.n, df=df) if i in scored else None for i, df in enumerate(dfs)]
        columns, score, idf_params = _scoring_sql(idfs)
        params.update(idf_params, avgdl=plan.avgdl, **{f"term_{i}": term for i, term in enumerate(terms)})
        rows, exact = _two_passes(
            params=params, terms=terms, plan=plan, idfs=idfs, kept=sorted(scored) or list(range(len(dfs))),
            depth=min(limit, EXACT_DEPTH), limit=limit,
            sql=_GIVEN_IDF_SQL.format(
                chunk=CHUNK, file_join=file_join, file_where=file_where, match_limit="{match_limit}", columns=columns, score=score
            ),
        )
        if not rows:
            return KeywordResult(hits=[], lexemes=lexemes, idf={}, exact=exact)
        idf = {lexeme: value for lexeme, value in zip(lexemes, idfs) if value is not None}
    return KeywordResult(hits=_hits(rows), lexemes=lexemes, idf=idf, exact=exact)


def _hits(rows, *, exact: bool = False) -> list[KeywordHit]:
    """Rows of (chunk id, score, file id, start line, end line), best first, as hits scored 0..1; from
    _EXACT_SQL (``exact``) then the part of the score the words searched with the query gave (or NULL)
    and the query's own BM25 (NULL for a chunk only those words found)."""
    best = rows[0][1] or 1.0
    return [
        KeywordHit(
            chunk_id=row[0], score=(row[1] / best) if best > 0 else 0.0, bm25=(row[6] or 0.0) if exact else row[1],
            file_id=row[2], start_line=row[3], end_line=row[4],
            expansion_score=(row[5] / best) if exact and row[5] is not None and best > 0 else None,
        )
        for row in rows
    ]


def _pass(
    sql: str, params: dict, *, queries: list[str], also: str = "", seen: str = "", row_limit: int | None
) -> tuple[list, int]:
    """(the best ``limit`` rows scored, the matches read) of one pass of _GIVEN_IDF_SQL over the chunks
    matching any of ``queries`` or the SQL condition ``also``, but not the SQL condition ``seen``.

    Each query is its own ``@@`` so that the planner ORs one GIN bitmap per query: an AND of two common
    lexemes is then an intersection of their posting lists, while one tsquery ORing several ANDs made
    GIN test every chunk of every lexeme in it (measured: 50-85 ms for 9-40 ANDs of common lexemes)."""
    matches = [f"c.search_vector @@ %(match_{i})s::tsquery" for i in range(len(queries))] + ([f"({also})"] if also else [])
    match = "(" + (" OR ".join(matches) or "FALSE") + ")"
    if seen:
        match += f" AND NOT ({seen})"
    # OFFSET 0 keeps the matches a subquery of their own, so each rank is computed once per row.
    match_limit = f"LIMIT {int(row_limit)}" if row_limit is not None else "OFFSET 0"
    sql = sql.replace("{match_limit}", match_limit).replace("{match}", match)
    values = {**params, **{f"match_{i}": query for i, query in enumerate(queries)}}
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        rows = cursor.fetchall()
    return [row for row in rows if row[0] is not None], rows[0][5]


def _first_threshold(bounds: list[float], shares: list[float], *, n: int, enough: float) -> float:
    """The highest threshold (within 1/2^THRESHOLD_STEPS of the bounds' sum) whose reaching sets the
    agent's chunks are expected to hold at least ``enough`` times, each set's chunks estimated as ``n``
    times the product of its lexemes' shares of the chunks (as if lexemes occurred independently); 0 when
    all the lexemes' chunks together fall short. More than MAX_REACHING_SETS sets count as enough."""

    def reaches(threshold: float) -> bool:
        expected = 0.0
        for count, group in enumerate(minimal_sets(bounds, threshold), 1):
            expected += n * math.prod(shares[j] for j in group)
            if expected >= enough or count > MAX_REACHING_SETS:
                return True
        return False

    low, high = 0.0, sum(bounds)
    if not reaches(low):
        return low
    for _ in range(THRESHOLD_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if reaches(middle) else (low, middle)
    return low


def _rarest(shares: list[float], *, budget: float) -> list[int]:
    """The indexes of the rarest lexemes whose shares add up to at most ``budget``, and always the rarest."""
    chosen, total = [], 0.0
    for i in sorted(range(len(shares)), key=lambda i: (shares[i], i)):
        if chosen and total + shares[i] > budget:
            break
        chosen.append(i)
        total += shares[i]
    return chosen


def _two_passes(
    *, sql: str, params: dict, terms: list[str], plan: _Plan, idfs: list[float | None], kept: list[int],
    depth: int, limit: int,
) -> tuple[list, bool]:
    """(the best ``limit`` rows, whether their first ``depth`` are proven exact) of a large agent's search:
    the two passes described above SCORE_BUDGET, over the ``kept`` lexemes that have an IDF."""
    scored = [i for i in kept if idfs[i] is not None]
    if not scored:
        return [], True
    bounds = [idfs[i] * tf_factor_bound(plan.tf_bounds[i], avgdl=plan.avgdl, k1=params["k1"], b=params["b"]) for i in scored]

    def queries(sets: list[list[int]]) -> list[str]:
        return [" & ".join(terms[scored[j]] for j in group) for group in sets]

    shares = [plan.dfs[i] / plan.n for i in scored]
    guess = _first_threshold(bounds, shares, n=plan.n, enough=SCORE_BUDGET)
    first = reaching_sets(bounds, guess, at_most=MAX_REACHING_SETS)
    if not first:  # too many sets (long queries of similar words): the rarest lexemes' chunks, about a budget
        first = [[j] for j in _rarest(shares, budget=SCORE_BUDGET / plan.n)]
    newer = ""  # the chunks the stats' bounds do not cover (see above SCORE_BUDGET)
    # Expected plan: one more arm of the pass's BitmapOr, the agent's primary key range (ANDed with a GIN
    # bitmap of the scored lexemes when the range is large: forcing the range alone cost 9 against 4 ms
    # at 5,000 newer chunks of a 100k-chunk agent; the planner's choice costs 0.5-1 ms at 100-5,000).
    if plan.bounded_to is not None:
        newer = "c.id > %(bounded_to)s AND c.search_vector @@ %(any_scored)s::tsquery"
        params = {**params, "bounded_to": plan.bounded_to, "any_scored": " | ".join(terms[i] for i in scored)}
    first_limit = min(FIRST_PASS_LIMIT * SCORE_BUDGET, MAX_SCORED_ROWS)
    first_queries = queries(first)
    rows, read = _pass(sql, params, queries=first_queries, also=newer, row_limit=first_limit)
    complete = read < first_limit  # then every chunk holding one of the first sets, and every newer one, is scored

    threshold = rows[depth - 1][1] if depth > 0 and len(rows) >= depth else 0.0
    # Float sums of the same terms can differ in their last bits: a chunk that ties is read, not skipped.
    sets = reaching_sets(bounds, threshold * (1 - 1e-9), at_most=MAX_REACHING_SETS)
    if sets is None:
        sets = [[j] for j in range(len(scored))]
    if complete:  # a set holding one of the first pass's has no chunk left to read
        sets = [group for group in sets if not any(set(done) <= set(group) for done in first)]
    if not sets and (complete or not newer):
        return rows, True
    if read >= MAX_SCORED_ROWS:
        return rows, False
    row_limit = MAX_SCORED_ROWS - read
    seen = ""
    if complete:
        params = {**params, "seen": " | ".join(f"( {query} )" for query in first_queries)}
        seen = "c.search_vector @@ %(seen)s::tsquery" + (" OR c.id > %(bounded_to)s" if newer else "")
    more, more_read = _pass(sql, params, queries=queries(sets), also="" if complete else newer, seen=seen, row_limit=row_limit)
    return _merged(rows, more, limit=limit), more_read < row_limit


def _merged(rows: list, more: list, *, limit: int) -> list:
    """The best ``limit`` of two passes' rows (a chunk both read has the same exact score in each)."""
    merged = {row[0]: row for row in rows}
    merged.update((row[0], row) for row in more)
    return sorted(merged.values(), key=lambda row: (-row[1], row[0]))[:limit]
