"""memory_search: the one entry point every caller uses (REST API, tools, MCP, admin playground).

query → validate → a question's rare words and their neighbours read off the memory's words
(search/expansion.py) → embed the query (LRU-cached; the rare words the memory lacks with it) → vector
and keyword candidates of this agent only, a pool wider than max_results, the keyword half lifted by the
memory's words nearest to the rare ones (searched in its own scoring statement for a small agent whose
words' neighbours are worked out, else by a second keyword query beside the halves) → fuse
(search/fusion.py) → optional recency boost → a question's named dates (search/dates.py) → min_score →
a long query's results spread over what it talks about → overlapping hits of one file deferred →
snippets (search/snippets.py) until max_results.

Bounds (search/deadline.py, search/query_breaker.py): every query runs under a statement timeout within
the search's deadline, the query embedding has a short time limit of its own behind a circuit breaker,
and snippet work is bounded by the snippet budget; a half that runs out of time is left out (the message
says so), and a search that found nothing in time answers 503.

Score scale (0..1, see fusion.py): with the default weighted fusion, 0.5 × cosine similarity +
0.5 × keyword score (BM25 scaled so the query's best keyword hit is 1). The best exact keyword hit with
no vector support scores 0.5, so the default min_score of 0.1 never drops it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import date, datetime, timezone as dt_timezone
from typing import NamedTuple

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from agents.models import Agent
from indexing.embedding_cache import cache_scope
from indexing.embedding_identity import EmbeddingIdentity, configured_identity
from indexing.models import Chunk, MemoryFile
from indexing.tables import CHUNK, FILE
from memoryhub import metrics
from memoryhub.domain import InvalidInput
from memoryhub.replicas import current_read_alias, read_connection, replica_failed, replica_reads, search_read_alias
from search.beside import run_beside
from search.fusion import (
    Candidate, diversified, fuse, keyword_only, keyword_scored_without_vectors, neighbour_credit, overlaps_deferred,
    stretch_runs,
)
from search.dates import file_day, in_spans, path_day, query_spans
from search.deadline import SearchDeadline, SearchTimedOut, SearchUnavailable
from search.expansion import PLAN_JSON_SQL, WORDS, expansion_query, expansion_words, lifted, plan_from_rows, plan_params
from search.keyword import KeywordResult, keyword_candidates, lines_lexemes, query_lexemes
from search.query_breaker import BreakerOpen, embed_query_bounded
from search.rerank import candidates_reranked, rerank_enabled
from search.snippets import FileLines, line_scores, snippet_build
from search.types import SearchFilters, SearchResponse, SearchResult
from search.vector import pairwise_similarity, vector_candidates
from search.vector_index import USABLE_INDEX_SQL, agent_vector_index_name
from memoryhub.usage.services import search_record

logger = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "keyword")
MAX_QUERY_CHARS = 10_000
# An answer whose snippets have left less room than this ends there (MEMORYHUB_SEARCH_SNIPPET_CHARS's minimum).
MIN_SNIPPET_CHARS = 80
_TIMED_OUT = "The search did not finish in time (the database is slow or busy). Try again."


def _bad_request(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_request")


# --- Query embeddings, cached -------------------------------------------------------------------

_query_cache: OrderedDict[tuple[str, int, str, tuple[str, ...]], list[list[float]]] = OrderedDict()
_query_cache_lock = threading.Lock()


def query_embedding(
    *, provider, text: str, agent_id: int, timeout: float | None = None, words: tuple[str, ...] = ()
) -> list[list[float]]:
    """The provider's vectors for a query: one, or one per window of a query longer than the model
    reads (search/query_windows.py); then one per word of ``words`` (keyword expansion's: they ride in the
    same request, search/expansion.py). The last MEMORYHUB_SEARCH_QUERY_CACHE_SIZE queries are kept
    (agents repeat questions, and an embedding call costs far more than the search itself), each in
    the asking agent's part of the cache as the embedding cache is (MEMORYHUB_EMBEDDING_CACHE_SCOPE): a
    search answered faster, and its ``took_ms``, must not tell an agent what another agent asked. The
    call is bounded in time and guarded by the circuit breaker (search/query_breaker.py)."""
    size = settings.MEMORYHUB_SEARCH_QUERY_CACHE_SIZE
    key = (provider.identity.key, cache_scope(agent_id), text, words)
    with _query_cache_lock:
        vector = _query_cache.get(key)
        if vector is not None:
            _query_cache.move_to_end(key)
            metrics.embedding_cache_hits(kind="query", hits=1)
            return vector
    if timeout is None:
        timeout = settings.MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT
    try:
        vector = embed_query_bounded(provider=provider, text=text, timeout=timeout, words=words)  # one per window, word
    except BreakerOpen:
        raise  # the provider was not called
    except Exception:
        metrics.embedding_observe(kind="query", inputs=1, error=True)
        raise
    metrics.embedding_observe(kind="query", inputs=1)
    if size > 0:
        with _query_cache_lock:
            _query_cache[key] = vector
            while len(_query_cache) > size:
                _query_cache.popitem(last=False)
    return vector


def query_cache_clear() -> None:
    with _query_cache_lock:
        _query_cache.clear()


# --- Input --------------------------------------------------------------------------------------


def _clean_query(query) -> str:
    if not isinstance(query, str):
        raise _bad_request("query must be a string.")
    # NUL cannot reach Postgres and lone surrogates cannot be encoded: neither carries meaning.
    query = query.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
    if not query.strip():
        raise _bad_request("query must not be empty.")
    if len(query) > MAX_QUERY_CHARS:
        raise _bad_request(f"query is longer than {MAX_QUERY_CHARS} characters ({len(query)}).")
    return query.strip()


def _check_number(name: str, value, *, low, high, integer: bool):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise _bad_request(f"{name} must be {'a whole number' if integer else 'a number'}.")
    if value != value or not low <= value <= high:  # NaN fails both comparisons
        raise _bad_request(f"{name} must be between {low} and {high}.")
    return value


def _check_filters(filters: SearchFilters) -> None:
    unknown = [s for s in filters.sources if s not in MemoryFile.Source.values]
    if unknown:
        raise _bad_request(f"Unknown source(s) {', '.join(map(repr, unknown))}; use {', '.join(MemoryFile.Source.values)}.")
    if "\x00" in filters.path_prefix:
        raise _bad_request("path_prefix must not contain NUL.")
    since, until = filters.modified_since, filters.modified_until
    if since is not None and until is not None and since > until:
        raise _bad_request("modified_since is after modified_until.")


# --- Recency ------------------------------------------------------------------------------------


def recency_factor(path: str, *, today: date, boost: float, half_life_days: float) -> float:
    """Multiplier for a dated memory file (memory/YYYY-MM-DD.md): 1 for today, falling towards
    1 - boost with the file's age (half-life in days). Undated files (MEMORY.md, topics) are evergreen: 1."""
    if boost <= 0:
        return 1.0
    day = path_day(path)
    if day is None:
        return 1.0
    age = max(0, (today - day).days)
    return (1 - boost) + boost * 0.5 ** (age / half_life_days)


