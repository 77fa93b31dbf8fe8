"""One agent's memory as a JSON Lines file a person can read, and back.

The first line is a header (``{"format": "memoryhub-export", "version": 1, "agent": ..., "files": N}``);
each following line is one file: ``{"path", "source", "mtime", "hash", "attributes", "content"}``, ordered by path
(an export without ``attributes``, from before they existed, imports with none).
Chunks and vectors are not exported: an import stores the files and queues their indexing, so the
importing deployment chunks and embeds them with its own settings (and its embedding cache).
"""

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.models import Agent
from indexing.attributes import InvalidAttributes, attributes_clean
from indexing.models import MemoryFile
from indexing.writes import SyncEntry, workspace_sync
from memoryhub.domain import InvalidInput

EXPORT_FORMAT = "memoryhub-export"
EXPORT_VERSION = 1
# Files read from the database per round trip while streaming, and stored per transaction on import.
_EXPORT_FETCH = 200
IMPORT_BATCH = 500


def agent_export_lines(*, agent: Agent) -> Iterator[str]:
    """The export of `agent`, one JSON line at a time (a streaming response never holds every file)."""
    files = MemoryFile.objects.filter(agent=agent).order_by("path")
    header = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "agent": agent.slug,
        "files": files.count(),
        "exported_at": timezone.now().isoformat(),
    }
    yield json.dumps(header) + "\n"
    rows = files.values_list("path", "source", "client_mtime", "content_hash", "attributes", "content")
    for path, source, mtime, digest, attributes, content in rows.iterator(chunk_size=_EXPORT_FETCH):
        line = {
            "path": path, "source": source, "mtime": mtime.isoformat() if mtime else None, "hash": digest,
            "attributes": attributes, "content": content,
        }
        yield json.dumps(line, ensure_ascii=False) + "\n"


@dataclass
class ImportOutcome:
    files: int = 0
    changed: int = 0
    unchanged: int = 0
    jobs: list[int] = field(default_factory=list)


def _invalid(line_number: int, message: str) -> InvalidInput:
    return InvalidInput(f"line {line_number}: {message}", code="invalid_export")


def _entries(lines: Iterable[str]) -> Iterator[SyncEntry]:
    numbered = enumerate(lines, start=1)
    header = None
    for number, text in numbered:
        if text.strip():
            try:
                header = json.loads(text)
            except ValueError:
                raise _invalid(number, "not JSON") from None
            break
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise _invalid(1, f"not a MemoryHub export (the first line must be its {EXPORT_FORMAT!r} header)")
    if header.get("version") != EXPORT_VERSION:
        raise _invalid(1, f"export version {header.get('version')!r} is not supported (this server reads {EXPORT_VERSION})")
    for number, text in numbered:
        if not text.strip():
            continue
        try:
            item = json.loads(text)
        except ValueError:
            raise _invalid(number, "not JSON") from None
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not isinstance(item.get("content"), str):
            raise _invalid(number, "each file needs a string 'path' and 'content'")
        try:
            mtime = parse_datetime(item["mtime"]) if isinstance(item.get("mtime"), str) else None
        except ValueError:
            raise _invalid(number, "'mtime' is not an ISO 8601 date and time") from None
        try:
            attributes = attributes_clean(item["attributes"]) if item.get("attributes") is not None else None
        except InvalidAttributes as exc:
            raise _invalid(number, str(exc)) from None
        yield SyncEntry(
            path=item["path"], content=item["content"], hash=item.get("hash"), source=item.get("source"), mtime=mtime,
            attributes=attributes,
        )


def agent_import(*, agent: Agent, lines: Iterable[str]) -> ImportOutcome:
    """Store the files of an export into `agent` (creating or replacing them by path; files the export
    does not list are kept) and queue their indexing. Each batch of IMPORT_BATCH files is one
    transaction: a bad line stops the import there, with the batches before it kept."""
    outcome = ImportOutcome()
    batch: list[SyncEntry] = []

    def flush() -> None:
        result = workspace_sync(agent=agent, entries=batch)
        outcome.files += len(batch)
        outcome.changed += result.changed
        outcome.unchanged += result.unchanged
        if result.job is not None:
            outcome.jobs.append(result.job.pk)
        batch.clear()

    for entry in _entries(lines):
        batch.append(entry)
        if len(batch) >= IMPORT_BATCH:
            flush()
    if batch:
        flush()
    return outcome
