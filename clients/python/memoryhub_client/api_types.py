"""The shapes of the API v1's answers, as ``ApiClient`` returns them (the server's OpenAPI schema at
``/api/schema/`` is the reference). Plain dicts at run time: these are for type checkers and readers."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


Source = Literal["memory", "session", "workspace"]


class FileWritten(TypedDict):
    path: str
    hash: str
    size: int
    status: str
    job: int | None  # None when the content was unchanged
    attributes: dict[str, Any]


class FileLines(TypedDict):
    path: str
    # "from" is a keyword in Python: read it as lines["from"]
    lines: int
    total_lines: int
    content: str
    source: Source


class FileDeleted(TypedDict):
    path: str
    deleted: bool
    chunks_removed: int
    job: int


class FileListItem(TypedDict):
    path: str
    hash: str
    size: int
    status: str
    source: Source
    mtime: str | None
    last_error: str
    indexed_at: str | None
    updated_at: str
    attributes: dict[str, Any]


class FileList(TypedDict):
    count: int
    next: str | None
    previous: str | None
    results: list[FileListItem]


class SyncEntry(TypedDict, total=False):
    path: str  # required
    content: str  # the full text; leave it out and give hash to ask whether the server holds it
    hash: str  # sha256 of the UTF-8 bytes, hex
    source: Source
    mtime: str | float
    attributes: dict[str, Any]


class SyncResponse(TypedDict):
    job: int | None
    needed: list[str]
    unchanged: int
    changed: int
    deleted: list[str]


class Job(TypedDict):
    id: int
    trigger: str
    state: str  # queued | running | waiting (embeddings in a provider's batch) | done | failed
    files_seen: int
    files_changed: int
    files_removed: int
    chunks_added: int
    chunks_removed: int
    chunks_embedded: int
    cache_hits: int
    malformed_lines: int
    attempts: int
    error: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    duration_ms: float | None


class Status(TypedDict):
    agent: str
    files: int
    chunks: int
    pending: int  # 0 once every accepted change is searchable
    awaiting_vectors: int
    failed: int
    failed_jobs: int
    embedding: dict[str, Any]
    # Batches of this agent's texts in flight at the provider's batch API: id, provider, remote_id,
    # state, inputs, submitted_at, job.
    embedding_batches: list[dict[str, Any]]
    # The memory's words for keyword expansion: words, embedded (with a vector of the model).
    memory_words: dict[str, int]
    last_indexed_at: str | None


class SearchResult(TypedDict):
    path: str
    start_line: int  # 1-indexed; the snippet shows exactly start_line..end_line
    end_line: int
    score: float  # 0..1
    snippet: str
    source: Source
    attributes: dict[str, Any]
    explain: NotRequired[dict[str, Any]]
    owner: NotRequired[str]  # the owner agent of a memory granted to this one; absent for its own files


class SearchResponse(TypedDict):
    results: list[SearchResult]
    mode: str
    pending: int
    took_ms: float
    message: str  # says plainly when nothing matched or indexing is still running


class ToolDefinitions(TypedDict):
    format: Literal["openai", "anthropic", "mcp"]
    tools: list[dict[str, Any]]


class ToolResult(TypedDict):
    content: str  # text for the model, citing path#Lstart-Lend
    data: dict[str, Any]


class ExportedFile(TypedDict):
    path: str
    source: Source
    mtime: str | None
    hash: str
    attributes: dict[str, Any]
    content: str