# --- The search ---------------------------------------------------------------------------------


# These run on every search: plain SQL, since building the ORM query costs as much as running it, and
# one statement when the search reads the primary (no replica): a round trip less per search.

_HAS_VECTORS_SQL = (
    f"EXISTS (SELECT 1 FROM {CHUNK} WHERE agent_id = %(agent)s AND embedding_identity = %(identity)s "
    "AND embedding IS NOT NULL)"
)
# The files not indexed yet, those of them whose chunks are in already (their vectors are not), and whether
# a failed file's chunks are in (some may never get a vector: a provider that refused a text). Only the
# pending files are counted: a search need not read every failed file of its agent.
_PENDING_SQL = (
    f"SELECT count(*), count(*) FILTER (WHERE indexed_hash = content_hash), EXISTS (SELECT 1 FROM {FILE} "
    "WHERE agent_id = %(agent)s AND state = %(failed)s AND indexed_hash = content_hash) "
    f"FROM {FILE} WHERE agent_id = %(agent)s AND state = ANY(%(states)s)"
)
_PENDING_PARAMS = {
    "states": [MemoryFile.State.PENDING.value, MemoryFile.State.INDEXING.value],
    "failed": MemoryFile.State.FAILED.value,
}


# The agent's HNSW index for the query's dimensions (search/vector.py's plan), read with its vectors: the
# vector half then sends its query alone.
_HAS_INDEX_SQL = f"EXISTS (SELECT 1 {USABLE_INDEX_SQL})"
# Whether the agent has words embedded for keyword expansion (search/expansion.py): without them the
# question's words are not embedded.
_HAS_WORDS_SQL = f"EXISTS (SELECT 1 FROM {WORDS} WHERE agent_id = %(agent)s AND embedding_identity = %(identity)s)"
_VECTOR_CHECKS_SQL = f"{_HAS_VECTORS_SQL}, {_HAS_INDEX_SQL}, {_HAS_WORDS_SQL}"


def _agent_has_vectors(*, agent: Agent, identity: EmbeddingIdentity, plan_words: list[str] | None = None) -> tuple:
    """(whether the agent has vectors of ``identity``, whether it has an HNSW index for them, whether it has
    words embedded with it, keyword expansion's plan rows for ``plan_words`` or None)."""
    columns, params = _vector_checks(agent=agent, identity=identity, plan_words=plan_words)
    with read_connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns}", params)
        return tuple(cursor.fetchone())


def _vector_checks(*, agent: Agent, identity: EmbeddingIdentity, plan_words: list[str] | None) -> tuple[str, dict]:
    """The vector checks' four columns (the last: the plan's rows as JSON for ``plan_words``, or NULL) and
    their parameters."""
    index = agent_vector_index_name(agent_id=agent.pk, dimensions=identity.dimensions or 0)
    params = {"agent": agent.pk, "identity": identity.key, "index": index}
    if not plan_words:
        return f"{_VECTOR_CHECKS_SQL}, NULL", params
    return f"{_VECTOR_CHECKS_SQL}, {PLAN_JSON_SQL}", params | plan_params(
        agent_id=agent.pk, identity_key=identity.key, words=plan_words
    )


