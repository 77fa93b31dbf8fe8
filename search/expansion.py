"""Keyword expansion by words of like meaning: a question's rare word also searches for the memory's
words nearest to it in meaning.

Why: the keyword half finds only the words a question shares with its evidence. A meeting's question
says "budget" where the transcript says "cost"; a question asks for "activities" where the notes say
"hiking". The vector half reads meaning, but it scores whole chunks, and a chunk that holds one telling
word among many others is far from the question. So every word of an agent's memory gets a vector of
its own, and each content word of a short question that is rare in the memory (or absent from it)
brings the memory's words nearest to it. Those words are searched as a second keyword query, and each
chunk's keyword score becomes its own plus MEMORYHUB_SEARCH_EXPANSION_WEIGHT times its score there,
scaled so the best is 1 again. Measured on both dev sets in docs/search.md ("Keyword expansion ...").

Only rare words are expanded: a common word (the speakers' names, "meeting") already finds many chunks,
and its neighbours would only add noise. Rare means that the word's lexeme has a BM25 IDF of at least
MEMORYHUB_SEARCH_EXPANSION_MIN_IDF in the agent, or stands in none of its chunks: the keyword half's
IDF, but counted when the memory's words are read, so that the gate is known before either half runs.

Two parts:

- **The memory's words** (``memory_words_sync``, the periodic ``memory_words`` task): each agent's
  chunks written since the last run are read; their new words are stored (``MemoryWord``, at most
  MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS per agent), the chunks holding each of their lexemes counted
  (``MemoryLexeme``, out of ``MemoryWordsState.chunks``), and the words without a vector of the
  configured model embedded. Each embedded word's nearest words are then worked out
  (``MemoryWord.neighbours``, with the lookup a search makes), and worked out again when a word near it
  is embedded or dropped, or the model or the expansion's settings change. A provider failure leaves the
  words without vectors for the next run; the indexing jobs never wait for this. A lexeme's count is
  added to as chunks are read, so an edited file (its chunks written again) or a deleted one leaves the
  counts of chunks that are gone, and words whose text is gone; once the chunks counted and the agent's
  live chunks differ by more than MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT of the live ones (the keyword
  stats' setting), the agent's lexemes are counted again from its live chunks and the words no live
  chunk holds are dropped (``lexemes_recount``), which makes room for new ones under the cap: an agent
  that was full has its chunks read again for the words refused meanwhile (``_words_refill``). The check
  runs when the agent's new chunks have been read; a deleted file, or an edit that took words out of one
  (``words_text_removed``, noted by the indexing), brings the recount at the next run whatever the drift.
- **At search** (search/services.py): the plan reads the question's content words' lexeme counts,
  vectors and worked-out neighbours (``PLAN_JSON_SQL``, in the statement of the search's checks, on the
  request's thread while the keyword half sends its first) and keeps the rare ones (``plan_from_rows``;
  ``expansion_plan`` is the same in a statement of its own). When every rare word's neighbours are worked out and the
  agent is small enough to be searched by keyword exactly (MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS:
  most agents), the keyword half takes their lexemes from the plan and searches them with the question
  in its next statement (``keyword_candidates(also=...)``). Else the rare words the memory holds have
  their vectors there, the others are embedded with the query, in the same provider request, and
  ``expansion_query`` (the nearest memory words of each word whose neighbours are not worked out, one
  statement, then a second keyword query) runs beside both halves, as it needs nothing of the keyword
  half; ``lifted`` merges it into the keyword half, with the scores the one statement gives. All of it
  runs under the search's deadline: out of time, or with no word near enough, the keyword half
  stays as it was. Only the asking agent's words are read.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from indexing.keyword_document import KEYWORD_CONFIG
from indexing.tables import AGENT, CHUNK
from memoryhub.replicas import read_connection
from search.keyword import KeywordHit, KeywordResult, bm25_idf, keyword_candidates
from search.models import MemoryLexeme, MemoryWord, MemoryWordsState
from search.types import SearchFilters

logger = logging.getLogger(__name__)

WORDS = MemoryWord._meta.db_table
WORDS_STATE = MemoryWordsState._meta.db_table
LEXEMES = MemoryLexeme._meta.db_table

# Words are ASCII letters, lower-cased: the measured form (docs/search.md). Longer words are not words.
# A word starts where a run of letters starts (or, capitalised, inside an ASCII run: "memorySearch" gives
# memory and search) and ends where the run ends or a capital follows. A run holding a letter outside
# ASCII gives no word: its ASCII pieces are not words ("réunion" gave "union", "Müller" "ller", "café"
# "caf"). On ASCII text the words are those of the plain `[A-Za-z][a-z]+`.
WORD = re.compile(r"(?:(?<![^\W\d_])[a-z]|(?<![^\W\d_A-Za-z])[A-Z])[a-z]+(?![^\W\d_A-Z])")
# The same words on ASCII text, three times faster (the lookarounds cost 44 µs per 1,000 characters against
# 14 µs: the words task reads every new chunk).
ASCII_WORD = re.compile(r"[A-Za-z][a-z]+")
MIN_WORD_CHARS = 3
MAX_WORD_CHARS = 40
# A question's words looked up at most (a question of 30 words has about 10 content words).
MAX_EXPANDED_WORDS = 12
# A word shares its first letters with its own forms (plan, plans, planning): those the keyword half's
# stemming finds already, so they are not neighbours.
SAME_STEM_CHARS = 5
STOP = frozenset(
    "the and for that this with you are was were have has had not but what when where which who whom why how "
    "did does doing done can could would should will shall may might must about into from they them their "
    "there then than its his her hers him she he our ours your yours mine any all some each every other such "
    "only own same very just also too more most much many few been being one two like get got make made say "
    "said tell told think know go went come came take took see saw want yes yeah okay well really thing things "
    "something anything lot kind sort mean uh um".split()
)

# Advisory lock of a run of memory_words_sync: two runs never read the same agent's chunks at once.
ADVISORY_LOCK_KEY = 0x6D68_7764  # "mhwd"
# Chunks read per statement, and words embedded per provider request.
CHUNKS_PER_READ = 500
WORDS_PER_REQUEST = 256


def words_in(text: str) -> list[str]:
    """WORD's words of ``text``, in order."""
    return (ASCII_WORD if text.isascii() else WORD).findall(text)


