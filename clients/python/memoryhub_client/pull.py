"""``pull``: write an agent's files from the server into a local folder (``GET export``, one stream).

Nothing local is lost: a file whose local content differs from the server's is kept and reported
unless ``force`` is set, files the server does not have are left alone, and each file is written to a
temporary name first and renamed, so an interrupted pull never leaves half a file. A path that would
land outside the folder is refused (the server never stores one, but the client does not rely on it).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from memoryhub_client.api import ApiClient


@dataclass
class PullResult:
    written: list[str] = field(default_factory=list)
    unchanged: int = 0
    kept: list[str] = field(default_factory=list)  # differ locally; --force overwrites them
    refused: list[str] = field(default_factory=list)  # paths that would leave the folder
    seconds: float = 0.0

    def summary(self) -> str:
        line = f"pulled {len(self.written) + self.unchanged + len(self.kept)} files: {len(self.written)} written, {self.unchanged} unchanged"
        if self.kept:
            line += f", {len(self.kept)} kept (they differ locally; --force overwrites them)"
        if self.refused:
            line += f", {len(self.refused)} refused (outside the folder)"
        return line + f" in {self.seconds:.2f} s"

    def as_dict(self) -> dict:
        return {"written": self.written, "unchanged": self.unchanged, "kept": self.kept, "refused": self.refused,
                "seconds": round(self.seconds, 3)}


def workspace_pull(*, client: ApiClient, root: Path, prefix: str = "", force: bool = False) -> PullResult:
    """Write the agent's files under ``prefix`` (a server folder, as push's ``--prefix``) into ``root``,
    relative to the prefix: pulling what ``push DIR --prefix notes/`` sent gives back DIR."""
    started = time.monotonic()
    result = PullResult()
    scope = prefix.strip().strip("/") + "/" if prefix.strip().strip("/") else ""
    root = root.resolve()
    for item in client.export():
        path = item["path"]
        if not path.startswith(scope):
            continue
        relative = path[len(scope):]
        target = (root / relative).resolve()
        if root not in target.parents:
            result.refused.append(path)
            continue
        raw = item["content"].encode("utf-8")
        try:
            local = target.read_bytes()
        except OSError:
            local = None
        if local is not None and hashlib.sha256(local).digest() == hashlib.sha256(raw).digest():
            result.unchanged += 1
            continue
        if local is not None and not force:
            result.kept.append(path)
            continue
        _write_atomically(target, raw, mtime=_timestamp(item.get("mtime")))
        result.written.append(path)
    result.seconds = time.monotonic() - started
    return result


def _timestamp(value: str | None) -> float | None:
    try:
        return datetime.datetime.fromisoformat(value).timestamp() if value else None
    except ValueError:
        return None


def _write_atomically(target: Path, raw: bytes, *, mtime: float | None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".memoryhub-pull-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(raw)
        if mtime is not None:
            os.utime(temporary, (mtime, mtime))
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