def _pending_files(*, agent: Agent) -> tuple[int, int, bool]:
    """(files not indexed yet, how many of them keyword search finds already: their chunks are in,
    their vectors are not — see indexing.services.files_index —, whether a failed file's chunks are in). Read
    on the primary even when the search reads a replica: a file stored a moment ago is counted, not
    missed (read-your-writes)."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(_PENDING_SQL, {"agent": agent.pk, **_PENDING_PARAMS})
        return cursor.fetchone()


class SearchChecks(NamedTuple):
    """What a search reads before its halves (_search_checks)."""

    pending: int  # the agent's files waiting to be indexed
    awaiting_vectors: int  # of which keyword search finds already (their vectors are still to come)
    failed_with_chunks: bool  # a failed file keyword search finds (its chunks may lack vectors)
    has_vectors: bool  # the agent has vectors of the configured identity (asked for vectors only)
    has_index: bool  # ... and an HNSW index for them
    has_words: bool  # ... and memory words embedded with it (keyword expansion)
    plan_rows: list | None  # keyword expansion's plan rows for the question's words, else None


def _search_checks(
    *, agent: Agent, identity: EmbeddingIdentity, want_vectors: bool, deadline: SearchDeadline,
    plan_words: list[str] | None = None,
) -> SearchChecks:
    """The search's checks: the pending files, and when ``want_vectors`` the agent's vectors, index and
    words, with the plan rows when there are ``plan_words``. _pending_files on the primary and
    _agent_has_vectors where the search reads, in one statement when both are one."""
    if current_read_alias() == DEFAULT_DB_ALIAS:
        if want_vectors:
            columns, params = _vector_checks(agent=agent, identity=identity, plan_words=plan_words)
        else:
            columns, params = "false, false, false, NULL", {"agent": agent.pk}
        with deadline.queries():
            with read_connection.cursor() as cursor:
                cursor.execute(f"SELECT p.*, {columns} FROM ({_PENDING_SQL}) p", {**_PENDING_PARAMS, **params})
                return SearchChecks(*cursor.fetchone())
    with deadline.queries(using=DEFAULT_DB_ALIAS):
        pending, awaiting_vectors, failed_with_chunks = _pending_files(agent=agent)
    has_vectors = has_index = has_words = False
    plan_rows = None
    if want_vectors:
        with deadline.queries():
            has_vectors, has_index, has_words, plan_rows = _agent_has_vectors(
                agent=agent, identity=identity, plan_words=plan_words
            )
    return SearchChecks(pending, awaiting_vectors, failed_with_chunks, has_vectors, has_index, has_words, plan_rows)


def _batches_in_flight(*, agent: Agent, deadline: SearchDeadline) -> bool:
    """Whether the agent's files wait on the embedding provider's batch; False when the search has no time
    left to ask (the note then leaves the batch out)."""
    from indexing.embedding_batches import batches_in_flight

    try:
        with deadline.queries():
            return batches_in_flight(agent_id=agent.pk).exists()
    except SearchTimedOut:
        return False


def memory_search(
    *,
    agent: Agent,
    query: str,
    max_results: int | None = None,
    min_score: float | None = None,
    mode: str | None = None,
    filters: SearchFilters | None = None,
    explain: bool = False,
    scope: str | list[str] | None = None,
) -> SearchResponse:
    """Search one agent's memory, or with ``scope`` ("shared", or a list of memory names) its own and the
    memories granted to it. Raises InvalidInput for bad input, SearchUnavailable (Busy) when nothing was
    found before the deadline; see the module docstring."""
    if scope not in (None, "own"):
        return _memory_search_shared(
            agent=agent, query=query, max_results=max_results, min_score=min_score, mode=mode, filters=filters,
            explain=explain, scope=scope,
        )
    with SearchDeadline() as deadline:
        response = _memory_search_routed(
            agent=agent, query=query, max_results=max_results, min_score=min_score, mode=mode, filters=filters,
            explain=explain, deadline=deadline,
        )
        # Usage bookkeeping: one small row, recorded even when the deadline has passed (slow searches are
        # the ones worth seeing; in autocommit it is buffered and written after the answer, see
        # memoryhub/usage/services.py); a failure to write it never fails the search.
        with deadline.bookkeeping():
            search_record(agent_id=agent.pk, mode=response.mode, results=len(response.results), took_ms=response.took_ms)
    return response


def _memory_search_routed(*, deadline: SearchDeadline, **search) -> SearchResponse:
    """The search on a read replica when one is fit (memoryhub/replicas.py), else on the primary. A
    replica that fails during the search (gone, restarted, a query cancelled by its recovery) is set
    aside and the search runs again on the primary, within the same deadline: the caller never sees it."""
    # Inside a caller's transaction on the primary, the search must see what that transaction wrote.
    alias = DEFAULT_DB_ALIAS if connections[DEFAULT_DB_ALIAS].in_atomic_block else search_read_alias()
    if alias != DEFAULT_DB_ALIAS:
        try:
            with replica_reads(alias):
                return _memory_search(deadline=deadline, **search)
        except DatabaseError as exc:
            replica_failed(alias, reason=f"{exc.__class__.__name__} during a search: {str(exc).strip()[:200]}")
    return _memory_search(deadline=deadline, **search)


def _memory_search_shared(*, agent: Agent, scope, max_results: int | None, **search) -> SearchResponse:
    """Each memory of the scope searched as its own (the same scores, 0..1), under one deadline, and the
    best results of all of them kept. A granted memory's results name their owner."""
    from agents.selectors import memory_scope_resolve

    memories = memory_scope_resolve(reader=agent, scope=scope)
    started = time.perf_counter()
    responses: list[tuple[str | None, SearchResponse]] = []
    with SearchDeadline() as deadline:
        for owner, memory in memories:
            try:
                response = _memory_search_routed(
                    agent=memory, asker_id=agent.pk, max_results=max_results, deadline=deadline, **search
                )
            except SearchUnavailable:
                if not any(found.results for _, found in responses):
                    raise
                break  # out of time: what the earlier memories found is the answer
            for result in response.results:
                result.owner = owner
            responses.append((owner, response))
        results = sorted((r for _, found in responses for r in found.results), key=lambda r: -r.score)
        limit = settings.MEMORYHUB_SEARCH_MAX_RESULTS if max_results is None else max_results
        own = next((found for owner, found in responses if owner is None), responses[0][1])
        # Each memory's message, sentence by sentence, each sentence once ("Vector search is off" is said
        # by every memory searched); "Nothing matched." only when nothing did.
        notes = list(dict.fromkeys(
            sentence for _, found in responses for sentence in re.split(r"(?<=[.!?])\s+", found.message or "") if sentence
        ))
        merged = SearchResponse(
            results=results[:limit],
            mode=own.mode,
            pending=sum(found.pending for _, found in responses),
            took_ms=round((time.perf_counter() - started) * 1000, 2),
            message=" ".join(notes) if not results else " ".join(n for n in notes if not n.startswith("Nothing matched")),
        )
        with deadline.bookkeeping():
            search_record(agent_id=agent.pk, mode=merged.mode, results=len(merged.results), took_ms=merged.took_ms)
    return merged