def content_words(question: str) -> list[str]:
    """The question's words worth expanding, in order: lower-cased, not stop words, none capitalised past
    the first word (names and roles, which have no synonyms)."""
    out: list[str] = []
    for number, word in enumerate(words_in(question)):
        if number and word[0].isupper():
            continue
        word = word.lower()
        if MIN_WORD_CHARS <= len(word) <= MAX_WORD_CHARS and word not in STOP and word not in out:
            out.append(word)
    return out


def expansion_words(query: str) -> list[str]:
    """The words of ``query`` to embed with it for expansion: none when expansion is off or the query is
    longer than a question (MEMORYHUB_SEARCH_EXPANSION_MAX_QUERY_WORDS words)."""
    if settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT <= 0:
        return []
    if len(query.split()) > settings.MEMORYHUB_SEARCH_EXPANSION_MAX_QUERY_WORDS:
        return []
    return content_words(query)[:MAX_EXPANDED_WORDS]


def text_words(text: str) -> set[str]:
    """The words of a memory's text worth a vector."""
    return {
        word for word in (found.lower() for found in words_in(text))
        if MIN_WORD_CHARS <= len(word) <= MAX_WORD_CHARS and word not in STOP
    }


# words_gone searches the whole text for each word left once there are at most this many.
FEW_WORDS_LEFT = 16


def words_gone(*, removed: list[str], kept: list[str]) -> bool:
    """Whether a word of ``removed`` (the texts of a file's chunks that an edit took out) stands in none of
    ``kept`` (the texts of the file's chunks now, the ones new to it first): the edit removed text, not only
    added to it. An append rewrites the file's last chunk, whose words all stand in the new last chunk, so
    the check usually ends with the first text read. Once few words are left, a word that is not even a part
    of the texts is gone, found without reading every text's words (a search of the texts per word)."""
    left = set().union(*(text_words(text) for text in removed))
    whole = None
    for text in kept:
        if not left:
            return False
        if whole is None and len(left) <= FEW_WORDS_LEFT:
            whole = "\n".join(kept).lower()
            if any(word not in whole for word in left):
                return True
        left -= text_words(text)
    return bool(left)


# --- The memory's words ----------------------------------------------------------------------------


@dataclass
class WordsOutcome:
    agents: int = 0  # agents with work done
    chunks_read: int = 0
    words_added: int = 0
    words_embedded: int = 0
    words_dropped: int = 0  # words whose text is gone, dropped when the agent's lexemes were counted again
    errors: dict[int, str] = field(default_factory=dict)  # agent id → why its words were not embedded
    skipped: str = ""  # another run holds the lock
    finished: bool = True  # False: the time budget ended the run with work left
    indexes_created: list[str] = field(default_factory=list)  # per-agent HNSW indexes of the words
    indexes_dropped: list[str] = field(default_factory=list)
    recounted: list[int] = field(default_factory=list)  # agents whose lexemes were counted again (drift)
    neighbours_found: int = 0  # words whose nearest words were worked out


# Live agents (of ``only``, when it is not null) whose chunks were written since their words were last
# read, or whose text was removed since (``text_removed``), or, with a model (``key``: neighbours_key()),
# whose words were embedded and worked out with another model or settings, or have words without their
# neighbours (new, not embedded yet, or dropped: a word's vector and its list come together). max(id) per
# agent is one probe of its partition's primary key, and the words without neighbours are found by the
# partial index memory_word_unlisted_idx: the words of an agent whose work is done are not read.
_AGENTS_WITH_WORK_SQL = f"""
SELECT a.id, coalesce(s.last_chunk_id, 0), coalesce(s.words, 0), coalesce(s.lexemes, 0), coalesce(s.text_removed, false)
FROM {AGENT} a LEFT JOIN {WORDS_STATE} s ON s.agent_id = a.id
WHERE a.deletion_requested_at IS NULL AND (%(only)s::bigint[] IS NULL OR a.id = ANY(%(only)s::bigint[]))
  AND ((SELECT max(c.id) FROM {CHUNK} c WHERE c.agent_id = a.id) > coalesce(s.last_chunk_id, 0) OR s.text_removed
       OR (%(key)s <> '' AND (s.neighbours_key <> %(key)s
                              OR EXISTS (SELECT 1 FROM {WORDS} w WHERE w.agent_id = a.id AND w.neighbours IS NULL))))
ORDER BY a.id
"""


