"""``push``: make the agent's files on the server equal to a local workspace, sending only what changed.

1. Hash every local file the server would index (``workspace.workspace_scan``).
2. One hash-only ``POST sync`` lists them all with ``delete_missing``: the server deletes its files that
   are gone locally and answers which paths it lacks (``needed``).
3. The needed files go up with their content in batches bounded by file count and body bytes, well
   under the server's default MEMORYHUB_MAX_SYNC_FILES / MEMORYHUB_MAX_SYNC_BYTES.

An unchanged workspace therefore costs one request with ~100 bytes per file and no upload at all.
A workspace with more files than one sync may list is diffed in several hash-only requests without
``delete_missing``; deletions then come from listing the server's files and deleting the extra ones.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from memoryhub_client.api import ApiClient
from memoryhub_client.limits import (
    DEFAULT_BATCH_BYTES, DEFAULT_BATCH_FILES, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_SYNC_FILES,
)
from memoryhub_client.progress import Progress
from memoryhub_client.workspace import (
    UNREADABLE, Excludes, LocalFile, UnreadableFile, read_text, workspace_scan,
)



@dataclass
class PushOptions:
    prefix: str = ""  # server-side folder the workspace maps to ('' = the agent's whole namespace)
    delete_missing: bool = True
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    batch_files: int = DEFAULT_BATCH_FILES
    batch_bytes: int = DEFAULT_BATCH_BYTES
    max_sync_files: int = DEFAULT_MAX_SYNC_FILES
    exclude: tuple[str, ...] = ()  # --exclude patterns, added to the workspace's .memoryhubignore
    gitignore: bool = True  # also leave out what the workspace's .gitignore files ignore


@dataclass
class PushResult:
    files: int = 0  # local files the server indexes
    uploaded: int = 0
    uploaded_bytes: int = 0
    unchanged: int = 0
    deleted: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    kept_server_files: bool = False  # the workspace was empty, so nothing was deleted
    seconds: float = 0.0

    def summary(self) -> str:
        parts = [f"{self.uploaded} uploaded" + (f" ({_megabytes(self.uploaded_bytes)})" if self.uploaded_bytes else "")]
        parts.append(f"{self.unchanged} unchanged")
        parts.append(f"{len(self.deleted)} deleted")
        line = f"pushed {self.files} files: " + ", ".join(parts)
        if self.skipped:
            reasons: dict[str, int] = {}
            for _, reason in self.skipped:
                reasons[reason] = reasons.get(reason, 0) + 1
            detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
            line += f"; skipped {len(self.skipped)} ({detail})"
        line += f" in {self.seconds:.2f} s"
        if self.jobs:
            line += f"; job {self.jobs[-1]}" if len(self.jobs) == 1 else f"; jobs {self.jobs[0]}–{self.jobs[-1]}"
        return line

    def as_dict(self) -> dict:
        return {
            "files": self.files, "uploaded": self.uploaded, "uploaded_bytes": self.uploaded_bytes,
            "unchanged": self.unchanged, "deleted": self.deleted,
            "skipped": [{"path": path, "reason": reason} for path, reason in self.skipped],
            "jobs": self.jobs, "seconds": round(self.seconds, 3),
        }


def _megabytes(size: int) -> str:
    if size >= 100_000:
        return f"{size / 1_048_576:.1f} MB"
    return f"{size / 1024:.1f} kB" if size >= 1024 else f"{size} B"


def _scope(prefix: str) -> str:
    """The server folder of this workspace: 'notes' and 'notes/' both mean 'notes/'."""
    prefix = prefix.strip().strip("/")
    return prefix + "/" if prefix else ""


def workspace_push(*, client: ApiClient, root: Path, options: PushOptions, progress: Progress | None = None) -> PushResult:
    started = time.monotonic()
    progress = progress or Progress(enabled=False)
    scope = _scope(options.prefix)
    excludes = Excludes.of_workspace(root, options.exclude, gitignore=options.gitignore)  # read on every push: the file may have changed
    scan = workspace_scan(
        root=root, prefix=scope, max_file_bytes=options.max_file_bytes, progress=progress, excludes=excludes
    )
    result = PushResult(files=len(scan.files), skipped=list(scan.skipped))
    # An empty scan usually means a wrong directory, not "forget everything": never mirror it.
    delete_missing = options.delete_missing and bool(scan.files)
    result.kept_server_files = options.delete_missing and not scan.files

    needed = _diff(client=client, files=list(scan.files.values()), options=options, scope=scope,
                   delete_missing=delete_missing, result=result)
    _upload(client=client, files=[scan.files[path] for path in needed if path in scan.files],
            options=options, result=result, progress=progress)
    result.seconds = time.monotonic() - started
    return result


def _record(result: PushResult, outcome: dict) -> None:
    if outcome.get("job") is not None:
        result.jobs.append(outcome["job"])


def _diff(*, client: ApiClient, files: list[LocalFile], options: PushOptions, scope: str, delete_missing: bool,
          result: PushResult) -> list[str]:
    """Hash-only sync: delete what is gone, return the paths the server lacks."""
    # The source goes with the hash: a file stored under another source (an older client's push with a
    # prefix) is re-sourced by the server without sending its content again.
    entries = [{"path": f.path, "hash": f.hash, "source": f.source} for f in files]
    if len(entries) <= options.max_sync_files:
        outcome = client.sync(files=entries, delete_missing=delete_missing, prefix=scope)
        _record(result, outcome)
        result.unchanged += outcome.get("unchanged", 0)
        result.deleted.extend(outcome.get("deleted", []))
        return list(outcome.get("needed", []))

    needed: list[str] = []
    for start in range(0, len(entries), options.max_sync_files):
        outcome = client.sync(files=entries[start : start + options.max_sync_files])
        _record(result, outcome)
        result.unchanged += outcome.get("unchanged", 0)
        needed.extend(outcome.get("needed", []))
    if delete_missing:
        local = {f.path for f in files}
        for path in client.file_list(prefix=scope):
            if path not in local:
                _record(result, client.file_delete(path=path))
                result.deleted.append(path)
    return needed


def _upload(*, client: ApiClient, files: list[LocalFile], options: PushOptions, result: PushResult, progress: Progress) -> None:
    """Send the needed files with their content, in batches under the body and file-count limits."""
    progress.start(label="uploading", total=len(files))
    batch: list[dict] = []
    batch_bytes = 0
    batch_sizes = 0

    def send() -> None:
        nonlocal batch, batch_bytes, batch_sizes
        if batch:
            outcome = client.sync(files=batch)
            _record(result, outcome)
            result.uploaded += len(batch)
            result.uploaded_bytes += batch_sizes
            progress.advance(len(batch), batch_sizes)
        batch, batch_bytes, batch_sizes = [], 0, 0

    for local in files:
        try:
            content, raw = read_text(local.absolute, max_bytes=options.max_file_bytes)
        except UnreadableFile as exc:  # changed or vanished since it was hashed
            result.skipped.append((local.path, exc.reason))
            progress.advance()
            continue
        except OSError:
            result.skipped.append((local.path, UNREADABLE))
            progress.advance()
            continue
        entry = {"path": local.path, "content": content, "source": local.source, "mtime": round(local.mtime, 3)}
        entry_bytes = len(json.dumps(entry, ensure_ascii=False).encode("utf-8")) + 2
        if batch and (len(batch) >= options.batch_files or batch_bytes + entry_bytes > options.batch_bytes):
            send()
        batch.append(entry)
        batch_bytes += entry_bytes
        batch_sizes += len(raw)
    send()
    progress.finish()