def _memory_search(
    *,
    agent: Agent,
    query: str,
    max_results: int | None,
    min_score: float | None,
    mode: str | None,
    filters: SearchFilters | None,
    explain: bool,
    deadline: SearchDeadline,
    asker_id: int | None = None,  # the agent asking, when it searches a memory granted to it
) -> SearchResponse:
    started = time.perf_counter()
    query = _clean_query(query)
    limit = settings.MEMORYHUB_SEARCH_MAX_RESULTS_LIMIT
    max_results = settings.MEMORYHUB_SEARCH_MAX_RESULTS if max_results is None else max_results
    max_results = _check_number("max_results", max_results, low=1, high=limit, integer=True)
    min_score = settings.MEMORYHUB_SEARCH_MIN_SCORE if min_score is None else min_score
    min_score = float(_check_number("min_score", min_score, low=0, high=1, integer=False))
    if mode is not None and mode not in MODES:
        raise _bad_request(f"mode must be one of {', '.join(MODES)}.")
    filters = filters or SearchFilters()
    _check_filters(filters)

    notes: list[str] = []
    used_mode = mode or "hybrid"
    identity = configured_identity()
    embedding: list[list[float]] | None = None  # one vector per window of the query
    pool = max(settings.MEMORYHUB_SEARCH_CANDIDATE_POOL, 2 * max_results)

    # Keyword expansion (search/expansion.py), hybrid questions only: the question's rare words and their
    # neighbours, read off the memory's words (the plan) with the search's checks, while the keyword half
    # sends its first statement. When the memory has worked out every rare word's neighbours and the agent
    # is searched by keyword exactly (small: most agents), the keyword half waits for the plan and searches
    # them with the question in its next statement; else a second keyword query searches them, beside the
    # rest (below).
    plan_words = expansion_words(query) if used_mode == "hybrid" and identity.has_vectors else []
    expanding = bool(plan_words)
    planned = threading.Event()  # set once the plan is read, or failed to be
    shared: dict = {}  # "plan": read on this thread; "searched": the neighbours the keyword half searched

    def in_keyword_half(plan) -> bool:
        return plan is not None and plan.searched is not None and plan.chunks <= settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS

    def neighbour_lexemes() -> list[str]:  # called by keyword_candidates once it knows the agent is small
        if not planned.wait(timeout=max(0.0, deadline.remaining())) or not in_keyword_half(shared.get("plan")):
            return []
        lexemes = shared["plan"].searched_lexemes
        if lexemes:
            shared["searched"] = shared["plan"].searched
        return lexemes

    def keyword_half() -> KeywordResult:
        with deadline.queries():
            found = keyword_candidates(
                agent_id=agent.pk, query=query, filters=filters, limit=pool, also=neighbour_lexemes if expanding else None,
                also_weight=settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT,
            )
        return replace(found, expansion=shared["searched"]) if "searched" in shared else found

    # A hybrid search runs its keyword half beside the rest when a helper is free (search/beside.py): its
    # checks, the query embedding and its vector half. It needs none of them, so it starts first. (A search
    # that falls back to keyword only, its query not embedded, keeps the neighbours it searched.)
    keyword_later = run_beside(keyword_half) if used_mode == "hybrid" and identity.has_vectors else None
    plan = None
    try:
        checks = _search_checks(
            agent=agent, identity=identity, want_vectors=used_mode != "keyword" and identity.has_vectors, deadline=deadline,
            plan_words=plan_words,
        )
        plan = plan_from_rows(checks.plan_rows) if checks.has_words else None
    except SearchTimedOut:
        raise SearchUnavailable(_TIMED_OUT) from None
    finally:  # the keyword half may be waiting for the plan: it goes on without it when there is none
        shared["plan"] = plan
        planned.set()
    # The rest of the expansion, when words must be looked up or the agent is large: the second keyword query
    # needs nothing of either half, only the words' vectors, so it starts on a helper as soon as they are
    # known (at once when the memory holds them all, else once the query embedding brought the others) and
    # runs beside the rest.
    in_half = in_keyword_half(plan)
    if in_half:
        plan = None

    def expansion() -> KeywordResult:
        with deadline.queries():
            return expansion_query(
                agent_id=agent.pk, identity_key=identity.key, dimensions=identity.dimensions, plan=plan, filters=filters,
                limit=pool,
            )

    expansion_later = run_beside(expansion) if plan is not None and not plan.to_embed else None
    words = plan.to_embed if plan is not None else ()
    if used_mode in ("hybrid", "vector"):
        embedding, why_not = _embed_for_search(
            identity=identity, agent_id=asker_id or agent.pk, query=query, has_vectors=checks.has_vectors,
            deadline=deadline, words=words,
        )
        if embedding is None:
            notes.append(f"{why_not} Keyword search only.")
            used_mode = "keyword"
        elif words:
            embedding, embedded = embedding[: -len(words)], embedding[-len(words):]
            plan.vectors.update(zip(words, embedded))
            expansion_later = run_beside(expansion)
    vector_hits = []
    if embedding is not None:
        try:
            with deadline.queries():
                vector_hits = _nearest(
                    agent=agent, vectors=embedding, identity=identity, filters=filters, limit=pool,
                    has_index=checks.has_index,
                )
        except SearchTimedOut:
            used_mode = "keyword" if used_mode == "hybrid" else used_mode
    # The second keyword query: the helper's, or run here when no helper took it (or its run failed), while
    # the keyword half may still be running on its own. A search fallen back to keyword only keeps it (a word
    # that was to be embedded with the query has no vector then, and no neighbours), as it keeps the
    # neighbours its keyword half searched.
    second = None
    if plan is not None and used_mode != "vector":
        second = _beside_result(expansion_later, deadline=deadline, quiet=True) if expansion_later is not None else None
        if second is None and not deadline.timed_out:
            try:
                second = expansion()
            except SearchTimedOut:
                pass
    keyword = None
    if used_mode in ("hybrid", "keyword"):
        try:
            keyword = _beside_result(keyword_later, deadline=deadline) if keyword_later is not None else None
            if keyword is None:  # run here: no helper was free, or the helper's connection failed
                keyword = keyword_half()
        except SearchTimedOut:
            used_mode = "vector" if used_mode == "hybrid" and vector_hits else used_mode
    if in_half and keyword is not None and not keyword.expansion and used_mode != "vector" and not deadline.timed_out:
        # The keyword half did not search the neighbours (the agent is larger than its words counted): here.
        plan = shared["plan"]
        try:
            second = expansion()
        except SearchTimedOut:
            pass
    if keyword is not None and second is not None and second.hits and used_mode != "vector":
        keyword = lifted(keyword, second, weight=settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT, limit=pool)
    if keyword is None:
        try:
            with deadline.queries():
                keyword = KeywordResult(hits=[], lexemes=query_lexemes(query), idf={})
        except SearchTimedOut:
            keyword = KeywordResult(hits=[], lexemes=[], idf={})
    if deadline.timed_out and not vector_hits and not keyword.hits:
        raise SearchUnavailable(_TIMED_OUT)
    # (file id, start line, end line) of every candidate, as both halves read them.
    spans = {hit.chunk_id: (hit.file_id, hit.start_line, hit.end_line) for hit in [*vector_hits, *keyword.hits]}

    weights = {
        "hybrid": (settings.MEMORYHUB_SEARCH_VECTOR_WEIGHT, settings.MEMORYHUB_SEARCH_KEYWORD_WEIGHT),
        "vector": (1.0, 0.0),
        "keyword": (0.0, 1.0),
    }[used_mode]
    candidates = fuse(
        vector=[(hit.chunk_id, hit.distance) for hit in vector_hits], keyword=keyword.hits, method=settings.MEMORYHUB_SEARCH_FUSION,
        vector_weight=weights[0], keyword_weight=weights[1], rrf_k=settings.MEMORYHUB_SEARCH_RRF_K,
    )
    if explain and keyword.expansion:
        for candidate in candidates:
            if candidate.expansion_score is not None:
                candidate.expansion = keyword.expansion
    if (checks.awaiting_vectors or checks.failed_with_chunks) and vector_hits:  # fusion.keyword_scored_without_vectors
        candidates = keyword_scored_without_vectors(
            candidates, _without_vectors(agent_id=agent.pk, identity=identity, candidates=candidates, deadline=deadline)
        )
    candidates = neighbour_credit(candidates, spans=spans, weight=settings.MEMORYHUB_SEARCH_NEIGHBOUR_CREDIT)
    results, best_below = _results(
        agent_id=agent.pk, deadline=deadline, candidates=candidates, spans=spans, keyword=keyword, max_results=max_results,
        min_score=min_score, explain=explain, query=query, notes=notes,
    )

    if deadline.timed_out:
        if not results:
            raise SearchUnavailable(_TIMED_OUT)
        notes.insert(0, f"The search stopped at its time limit ({deadline.deadline_ms} ms or "
                        f"{deadline.statement_timeout_ms} ms per query): these are the results found by then.")
    if not results:
        if best_below is not None:
            notes.insert(0, f"Nothing matched with a score of at least {min_score:g} (best: {best_below:.3f}).")
        else:
            notes.insert(0, "Nothing matched.")
    pending, awaiting_vectors = checks.pending, checks.awaiting_vectors
    if pending > awaiting_vectors:
        notes.append(f"{pending - awaiting_vectors} file(s) are still being indexed; recent changes may not be searchable yet.")
    if awaiting_vectors and (mode or "hybrid") != "keyword":  # asked for vectors: say which files have none yet
        note = (f"{awaiting_vectors} file(s) are searchable by keyword only until their vectors are computed (their "
                "chunks are scored by their keywords alone meanwhile)")
        if _batches_in_flight(agent=agent, deadline=deadline):
            note += " (bulk work in the embedding provider's batch: within its window, up to 24 h)"
        notes.append(note + ".")
    metrics.search_observe(mode=used_mode, results=len(results), seconds=time.perf_counter() - started)
    return SearchResponse(
        results=results,
        mode=used_mode,
        pending=pending,
        took_ms=round((time.perf_counter() - started) * 1000, 2),
        message=" ".join(notes),
    )