def memory_words_sync(*, seconds: float | None = None, agent_ids: list[int] | None = None) -> WordsOutcome:
    """Bring every agent's words up to date (or only ``agent_ids``'): read the chunks written since the
    last run, store their new words and count their lexemes, embed the words without a vector of the
    configured model. Stops after ``seconds`` (the next run goes on where it stopped). Safe to run twice
    at once: the second run returns with ``skipped`` set."""
    from indexing.embedding_identity import configured_identity
    from search.ddl import advisory_lock

    outcome = WordsOutcome()
    if settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT <= 0:
        return outcome
    identity = configured_identity()
    deadline = time.monotonic() + seconds if seconds is not None else math.inf
    with advisory_lock(ADVISORY_LOCK_KEY) as acquired:
        if not acquired:
            outcome.skipped = "another run is reading the memories' words"
            return outcome
        with connection.cursor() as cursor:
            cursor.execute(
                _AGENTS_WITH_WORK_SQL,
                {"key": neighbours_key(identity.key) if identity.has_vectors else "", "only": agent_ids},
            )
            agents = cursor.fetchall()
        embedded = []  # agents whose words all have their vector
        for agent_id, last_chunk_id, words, lexemes, text_removed in agents:
            if time.monotonic() >= deadline:
                outcome.finished = False
                break
            outcome.agents += 1
            caught_up = _words_read(
                agent_id=agent_id, after=last_chunk_id, words=words, lexemes=lexemes, deadline=deadline, outcome=outcome
            )
            if caught_up and (text_removed or _lexemes_drifted(agent_id)):
                full = _words_count(agent_id) >= settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS
                dropped = lexemes_recount(agent_id)
                outcome.words_dropped += len(dropped)
                outcome.recounted.append(agent_id)
                if dropped and full:
                    _words_refill(agent_id=agent_id, deadline=deadline, outcome=outcome)
            if identity.has_vectors:
                _neighbours_key_check(agent_id=agent_id, identity=identity)
                if _words_embed(agent_id=agent_id, identity=identity, deadline=deadline, outcome=outcome):
                    embedded.append(agent_id)
        words_indexes_sync(identity=identity, agent_ids=[agent_id for agent_id, *_ in agents], outcome=outcome)
        # After the indexes: a large agent's lookups use its own (an exact scan of 19,000 words takes ~8 ms).
        for agent_id in embedded:
            if not _words_neighbours(agent_id=agent_id, identity=identity, deadline=deadline, outcome=outcome):
                outcome.finished = False
                break
    return outcome


# One read's lexemes counted: a lexeme already stored gains the chunks of this read that hold it; new ones
# are stored with theirs, the most frequent first, while the agent has room (the row count: those added).
_LEXEMES_COUNT_SQL = f"""
WITH batch AS (SELECT x, n FROM unnest(%(lexemes)s::text[], %(counts)s::int[]) AS b(x, n)),
counted AS (
    UPDATE {LEXEMES} l SET chunks = l.chunks + batch.n FROM batch
    WHERE l.agent_id = %(agent)s AND l.lexeme = batch.x
    RETURNING l.lexeme
)
INSERT INTO {LEXEMES} (agent_id, lexeme, chunks)
SELECT %(agent)s, batch.x, batch.n FROM batch WHERE batch.x NOT IN (SELECT lexeme FROM counted)
ORDER BY batch.n DESC, batch.x LIMIT %(room)s
ON CONFLICT (agent_id, lexeme) DO NOTHING
"""


def _word_lexemes(word: str) -> str:
    """SQL: the rows of a word's lexemes as the keyword index reads the word (``word``: a column), for the
    rule by which words are stored and dropped, and for the plan."""
    return f"unnest(tsvector_to_array(to_tsvector(%(config)s::regconfig, {word})))"


# One read's new words stored, alphabetically while the agent has room: those one of whose lexemes (the
# keyword index's) the read's chunks hold. A word the keyword index reads otherwise ("smart" of "SmartKom",
# one lexeme "smartkom"; a Postgres stop word, no lexeme) would search for nothing as a neighbour. The
# words already stored are left out before the room is counted, so that they take none of it.
_WORDS_STORE_SQL = f"""
INSERT INTO {WORDS} (agent_id, word, embedding_identity)
SELECT %(agent)s, w, '' FROM (
    SELECT DISTINCT q.w FROM unnest(%(words)s::text[]) AS q(w)
    CROSS JOIN LATERAL {_word_lexemes('q.w')} AS y(lexeme)
    JOIN unnest(%(held)s::text[]) AS h(lexeme) ON h.lexeme = y.lexeme
    WHERE NOT EXISTS (SELECT 1 FROM {WORDS} s WHERE s.agent_id = %(agent)s AND s.word = q.w)
) found
ORDER BY w LIMIT %(room)s
ON CONFLICT (agent_id, word) DO NOTHING
"""


def _chunks_read(cursor, *, agent_id: int, after: int, up_to: int | None = None) -> list[tuple]:
    """The agent's next CHUNKS_PER_READ chunks above ``after`` (and at most ``up_to``), by id: (id, text,
    the keyword index's lexemes)."""
    below = "" if up_to is None else "AND id <= %s "
    cursor.execute(
        f"SELECT id, text, tsvector_to_array(search_vector) FROM {CHUNK} WHERE agent_id = %s AND id > %s {below}"
        "ORDER BY id LIMIT %s",
        [agent_id, after, *([] if up_to is None else [up_to]), CHUNKS_PER_READ],
    )
    return cursor.fetchall()


def _words_store(cursor, *, agent_id: int, rows: list[tuple], held, room: int) -> int:
    """Store the new words of these chunks (_WORDS_STORE_SQL) while there is ``room``; returns how many.
    A full agent's chunks are not scanned for words."""
    if not (held and room > 0):
        return 0
    found: set[str] = set()
    for _, text, _ in rows:
        found |= text_words(text)
    if not found:
        return 0
    cursor.execute(
        _WORDS_STORE_SQL,
        {"agent": agent_id, "words": sorted(found), "config": KEYWORD_CONFIG, "held": sorted(held), "room": room},
    )
    return cursor.rowcount


def _words_read(*, agent_id: int, after: int, words: int, lexemes: int, deadline: float, outcome: WordsOutcome) -> bool:
    """Read the agent's chunks above ``after`` (chunk id), CHUNKS_PER_READ at a time, each read committed
    with the new watermark: their new words are stored, and the chunks holding each of their lexemes (the
    keyword index's, from the chunk's search vector) counted (_LEXEMES_COUNT_SQL). Past
    MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS words (or lexemes) no new one is stored; the chunks are still
    read, and the lexemes held still counted. True when every chunk was read, False when time ran out."""
    cap = settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS
    while time.monotonic() < deadline:
        with transaction.atomic(), connection.cursor() as cursor:
            rows = _chunks_read(cursor, agent_id=agent_id, after=after)
            if not rows:
                return True
            held = Counter(lexeme for _, _, chunk_lexemes in rows for lexeme in chunk_lexemes or ())
            added = _words_store(cursor, agent_id=agent_id, rows=rows, held=held, room=cap - words)
            words += added
            outcome.words_added += added
            if held:
                counted = sorted(held)
                cursor.execute(
                    _LEXEMES_COUNT_SQL,
                    {"agent": agent_id, "lexemes": counted, "counts": [held[x] for x in counted], "room": max(0, cap - lexemes)},
                )
                lexemes += cursor.rowcount
            outcome.chunks_read += len(rows)
            after = rows[-1][0]
            cursor.execute(
                f"INSERT INTO {WORDS_STATE} (agent_id, last_chunk_id, words, lexemes, chunks) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (agent_id) DO UPDATE SET last_chunk_id = excluded.last_chunk_id, words = excluded.words, "
                f"lexemes = excluded.lexemes, chunks = {WORDS_STATE}.chunks + excluded.chunks",
                [agent_id, after, words, lexemes, len(rows)],
            )
    return False


