"""The web side's writes: store a file's content (upload, append, sync) or delete it, and queue its indexing.

Each write stores content and its hash in one transaction and enqueues an IndexJob on commit (with the
outbox behind it: a broker that is down never fails a write, indexing/recovery.py); nothing is
half-written on a rejection because every check runs before the first write. The worker side that
then chunks and embeds is indexing/services.py; the locks both take, and their order, indexing/locks.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import Agent
from indexing.locks import agent_lock, files_lock, lock_conflict_retry
from indexing.models import Chunk, IndexJob, MemoryFile
from indexing.paths import path_normalize, prefix_normalize, source_resolve
from indexing.recovery import job_enqueue_on_commit
from memoryhub.domain import DomainError, Forbidden, InvalidInput, NotFound, PreconditionFailed, TooLarge, UnsupportedContent

State = MemoryFile.State
JobState = IndexJob.State
Trigger = IndexJob.Trigger
# Uploads one waiting job takes before the next upload starts a job of its own (see _upload_job).
COALESCE_MAX_FILES = 500


# --- Content checks ------------------------------------------------------------------------------


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_from_bytes(raw: bytes) -> str:
    """A raw request body as text: UTF-8 only, no binary (NUL bytes) → UnsupportedContent."""
    if b"\x00" in raw:
        raise UnsupportedContent("The content contains NUL bytes: binary files are not accepted.", code="binary_content")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsupportedContent(f"The content is not valid UTF-8 (byte {exc.start}).", code="invalid_encoding") from None


def content_check(content: str) -> tuple[str, int]:
    """(sha256 hex, UTF-8 size) of acceptable text content, or UnsupportedContent / TooLarge."""
    if "\x00" in content:
        raise UnsupportedContent("The content contains NUL characters: binary files are not accepted.", code="binary_content")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsupportedContent("The content is not valid Unicode text (lone surrogate).", code="invalid_encoding") from None
    limit = settings.MEMORYHUB_MAX_FILE_BYTES
    if len(data) > limit:
        raise TooLarge(f"The file has {len(data)} bytes; the limit is {limit} bytes per file.", code="file_too_large")
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
        raise InvalidInput("hash must be the SHA-256 of the file's bytes: 64 hex digits (optionally 'sha256:<hex>').", code="invalid_hash")
    return digest


def _quota_check(*, agent: Agent, files_delta: int, bytes_delta: int) -> None:
    if files_delta <= 0 and bytes_delta <= 0:
        return  # shrinking is always allowed, even above a lowered quota
    usage = MemoryFile.objects.filter(agent=agent).aggregate(files=Count("id"), bytes=Coalesce(Sum("size"), 0))
    max_files = settings.MEMORYHUB_MAX_FILES_PER_AGENT
    max_bytes = settings.MEMORYHUB_MAX_BYTES_PER_AGENT
    if files_delta > 0 and usage["files"] + files_delta > max_files:
        raise TooLarge(
            f"This agent stores {usage['files']} files; {files_delta} more would exceed its quota of {max_files} files.",
            code="file_quota_exceeded",
        )
    if bytes_delta > 0 and usage["bytes"] + bytes_delta > max_bytes:
        raise TooLarge(
            f"This agent stores {usage['bytes']} bytes; this change adds {bytes_delta} bytes and would exceed "
            f"its quota of {max_bytes} bytes.",
            code="byte_quota_exceeded",
        )
    _team_quota_check(agent=agent, files_delta=files_delta, bytes_delta=bytes_delta)


def _team_quota_check(*, agent: Agent, files_delta: int, bytes_delta: int) -> None:
    """The team's limits on what all its agents store together (MEMORYHUB_TEAM_MAX_*, or the team's own)."""
    team = agent.team
    if team.file_limit is None and team.byte_limit is None:
        return
    usage = MemoryFile.objects.filter(agent__team_id=team.pk).aggregate(files=Count("id"), bytes=Coalesce(Sum("size"), 0))
    if files_delta > 0 and team.file_limit is not None and usage["files"] + files_delta > team.file_limit:
        raise TooLarge(
            f"This agent's team stores {usage['files']} files; {files_delta} more would exceed the team's limit of "
            f"{team.file_limit} files (team_max_files).",
            code="team_file_quota_exceeded",
        )
    if bytes_delta > 0 and team.byte_limit is not None and usage["bytes"] + bytes_delta > team.byte_limit:
        raise TooLarge(
            f"This agent's team stores {usage['bytes']} bytes; this change adds {bytes_delta} bytes and would exceed "
            f"the team's limit of {team.byte_limit} bytes (team_max_bytes).",
            code="team_byte_quota_exceeded",
        )


def _granted_prefix_check(*, agent: Agent, paths: list[str]) -> None:
    """Refuse a write to ``owner:path`` where ``owner`` names a memory granted to this agent: that name
    reads the granted memory (memory_get, GET files/), which is never writable through a grant, and a file
    of the writer's own by that name could never be read back. Other paths with a colon are the writer's."""
    from agents.selectors import memory_grants_readable, memory_prefix

    prefixes = {named[0] for named in map(memory_prefix, paths) if named}
    if not prefixes:
        return

    granted = prefixes & set(memory_grants_readable(reader=agent))
    if granted:
        owner = sorted(granted)[0]
        raise Forbidden(
            f"'{owner}:' names a memory granted to this agent, which it may read but never write; "
            "write to paths of its own memory.",
            code="read_only_memory",
        )


def _expected_hash_check(*, path: str, memory_file: MemoryFile | None, expected_hash: str | None) -> None:
    """A conditional write: the caller read the file at ``expected_hash`` (``""``: it expects no file).
    Called with the file row locked, so two writers that read the same hash cannot both pass."""
    if expected_hash is None:
        return
    current = memory_file.content_hash if memory_file is not None else ""
    if current != expected_hash:
        shown = current or "none (the file does not exist)"
        raise PreconditionFailed(
            f"{path} changed since it was read: its current hash is {shown}, not {expected_hash}. Nothing was written.",
            code="hash_mismatch",
            current_hash=current or None,
        )


def _enqueue(job: IndexJob) -> None:
    # On commit, with the outbox behind it: a broker that is down never fails the write (indexing/recovery.py).
    job_enqueue_on_commit(job_id=job.id, trigger=job.trigger)


@lock_conflict_retry
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
    _granted_prefix_check(agent=agent, paths=[path])
    source = source_resolve(path=path, source=source)
    if (content is None) == (append is None):
        raise ValueError("file_ingest needs exactly one of content and append")
    if append is not None:
        content_check(append)  # a bad delta is refused before anything is locked
    else:
        content_hash, size = content_check(content)
    with transaction.atomic():
        agent_lock(agent)
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
        job, new_job = _upload_job(agent)
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
        if new_job:
            _enqueue(job)
    memory_file.was_created = created
    return memory_file, job


def _upload_job(agent: Agent) -> tuple[IndexJob, bool]:
    """The job that will index an upload, and whether it is new (its task still to be sent).

    An agent's upload job that is still waiting in the queue takes the upload too: a tenant that writes
    faster than the workers index has one waiting job that grows, never a queue of its own jobs in front
    of the other tenants' (each job is a task in the one Celery queue, served in order). The job row is
    locked until this write commits, so a worker's claim (``index_job_run``) waits for it and then finds
    this file; a job already claimed is not ``queued`` and a new one is made. A waiting job takes at
    most COALESCE_MAX_FILES uploads (its files are indexed in batches either way)."""
    waiting = (
        IndexJob.objects.select_for_update()
        .filter(agent=agent, trigger=Trigger.UPLOAD, state=JobState.QUEUED, files_seen__lt=COALESCE_MAX_FILES)
        .order_by("-created_at")
        .first()
    )
    if waiting is None:
        return IndexJob.objects.create(agent=agent, trigger=Trigger.UPLOAD, files_seen=1), True
    IndexJob.objects.filter(pk=waiting.pk).update(files_seen=F("files_seen") + 1)
    waiting.files_seen += 1
    return waiting, False


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


def _entry_error(index: int, exc: DomainError) -> DomainError:
    """The same error, its message prefixed with the sync entry it is about."""
    return type(exc)(f"files[{index}]: {exc}", code=exc.code, **exc.details)


def _sync_prepare(entries: list[SyncEntry]) -> list[_Prepared]:
    """Validate every entry before anything is written (one bad entry rejects the whole sync)."""
    limit = settings.MEMORYHUB_MAX_SYNC_FILES
    if len(entries) > limit:
        raise TooLarge(f"The sync lists {len(entries)} files; the limit is {limit} per request.", code="too_many_files")
    prepared: list[_Prepared] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        try:
            path = path_normalize(entry.path)
            if path in seen:
                raise InvalidInput(f"{path!r} is listed more than once.", code="duplicate_path")
            seen.add(path)
            source = source_resolve(path=path, source=entry.source)
            if entry.content is not None:
                digest, size = content_check(entry.content)
                if entry.hash and hash_normalize(entry.hash) != digest:
                    raise InvalidInput("hash is not the SHA-256 of the UTF-8 content sent.", code="hash_mismatch")
            elif entry.hash:
                digest, size = hash_normalize(entry.hash), 0
            else:
                raise InvalidInput("each file needs 'content' or 'hash'.", code="invalid_request")
        except DomainError as exc:
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


@dataclass
class _SyncPlan:
    create: list[_Prepared] = field(default_factory=list)
    update: list[tuple[_Prepared, MemoryFile]] = field(default_factory=list)  # new content
    resource: list[tuple[_Prepared, MemoryFile]] = field(default_factory=list)  # same content, new source: index again
    relabel: list[MemoryFile] = field(default_factory=list)  # new attributes (set on the row here): no indexing
    needed: list[str] = field(default_factory=list)  # hash-only entries whose content the server lacks
    unchanged: int = 0


def _sync_plan(prepared: list[_Prepared], *, existing: dict[str, MemoryFile]) -> _SyncPlan:
    """What the sync does with each entry, given the agent's current files of those paths."""
    plan = _SyncPlan()
    for item in prepared:
        current = existing.get(item.path)
        if current is not None and item.attributes is not None and current.attributes != item.attributes:
            current.attributes = item.attributes
            plan.relabel.append(current)
        if current is None or current.content_hash != item.hash:
            if item.content is None:
                plan.needed.append(item.path)
            elif current is None:
                plan.create.append(item)
            else:
                plan.update.append((item, current))
        elif current.source != item.source and (item.source_given or item.content is not None):
            plan.resource.append((item, current))
        else:
            plan.unchanged += 1
    return plan