# Of the given chunks (those only the keyword half found), the ones without a vector of the identity.
_WITHOUT_VECTORS_SQL = (
    f"SELECT id FROM {CHUNK} WHERE agent_id = %(agent)s AND id = ANY(%(ids)s) "
    "AND (embedding IS NULL OR embedding_identity <> %(identity)s)"
)


def _without_vectors(*, agent_id: int, identity: EmbeddingIdentity, candidates: list[Candidate], deadline: SearchDeadline) -> set[int]:
    """The candidates only the keyword half found that have no vector of ``identity`` (one statement, asked only
    while some of the agent's files wait for their vectors or failed after their chunks were written); none
    when the search is out of time."""
    ids = [c.chunk_id for c in candidates if keyword_only(c)]
    if not ids:
        return set()
    try:
        with deadline.queries():
            with read_connection.cursor() as cursor:
                cursor.execute(_WITHOUT_VECTORS_SQL, {"agent": agent_id, "ids": ids, "identity": identity.key})
                return {row[0] for row in cursor.fetchall()}
    except SearchTimedOut:
        return set()


def _beside_result(future, *, deadline: SearchDeadline, quiet: bool = False) -> KeywordResult | None:
    """The keyword half run beside the vector half (search/beside.py): its result; SearchTimedOut as it
    would be raised on the request's thread, or when the deadline passes first; None when it failed
    otherwise (a helper's connection broken by a database restart), for the caller to run it again.
    ``quiet`` (keyword expansion run beside): None for any failure or lack of time, never an error."""
    try:
        return future.result(timeout=max(0.0, deadline.remaining()))
    except FutureTimeout:
        deadline.timed_out = True
        if quiet:
            return None
        raise SearchTimedOut from None
    except DatabaseError as exc:
        logger.warning("a search half failed on a helper thread, running it again: %s", exc)
        return None
    except Exception:
        if quiet:
            return None
        raise


def _nearest(
    *, agent: Agent, vectors: list[list[float]], identity: EmbeddingIdentity, filters: SearchFilters, limit: int, has_index: bool
):
    """The vector half: the agent's chunks nearest to the query, or for a query of several windows
    (search/query_windows.py) to any of its windows, each chunk at its best distance."""
    if len(vectors) == 1:
        return vector_candidates(
            agent_id=agent.pk, query_embedding=vectors[0], identity=identity, dimensions=identity.dimensions,
            filters=filters, limit=limit, has_index=has_index,
        )
    best = {}
    for vector in vectors:
        for hit in vector_candidates(
            agent_id=agent.pk, query_embedding=vector, identity=identity, dimensions=identity.dimensions,
            filters=filters, limit=limit, has_index=has_index,
        ):
            if hit.chunk_id not in best or hit.distance < best[hit.chunk_id].distance:
                best[hit.chunk_id] = hit
    return sorted(best.values(), key=lambda hit: (hit.distance, hit.chunk_id))[:limit]