def _words_refill(*, agent_id: int, deadline: float, outcome: WordsOutcome) -> None:
    """After a recount dropped words of an agent that had reached MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS: the
    words its reads refused for want of room (in this run, before the drop, or in earlier ones) are read
    again from its chunks up to the watermark, the first chunks first, until the room is full, every chunk
    is read or the run's time is out (the rest then waits for the next drop). Words only: the lexemes were
    just counted. Each read is committed with the state's word count."""
    cap = settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT words, last_chunk_id FROM {WORDS_STATE} WHERE agent_id = %s", [agent_id])
        words, up_to = cursor.fetchone()
    after = 0
    while words < cap and time.monotonic() < deadline:
        with transaction.atomic(), connection.cursor() as cursor:
            rows = _chunks_read(cursor, agent_id=agent_id, after=after, up_to=up_to)
            if not rows:
                return
            held = {lexeme for _, _, chunk_lexemes in rows for lexeme in chunk_lexemes or ()}
            added = _words_store(cursor, agent_id=agent_id, rows=rows, held=held, room=cap - words)
            if added:
                cursor.execute(f"UPDATE {WORDS_STATE} SET words = words + %s WHERE agent_id = %s", [added, agent_id])
            words += added
            outcome.words_added += added
            after = rows[-1][0]


def _words_count(agent_id: int) -> int:
    """The agent's stored words as its state counts them."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce((SELECT words FROM {WORDS_STATE} WHERE agent_id = %s), 0)", [agent_id])
        return cursor.fetchone()[0]


def _lexemes_drifted(agent_id: int) -> bool:
    """Whether the agent's chunks counted (MemoryWordsState.chunks) and its live chunks at or below the
    watermark differ by more than MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT of the live ones: files edited or
    deleted since the counts were made."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.chunks, (SELECT count(*) FROM {CHUNK} c WHERE c.agent_id = %s AND c.id <= s.last_chunk_id) "
            f"FROM {WORDS_STATE} s WHERE s.agent_id = %s",
            [agent_id, agent_id],
        )
        row = cursor.fetchone()
    if row is None:
        return False
    counted, live = row
    return abs(counted - live) > settings.MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT * max(live, 1)


# The agent's lexemes counted again from its live chunks at or below the watermark (those above it are
# counted when they are read), the most frequent MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS kept, the words whose
# text is gone dropped (none of their lexemes in a live chunk: as _WORDS_STORE_SQL stores them), and the
# state's totals set to match: one statement, so the counts, the words and the totals are of the same
# chunks (the words counted are those it keeps). It returns the words dropped. The words' lexemes are a
# CTE of their own, so that the join with the held lexemes is one of two CTE scans, hashed (the planner
# takes a CTE's aggregate for ten rows: joined inside one scan of the words, the held lexemes were read
# once per word, 12 s for 16,574 words).
_LEXEMES_RECOUNT_SQL = f"""
WITH live AS MATERIALIZED (
    SELECT c.search_vector FROM {CHUNK} c
    WHERE c.agent_id = %(agent)s AND c.id <= (SELECT last_chunk_id FROM {WORDS_STATE} WHERE agent_id = %(agent)s)
),
held AS MATERIALIZED (
    SELECT x AS lexeme, count(*) AS n FROM live CROSS JOIN LATERAL unnest(tsvector_to_array(live.search_vector)) AS x
    GROUP BY x
),
stored AS (
    INSERT INTO {LEXEMES} (agent_id, lexeme, chunks)
    SELECT %(agent)s, lexeme, n FROM held ORDER BY n DESC, lexeme LIMIT %(cap)s
    RETURNING 1
),
word_lexemes AS MATERIALIZED (
    SELECT w.id, y.lexeme FROM {WORDS} w
    CROSS JOIN LATERAL {_word_lexemes('w.word')} AS y(lexeme)
    WHERE w.agent_id = %(agent)s
),
kept AS (SELECT DISTINCT wl.id FROM word_lexemes wl JOIN held h ON h.lexeme = wl.lexeme),
gone AS (DELETE FROM {WORDS} w WHERE w.agent_id = %(agent)s AND w.id NOT IN (SELECT id FROM kept) RETURNING w.word)
UPDATE {WORDS_STATE}
SET chunks = (SELECT count(*) FROM live), lexemes = (SELECT count(*) FROM stored),
    words = (SELECT count(*) FROM kept)
WHERE agent_id = %(agent)s
RETURNING (SELECT coalesce(array_agg(word ORDER BY word), '{{}}') FROM gone)
"""


def words_text_removed(*, agent_ids) -> None:
    """Note that files of these agents were deleted (indexing/writes.py, ``files_remove``), or edited so
    that words of their text went (indexing/services.py, ``words_gone``): the next run of the
    ``memory_words`` task counts their lexemes again and drops the words no chunk holds any more, whatever
    the drift. (An append removes no word, and is not noted: a recount at each one would be wasted.) Noted
    once the caller's transaction has committed (at once outside one), so the indexing never waits for this
    task's row of the agent; lost if the process dies in between, the words then go at the next recount the
    drift brings, as before."""
    ids = list(agent_ids)

    def note() -> None:  # after the caller's commit: a failure here must not fail its answer or its job
        try:
            MemoryWordsState.objects.filter(agent_id__in=ids, text_removed=False).update(text_removed=True)
        except DatabaseError as exc:
            logger.warning("deleted text of agents %s not noted for their memory words: %s", ids, exc)

    transaction.on_commit(note)


