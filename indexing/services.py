"""The worker side of indexing: run an IndexJob, chunk its files, reuse vectors by text hash (from this
agent's chunks, then from its EmbeddingCache), embed only the rest and write each file's chunk set.

``index_job_run`` → ``files_index`` (in batches) → ``index_job_settle``. The writes that create the
jobs are indexing/writes.py; the re-queues of maintenance, indexing/maintenance.py; the lock order all
of them keep, indexing/locks.py.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from pgvector import Vector

from agents.models import Agent
from indexing.chunking import ChunkSpan, chunk_markdown, count_tokens
from indexing.embedding_identity import configured_identity
from indexing.keyword_document import keyword_document
from indexing.locks import files_lock, files_update
from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.recovery import claimed_files_lease
from indexing.states import (
    CLAIMABLE,
    IN_FLIGHT,
    error_text,
    job_to_finished,
    job_to_queued,
    job_to_running,
    job_to_waiting,
    to_failed,
    to_indexing,
    to_pending,
    to_settled,
)
from indexing.tables import CHUNK
from indexing.transcripts import chunk_transcript
from indexing.window_probe import model_window, window_measure
from memoryhub import metrics

logger = logging.getLogger(__name__)

State = MemoryFile.State
JobState = IndexJob.State
Trigger = IndexJob.Trigger


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- Worker side ---------------------------------------------------------------------------------


@dataclass
class FileIndexOutcome:
    file_id: int
    skipped: bool = False  # content already indexed with vectors of the configured identity
    superseded: bool = False  # the file changed or disappeared while it was being chunked
    chunks: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    malformed_lines: int = 0
    error: str = ""


def chunk_sizes(*, agent: Agent, window: int | None = None) -> tuple[int, int]:
    """(max tokens, overlap) for this agent, never larger than the embedding model reads
    (MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS, or the model's measured window: indexing/window_probe.py): a
    vector is only credited with lines its model saw. ``window``: model_window() as the caller read it."""
    tokens, overlap = _chunk_sizes_asked(agent=agent)
    window = model_window() if window is None else window
    if configured_identity().has_vectors and tokens > window:
        return window, min(overlap, window // 5)
    return tokens, overlap


def _chunk_sizes_asked(*, agent: Agent) -> tuple[int, int]:
    """Agent.overrides ``chunk_tokens`` / ``chunk_overlap``, else the settings. Overriding only the size
    keeps the overlap at most a fifth of it. Invalid overrides are ignored (with a warning) rather than
    breaking the agent's indexing."""
    default_tokens, default_overlap = settings.MEMORYHUB_CHUNK_TOKENS, settings.MEMORYHUB_CHUNK_OVERLAP
    overrides = agent.overrides if isinstance(agent.overrides, dict) else {}
    if "chunk_tokens" not in overrides and "chunk_overlap" not in overrides:
        return default_tokens, default_overlap
    tokens = overrides.get("chunk_tokens", default_tokens)
    if type(tokens) is int and "chunk_overlap" not in overrides:
        overlap = min(default_overlap, tokens // 5)
    else:
        overlap = overrides.get("chunk_overlap")
    if type(tokens) is int and type(overlap) is int and 32 <= tokens <= 8000 and 0 <= overlap < tokens:
        return tokens, overlap
    logger.warning("agent %s: ignoring invalid chunk overrides %r", agent.slug, overrides)
    return default_tokens, default_overlap


def file_title(*, memory_file: MemoryFile) -> str:
    """The line that says what a whole file is about — its first line when that is a level-1 markdown
    heading ("# Session 3 (1:56 pm on 8 May, 2023)", "# Meeting of the budget committee") — or "".
    With MEMORYHUB_CHUNK_TITLE_CONTEXT every later chunk of the file is embedded and keyword-indexed
    with it in front: a turn of a dated session then carries its date, which sits in the header line
    and nowhere in the turn. Transcripts (JSONL) have no title."""
    if not settings.MEMORYHUB_CHUNK_TITLE_CONTEXT or memory_file.source == MemoryFile.Source.SESSION:
        return ""
    first = memory_file.content.split("\n", 1)[0].strip()
    if not first.startswith("# ") or len(first) > MAX_TITLE_CHARS:
        return ""
    return first


# A title longer than this is a paragraph, not a title, and is not repeated in every chunk.
MAX_TITLE_CHARS = 200


def chunk_indexed_text(*, span: ChunkSpan, title: str) -> str:
    """What is embedded and keyword-indexed for a chunk: its text, after the file's title when it has
    one and the chunk does not start with it. The chunk's text and lines stay its own (snippets and
    citations show only them)."""
    return f"{title}\n{span.text}" if title and span.start_line > 1 else span.text


def file_chunk_spans(*, memory_file: MemoryFile, max_tokens: int, overlap_tokens: int) -> tuple[list[ChunkSpan], int]:
    """The chunks of a file's content with line ranges of the stored file, and its malformed JSONL lines."""
    if memory_file.source != MemoryFile.Source.SESSION:
        return chunk_markdown(memory_file.content, max_tokens=max_tokens, overlap_tokens=overlap_tokens), 0
    spans, transcript = chunk_transcript(memory_file.content, max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    return spans, transcript.malformed_lines


# Files indexed together: one claim, one reuse lookup, one embedding call, one write transaction.
# Bounded by count and by content size, so a batch of large files stays small in memory.
INDEX_BATCH_FILES = 100
INDEX_BATCH_BYTES = 8 * 1024 * 1024


def _batches(rows: list[tuple[int, int]]) -> list[list[int]]:
    """Group (file id, size) rows into batches of at most INDEX_BATCH_FILES files / INDEX_BATCH_BYTES."""
    batches: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for file_id, size in rows:
        if current and (len(current) >= INDEX_BATCH_FILES or current_bytes + size > INDEX_BATCH_BYTES):
            batches.append(current)
            current, current_bytes = [], 0
        current.append(file_id)
        current_bytes += size
    if current:
        batches.append(current)
    return batches

_DEFAULT = object()


def file_index(*, file_id: int, provider=_DEFAULT, job_id: int | None = None) -> FileIndexOutcome | None:
    """Index one file (worker side). Returns None when there was nothing to claim (already indexed,
    or another worker has it). See ``files_index``."""
    outcomes = files_index(file_ids=[file_id], provider=provider, job_id=job_id)
    return outcomes[0] if outcomes else None


def _claim(*, file_ids: list[int], job_id: int | None) -> list[int]:
    """pending/failed → indexing. Returns the ids claimed.

    A job's claim waits for rows another transaction holds (in id order, the lock order): that is an
    upload committing (after it, the row belongs to the newer job and the re-checked filter drops it)
    or a worker finishing the previous version (after it, the row is this job's to index). Skipping
    them instead left the file pending, under a job that had already run, until the stuck-work sweep
    (seen in 2 of 25 rounds of 6 racing uploads). Without a job, rows held elsewhere are skipped."""
    with transaction.atomic():
        rows = MemoryFile.objects.filter(pk__in=file_ids, state__in=CLAIMABLE)
        if job_id is not None:
            rows = rows.filter(job_id=job_id).order_by("id").select_for_update()
        else:
            rows = rows.select_for_update(skip_locked=True)
        claimed = list(rows.values_list("id", flat=True))
        if claimed:
            MemoryFile.objects.filter(pk__in=claimed, state__in=CLAIMABLE).update(**to_indexing())
    return claimed


def files_index(
    *, file_ids: list[int], provider=_DEFAULT, job_id: int | None = None, defer_embedding: str = ""
) -> list[FileIndexOutcome]:
    """Index a batch of files in two steps, so that a file is keyword-searchable as soon as it is
    chunked, whatever the embedding provider does (hangs included):

    1. claim → chunk → the vectors known without the provider (this agent's chunks with the same text,
       then its EmbeddingCache) → write each file's chunk set with them, and commit. Keyword
       search finds the files from here on. A file that needs nothing from the provider is settled in
       this same transaction (one write); the others stay ``indexing`` with ``indexed_hash`` set: their
       chunks are in the index, their vectors are not yet ("keyword-only").
    2. embed the missing texts (each distinct text once) → fill in the vectors by text hash → mark the
       files indexed.

    A worker that dies between the steps leaves the chunks in place and its files ``indexing``; their
    lease runs out and recovery queues them again (indexing/recovery.py). The rerun finds each chunk
    set unchanged, keeps the rows and only fills in the vectors (those embedded before the death come
    from the cache). Files already indexed with vectors of the configured identity are skipped.

    Embedding failures never lose the chunks: the files are marked failed with the reason (keyword
    search still finds them), and a ProviderTransientError is re-raised afterwards so the caller can
    retry. ``defer_embedding`` (a reason) skips the provider altogether with the same outcome — used
    once a job has met a transient error. While the batch runs, its files' lease is renewed.
    """
    claimed = _claim(file_ids=file_ids, job_id=job_id)
    if not claimed:
        return []
    with claimed_files_lease(claimed):
        return _files_index_claimed(claimed=claimed, provider=provider, job_id=job_id, defer_embedding=defer_embedding)


def _files_index_claimed(*, claimed: list[int], provider, job_id: int | None, defer_embedding: str) -> list[FileIndexOutcome]:
    from indexing.embeddings import ProviderError, get_provider

    transient: Exception | None = None
    try:
        files = list(MemoryFile.objects.select_related("agent").filter(pk__in=claimed).order_by("id"))
        outcomes = {f.pk: FileIndexOutcome(file_id=f.pk) for f in files}
        if provider is _DEFAULT:
            provider = get_provider()
        identity = provider.identity if provider is not None else None
        if provider is not None and not defer_embedding:
            window_measure(provider)  # a model not known by name: its window, measured once, before chunking
        work, indexed_texts = _files_chunked(files=files, outcomes=outcomes, identity=identity)
        agent_id = _batch_agent(files) if files else None  # whose chunks and cache may give vectors

        # Step 1: the vectors known without the provider, then the chunks, committed.
        vectors, cache_hits = (
            _known_vectors(work=work, identity=identity, agent_id=agent_id) if provider is not None else ({}, 0)
        )
        missing = {  # text hash → text, for the provider
            digest: indexed_texts[digest]
            for _, spans in work for _, digest in spans if provider is not None and digest not in vectors
        }
        if missing and defer_embedding:
            for memory_file, spans in work:
                if any(digest in missing for _, digest in spans):
                    outcomes[memory_file.pk].error = defer_embedding
            missing = {}
        awaiting = _files_chunks_write(
            files=files, outcomes=outcomes, work=work, indexed_texts=indexed_texts, vectors=vectors, identity=identity,
            job_id=job_id, missing=missing.keys(), cache_hits=cache_hits,
        )

        # Step 2: embed what the written files lack, fill it in, settle them.
        if awaiting:
            transient = _embed_awaiting(
                awaiting=awaiting, missing=missing, vectors=vectors, outcomes=outcomes, provider=provider,
                identity=identity, job_id=job_id, agent_id=agent_id,
            )
    except Exception as exc:
        if not isinstance(exc, ProviderError):
            # A bug must not leave files "indexing" forever: mark them failed, then fail loudly.
            with transaction.atomic():
                files_lock(claimed)  # lock order, as everywhere
                MemoryFile.objects.filter(pk__in=claimed, state=State.INDEXING).update(
                    **to_failed(f"internal error: {exc.__class__.__name__}: {exc}")
                )
        raise
    result_list = [outcomes[f.pk] for f in files]
    if transient is not None and not all(o.superseded for o in result_list):
        raise transient
    return result_list


def _files_chunked(*, files, outcomes, identity) -> tuple[list, dict[str, str]]:
    """Each file's chunk spans with the hash of what is embedded and keyword-indexed for them, and that
    text by hash. A file already indexed with vectors of this identity is skipped."""
    identity_key = identity.key if identity is not None else ""
    lacking_vectors: set[int] = set()
    unchanged = [f.pk for f in files if f.indexed_hash == f.content_hash]
    if identity is not None and unchanged:
        lacking_vectors = set(
            Chunk.objects.filter(agent_id__in={f.agent_id for f in files}, file_id__in=unchanged)
            .exclude(embedding_identity=identity_key)
            .values_list("file_id", flat=True)
            .distinct()
        )
    work: list[tuple[MemoryFile, list[tuple[ChunkSpan, str]]]] = []
    indexed_texts: dict[str, str] = {}  # digest -> what is embedded and keyword-indexed (chunk_indexed_text)
    window = model_window()  # read once: every file of the batch is cut to the same window
    for memory_file in files:
        outcome = outcomes[memory_file.pk]
        if memory_file.indexed_hash == memory_file.content_hash and memory_file.pk not in lacking_vectors:
            outcome.skipped = True
            continue
        max_tokens, overlap = chunk_sizes(agent=memory_file.agent, window=window)
        title = file_title(memory_file=memory_file)
        # The title rides in front of every chunk: together they must fit in the model's window.
        room = window - count_tokens(title) - 1
        if title and max_tokens > room:
            max_tokens = max(32, room)
            overlap = min(overlap, max_tokens // 5)
        spans, outcome.malformed_lines = file_chunk_spans(memory_file=memory_file, max_tokens=max_tokens, overlap_tokens=overlap)
        file_work = []
        for span in spans:
            text = chunk_indexed_text(span=span, title=title)
            digest = text_hash(text)
            indexed_texts[digest] = text
            file_work.append((span, digest))
        work.append((memory_file, file_work))
    return work, indexed_texts


def _known_vectors(*, work, identity, agent_id: int) -> tuple[dict[str, object], int]:
    """The vectors of these chunks known without the provider: the agent's chunks with the same text,
    then the agent's EmbeddingCache. Returns (vectors by text hash, how many were found)."""
    from indexing.embedding_cache import cached_vectors

    if not work:
        return {}, 0
    wanted = {digest for _, spans in work for _, digest in spans}
    vectors: dict[str, object] = dict(
        Chunk.objects.filter(agent_id=agent_id, text_hash__in=wanted, embedding_identity=identity.key)
        .exclude(embedding=None)
        .order_by("text_hash")
        .distinct("text_hash")
        .values_list("text_hash", "embedding")
    )
    vectors.update(cached_vectors(identity=identity, agent_id=agent_id, digests=sorted(wanted - vectors.keys())))
    metrics.embedding_cache_hits(kind="document", hits=len(vectors))  # embed_texts counts its own
    return vectors, len(vectors)


def _batch_agent(files) -> int:
    """The one agent whose files a batch indexes (a batch is one job's files): vectors are reused within
    an agent's memory only, never from another agent's."""
    agent_ids = {f.agent_id for f in files}
    if len(agent_ids) != 1:
        raise ValueError(f"an indexing batch holds one agent's files, not {len(agent_ids)} agents'")
    return agent_ids.pop()


def _embed_awaiting(*, awaiting, missing, vectors, outcomes, provider, identity, job_id, agent_id: int) -> Exception | None:
    """Step 2: embed the texts the written files lack (each once), fill their vectors in and settle
    them. Returns the transient provider error met, if any (the caller re-raises it to retry)."""
    from indexing.embedding_cache import embed_texts
    from indexing.embeddings import ProviderError, ProviderTransientError

    needed = {digest: missing[digest] for _, spans in awaiting for _, digest in spans if digest in missing}
    if _batch_submitted(awaiting=awaiting, needed=needed, outcomes=outcomes, provider=provider, job_id=job_id, agent_id=agent_id):
        return None
    embedded = hits = 0
    batch_error = ""
    transient = None
    rejected: dict[str, str] = {}
    try:
        result = embed_texts(provider=provider, agent_id=agent_id, texts=list(needed.values()))
    except ProviderError as exc:
        batch_error = f"embedding failed: {exc}"
        if isinstance(exc, ProviderTransientError):
            transient = exc
    else:
        digests = list(needed)
        vectors.update((d, v) for d, v in zip(digests, result.vectors) if v is not None)
        rejected = {digests[i]: reason for i, reason in result.rejected.items()}
        embedded, hits = result.embedded, result.cache_hits
    for memory_file, spans in awaiting:
        lacking = [digest for _, digest in spans if digest not in vectors]
        if lacking:
            reasons = [rejected[d] for d in lacking if d in rejected]
            outcomes[memory_file.pk].error = batch_error or f"the provider rejected {len(reasons)} chunk(s): {reasons[0] if reasons else ''}"
    _files_vectors_fill(
        awaiting=awaiting, outcomes=outcomes, vectors={d: vectors[d] for d in needed if d in vectors},
        identity=identity, job_id=job_id, embedded=embedded, cache_hits=hits,
    )
    return transient


def _batch_submitted(*, awaiting, needed: dict[str, str], outcomes, provider, job_id: int | None, agent_id: int) -> bool:
    """Bulk work: the texts go to the provider's batch API instead (indexing/embedding_batches.py).
    True when they are in flight: the batch's id is stored, then the files go back to ``pending``
    (their chunks written, keyword-searchable) and the job to ``waiting`` until the collector has the
    vectors. A provider that refuses the batch costs nothing: the pass embeds synchronously."""
    from indexing.embedding_batches import batch_wanted, embedding_batch_submit, embedding_batches_in_flight
    from indexing.embeddings import ProviderError

    if not batch_wanted(provider=provider, job_id=job_id, inputs=len(needed)):
        return False
    files = [f for f, _ in awaiting]
    try:
        batches = embedding_batch_submit(
            provider=provider, agent_id=agent_id, job_id=job_id, texts=needed, file_ids=[f.pk for f in files]
        )
    except ProviderError as exc:
        logger.warning("job %s: the batch API refused %d text(s) (%s); embedding them synchronously", job_id, len(needed), exc)
        return False
    now = timezone.now()
    with transaction.atomic():
        embedding_batches_in_flight(batches=batches)
        live, _ = _files_live(files=files, outcomes=outcomes)
        MemoryFile.objects.filter(pk__in=[f.pk for f in live], state=State.INDEXING).update(**to_pending(now=now))
        IndexJob.objects.filter(pk=job_id, state=JobState.RUNNING).update(**job_to_waiting())
    return True


_CHUNK_COPY_COLUMNS = (
    "agent_id", "file_id", "ordinal", "start_line", "end_line", "text", "text_hash", "token_count",
    "search_text", "embedding", "embedding_identity", "embedding_dimensions", "created_at",
)


def _chunks_copy(rows: list[tuple]) -> None:
    """Insert chunk rows with COPY: several times faster than a multi-row INSERT for thousands of
    chunks (no per-parameter query parsing). search_vector is a generated column, filled by Postgres."""
    if not rows:
        return
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {CHUNK} ({', '.join(_CHUNK_COPY_COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _chunk_vectors_fill(*, agent_ids: set[int], file_ids: list[int], vectors: dict, identity) -> int:
    """Give every chunk of these files whose text has a vector in ``vectors`` (text hash → vector) that
    vector, unless it has one of this identity already. By text hash: a vector belongs to its text, so
    this is right whichever version of a file the chunk belongs to. Returns the rows changed."""
    if not file_ids or not vectors:
        return 0
    digests = list(vectors)
    # Expected plan: the files' chunks through chunk_file_ordinal_idx, hash-joined with the unnested
    # pairs. Only `embedding`, `embedding_identity` and `embedding_dimensions` change: Postgres does not
    # recompute the generated search_vector, whose input (search_text) is untouched.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {CHUNK} AS c SET embedding = v.embedding::vector, embedding_identity = %s, "
            "embedding_dimensions = %s FROM unnest(%s::text[], %s::text[]) AS v(text_hash, embedding) "
            "WHERE c.agent_id = ANY(%s) AND c.file_id = ANY(%s) AND c.text_hash = v.text_hash AND c.embedding_identity <> %s",
            [
                identity.key, identity.dimensions, digests, [Vector._to_db(vectors[d]) for d in digests],
                sorted(agent_ids), sorted(file_ids), identity.key,
            ],
        )
        return cursor.rowcount


def _files_live(*, files: list[MemoryFile], outcomes: dict) -> tuple[list[MemoryFile], dict[int, dict]]:
    """Inside a transaction: lock the files (ascending id, like every web path: the lock order) and
    keep those that still have the content that was chunked; the others are marked superseded and left
    to the newer upload's job. Returns (live files, their current rows by id)."""
    files_lock([f.pk for f in files])
    current = {
        row["id"]: row
        for row in MemoryFile.objects.filter(pk__in=[f.pk for f in files]).values("id", "content_hash", "source", "job_id")
    }
    live = []
    for memory_file in files:
        row = current.get(memory_file.pk)
        if row is None or row["content_hash"] != memory_file.content_hash or row["source"] != memory_file.source:
            outcomes[memory_file.pk].superseded = True
        else:
            live.append(memory_file)
    return live, current


def _files_settle(*, files: list[MemoryFile], outcomes: dict, now: datetime) -> None:
    """Indexed, or failed with its outcome's error: one UPDATE per distinct result (normally one).
    indexed_hash = content_hash is exact here: the rows are locked and their hash was just re-checked."""
    by_result: dict[str, list[int]] = {}
    for memory_file in files:
        by_result.setdefault(error_text(outcomes[memory_file.pk].error), []).append(memory_file.pk)
    for error, ids in by_result.items():
        MemoryFile.objects.filter(pk__in=ids).update(**to_settled(error, now=now))


def _jobs_count(*, per_job: dict[int, Counter], job_id: int | None, batch: Counter) -> None:
    """Add counters to jobs: ``per_job`` to the files' own jobs, ``batch`` (the batch's embedding work)
    to the job being run, or to the files' one job when the batch runs outside a job."""
    batch = +batch
    owner = job_id if job_id is not None else (next(iter(per_job)) if len(per_job) == 1 else None)
    if batch and owner is not None:
        per_job.setdefault(owner, Counter()).update(batch)
    for owner, counts in per_job.items():
        counts = +counts
        if counts:
            IndexJob.objects.filter(pk=owner).update(**{name: F(name) + value for name, value in counts.items()})


def _files_chunks_write(
    *, files, outcomes, work, indexed_texts: dict[str, str], vectors: dict, identity, job_id, missing, cache_hits: int
) -> list[tuple[MemoryFile, list[tuple[ChunkSpan, str]]]]:
    """Step 1, in one transaction: each live file's chunk set with the vectors known so far, and the
    files that need nothing from the provider (``missing``: the text hashes to embed) settled. Returns
    the (file, spans) written that still lack vectors — step 2's work; they stay ``indexing``.

    A file whose chunks already are exactly these (same content, lines and texts: a rerun that lacks
    only vectors, a re-embedding) keeps its rows, which get the known vectors in place."""
    now = timezone.now()
    with transaction.atomic():
        live, current = _files_live(files=files, outcomes=outcomes)
        live_ids = {f.pk for f in live}
        live_work = [(f, spans) for f, spans in work if f.pk in live_ids]
        if live_work:
            agent_ids = {f.agent_id for f, _ in live_work}
            old_rows: dict[int, list[tuple]] = {}
            for file_id, *row in (
                # The agents named too, here and below: the chunk table is partitioned by agent, and
                # a statement without it plans and locks every partition (indexing/partitions.py).
                Chunk.objects.filter(agent_id__in=agent_ids, file_id__in=[f.pk for f, _ in live_work])
                .order_by("file_id", "ordinal")
                .values_list("file_id", "ordinal", "start_line", "end_line", "text_hash")
            ):
                old_rows.setdefault(file_id, []).append(tuple(row))
            rows, rewritten, kept, kept_vectors = [], [], [], {}
            edited: dict[int, EditedFile] = {}
            for memory_file, spans in live_work:
                old = old_rows.get(memory_file.pk, [])
                new = [(ordinal, span.start_line, span.end_line, digest) for ordinal, (span, digest) in enumerate(spans)]
                new_counts, old_counts = Counter(row[3] for row in new), Counter(row[3] for row in old)
                outcome = outcomes[memory_file.pk]
                outcome.chunks = len(spans)
                outcome.chunks_added = sum((new_counts - old_counts).values())
                outcome.chunks_removed = sum((old_counts - new_counts).values())
                if memory_file.indexed_hash == memory_file.content_hash and old == new:
                    kept.append(memory_file.pk)
                    kept_vectors.update((d, vectors[d]) for _, d in spans if d in vectors)
                    continue
                rewritten.append(memory_file.pk)
                if outcome.chunks_removed:
                    edited[memory_file.pk] = EditedFile(
                        agent_id=memory_file.agent_id, spans=spans,
                        old=set(old_counts), gone=set(old_counts - new_counts),
                    )
                for ordinal, (span, digest) in enumerate(spans):
                    vector = vectors.get(digest)
                    rows.append(
                        (
                            memory_file.agent_id, memory_file.pk, ordinal, span.start_line, span.end_line, span.text,
                            digest, span.token_count, keyword_document(indexed_texts[digest]),
                            None if vector is None else Vector._to_db(vector),
                            identity.key if vector is not None else "",
                            identity.dimensions if vector is not None else None,
                            now,
                        )
                    )
            if rewritten:
                _words_removed_note(edited=edited)
                Chunk.objects.filter(agent_id__in=agent_ids, file_id__in=rewritten).delete()
                _chunks_copy(rows)
            _chunk_vectors_fill(agent_ids=agent_ids, file_ids=kept, vectors=kept_vectors, identity=identity)

        awaiting = [(f, spans) for f, spans in live_work if any(digest in missing for _, digest in spans)]
        awaiting_ids = {f.pk for f, _ in awaiting}
        _files_settle(files=[f for f in live if f.pk not in awaiting_ids], outcomes=outcomes, now=now)
        if awaiting_ids:
            # Their chunks are this content's: keyword search and snippets read them as indexed.
            MemoryFile.objects.filter(pk__in=awaiting_ids).update(indexed_hash=F("content_hash"), updated_at=now)

        per_job: dict[int, Counter] = {}
        for memory_file in live:
            owner = current[memory_file.pk]["job_id"]
            outcome = outcomes[memory_file.pk]
            if owner is None or outcome.skipped:
                continue
            counts = per_job.setdefault(owner, Counter())
            # A retry that only adds missing vectors is not another change of the file.
            counts["files_changed"] += memory_file.indexed_hash != memory_file.content_hash
            counts["chunks_added"] += outcome.chunks_added
            counts["chunks_removed"] += outcome.chunks_removed
            counts["malformed_lines"] += outcome.malformed_lines
        _jobs_count(per_job=per_job, job_id=job_id, batch=Counter(cache_hits=cache_hits))
    return awaiting


class EditedFile(NamedTuple):
    """A file whose chunks are written again with some of the old ones gone (_words_removed_note)."""

    agent_id: int
    spans: list[tuple[ChunkSpan, str]]  # its new chunks: (span, text hash)
    old: set[str]  # its old chunks' text hashes
    gone: set[str]  # those of them not among the new ones


def _words_removed_note(*, edited: dict[int, EditedFile]) -> None:
    """Keyword expansion's words follow the text (search/expansion.py): the agents of the files (by id)
    whose edit took words out (not an append, which only rewrites the last chunk) are noted for a recount
    of their words. Reads the gone chunks' texts, before they are deleted."""
    if not edited:
        return
    from search.expansion import words_gone, words_text_removed

    gone_texts: dict[int, list[str]] = {}
    for file_id, digest, text in Chunk.objects.filter(
        agent_id__in={e.agent_id for e in edited.values()}, file_id__in=list(edited),
        text_hash__in=set().union(*(e.gone for e in edited.values())),
    ).values_list("file_id", "text_hash", "text"):
        if digest in edited[file_id].gone:
            gone_texts.setdefault(file_id, []).append(text)
    agents = set()
    for file_id, e in edited.items():
        # The chunks new to the file first: an append's old last chunk has its words in the new last one.
        texts = [span.text for span, _ in sorted(e.spans, key=lambda pair: pair[1] in e.old)]
        if e.agent_id not in agents and words_gone(removed=gone_texts.get(file_id, []), kept=texts):
            agents.add(e.agent_id)
    if agents:
        words_text_removed(agent_ids=agents)


def _files_vectors_fill(*, awaiting, outcomes, vectors: dict, identity, job_id, embedded: int, cache_hits: int) -> None:
    """Step 2, in one transaction: the vectors embedded for the chunks step 1 wrote, and those files
    settled (indexed, or failed with the reason when vectors are still missing). Vectors go in whatever
    happened to a file meanwhile (by text hash); only files still holding the content that was chunked
    are settled, the others belong to the newer upload's job."""
    now = timezone.now()
    files = [f for f, _ in awaiting]
    with transaction.atomic():
        live, current = _files_live(files=files, outcomes=outcomes)
        _chunk_vectors_fill(
            agent_ids={f.agent_id for f in files}, file_ids=[f.pk for f in files], vectors=vectors, identity=identity
        )
        _files_settle(files=live, outcomes=outcomes, now=now)
        owners = {current[f.pk]["job_id"] for f in live if current[f.pk]["job_id"] is not None}
        _jobs_count(
            per_job={owner: Counter() for owner in owners}, job_id=job_id,
            batch=Counter(chunks_embedded=embedded, cache_hits=cache_hits),
        )


def _index_batch(*, batch: list[int], provider, job_id: int, deferred: str) -> tuple[Exception | None, list[str]]:
    """Index one batch; on an unexpected error, index its files one by one so one bad file fails
    alone. Returns (the transient provider error met, if any; internal error messages)."""
    from indexing.embeddings import ProviderTransientError

    try:
        files_index(file_ids=batch, provider=provider, job_id=job_id, defer_embedding=deferred)
        return None, []
    except ProviderTransientError as exc:
        return exc, []
    except Exception:
        logger.exception("indexing a batch of job %s failed; retrying its files one by one", job_id)
    transient, internal_errors = None, []
    for file_id in batch:
        try:
            files_index(file_ids=[file_id], provider=provider, job_id=job_id, defer_embedding=deferred)
        except ProviderTransientError as exc:
            transient = exc
        except Exception as exc:
            logger.exception("indexing file %s of job %s failed", file_id, job_id)
            internal_errors.append(f"{exc.__class__.__name__}: {exc}")
    return transient, internal_errors


def index_job_run(*, job_id: int, dispatch_batch: Callable[[int, list[int]], None] | None = None) -> IndexJob | None:
    """Run one job: index its pending or failed files in batches. Returns None when the job was not
    claimable (already running, done or failed: running a job twice is harmless).

    With ``dispatch_batch`` (the Celery task passes one that enqueues ``index_batch_task``), a job of
    several batches is fanned out so that every worker process can take a share; the last batch to
    finish settles the job (``index_job_settle``). Otherwise the batches run here, in order: on a
    transient provider error the remaining files are still chunked (keyword-searchable) without calling
    the provider again, the job goes back to ``queued`` and the error is re-raised so the task retries.
    """
    from indexing.embeddings import get_provider

    now = timezone.now()
    claimed = IndexJob.objects.filter(pk=job_id, state=JobState.QUEUED).update(**job_to_running(now=now))
    if not claimed:
        return None
    if _job_agent_being_deleted(job_id):
        return _job_stop(job_id)
    rows = list(
        MemoryFile.objects.filter(job_id=job_id, state__in=CLAIMABLE).order_by("id").values_list("id", "size")
    )
    batches = _batches(rows)
    if dispatch_batch is not None and len(batches) > 1:
        for batch in batches:
            dispatch_batch(job_id, batch)
        return IndexJob.objects.get(pk=job_id)

    provider = get_provider()
    transient = None
    internal_errors: list[str] = []
    for batch in batches:
        if _job_agent_being_deleted(job_id):
            return _job_stop(job_id)
        deferred = f"embedding deferred after a transient error: {transient}" if transient else ""
        met, errors = _index_batch(batch=batch, provider=provider, job_id=job_id, deferred=deferred)
        transient = transient or met
        internal_errors += errors
    if transient is not None:
        IndexJob.objects.filter(pk=job_id, state=JobState.RUNNING).update(
            **job_to_queued(error=f"transient embedding error, will retry: {transient}")
        )
        raise transient
    return index_job_settle(job_id=job_id, internal_errors=internal_errors)


def index_job_batch_run(*, job_id: int, file_ids: list[int]) -> IndexJob | None:
    """One batch of a fanned-out job (worker side). A transient provider error is re-raised (after the
    batch's files were written without the missing vectors) so the batch task retries; otherwise the
    job is settled if this was its last unfinished batch."""
    from indexing.embeddings import get_provider

    if _job_agent_being_deleted(job_id):
        return _job_stop(job_id)
    transient, internal_errors = _index_batch(batch=file_ids, provider=get_provider(), job_id=job_id, deferred="")
    if transient is not None:
        raise transient
    return index_job_settle(job_id=job_id, internal_errors=internal_errors)


# The reason a job of an agent being deleted ends with (agents/deletion.py deletes it soon after).
AGENT_BEING_DELETED = "stopped: the agent is being deleted"


def _job_agent_being_deleted(job_id: int) -> bool:
    return IndexJob.objects.filter(pk=job_id, agent__deletion_requested_at__isnull=False).exists()


def _job_stop(job_id: int) -> IndexJob | None:
    """End a job whose agent is being deleted, between two batches: what it wrote stays consistent (each
    batch commits whole), what it did not index stays as it is until the deletion takes it."""
    IndexJob.objects.filter(pk=job_id).exclude(state=JobState.DONE).update(**job_to_finished(AGENT_BEING_DELETED))
    return IndexJob.objects.filter(pk=job_id).first()


def index_job_settle(*, job_id: int, internal_errors: list[str] | None = None) -> IndexJob | None:
    """Finish a running job once none of its files is pending or indexing: done, or failed with the
    first failure. Safe to call from every batch (only the last one finds nothing left), and a later
    successful retry of a batch turns a failed job done."""
    if MemoryFile.objects.filter(job_id=job_id, state__in=IN_FLIGHT).exists():
        return None
    failed_files = MemoryFile.objects.filter(job_id=job_id, state=State.FAILED)
    first_failed = failed_files.values_list("path", "last_error").first()
    error = ""
    if first_failed:
        error = f"{failed_files.count()} file(s) failed; first: {first_failed[0]}: {first_failed[1]}"
    elif internal_errors:
        error = f"{len(internal_errors)} internal error(s); first: {internal_errors[0]}"
    IndexJob.objects.filter(pk=job_id, state__in=[JobState.RUNNING, JobState.FAILED]).update(**job_to_finished(error))
    return IndexJob.objects.filter(pk=job_id).first()


def index_job_fail(*, job_id: int, reason: str) -> None:
    """Mark a job failed for good (retries exhausted, or an unexpected error in the task)."""
    IndexJob.objects.filter(pk=job_id).exclude(state=JobState.DONE).update(**job_to_finished(reason))
    # Files the job left claimed go back to "failed" (keyword-searchable if they have chunks) so the
    # periodic task retries them; they are not silently stuck in "indexing".
    files_update(
        MemoryFile.objects.filter(job_id=job_id, state__in=[State.INDEXING]), **to_failed(reason)
    )