def _embed_for_search(
    *, identity: EmbeddingIdentity, agent_id: int, query: str, has_vectors: bool, deadline: SearchDeadline,
    words: tuple[str, ...] = (),
) -> tuple[list[list[float]] | None, str]:
    """(the query's vectors, then those of ``words``, "") or (None, the reason vector search cannot run)."""
    from indexing.embeddings import get_provider
    from indexing.model_check import vectors_paused

    if not identity.has_vectors:
        return None, "Vector search is off (embedding provider 'none')."
    if not has_vectors:
        return None, f"No chunk of this agent is embedded with {identity.key} yet."
    no_time = "The search ran out of time before the query could be embedded."
    try:
        with deadline.queries():  # read at most once a minute per process (indexing/model_check.py)
            paused = vectors_paused(identity)
    except SearchTimedOut:
        return None, no_time
    if paused is not None:
        return None, paused
    if deadline.expired:  # not the provider's fault: the breaker must not count it
        return None, no_time
    try:
        provider = get_provider()
        if provider is None:
            return None, "Vector search is off (embedding provider 'none')."
        vector = query_embedding(provider=provider, text=query, agent_id=agent_id, timeout=deadline.remaining(), words=words)
    except BreakerOpen as exc:
        return None, str(exc)
    except Exception as exc:  # any provider failure degrades to keyword search, never a 500
        logger.warning("query embedding failed, searching by keyword only: %s", exc)
        return None, f"The embedding provider failed ({exc.__class__.__name__})."
    if any(len(v) != identity.dimensions for v in vector):
        return None, "The embedding provider returned a vector of the wrong size."
    return vector, ""


def _results(
    *,
    agent_id: int,
    deadline: SearchDeadline,
    candidates: list[Candidate],
    spans: dict[int, tuple[int, int, int]],
    keyword: KeywordResult,
    max_results: int,
    min_score: float,
    explain: bool,
    query: str = "",
    notes: list[str] | None = None,
) -> tuple[list[SearchResult], float | None]:
    """Snippets for the best candidates; also the best score that min_score dropped (for the message).

    ``spans`` holds each candidate's (file id, start line, end line) as the halves read it. Snippets
    show the file's current lines; a chunk's own text is fetched only when its file changed since it
    was indexed (then the stored lines no longer match its line numbers). Every row is read with the
    agent's id as well as its own: the ids come from this agent's candidates, and a database distributed
    by agent (docs/scale.md) can then read them from the agent's shard alone."""
    today = datetime.now(dt_timezone.utc).date()  # one day for the recency boost and the question's dates
    boost = settings.MEMORYHUB_SEARCH_RECENCY_BOOST
    if boost > 0 and candidates:
        try:
            with deadline.queries():
                file_ids = {spans[c.chunk_id][0] for c in candidates}
                paths = dict(MemoryFile.objects.filter(agent_id=agent_id, pk__in=file_ids).values_list("id", "path"))
        except SearchTimedOut:
            paths = {}  # no boost: the answer is still right, its order a little less
        half_life = settings.MEMORYHUB_SEARCH_RECENCY_HALF_LIFE_DAYS
        for c in candidates:
            c.score *= recency_factor(paths.get(spans[c.chunk_id][0], ""), today=today, boost=boost, half_life_days=half_life)
        candidates.sort(key=lambda c: -c.score)
    if asks_dates(keyword.lexemes) and candidates and query:
        candidates = _date_boosted(
            agent_id=agent_id, query=query, today=today, candidates=candidates, spans=spans, deadline=deadline
        )
    best_below = max((c.score for c in candidates if c.score < min_score), default=None)
    candidates = [c for c in candidates if c.score >= min_score]
    diversity = long_query_diversity(keyword.lexemes)
    if diversity and len(candidates) > 1:
        candidates = _diversified(agent_id=agent_id, candidates=candidates, weight=diversity, deadline=deadline)
    if rerank_enabled() and query:
        candidates = _reranked(agent_id=agent_id, query=query, candidates=candidates, deadline=deadline, notes=notes)
    stretch_runs(candidates, spans=spans, depth=2 * max_results, length=settings.MEMORYHUB_SEARCH_STRETCH_RUN)
    candidates = overlaps_deferred(candidates, span=lambda c: spans[c.chunk_id])

    files: dict[int, _ShownFile] = {}
    # The lines snippets show: a file's, keyed (file id, 0), or a changed file's chunk's own, (file id, chunk id).
    file_lines: dict[tuple[int, int], FileLines] = {}
    shown: dict[int, set[int]] = {}
    line_lexemes: dict[tuple[tuple[int, int], int], set[str]] = {}  # (file_lines key, line index) → lexemes
    results: list[SearchResult] = []
    budget = settings.MEMORYHUB_SEARCH_SNIPPET_CHARS
    # The answer's snippets hold at most max_results x budget characters in all. A hit inside a stretch of
    # matching chunks (fusion's in_stretch: neighbour_credit, stretch_runs) may take up to
    # MEMORYHUB_SEARCH_SNIPPET_STRETCH x budget of it, and the answer then ends with fewer results.
    room = max_results * budget
    wide = int(budget * settings.MEMORYHUB_SEARCH_SNIPPET_STRETCH)
    batch = max_results  # chunks: the usual case needs no more; skipped hits pull in the next batch
    # Hits whose lines are all shown already are dropped here, before any query: when hundreds of
    # candidates cite the same few lines (a file that is one long line), the search stops reading
    # batches as soon as those lines are shown instead of walking the whole pool.
    fresh = (c for c in candidates if not _all_shown(spans[c.chunk_id], shown))
    while len(results) < max_results and room >= MIN_SNIPPET_CHARS:
        group = _next_group(fresh, chunks=batch)
        if not group:
            break
        try:
            with deadline.queries():
                regions = _snippet_regions(
                    agent_id=agent_id, group=group, spans=spans, files=files, file_lines=file_lines, shown=shown, budget=budget, keyword=keyword
                )
                # Lexemes of the lines not seen yet, in one query: each line at most once per search. A
                # region of one line needs none: its snippet starts at that line whatever it scores.
                todo = {
                    (key, i): file_lines[key].lines[i]
                    for item in regions if item for key, (a, b) in [item] if a < b for i in range(a, b + 1)
                    if (key, i) not in line_lexemes
                }
                if keyword.lexemes:
                    line_lexemes.update(zip(todo, lines_lexemes(list(todo.values()))))
                else:
                    line_lexemes.update((key, set()) for key in todo)
        except SearchTimedOut:
            break  # the answer keeps the snippets built so far; the caller's message says why
        for c, item in zip(group, regions):
            if len(results) >= max_results or room < MIN_SNIPPET_CHARS:
                break
            if item is None:
                continue
            key, (a, b) = item
            lines = file_lines[key]
            if a < b:
                scores = line_scores([line_lexemes[(key, i)] for i in range(a, b + 1)], keyword.idf, keyword.lexemes)
            else:
                scores = [0.0]
            memory_file = files[spans[c.chunk_id][0]]
            own = wide if c.in_stretch else budget
            snippet = snippet_build(
                file_lines=lines, region=(a, b), scores=scores,
                shown=shown.setdefault(memory_file.id, set()), budget=min(own, room), query_lexemes=keyword.lexemes,
            )
            if snippet is None:
                continue  # every line of it is already shown by a better hit
            room -= len(snippet.text)
            results.append(
                SearchResult(
                    path=memory_file.path,
                    start_line=lines.cite(snippet.first),
                    end_line=lines.cite(snippet.last),
                    score=round(c.score, 4),
                    snippet=snippet.text,
                    source=memory_file.source,
                    explain=c.explain() if explain else None,
                    attributes=None if memory_file.attributes is None else json.loads(memory_file.attributes),
                )
            )
    return results, best_below