def lexemes_recount(agent_id: int) -> list[str]:
    """Count the agent's lexemes again from its live chunks and drop the words whose text is gone
    (_LEXEMES_RECOUNT_SQL), in one transaction: a search reads the old counts and words or the new ones,
    never a mix. The words whose worked-out neighbours named a word dropped are listed again by the same
    run (memory_words_sync). Runs under memory_words_sync's lock. Returns the words dropped."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Cleared before the chunks are read: text removed while this runs sets it again, for the next run.
        cursor.execute(f"UPDATE {WORDS_STATE} SET text_removed = false WHERE agent_id = %s AND text_removed", [agent_id])
        cursor.execute(f"DELETE FROM {LEXEMES} WHERE agent_id = %s", [agent_id])
        cursor.execute(
            _LEXEMES_RECOUNT_SQL,
            {"agent": agent_id, "cap": settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS, "config": KEYWORD_CONFIG},
        )
        row = cursor.fetchone()
        dropped = list(row[0]) if row else []
        if dropped:
            cursor.execute(
                f"UPDATE {WORDS} SET neighbours = NULL WHERE agent_id = %s AND neighbours && %s::varchar[]",
                [agent_id, dropped],
            )
    return dropped


def _words_embed(*, agent_id: int, identity, deadline: float, outcome: WordsOutcome) -> bool:
    """Embed the agent's words without a vector of ``identity``, WORDS_PER_REQUEST per request, each
    request's vectors stored as it returns, and the worked-out neighbours of the words near them dropped
    (_NEIGHBOURS_NEAR_SQL). A provider failure stops this agent's words for this run. True when every word
    has its vector."""
    from indexing.embeddings import get_provider

    provider = get_provider()
    if provider is None:
        return False
    words = MemoryWord.objects.filter(agent_id=agent_id)  # by agent: one partition of the words table
    while time.monotonic() < deadline:
        todo = list(words.exclude(embedding_identity=identity.key).order_by("id").values_list("id", "word")[:WORDS_PER_REQUEST])
        if not todo:
            return True
        try:
            vectors = provider.embed_documents([word for _, word in todo])
        except Exception as exc:  # the next run tries again; searches meanwhile expand with fewer words
            logger.warning("memory words of agent %d not embedded: %s", agent_id, exc)
            outcome.errors[agent_id] = f"{exc.__class__.__name__}: {exc}"
            return False
        rows = [
            MemoryWord(id=pk, embedding=vector, embedding_identity=identity.key, neighbours=None)
            for (pk, _), vector in zip(todo, vectors)
            if vector is not None and len(vector) == identity.dimensions and all(map(math.isfinite, vector))
        ]
        with transaction.atomic():
            if len(rows) < len(todo):  # a word the provider would not embed is not asked again
                done = {row.id for row in rows}
                words.filter(pk__in=[pk for pk, _ in todo if pk not in done]).delete()
            words.bulk_update(rows, ["embedding", "embedding_identity", "neighbours"])
            if rows:
                with connection.cursor() as cursor:
                    cursor.execute(
                        _NEIGHBOURS_NEAR_SQL.format(words=WORDS, dims=int(identity.dimensions)),
                        {"agent": agent_id, "ids": [row.id for row in rows], "identity": identity.key,
                         "farthest": 1 - settings.MEMORYHUB_SEARCH_EXPANSION_MIN_SIMILARITY},
                    )
        outcome.words_embedded += len(rows)
    return False


# The agent's words whose neighbours were worked out and that stand near one of the words just embedded
# (``ids``): the new word may be one of their nearest now, so theirs are worked out again. Each pair of the
# new words and the worked-out ones is compared (exactly): a few hundred new words against the agent's
# 20,000 at most, the usual run adding a handful.
_NEIGHBOURS_NEAR_SQL = """
UPDATE {words} w SET neighbours = NULL
WHERE w.agent_id = %(agent)s AND w.neighbours IS NOT NULL AND w.embedding_identity = %(identity)s
  AND EXISTS (
    SELECT 1 FROM {words} n
    WHERE n.agent_id = %(agent)s AND n.id = ANY(%(ids)s::bigint[]) AND n.id <> w.id
      AND (n.embedding::vector({dims}) <=> w.embedding::vector({dims})) <= %(farthest)s
  )
"""


def neighbours_key(identity_key: str) -> str:
    """What a word's worked-out neighbours depend on: the model, how many are kept and how near."""
    return (
        f"{identity_key}|{settings.MEMORYHUB_SEARCH_EXPANSION_NEIGHBOURS}"
        f"|{settings.MEMORYHUB_SEARCH_EXPANSION_MIN_SIMILARITY}"
    )


def _neighbours_key_check(*, agent_id: int, identity) -> None:
    """Drop the agent's worked-out neighbours when they were worked out with another model or settings
    (MemoryWordsState.neighbours_key), so that they are worked out again."""
    key = neighbours_key(identity.key)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {WORDS_STATE} SET neighbours_key = %s WHERE agent_id = %s AND neighbours_key <> %s", [key, agent_id, key]
        )
        if cursor.rowcount:
            cursor.execute(f"UPDATE {WORDS} SET neighbours = NULL WHERE agent_id = %s AND neighbours IS NOT NULL", [agent_id])


# Words whose neighbours are worked out per lookup statement.
WORDS_PER_LOOKUP = 128


