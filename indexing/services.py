"""Workflows that write an agent's memory and its index.

The web side (``file_ingest``, ``workspace_sync``, ``file_delete``) stores content and its hash in one
transaction and enqueues an IndexJob on commit; nothing is half-written on a rejection because every
check runs before the first write. The worker side (``index_job_run`` → ``file_index``) chunks, reuses
vectors by text hash (from this agent's chunks, then from the shared EmbeddingCache), embeds only the
rest and replaces the file's chunk set atomically.

Concurrency, in short:
- writes of one agent are serialised by a row lock on the Agent (quotas stay exact, and two uploads of
  one path cannot interleave);
- lock order, everywhere: the Agent row (web side only, FOR NO KEY UPDATE), then MemoryFile rows in
  ascending id (``files_lock``), then their chunks, then IndexJob rows. A path that deletes or replaces
  chunks locks their files first. (Deleting chunks before locking their file, or a plain FOR UPDATE on the
  Agent that blocks the FOR KEY SHARE of the chunks' foreign-key check at a worker's commit, deadlocked
  a sync against a worker.) Web writes that still meet a deadlock are retried (``_lock_conflict_retry``);
- workers claim files and jobs with status-guarded UPDATEs, so a task that runs twice does nothing twice;
- a worker writes chunks only while holding the MemoryFile row lock and only if the file still has the
  content hash it chunked, so racing uploads never leave a mix of two versions' chunks.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone
from pgvector import Vector

from agents.models import Agent
from indexing.chunking import ChunkSpan, chunk_markdown
from indexing.embedding_identity import configured_identity
from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.paths import path_normalize, prefix_normalize, source_resolve
from indexing.recovery import claimed_files_lease, job_enqueue_on_commit
from indexing.transcripts import chunk_transcript
from memoryhub import metrics
from memoryhub.domain import DomainError
from memoryhub.errors import CLIENT_ERRORS, ApiError, is_lock_conflict
from indexing.keyword_document import keyword_document

logger = logging.getLogger(__name__)

State = MemoryFile.State
JobState = IndexJob.State
Trigger = IndexJob.Trigger


# --- Content checks ------------------------------------------------------------------------------


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_from_bytes(raw: bytes) -> str:
    """A raw request body as text: UTF-8 only, no binary (NUL bytes) → ApiError 415."""
    if b"\x00" in raw:
        raise ApiError(status_code=415, code="binary_content", message="The content contains NUL bytes: binary files are not accepted.")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            status_code=415, code="invalid_encoding", message=f"The content is not valid UTF-8 (byte {exc.start})."
        ) from None


def content_check(content: str) -> tuple[str, int]:
    """(sha256 hex, UTF-8 size) of acceptable text content, or ApiError 415/413."""
    if "\x00" in content:
        raise ApiError(status_code=415, code="binary_content", message="The content contains NUL characters: binary files are not accepted.")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(status_code=415, code="invalid_encoding", message="The content is not valid Unicode text (lone surrogate).") from None
    limit = settings.MEMORYHUB_MAX_FILE_BYTES
    if len(data) > limit:
        raise ApiError(
            status_code=413, code="file_too_large", message=f"The file has {len(data)} bytes; the limit is {limit} bytes per file."
        )
    return hashlib.sha256(data).hexdigest(), len(data)


def text_append(content: str, text: str) -> str:
    """``content`` with ``text`` added as new lines: a file that does not end with a newline gets one
    first, so an appended JSONL line never joins the last one."""
    if not text:
        return content
    if content and not content.endswith("\n"):
        content += "\n"
    return content + text


def hash_normalize(value: str) -> str:
    """A client's content hash: 64 hex digits, optionally written ``sha256:<hex>``."""
    digest = value.strip().lower().removeprefix("sha256:") if isinstance(value, str) else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ApiError(status_code=400, code="invalid_hash", message="hash must be the SHA-256 of the file's bytes: 64 hex digits (optionally 'sha256:<hex>').")
    return digest


# --- Web side: ingest, sync, delete --------------------------------------------------------------


def _agent_lock(agent: Agent) -> None:
    """Serialise this agent's writes until the transaction ends (quotas and racing uploads).

    FOR NO KEY UPDATE, not FOR UPDATE: it conflicts with itself, but not with the FOR KEY SHARE that
    Postgres' (deferred) foreign-key checks take on the agent row when a worker commits new chunks, so a
    worker never waits for a web request's agent lock while holding file rows that request wants."""
    Agent.objects.select_for_update(no_key=True).filter(pk=agent.pk).values_list("pk", flat=True).first()


def files_lock(file_ids) -> list[int]:
    """Lock MemoryFile rows in ascending id order (the one lock order of every path that touches their
    chunks or state) until the transaction ends. Returns the ids that still exist."""
    ids = sorted(set(file_ids))
    locked: list[int] = []
    for start in range(0, len(ids), 5000):  # batches in ascending order keep the global order
        batch = ids[start : start + 5000]
        locked += MemoryFile.objects.select_for_update().filter(pk__in=batch).order_by("id").values_list("id", flat=True)
    return locked