def _date_boosted(
    *, agent_id: int, query: str, today: date, candidates: list[Candidate], spans: dict[int, tuple[int, int, int]],
    deadline: SearchDeadline,
) -> list[Candidate]:
    """A question that names a day, a month or a year (search/dates.py) favours the files written in
    that span or within MEMORYHUB_SEARCH_DATE_AFTER_DAYS after it: when any candidate's file is one, every
    other candidate's score is multiplied by 1 - MEMORYHUB_SEARCH_DATE_BOOST (so a file of the right day
    can pass the best match of another day; scores stay on 0..1). ``explain`` gives ``date_match``. Out
    of time, the scores stay as fused."""
    asked = query_spans(query, today=today)
    if not asked:
        return candidates
    try:
        with deadline.queries():
            days = _file_days(agent_id=agent_id, file_ids={spans[c.chunk_id][0] for c in candidates})
    except SearchTimedOut:
        return candidates
    after = settings.MEMORYHUB_SEARCH_DATE_AFTER_DAYS
    matched = {
        c.chunk_id for c in candidates
        if (day := days.get(spans[c.chunk_id][0])) is not None and in_spans(day, asked, after_days=after)
    }
    if not matched:
        return candidates
    for candidate in candidates:
        candidate.date_match = candidate.chunk_id in matched
        if not candidate.date_match:
            candidate.score *= 1 - settings.MEMORYHUB_SEARCH_DATE_BOOST
    return sorted(candidates, key=lambda c: -c.score)


# The day of each file: its path's date, else its title line. The title is read only from files small
# enough to be read whole for snippets, so a dated question never reads a large file's content.
_FILE_DAYS_SQL = (
    "SELECT id, path, CASE WHEN size <= %(whole_max)s THEN split_part(left(content, 300), E'\\n', 1) ELSE '' END "
    f"FROM {FILE} WHERE agent_id = %(agent)s AND id = ANY(%(ids)s)"
)


def _file_days(*, agent_id: int, file_ids: set[int]) -> dict[int, date]:
    with read_connection.cursor() as cursor:
        cursor.execute(
            _FILE_DAYS_SQL,
            {"whole_max": settings.MEMORYHUB_SEARCH_SNIPPET_FILE_MAX_BYTES, "agent": agent_id, "ids": sorted(file_ids)},
        )
        found = {file_id: file_day(path, title) for file_id, path, title in cursor.fetchall()}
    return {file_id: day for file_id, day in found.items() if day is not None}


def asks_dates(lexemes: list[str]) -> bool:
    """Whether a query of these lexemes goes through the date stage: the stage is on, and the query is
    shorter than MEMORYHUB_SEARCH_DATE_MAX_LEXEMES distinct words (a question, not a pasted stretch of text)."""
    return settings.MEMORYHUB_SEARCH_DATE_BOOST > 0 and len(lexemes) < settings.MEMORYHUB_SEARCH_DATE_MAX_LEXEMES


def long_query_diversity(lexemes: list[str]) -> float:
    """The diversity weight for a query of these lexemes: MEMORYHUB_SEARCH_DIVERSITY for a query of at
    least MEMORYHUB_SEARCH_DIVERSITY_MIN_LEXEMES distinct words (a pasted stretch of dialogue), else 0."""
    if len(lexemes) < settings.MEMORYHUB_SEARCH_DIVERSITY_MIN_LEXEMES:
        return 0.0
    return settings.MEMORYHUB_SEARCH_DIVERSITY