def _words_neighbours(*, agent_id: int, identity, deadline: float, outcome: WordsOutcome) -> bool:
    """Work out the nearest words of each of the agent's embedded words that has none yet, with the lookup
    a search makes (``nearest_words``), WORDS_PER_LOOKUP at a time, each batch stored as it is done: a
    search then reads them (_PLAN_SQL) instead of looking them up. An empty list: no word near enough.
    True when every word has its list, False when time ran out."""
    # By agent: one partition of the words table (bulk_update keeps the filter, as in _words_embed).
    words = MemoryWord.objects.filter(agent_id=agent_id, embedding_identity=identity.key, neighbours__isnull=True)
    while time.monotonic() < deadline:
        todo = list(words.order_by("id").values_list("id", "word")[:WORDS_PER_LOOKUP])
        if not todo:
            return True
        near = nearest_words(
            agent_id=agent_id, identity_key=identity.key, dimensions=identity.dimensions, words=[word for _, word in todo]
        )
        words.bulk_update([MemoryWord(id=pk, neighbours=near.get(word, [])) for pk, word in todo], ["neighbours"])
        outcome.neighbours_found += len(todo)
    return False


def memory_words_counts(*, agent_id: int, identity_key: str) -> dict[str, int]:
    """GET status's ``memory_words``: the agent's words, and how many have a vector of ``identity_key``
    (none without a model: an unembedded word's identity is blank too)."""
    from django.db.models import Count, Q

    embedded = Q(embedding_identity=identity_key) & ~Q(embedding_identity="")
    return MemoryWord.objects.filter(agent_id=agent_id).aggregate(words=Count("id"), embedded=Count("id", filter=embedded))


# --- Per-agent HNSW indexes of the words -------------------------------------------------------------

WORD_INDEX_PATTERN = re.compile(r"^word_hnsw_a(\d+)_([0-9a-f]{8})$")


def word_index_name(*, agent_id: int, identity_key: str) -> str:
    """``word_hnsw_a<agent id>_<identity digest>``: one index per agent and model."""
    return f"word_hnsw_a{int(agent_id)}_{hashlib.sha256(identity_key.encode()).hexdigest()[:8]}"


def words_indexes_sync(*, identity, agent_ids: list[int], outcome: WordsOutcome) -> None:
    """The partial HNSW indexes of the words (built CONCURRENTLY outside a transaction, on the agent's
    partition of the words table, so that the planner of a statement naming the agent weighs only the
    indexes of the agents sharing it): each agent of ``agent_ids`` (those this run worked on) with at
    least MEMORYHUB_SEARCH_EXPANSION_HNSW_MIN_WORDS words embedded with ``identity`` gets one, and its
    index of another model goes. Every index of an agent being deleted or gone is dropped, and an invalid
    one (an interrupted build) is built again. Runs under memory_words_sync's lock."""
    from indexing.partitions import agent_table, table_and_partitions
    from search.ddl import concurrently_clause
    from search.vector_index import HNSW_MAX_DIMENSIONS  # larger vectors are scanned exactly

    concurrently = concurrently_clause()
    with connection.cursor() as cursor:
        cursor.execute(  # on the words table, or on its partitions (search/migrations/0006)
            "SELECT c.relname, i.indisvalid AND i.indisready FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            f"WHERE i.indrelid IN ({table_and_partitions(WORDS)})"
        )
        existing = {
            name: (int(match[1]), valid) for name, valid in cursor.fetchall() if (match := WORD_INDEX_PATTERN.match(name))
        }
        cursor.execute(
            f"SELECT id FROM {AGENT} WHERE deletion_requested_at IS NULL AND id = ANY(%s)",
            [sorted({agent_id for agent_id, _ in existing.values()})],
        )
        live = {row[0] for row in cursor.fetchall()}
        todo = set(agent_ids) | {agent_id for agent_id, valid in existing.values() if not valid and agent_id in live}
        for name, (agent_id, valid) in existing.items():
            if agent_id not in live or not valid or (agent_id in todo and name != word_index_name(agent_id=agent_id, identity_key=identity.key)):
                cursor.execute(f'DROP INDEX{concurrently} IF EXISTS "{name}"')
                outcome.indexes_dropped.append(name)
        if not identity.has_vectors or identity.dimensions > HNSW_MAX_DIMENSIONS:
            return
        for agent_id in sorted(todo):
            cursor.execute(
                f"SELECT count(*) FROM {WORDS} WHERE agent_id = %s AND embedding_identity = %s", [agent_id, identity.key]
            )
            name = word_index_name(agent_id=agent_id, identity_key=identity.key)
            if cursor.fetchone()[0] < settings.MEMORYHUB_SEARCH_EXPANSION_HNSW_MIN_WORDS or existing.get(name, (0, False))[1]:
                continue
            cursor.execute(
                f'CREATE INDEX{concurrently} IF NOT EXISTS "{name}" ON {agent_table(table=WORDS, agent_id=agent_id)} '
                f"USING hnsw ((embedding::vector({int(identity.dimensions)})) vector_cosine_ops) "
                f"WHERE agent_id = {int(agent_id)} AND embedding_identity = {_sql_string(identity.key)}"
            )
            outcome.indexes_created.append(name)


# --- At search -------------------------------------------------------------------------------------


# Each question word's nearest memory words: the agent's words of this identity in order of distance,
# a few more than wanted (the word itself and its own forms are left out afterwards). A question word comes
# with its vector (embedded with the query) or without (null): the memory's own vector of it is read here,
# never sent back and forth. Agent and identity are literals and the order is over embedding::vector(D):
# an agent with at least MEMORYHUB_SEARCH_EXPANSION_HNSW_MIN_WORDS words has a partial HNSW index of its
# own on exactly that (words_index_sync), which the planner then uses; below it, the scan is exact (a few
# milliseconds).
_NEAREST_SQL = """
SELECT q.i, n.word, n.distance
FROM unnest(%s::text[], %s::vector[]) WITH ORDINALITY AS q(w, v, i)
CROSS JOIN LATERAL (
    SELECT coalesce(q.v, (SELECT m.embedding FROM {words} m
                          WHERE m.agent_id = {agent} AND m.word = q.w AND m.embedding_identity = {identity})) AS v
) e
CROSS JOIN LATERAL (
    SELECT w.word, w.embedding::vector({dims}) <=> e.v::vector({dims}) AS distance
    FROM {words} w
    WHERE w.agent_id = {agent} AND w.embedding_identity = {identity}
    ORDER BY w.embedding::vector({dims}) <=> e.v::vector({dims})
    LIMIT %s
) n
WHERE e.v IS NOT NULL
"""
# With the index, stale statistics must not turn the lookup into a sort of all the agent's words (as in
# search/vector.py); without it there is no other plan. Local to the statement's transaction.
_NEAREST_SETTINGS = "SELECT set_config('enable_sort', 'off', true)"
# Words looked at per question word beyond the ones wanted: room for the word itself and its own forms.
NEAREST_SLACK = 8