def _files_update(files, **fields) -> int:
    """``files.update(**fields)`` after locking the rows in id order: a plain multi-row UPDATE locks them
    in scan order and could deadlock with a sync or a worker holding some of them."""
    with transaction.atomic():
        ids = files_lock(files.values_list("id", flat=True))
        return files.filter(pk__in=ids).update(**fields) if ids else 0


_LOCK_CONFLICT_ATTEMPTS = 3


def _lock_conflict_retry(func):
    """Safety net for the web side's write transactions: the lock order above should make deadlocks
    impossible, but if Postgres still aborts one (deadlock or serialization failure), run the whole
    transaction again (it was rolled back: nothing is half-written) a few times, then answer 503
    ``write_conflict`` instead of a 500. Inside an outer transaction (tests, or a caller's atomic block)
    a retry is impossible, so the conflict is only translated."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        attempts = 1 if connection.in_atomic_block else _LOCK_CONFLICT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                return func(*args, **kwargs)
            except OperationalError as exc:
                if not is_lock_conflict(exc):
                    raise
                logger.warning("%s met a lock conflict (attempt %s of %s): %s", func.__name__, attempt, attempts, exc)
                if attempt == attempts:
                    error = ApiError(
                        status_code=503,
                        code="write_conflict",
                        message="This agent's memory is being written concurrently; nothing was changed. Try again.",
                    )
                    error.wait = 1
                    raise error from exc
                time.sleep(0.05 * attempt * (1 + random.random()))  # let the other transaction finish

    return wrapper


def _quota_check(*, agent: Agent, files_delta: int, bytes_delta: int) -> None:
    if files_delta <= 0 and bytes_delta <= 0:
        return  # shrinking is always allowed, even above a lowered quota
    usage = MemoryFile.objects.filter(agent=agent).aggregate(files=Count("id"), bytes=Coalesce(Sum("size"), 0))
    max_files = settings.MEMORYHUB_MAX_FILES_PER_AGENT
    max_bytes = settings.MEMORYHUB_MAX_BYTES_PER_AGENT
    if files_delta > 0 and usage["files"] + files_delta > max_files:
        raise ApiError(
            status_code=413,
            code="file_quota_exceeded",
            message=f"This agent stores {usage['files']} files; {files_delta} more would exceed its quota of {max_files} files.",
        )
    if bytes_delta > 0 and usage["bytes"] + bytes_delta > max_bytes:
        raise ApiError(
            status_code=413,
            code="byte_quota_exceeded",
            message=(
                f"This agent stores {usage['bytes']} bytes; this change adds {bytes_delta} bytes and would exceed "
                f"its quota of {max_bytes} bytes."
            ),
        )


def _expected_hash_check(*, path: str, memory_file: MemoryFile | None, expected_hash: str | None) -> None:
    """A conditional write: the caller read the file at ``expected_hash`` (``""``: it expects no file).
    Called with the file row locked, so two writers that read the same hash cannot both pass."""
    if expected_hash is None:
        return
    current = memory_file.content_hash if memory_file is not None else ""
    if current != expected_hash:
        shown = current or "none (the file does not exist)"
        error = ApiError(
            status_code=412,
            code="hash_mismatch",
            message=f"{path} changed since it was read: its current hash is {shown}, not {expected_hash}. Nothing was written.",
        )
        error.details = {"current_hash": current or None}
        raise error


def _enqueue(job: IndexJob) -> None:
    # On commit, with the outbox behind it: a broker that is down never fails the write (indexing/recovery.py).
    job_enqueue_on_commit(job)


@_lock_conflict_retry
def file_ingest(
    *,
    agent: Agent,
    path: str,
    content: str | None = None,
    append: str | None = None,
    source: str | None = None,
    mtime: datetime | None = None,
    attributes: dict | None = None,
    expected_hash: str | None = None,
) -> tuple[MemoryFile, IndexJob | None]:
    """Store one file's content, or (``append``) add text to its end, creating it when absent.
    Unchanged content (same hash and source) creates no job.

    ``attributes`` (validated by indexing/attributes.py) replace the file's attributes; None keeps them.
    They are metadata: a change of attributes alone updates the row and creates no job.

    ``expected_hash`` makes the write conditional: the file's current hash (``""`` for "no file yet"),
    else 412 ``hash_mismatch`` and nothing is written. An append's chunks keep their text hashes up to
    the changed tail, so the worker embeds only the chunks around the end (vectors are reused by hash).

    The returned file has ``was_created`` set (True when the path was new to this agent).
    """
    path = path_normalize(path)
    source = source_resolve(path=path, source=source)
    if (content is None) == (append is None):
        raise ValueError("file_ingest needs exactly one of content and append")
    if append is not None:
        content_check(append)  # a bad delta is refused before anything is locked
    else:
        content_hash, size = content_check(content)
    with transaction.atomic():
        _agent_lock(agent)
        memory_file = MemoryFile.objects.select_for_update().filter(agent=agent, path=path).first()
        _expected_hash_check(path=path, memory_file=memory_file, expected_hash=expected_hash)
        if append is not None:
            content = text_append(memory_file.content if memory_file is not None else "", append)
            content_hash, size = content_check(content)
        if memory_file is not None and memory_file.content_hash == content_hash and memory_file.source == source:
            if mtime is not None and memory_file.client_mtime != mtime:
                MemoryFile.objects.filter(pk=memory_file.pk).update(client_mtime=mtime)
                memory_file.client_mtime = mtime
            if attributes is not None and memory_file.attributes != attributes:
                MemoryFile.objects.filter(pk=memory_file.pk).update(attributes=attributes)
                memory_file.attributes = attributes
            memory_file.was_created = False
            return memory_file, None
        _quota_check(
            agent=agent,
            files_delta=0 if memory_file else 1,
            bytes_delta=size - (memory_file.size if memory_file else 0),
        )
        job = IndexJob.objects.create(agent=agent, trigger=Trigger.UPLOAD, files_seen=1)
        created = memory_file is None
        if created:
            memory_file = MemoryFile(agent=agent, path=path)
        elif memory_file.source != source:
            memory_file.indexed_hash = ""  # same text, different chunking: index it again
        memory_file.source = source
        memory_file.content = content
        memory_file.content_hash = content_hash
        memory_file.size = size
        memory_file.client_mtime = mtime if mtime is not None else memory_file.client_mtime
        memory_file.attributes = attributes if attributes is not None else memory_file.attributes
        memory_file.state = State.PENDING
        memory_file.last_error = ""
        memory_file.failures = 0
        memory_file.job = job
        memory_file.save()
        _enqueue(job)
    memory_file.was_created = created
    return memory_file, job


@dataclass
class SyncEntry:
    path: str
    content: str | None = None
    hash: str | None = None
    source: str | None = None
    mtime: datetime | None = None
    attributes: dict | None = None  # None: keep the file's attributes


@dataclass
class SyncOutcome:
    job: IndexJob | None
    needed: list[str] = field(default_factory=list)
    unchanged: int = 0
    deleted: list[str] = field(default_factory=list)
    changed: int = 0


@dataclass
class _Prepared:
    path: str
    source: str
    source_given: bool
    content: str | None
    hash: str
    size: int
    mtime: datetime | None
    attributes: dict | None


def _entry_error(index: int, exc):
    """The same error, its message prefixed with the sync entry it is about."""
    if isinstance(exc, DomainError):
        return type(exc)(f"files[{index}]: {exc}", code=exc.code, **exc.details)
    return ApiError(status_code=exc.status_code, code=exc.get_codes(), message=f"files[{index}]: {exc.detail}")


def _sync_prepare(entries: list[SyncEntry]) -> list[_Prepared]:
    """Validate every entry before anything is written (one bad entry rejects the whole sync)."""
    limit = settings.MEMORYHUB_MAX_SYNC_FILES
    if len(entries) > limit:
        raise ApiError(status_code=413, code="too_many_files", message=f"The sync lists {len(entries)} files; the limit is {limit} per request.")
    prepared: list[_Prepared] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        try:
            path = path_normalize(entry.path)
            if path in seen:
                raise ApiError(status_code=400, code="duplicate_path", message=f"{path!r} is listed more than once.")
            seen.add(path)
            source = source_resolve(path=path, source=entry.source)
            if entry.content is not None:
                digest, size = content_check(entry.content)
                if entry.hash and hash_normalize(entry.hash) != digest:
                    raise ApiError(status_code=400, code="hash_mismatch", message="hash is not the SHA-256 of the UTF-8 content sent.")
            elif entry.hash:
                digest, size = hash_normalize(entry.hash), 0
            else:
                raise ApiError(status_code=400, code="invalid_request", message="each file needs 'content' or 'hash'.")
        except CLIENT_ERRORS as exc:
            raise _entry_error(index, exc) from None
        prepared.append(_Prepared(path, source, bool(entry.source), entry.content, digest, size, entry.mtime, entry.attributes))
    return prepared


def _existing_files(*, agent: Agent, paths: list[str]) -> dict[str, MemoryFile]:
    found: dict[str, MemoryFile] = {}
    fields = ("id", "agent_id", "path", "source", "content_hash", "size", "client_mtime", "attributes")
    for start in range(0, len(paths), 5000):
        batch = paths[start : start + 5000]
        for memory_file in MemoryFile.objects.filter(agent=agent, path__in=batch).only(*fields):
            found[memory_file.path] = memory_file
    return found


@_lock_conflict_retry
def workspace_sync(
    *, agent: Agent, entries: list[SyncEntry], delete_missing: bool = False, prefix: str = ""
) -> SyncOutcome:
    """The sync webhook: upsert content entries, diff hash-only ones, optionally delete the unlisted.

    Hash-only entries whose content the server lacks come back in ``needed`` (send them again with
    content). ``delete_missing`` removes this agent's files under ``prefix`` that are not listed.
    Everything happens in one transaction, after every entry has been validated.
    """
    prefix = prefix_normalize(prefix)
    prepared = _sync_prepare(entries)
    now = timezone.now()
    outcome = SyncOutcome(job=None)
    with transaction.atomic():
        _agent_lock(agent)
        existing = _existing_files(agent=agent, paths=[p.path for p in prepared])
        to_create: list[_Prepared] = []
        to_update: list[tuple[_Prepared, MemoryFile]] = []
        to_resource: list[tuple[_Prepared, MemoryFile]] = []  # same content, new source: index again
        relabelled: list[MemoryFile] = []  # new attributes only: no indexing
        for item in prepared:
            current = existing.get(item.path)
            if current is not None and item.attributes is not None and current.attributes != item.attributes:
                current.attributes = item.attributes
                relabelled.append(current)
            if current is None or current.content_hash != item.hash:
                if item.content is None:
                    outcome.needed.append(item.path)
                elif current is None:
                    to_create.append(item)
                else:
                    to_update.append((item, current))
            elif current.source != item.source and (item.source_given or item.content is not None):
                to_resource.append((item, current))
            else:
                outcome.unchanged += 1

        doomed: list[tuple[int, str, int]] = []
        if delete_missing:
            listed = {item.path for item in prepared}
            candidates = MemoryFile.objects.filter(agent=agent)
            if prefix:
                candidates = candidates.filter(path__startswith=prefix)
            doomed = [row for row in candidates.values_list("id", "path", "size") if row[1] not in listed]

        _quota_check(
            agent=agent,
            files_delta=len(to_create) - len(doomed),
            bytes_delta=sum(i.size for i in to_create)
            + sum(i.size - f.size for i, f in to_update)
            - sum(size for _, _, size in doomed),
        )

        # Every existing file this sync rewrites or deletes, locked in id order before any of their chunks
        # is touched: a worker replacing one of them finishes (or is superseded) first.
        files_lock(
            [current.pk for _, current in to_update]
            + [current.pk for _, current in to_resource]
            + [file_id for file_id, _, _ in doomed]
        )
        changed = len(to_create) + len(to_update) + len(to_resource)
        chunks_removed = 0
        if doomed:
            doomed_ids = [file_id for file_id, _, _ in doomed]
            chunks_removed = Chunk.objects.filter(file_id__in=doomed_ids).count()
            MemoryFile.objects.filter(agent=agent, id__in=doomed_ids).delete()
            outcome.deleted = sorted(path for _, path, _ in doomed)
        if changed or doomed:
            outcome.job = IndexJob.objects.create(
                agent=agent,
                trigger=Trigger.SYNC,
                state=JobState.QUEUED if changed else JobState.DONE,
                files_seen=len(prepared),
                files_removed=len(doomed),
                chunks_removed=chunks_removed,
                started_at=None if changed else now,
                finished_at=None if changed else now,
            )
        job = outcome.job
        if to_create:
            MemoryFile.objects.bulk_create(
                [
                    MemoryFile(
                        agent=agent, path=i.path, source=i.source, content=i.content, content_hash=i.hash,
                        size=i.size, client_mtime=i.mtime, attributes=i.attributes or {}, state=State.PENDING, job=job,
                    )
                    for i in to_create
                ],
                batch_size=500,
            )
        updates = []
        for item, current in to_update:
            current.content, current.content_hash, current.size = item.content, item.hash, item.size
            current.client_mtime = item.mtime if item.mtime is not None else current.client_mtime
            current.source = item.source
            current.state, current.last_error, current.job, current.updated_at = State.PENDING, "", job, now
            current.failures = 0
            updates.append(current)
        if updates:
            MemoryFile.objects.bulk_update(
                updates,
                [
                    "content", "content_hash", "size", "client_mtime", "attributes", "source", "state", "last_error",
                    "failures", "job", "updated_at",
                ],
                batch_size=200,
            )
        relabelled = [f for f in relabelled if f not in {current for _, current in to_update}]
        if relabelled:
            MemoryFile.objects.bulk_update(relabelled, ["attributes"], batch_size=500)
        for item, current in to_resource:  # rare: same text declared under another source
            MemoryFile.objects.filter(pk=current.pk).update(
                source=item.source, indexed_hash="", state=State.PENDING, last_error="", failures=0, job=job, updated_at=now
            )
        outcome.changed = changed
        if changed:
            _enqueue(job)
    return outcome


@_lock_conflict_retry
def file_delete(*, agent: Agent, path: str, expected_hash: str | None = None) -> IndexJob:
    """Delete one file and its chunks now; the returned (finished) job records what was removed.
    ``expected_hash``: delete only the version the caller read (else 412 ``hash_mismatch``)."""
    path = path_normalize(path)
    now = timezone.now()
    with transaction.atomic():
        _agent_lock(agent)
        memory_file = MemoryFile.objects.filter(agent=agent, path=path).only("id", "content_hash").first()
        if memory_file is None:
            raise ApiError(status_code=404, code="not_found", message=f"No file {path!r}.")
        files_lock([memory_file.pk])  # before its chunks (lock order)
        _expected_hash_check(path=path, memory_file=memory_file, expected_hash=expected_hash)
        chunks_removed = Chunk.objects.filter(file_id=memory_file.pk).count()
        memory_file.delete()
        return IndexJob.objects.create(
            agent=agent, trigger=Trigger.DELETE, state=JobState.DONE, files_seen=1, files_removed=1,
            chunks_removed=chunks_removed, started_at=now, finished_at=now,
        )


def _files_requeue(*, agent: Agent, file_ids: list[int], trigger: str, force: bool = False) -> IndexJob | None:
    """Put existing files back in the queue under a new job (``force``: re-chunk even if unchanged)."""
    if not file_ids:
        return None
    with transaction.atomic():
        _agent_lock(agent)
        file_ids = files_lock(file_ids)  # an unordered multi-row UPDATE could deadlock with a worker
        job = IndexJob.objects.create(agent=agent, trigger=trigger, files_seen=len(file_ids))
        update = {"state": State.PENDING, "job": job, "updated_at": timezone.now()}
        if force:
            update["indexed_hash"] = ""
            update["failures"] = 0  # an operator's re-index tries again whatever the earlier failures
        MemoryFile.objects.filter(agent=agent, id__in=file_ids).update(**update)
        _enqueue(job)
    return job


def file_reindex(*, agent: Agent, file_ids: list[int] | None = None) -> IndexJob | None:
    """Re-chunk and re-index files of this agent (all when ``file_ids`` is None), e.g. after a change of
    the agent's chunk sizes. Vectors are reused by text hash, so unchanged chunks cost no embedding."""
    files = MemoryFile.objects.filter(agent=agent)
    if file_ids is not None:
        files = files.filter(id__in=file_ids)
    return _files_requeue(agent=agent, file_ids=list(files.values_list("id", flat=True)), trigger=Trigger.REINDEX, force=True)