@lock_conflict_retry
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
    _granted_prefix_check(agent=agent, paths=[item.path for item in prepared])
    now = timezone.now()
    outcome = SyncOutcome(job=None)
    with transaction.atomic():
        agent_lock(agent)
        plan = _sync_plan(prepared, existing=_existing_files(agent=agent, paths=[p.path for p in prepared]))
        to_create, to_update, to_resource, relabelled = plan.create, plan.update, plan.resource, plan.relabel
        outcome.needed, outcome.unchanged = plan.needed, plan.unchanged

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
            chunks_removed = files_remove(agent_id=agent.pk, file_ids=[file_id for file_id, _, _ in doomed])
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


def files_remove(*, agent_id: int, file_ids: list[int]) -> int:
    """Delete these files of one agent and their chunks; returns how many chunks went. The caller holds
    the files' locks (indexing/locks.py). Their chunks go first, in a statement that names the agent, so
    it is pruned to the agent's partition of the chunk table; nothing cascades from a file to its chunks
    (Chunk.file), and the database's key refuses a file deleted with chunks left."""
    if not file_ids:
        return 0
    chunks_removed, _ = Chunk.objects.filter(agent_id=agent_id, file_id__in=file_ids).delete()
    MemoryFile.objects.filter(agent_id=agent_id, id__in=file_ids).delete()
    if chunks_removed:  # keyword expansion's words of this text go too (search's table, as selectors.py reads it)
        from search.expansion import words_text_removed

        words_text_removed(agent_ids=[agent_id])
    return chunks_removed


@lock_conflict_retry
def file_delete(*, agent: Agent, path: str, expected_hash: str | None = None) -> IndexJob:
    """Delete one file and its chunks now; the returned (finished) job records what was removed.
    ``expected_hash``: delete only the version the caller read (else 412 ``hash_mismatch``)."""
    path = path_normalize(path)
    _granted_prefix_check(agent=agent, paths=[path])
    now = timezone.now()
    with transaction.atomic():
        agent_lock(agent)
        memory_file = MemoryFile.objects.filter(agent=agent, path=path).only("id", "content_hash").first()
        if memory_file is None:
            raise NotFound(f"No file {path!r}.", code="not_found")
        files_lock([memory_file.pk])  # before its chunks (lock order)
        _expected_hash_check(path=path, memory_file=memory_file, expected_hash=expected_hash)
        chunks_removed = files_remove(agent_id=agent.pk, file_ids=[memory_file.pk])
        return IndexJob.objects.create(
            agent=agent, trigger=Trigger.DELETE, state=JobState.DONE, files_seen=1, files_removed=1,
            chunks_removed=chunks_removed, started_at=now, finished_at=now,
        )