def nearest_words(
    *, agent_id: int, identity_key: str, dimensions: int, words: list[str], vectors: dict[str, list[float]] | None = None
) -> dict[str, list[str]]:
    """Each of ``words`` → the agent's words nearest to it (at most MEMORYHUB_SEARCH_EXPANSION_NEIGHBOURS,
    cosine at least MEMORYHUB_SEARCH_EXPANSION_MIN_SIMILARITY, not the word itself nor one sharing its first
    SAME_STEM_CHARS letters), nearest first; words with none are left out. A word's vector is its entry in
    ``vectors``, else the memory's own (a word with neither has no neighbours)."""
    if not words:
        return {}
    from search.vector import rows_with_settings, vector_literal

    vectors = vectors or {}
    k = settings.MEMORYHUB_SEARCH_EXPANSION_NEIGHBOURS
    farthest = 1 - settings.MEMORYHUB_SEARCH_EXPANSION_MIN_SIMILARITY
    sql = _NEAREST_SQL.format(
        dims=int(dimensions), words=WORDS, agent=int(agent_id), identity=_sql_string(identity_key),
    )
    given = [vector_literal(vectors[word]) if word in vectors else None for word in words]
    rows = rows_with_settings(setting=_NEAREST_SETTINGS, setting_params=[], sql=sql, params=[words, given, k + NEAREST_SLACK])
    found: dict[str, list[str]] = {}
    for i, word, distance in sorted(rows, key=lambda row: (row[0], row[2], row[1])):
        question_word = words[i - 1]
        near = found.setdefault(question_word, [])
        if distance <= farthest and len(near) < k and word != question_word and word[:SAME_STEM_CHARS] != question_word[:SAME_STEM_CHARS]:
            near.append(word)
    return {word: near for word, near in found.items() if near}


def _sql_string(value: str) -> str:
    """``value`` as an SQL string literal (a partial index's predicate is matched against literals only)."""
    return "'" + value.replace("'", "''") + "'"


@dataclass
class ExpansionPlan:
    """A question's rare words, rarest first: those the memory holds a vector of (the lookup reads it
    there), the nearest words of those whose neighbours the memory has worked out already (no lookup for
    them), and the vectors of the others once they are embedded with the query."""

    words: list[str]
    held: frozenset[str]
    known: dict[str, list[str]] = field(default_factory=dict)
    vectors: dict[str, list[float]] = field(default_factory=dict)
    chunks: int = 0  # the agent's chunks counted
    known_lexemes: dict[str, list[str]] = field(default_factory=dict)  # the lexemes of each word's known neighbours

    @property
    def searched(self) -> dict[str, list[str]] | None:
        """Each rare word → its neighbours, when all of them are worked out already (nothing to embed or
        look up) and some word has neighbours; else None."""
        if any(word not in self.known for word in self.words):
            return None
        return {word: self.known[word] for word in self.words if self.known[word]} or None

    @property
    def searched_lexemes(self) -> list[str]:
        """The lexemes of the ``searched`` neighbours, each once, in order (the keyword half searches them)."""
        return list(dict.fromkeys(lexeme for word in self.words for lexeme in self.known_lexemes.get(word, ())))

    @property
    def to_embed(self) -> tuple[str, ...]:
        return tuple(word for word in self.words if word not in self.held and word not in self.vectors)

    @property
    def to_look_up(self) -> list[str]:
        return [word for word in self.words if word not in self.known]


# Each content word of a question: its lexeme (a word the keyword configuration drops has none and is not
# returned), the agent's chunks read and how many hold the lexeme (null: none), whether the memory holds a
# vector of the word of the configured model, and its nearest words when they were worked out with the
# settings of now (null: not worked out), with their lexemes.
_PLAN_SQL = f"""
SELECT q.i, q.w, x.lexeme, s.chunks AS counted, l.chunks AS holding, m.id IS NOT NULL AS held,
       CASE WHEN s.neighbours_key = %(key)s THEN m.neighbours END AS neighbours,
       CASE WHEN s.neighbours_key = %(key)s THEN array(
           SELECT y.lexeme FROM unnest(m.neighbours) WITH ORDINALITY AS n(w, k)
           CROSS JOIN LATERAL {_word_lexemes('n.w')} AS y(lexeme)
           ORDER BY n.k, y.lexeme
       ) END AS neighbour_lexemes
FROM unnest(%(words)s::text[]) WITH ORDINALITY AS q(w, i)
CROSS JOIN LATERAL {_word_lexemes('q.w')} AS x(lexeme)
JOIN {WORDS_STATE} s ON s.agent_id = %(agent)s
LEFT JOIN {LEXEMES} l ON l.agent_id = %(agent)s AND l.lexeme = x.lexeme
LEFT JOIN {WORDS} m ON m.agent_id = %(agent)s AND m.word = q.w AND m.embedding_identity = %(identity)s
ORDER BY q.i
"""

# The same rows as one JSON value (a list of lists, in the same order; null: none), for a statement that
# reads the plan with other things: the search's checks read it in their round trip (search/services.py).
PLAN_JSON_SQL = f"""(SELECT json_agg(json_build_array(
    r.i, r.w, r.lexeme, r.counted, r.holding, r.held, r.neighbours, r.neighbour_lexemes) ORDER BY r.i)
 FROM ({_PLAN_SQL}) r)"""