def agent_reembed(*, agent: Agent) -> IndexJob | None:
    """Queue this agent's indexed files that have chunks without a vector of the configured identity
    (after a change of model or dimensions). Search keeps working meanwhile: keyword search is not
    affected, and vector search only uses vectors of the configured identity."""
    identity = configured_identity()
    if not identity.has_vectors:
        return None
    stale = Chunk.objects.filter(agent=agent).exclude(embedding_identity=identity.key)
    file_ids = list(
        MemoryFile.objects.filter(agent=agent, state=State.INDEXED, id__in=stale.values("file_id")).values_list("id", flat=True)
    )
    return _files_requeue(agent=agent, file_ids=file_ids, trigger=Trigger.REINDEX)


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


def chunk_sizes(*, agent: Agent) -> tuple[int, int]:
    """(max tokens, overlap) for this agent, never larger than the embedding model reads
    (MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS): a vector is only credited with lines its model saw."""
    tokens, overlap = _chunk_sizes_asked(agent=agent)
    window = settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS
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
        rows = MemoryFile.objects.filter(pk__in=file_ids, state__in=[State.PENDING, State.FAILED])
        if job_id is not None:
            rows = rows.filter(job_id=job_id).order_by("id").select_for_update()
        else:
            rows = rows.select_for_update(skip_locked=True)
        claimed = list(rows.values_list("id", flat=True))
        if claimed:
            MemoryFile.objects.filter(pk__in=claimed, state__in=[State.PENDING, State.FAILED]).update(
                state=State.INDEXING, updated_at=timezone.now()
            )
    return claimed