def _diversified(*, agent_id: int, candidates: list[Candidate], weight: float, deadline: SearchDeadline) -> list[Candidate]:
    """A long query's best candidates spread over what it talks about (fusion.diversified), with the
    similarities of their vectors; out of time, or without vectors, the order stays the fusion's."""
    identity = configured_identity()
    if not identity.has_vectors:
        return candidates
    depth = settings.MEMORYHUB_SEARCH_DIVERSITY_DEPTH
    try:
        with deadline.queries():
            similarity = pairwise_similarity(
                agent_id=agent_id, chunk_ids=[c.chunk_id for c in candidates[:depth]],
                identity_key=identity.key, dims=identity.dimensions,
            )
    except SearchTimedOut:
        return candidates
    return diversified(candidates, similarity=similarity, weight=weight, depth=depth)


def _reranked(
    *, agent_id: int, query: str, candidates: list[Candidate], deadline: SearchDeadline, notes: list[str] | None
) -> list[Candidate]:
    """The optional rerank stage (search/rerank.py), bounded by its own timeout and the deadline."""
    top_ids = [c.chunk_id for c in candidates[: settings.MEMORYHUB_RERANK_TOP_N]]
    try:
        with deadline.queries():
            texts = dict(Chunk.objects.filter(agent_id=agent_id, pk__in=top_ids).values_list("id", "text"))
    except SearchTimedOut:
        texts = {}
    timeout = min(settings.MEMORYHUB_RERANK_TIMEOUT, deadline.remaining())
    if timeout <= 0.05 or not texts:
        note = "Reranking skipped (no time left): the results are in the unreranked order."
        reranked = candidates
    else:
        reranked, note = candidates_reranked(query=query, candidates=candidates, texts=texts, timeout=timeout)
    if note and notes is not None:
        notes.append(note)
    return reranked


def _next_group(fresh, *, chunks: int) -> list[Candidate]:
    """The next candidates of ``fresh``, up to ``chunks`` distinct chunks. A chunk's second entry
    (overlaps_deferred) that comes with its first costs no query (same file, same lines), so it does not
    take the place of another chunk: counting entries instead made a search of one-line chunks read a
    second batch in 4 searches out of 10. The order is kept, so the results are the same either way."""
    group: list[Candidate] = []
    seen: set[int] = set()
    for candidate in fresh:
        group.append(candidate)
        seen.add(candidate.chunk_id)
        if len(seen) >= chunks:
            break
    return group


def _all_shown(span: tuple[int, int, int], shown: dict[int, set[int]]) -> bool:
    """Whether every line of a candidate's (file id, start line, end line) is cited by a snippet already."""
    file_id, start_line, end_line = span
    seen = shown.get(file_id)
    return bool(seen) and all(line in seen for line in range(start_line, end_line + 1))


class _ShownFile(NamedTuple):
    """What the results need of a candidate's file (read as plain values: no model objects per search)."""

    id: int
    path: str
    source: str
    attributes: str | None  # jsonb as its text, decoded only for the results shown
    whole: bool  # small and unchanged since indexing: snippets show its current lines


# One statement per batch: the files' metadata, and the content of those read whole. A file read whole
# must be small: one that is larger shows its chunks' own text (bounded by the chunk size), so a 5 MB
# file costs a search no more than a small one.
_SNIPPET_FILES_SQL = (
    "SELECT id, path, source, attributes::text, w, CASE WHEN w THEN content END "
    f"FROM (SELECT f.*, (f.size <= %(whole_max)s AND f.indexed_hash = f.content_hash) AS w FROM {FILE} f "
    "      WHERE f.agent_id = %(agent)s AND f.id = ANY(%(ids)s)) x"
)


def _snippet_regions(*, agent_id: int, group, spans, files, file_lines, shown, budget: int, keyword: KeywordResult) -> list:
    """Per candidate of ``group``, (its ``file_lines`` key, its region) or None when it has nothing to show:
    its file or chunk is gone, or every line of it is shown already (skipped before any work on it).
    Lines longer than the snippet budget are windowed as they are read (FileLines.windowed)."""
    wanted = {spans[c.chunk_id][0] for c in group} - files.keys()
    contents: dict[int, str] = {}
    if wanted:
        with read_connection.cursor() as cursor:
            cursor.execute(
                _SNIPPET_FILES_SQL,
                {"whole_max": settings.MEMORYHUB_SEARCH_SNIPPET_FILE_MAX_BYTES, "agent": agent_id, "ids": sorted(wanted)},
            )
            for file_id, path, source, attributes, whole, content in cursor.fetchall():
                files[file_id] = _ShownFile(file_id, path, source, attributes, whole)
                if whole:
                    contents[file_id] = content
    by_chunk = [c.chunk_id for c in group if (f := files.get(spans[c.chunk_id][0])) and not f.whole]
    texts: dict[int, str] = {}
    if by_chunk:
        with read_connection.cursor() as cursor:
            cursor.execute(f"SELECT id, text FROM {CHUNK} WHERE agent_id = %s AND id = ANY(%s)", [agent_id, by_chunk])
            texts = dict(cursor.fetchall())
    regions = []
    for c in group:
        file_id, start_line, end_line = spans[c.chunk_id]
        memory_file = files.get(file_id)
        if memory_file is None:  # deleted since the candidate queries
            regions.append(None)
            continue
        if memory_file.whole:
            key = (file_id, 0)
            if key not in file_lines:
                file_lines[key] = FileLines.of_file(content=contents.get(file_id, ""), source=memory_file.source).windowed(
                    budget=budget, query_lexemes=keyword.lexemes
                )
        elif c.chunk_id in texts:  # a large file, or one changed since this chunk was indexed: the chunk's own text
            key = (file_id, c.chunk_id)
            file_lines[key] = FileLines.of_chunk(text=texts[c.chunk_id], start_line=start_line, end_line=end_line).windowed(
                budget=budget, query_lexemes=keyword.lexemes
            )
        else:  # the chunk was replaced since the candidate queries
            regions.append(None)
            continue
        lines = file_lines[key]
        region = lines.region(start_line, end_line)
        seen = shown.get(file_id, set())
        if region is not None and all(lines.cite(i) in seen for i in range(region[0], region[1] + 1)):
            region = None
        regions.append(None if region is None else (key, region))
    return regions