def plan_params(*, agent_id: int, identity_key: str, words: list[str]) -> dict:
    """The parameters of _PLAN_SQL (and PLAN_JSON_SQL) for the question words ``words``."""
    return {
        "words": words, "config": KEYWORD_CONFIG, "agent": agent_id, "identity": identity_key,
        "key": neighbours_key(identity_key),
    }


def expansion_plan(*, agent_id: int, identity_key: str, query: str) -> ExpansionPlan | None:
    """The words of ``query`` to expand (see the module docstring), or None: its content words (at most
    MAX_EXPANDED_WORDS, one statement, _PLAN_SQL) whose lexeme has a BM25 IDF of at least
    MEMORYHUB_SEARCH_EXPANSION_MIN_IDF in the agent's chunks read, or stands in none of them, the rarest
    MEMORYHUB_SEARCH_EXPANSION_MAX_EXPANDED (``plan_from_rows``). The search reads the same rows with its
    checks instead (PLAN_JSON_SQL)."""
    words = expansion_words(query)
    if not words:
        return None
    with read_connection.cursor() as cursor:  # where the search reads: a replica or the primary
        cursor.execute(_PLAN_SQL, plan_params(agent_id=agent_id, identity_key=identity_key, words=words))
        return plan_from_rows(cursor.fetchall())


def plan_from_rows(rows) -> ExpansionPlan | None:
    """The plan of _PLAN_SQL's rows (see expansion_plan). A word without a vector in the memory is left out
    when MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS is off. Nothing is expanded before the agent's chunks are
    read."""
    floor = settings.MEMORYHUB_SEARCH_EXPANSION_MIN_IDF
    absent_too = settings.MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS
    rarity: dict[str, float] = {}
    held: set[str] = set()
    counted = 0
    known: dict[str, list[str]] = {}
    known_lexemes: dict[str, list[str]] = {}
    for _, word, _, total, chunks, has_vector, neighbours, neighbour_lexemes in rows or ():
        if not total or (not has_vector and not absent_too):
            continue
        counted = total
        rarity[word] = max(rarity.get(word, 0.0), bm25_idf(n=total, df=chunks) if chunks else math.inf)
        if has_vector:
            held.add(word)
        if neighbours is not None:
            known[word], known_lexemes[word] = neighbours, neighbour_lexemes
    rare = [word for word in rarity if rarity[word] >= floor]
    rare = sorted(rare, key=lambda word: -rarity[word])[: settings.MEMORYHUB_SEARCH_EXPANSION_MAX_EXPANDED]
    if not rare or all(word in known and not known[word] for word in rare):
        return None  # nothing rare, or no rare word has a word near enough: nothing to search for
    return ExpansionPlan(
        words=rare, held=frozenset(held & set(rare)), known={word: known[word] for word in rare if word in known},
        chunks=counted, known_lexemes={word: known_lexemes[word] for word in rare if word in known},
    )


def expansion_query(
    *, agent_id: int, identity_key: str, dimensions: int, plan: ExpansionPlan, filters: SearchFilters, limit: int
) -> KeywordResult:
    """The second keyword query: the memory's words nearest to each of the plan's rare words (worked out
    already, or looked up now for a word held by the memory or embedded by now), searched together; its
    ``expansion`` says which word brought which. No hits when no word has a neighbour. Needs nothing of
    the keyword half, so it runs beside it; the caller runs it under the search's deadline and merges it
    with ``lifted``."""
    looked_up = nearest_words(
        agent_id=agent_id, identity_key=identity_key, dimensions=dimensions, words=plan.to_look_up, vectors=plan.vectors
    )
    neighbours = {word: plan.known.get(word) or looked_up.get(word) for word in plan.words}
    neighbours = {word: found for word, found in neighbours.items() if found}
    extra = list(dict.fromkeys(word for found in neighbours.values() for word in found))
    if not extra:
        return KeywordResult(hits=[], lexemes=[], idf={})
    second = keyword_candidates(agent_id=agent_id, query=" ".join(extra), filters=filters, limit=limit)
    return replace(second, expansion=neighbours)


def lifted(first: KeywordResult, second: KeywordResult, *, weight: float, limit: int | None = None) -> KeywordResult:
    """The hits of ``first`` with ``weight`` times their score in ``second`` added (hits only in ``second``
    join with that alone), scaled so the best scores 1; each hit keeps the part ``second`` gave it
    (``expansion_score``, on the same scale) for ``explain``, and its BM25 in ``first`` (0 when only
    ``second`` found it). The best ``limit`` of the two results' hits (the search's pool: no more than the
    keyword half gives alone; all of them when None). The query's lexemes and IDFs stay ``first``'s
    (snippets pick the lines of the question's own words); its ``expansion`` is ``second``'s.
    keyword_candidates(also=...) gives the same in one statement."""
    scores = {hit.chunk_id: hit.score for hit in first.hits}
    added = {hit.chunk_id: weight * hit.score for hit in second.hits}
    where = {hit.chunk_id: hit for hit in [*second.hits, *first.hits]}
    own = {hit.chunk_id: hit.bm25 for hit in first.hits}  # the question's own BM25 (0: found by the words alone)
    for chunk_id, extra in added.items():
        scores[chunk_id] = scores.get(chunk_id, 0.0) + extra
    best = max(scores.values(), default=1.0) or 1.0
    hits = [
        KeywordHit(
            chunk_id=chunk_id, score=score / best, bm25=own.get(chunk_id, 0.0), file_id=where[chunk_id].file_id,
            start_line=where[chunk_id].start_line, end_line=where[chunk_id].end_line,
            expansion_score=added[chunk_id] / best if chunk_id in added else None,
        )
        for chunk_id, score in sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
    ]
    return KeywordResult(hits=hits, lexemes=first.lexemes, idf=first.idf, exact=first.exact, expansion=second.expansion)