def files_index(
    *, file_ids: list[int], provider=_DEFAULT, job_id: int | None = None, defer_embedding: str = ""
) -> list[FileIndexOutcome]:
    """Index a batch of files in two steps, so that a file is keyword-searchable as soon as it is
    chunked, whatever the embedding provider does (hangs included):

    1. claim → chunk → the vectors known without the provider (this agent's chunks with the same text,
       then the shared EmbeddingCache) → write each file's chunk set with them, and commit. Keyword
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
    from indexing.embedding_cache import cached_vectors, embed_texts
    from indexing.embeddings import ProviderError, ProviderTransientError, get_provider

    transient: Exception | None = None
    try:
        files = list(MemoryFile.objects.select_related("agent").filter(pk__in=claimed).order_by("id"))
        outcomes = {f.pk: FileIndexOutcome(file_id=f.pk) for f in files}
        if provider is _DEFAULT:
            provider = get_provider()
        identity = provider.identity if provider is not None else None
        identity_key = identity.key if identity is not None else ""

        lacking_vectors: set[int] = set()
        unchanged = [f.pk for f in files if f.indexed_hash == f.content_hash]
        if provider is not None and unchanged:
            lacking_vectors = set(
                Chunk.objects.filter(file_id__in=unchanged).exclude(embedding_identity=identity_key).values_list("file_id", flat=True).distinct()
            )
        work: list[tuple[MemoryFile, list[tuple[ChunkSpan, str]]]] = []
        for memory_file in files:
            outcome = outcomes[memory_file.pk]
            if memory_file.indexed_hash == memory_file.content_hash and memory_file.pk not in lacking_vectors:
                outcome.skipped = True
                continue
            max_tokens, overlap = chunk_sizes(agent=memory_file.agent)
            spans, outcome.malformed_lines = file_chunk_spans(memory_file=memory_file, max_tokens=max_tokens, overlap_tokens=overlap)
            work.append((memory_file, [(span, text_hash(span.text)) for span in spans]))

        # Step 1: the vectors known without the provider, then the chunks, committed.
        vectors: dict[str, object] = {}
        missing: dict[str, str] = {}  # text hash → text, for the provider
        cache_hits = 0
        if provider is not None and work:
            wanted = {digest for _, spans in work for _, digest in spans}
            reusable = (
                Chunk.objects.filter(
                    agent_id__in={f.agent_id for f, _ in work}, text_hash__in=wanted, embedding_identity=identity_key
                )
                .exclude(embedding=None)
                .order_by("text_hash")
                .distinct("text_hash")
                .values_list("text_hash", "embedding")
            )
            vectors.update(reusable)
            vectors.update(cached_vectors(identity=identity, digests=sorted(wanted - vectors.keys())))
            cache_hits = len(vectors)
            metrics.embedding_cache_hits(kind="document", hits=cache_hits)  # embed_texts counts its own
            for _, spans in work:
                for span, digest in spans:
                    if digest not in vectors and digest not in missing:
                        missing[digest] = span.text
        if missing and defer_embedding:
            for memory_file, spans in work:
                if any(digest in missing for _, digest in spans):
                    outcomes[memory_file.pk].error = defer_embedding
            missing = {}
        awaiting = _files_chunks_write(
            files=files, outcomes=outcomes, work=work, vectors=vectors, identity=identity, job_id=job_id,
            missing=missing.keys(), cache_hits=cache_hits,
        )

        # Step 2: embed what the written files lack, fill it in, settle them.
        if awaiting:
            needed = {digest: missing[digest] for _, spans in awaiting for _, digest in spans if digest in missing}
            embedded = hits = 0
            batch_error = ""
            rejected: dict[str, str] = {}
            try:
                result = embed_texts(provider=provider, texts=list(needed.values()))
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
    except Exception as exc:
        if not isinstance(exc, ProviderError):
            # A bug must not leave files "indexing" forever: mark them failed, then fail loudly.
            with transaction.atomic():
                files_lock(claimed)  # lock order, as everywhere
                MemoryFile.objects.filter(pk__in=claimed, state=State.INDEXING).update(
                    state=State.FAILED, last_error=f"internal error: {exc.__class__.__name__}: {exc}"[:2000],
                    failures=F("failures") + 1, updated_at=timezone.now(),
                )
        raise
    result_list = [outcomes[f.pk] for f in files]
    if transient is not None and not all(o.superseded for o in result_list):
        raise transient
    return result_list


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
        with cursor.cursor.copy(f"COPY indexing_chunk ({', '.join(_CHUNK_COPY_COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _chunk_vectors_fill(*, file_ids: list[int], vectors: dict, identity) -> int:
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
            "UPDATE indexing_chunk AS c SET embedding = v.embedding::vector, embedding_identity = %s, "
            "embedding_dimensions = %s FROM unnest(%s::text[], %s::text[]) AS v(text_hash, embedding) "
            "WHERE c.file_id = ANY(%s) AND c.text_hash = v.text_hash AND c.embedding_identity <> %s",
            [
                identity.key, identity.dimensions, digests, [Vector._to_db(vectors[d]) for d in digests],
                sorted(file_ids), identity.key,
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
        by_result.setdefault(outcomes[memory_file.pk].error[:2000], []).append(memory_file.pk)
    for error, ids in by_result.items():
        fields = {"state": State.FAILED if error else State.INDEXED, "last_error": error, "updated_at": now}
        fields["failures"] = F("failures") + 1 if error else 0
        if not error:
            fields["indexed_at"] = now
        MemoryFile.objects.filter(pk__in=ids).update(indexed_hash=F("content_hash"), **fields)


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
    *, files, outcomes, work, vectors: dict, identity, job_id, missing, cache_hits: int
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
            old_rows: dict[int, list[tuple]] = {}
            for file_id, *row in (
                Chunk.objects.filter(file_id__in=[f.pk for f, _ in live_work])
                .order_by("file_id", "ordinal")
                .values_list("file_id", "ordinal", "start_line", "end_line", "text_hash")
            ):
                old_rows.setdefault(file_id, []).append(tuple(row))
            rows, rewritten, kept, kept_vectors = [], [], [], {}
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
                for ordinal, (span, digest) in enumerate(spans):
                    vector = vectors.get(digest)
                    rows.append(
                        (
                            memory_file.agent_id, memory_file.pk, ordinal, span.start_line, span.end_line, span.text,
                            digest, span.token_count, keyword_document(span.text),
                            None if vector is None else Vector._to_db(vector),
                            identity.key if vector is not None else "",
                            identity.dimensions if vector is not None else None,
                            now,
                        )
                    )
            if rewritten:
                Chunk.objects.filter(file_id__in=rewritten).delete()
                _chunks_copy(rows)
            _chunk_vectors_fill(file_ids=kept, vectors=kept_vectors, identity=identity)

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


def _files_vectors_fill(*, awaiting, outcomes, vectors: dict, identity, job_id, embedded: int, cache_hits: int) -> None:
    """Step 2, in one transaction: the vectors embedded for the chunks step 1 wrote, and those files
    settled (indexed, or failed with the reason when vectors are still missing). Vectors go in whatever
    happened to a file meanwhile (by text hash); only files still holding the content that was chunked
    are settled, the others belong to the newer upload's job."""
    now = timezone.now()
    files = [f for f, _ in awaiting]
    with transaction.atomic():
        live, current = _files_live(files=files, outcomes=outcomes)
        _chunk_vectors_fill(file_ids=[f.pk for f in files], vectors=vectors, identity=identity)
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
    claimed = IndexJob.objects.filter(pk=job_id, state=JobState.QUEUED).update(
        state=JobState.RUNNING, started_at=now, attempts=F("attempts") + 1, error=""
    )
    if not claimed:
        return None
    rows = list(
        MemoryFile.objects.filter(job_id=job_id, state__in=[State.PENDING, State.FAILED]).order_by("id").values_list("id", "size")
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
        deferred = f"embedding deferred after a transient error: {transient}" if transient else ""
        met, errors = _index_batch(batch=batch, provider=provider, job_id=job_id, deferred=deferred)
        transient = transient or met
        internal_errors += errors
    if transient is not None:
        IndexJob.objects.filter(pk=job_id, state=JobState.RUNNING).update(
            state=JobState.QUEUED, error=f"transient embedding error, will retry: {transient}"[:2000]
        )
        raise transient
    return index_job_settle(job_id=job_id, internal_errors=internal_errors)


def index_job_batch_run(*, job_id: int, file_ids: list[int]) -> IndexJob | None:
    """One batch of a fanned-out job (worker side). A transient provider error is re-raised (after the
    batch's files were written without the missing vectors) so the batch task retries; otherwise the
    job is settled if this was its last unfinished batch."""
    from indexing.embeddings import get_provider

    transient, internal_errors = _index_batch(batch=file_ids, provider=get_provider(), job_id=job_id, deferred="")
    if transient is not None:
        raise transient
    return index_job_settle(job_id=job_id, internal_errors=internal_errors)


def index_job_settle(*, job_id: int, internal_errors: list[str] | None = None) -> IndexJob | None:
    """Finish a running job once none of its files is pending or indexing: done, or failed with the
    first failure. Safe to call from every batch (only the last one finds nothing left), and a later
    successful retry of a batch turns a failed job done."""
    if MemoryFile.objects.filter(job_id=job_id, state__in=[State.PENDING, State.INDEXING]).exists():
        return None
    failed_files = MemoryFile.objects.filter(job_id=job_id, state=State.FAILED)
    first_failed = failed_files.values_list("path", "last_error").first()
    error = ""
    if first_failed:
        error = f"{failed_files.count()} file(s) failed; first: {first_failed[0]}: {first_failed[1]}"
    elif internal_errors:
        error = f"{len(internal_errors)} internal error(s); first: {internal_errors[0]}"
    IndexJob.objects.filter(pk=job_id, state__in=[JobState.RUNNING, JobState.FAILED]).update(
        state=JobState.FAILED if error else JobState.DONE, error=error[:2000], finished_at=timezone.now()
    )
    return IndexJob.objects.filter(pk=job_id).first()


def index_job_fail(*, job_id: int, reason: str) -> None:
    """Mark a job failed for good (retries exhausted, or an unexpected error in the task)."""
    IndexJob.objects.filter(pk=job_id).exclude(state=JobState.DONE).update(
        state=JobState.FAILED, error=reason[:2000], finished_at=timezone.now()
    )
    # Files the job left claimed go back to "failed" (keyword-searchable if they have chunks) so the
    # periodic task retries them; they are not silently stuck in "indexing".
    _files_update(
        MemoryFile.objects.filter(job_id=job_id, state__in=[State.INDEXING]),
        state=State.FAILED, last_error=reason[:2000], failures=F("failures") + 1, updated_at=timezone.now()
    )


def index_job_retry(*, job: IndexJob) -> bool:
    """Queue a failed job again (the admin's "Retry"): its files still failed or pending are indexed
    anew by the same job. Returns False when the job is not failed (a queued, running or done job has
    nothing to retry, and a second click is harmless)."""
    with transaction.atomic():
        claimed = IndexJob.objects.filter(pk=job.pk, state=JobState.FAILED).update(
            state=JobState.QUEUED, error="", started_at=None, finished_at=None
        )
        if claimed:
            _enqueue(job)
    return bool(claimed)


def files_requeue_under_new_job(*, agent_id: int, file_ids: list[int], now: datetime | None = None) -> IndexJob:
    """Queue files again under a new ``schedule`` job (the periodic sweeps: orphaned, failed, recovered)."""
    now = now or timezone.now()
    with transaction.atomic():
        files_lock(file_ids)  # lock order, before the multi-row UPDATEs
        job = IndexJob.objects.create(agent_id=agent_id, trigger=Trigger.SCHEDULE, files_seen=len(file_ids))
        # Failed files keep their state (they are keyword-searchable); the job's claim accepts them.
        MemoryFile.objects.filter(id__in=file_ids, state__in=[State.PENDING, State.INDEXING]).update(
            state=State.PENDING, job=job, updated_at=now
        )
        MemoryFile.objects.filter(id__in=file_ids, state=State.FAILED).update(job=job, updated_at=now)
        _enqueue(job)
    return job


@dataclass
class MaintenanceOutcome:
    stuck_jobs: int = 0
    requeued_files: int = 0
    retried_failed: int = 0
    reembed_jobs: int = 0
    jobs: list[int] = field(default_factory=list)


def index_maintenance(*, now: datetime | None = None) -> MaintenanceOutcome:
    """The periodic task's work: re-queue stuck and failed work, re-embed after an identity change.

    - jobs queued or running for longer than MEMORYHUB_INDEX_STUCK_AFTER (lost message, dead worker):
      their files claimed by a dead worker go back to pending and the job is queued again;
    - pending or indexing files whose job is over (or gone) are queued under a new ``schedule`` job;
    - failed files are tried again MEMORYHUB_INDEX_RETRY_FAILED_AFTER after their failure, twice that
      after a second one, and so on, until MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS failures in a row (then
      they stay failed, keyword-searchable with their old chunks, until new content or a re-index);
    - agents with chunks embedded under another identity get an ``agent_reembed``.
    """
    now = now or timezone.now()
    stuck_cutoff = now - timedelta(seconds=settings.MEMORYHUB_INDEX_STUCK_AFTER)
    failed_cutoff = now - timedelta(seconds=settings.MEMORYHUB_INDEX_RETRY_FAILED_AFTER)
    outcome = MaintenanceOutcome()

    stuck = IndexJob.objects.filter(
        Q(state=JobState.QUEUED, created_at__lt=stuck_cutoff) | Q(state=JobState.RUNNING, started_at__lt=stuck_cutoff)
    ).values_list("id", "state", "attempts")
    for job_id, state, attempts in stuck:
        if attempts > settings.MEMORYHUB_INDEX_MAX_RETRIES:
            index_job_fail(job_id=job_id, reason=f"gave up after {attempts} attempts (stuck)")
            continue
        with transaction.atomic():
            _files_update(
                MemoryFile.objects.filter(job_id=job_id, state=State.INDEXING, updated_at__lt=stuck_cutoff),
                state=State.PENDING, updated_at=now,
            )
            if IndexJob.objects.filter(pk=job_id, state=state).update(state=JobState.QUEUED):
                outcome.stuck_jobs += 1
                outcome.jobs.append(job_id)
                _enqueue(IndexJob(id=job_id))

    active_jobs = IndexJob.objects.filter(state__in=[JobState.QUEUED, JobState.RUNNING]).values("id")
    orphans = (
        MemoryFile.objects.filter(state__in=[State.PENDING, State.INDEXING], updated_at__lt=stuck_cutoff)
        .filter(Q(job__isnull=True) | ~Q(job_id__in=active_jobs))
        .values_list("agent_id", "id")
    )
    retry_failed = [
        (agent_id, file_id)
        for agent_id, file_id, failures, updated_at in MemoryFile.objects.filter(
            state=State.FAILED, updated_at__lt=failed_cutoff, failures__lt=settings.MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS
        ).values_list("agent_id", "id", "failures", "updated_at")
        if updated_at < now - timedelta(seconds=settings.MEMORYHUB_INDEX_RETRY_FAILED_AFTER * 2 ** max(failures - 1, 0))
    ]
    for rows, trigger_count in ((orphans, "requeued_files"), (retry_failed, "retried_failed")):
        by_agent: dict[int, list[int]] = {}
        for agent_id, file_id in rows:
            by_agent.setdefault(agent_id, []).append(file_id)
        for agent_id, file_ids in by_agent.items():
            job = files_requeue_under_new_job(agent_id=agent_id, file_ids=file_ids, now=now)
            setattr(outcome, trigger_count, getattr(outcome, trigger_count) + len(file_ids))
            outcome.jobs.append(job.id)

    identity = configured_identity()
    if identity.has_vectors:
        stale_agents = (
            Chunk.objects.exclude(embedding_identity=identity.key)
            .filter(file__state=State.INDEXED)
            .values_list("agent_id", flat=True)
            .distinct()
        )
        agent_ids = list(stale_agents)
        for agent in Agent.objects.filter(id__in=agent_ids):
            job = agent_reembed(agent=agent)
            if job is not None:
                outcome.reembed_jobs += 1
                outcome.jobs.append(job.id)
    return outcome
