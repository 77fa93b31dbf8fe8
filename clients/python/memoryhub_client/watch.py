"""``watch``: push once, then push again whenever the workspace changes, until Ctrl-C.

Changes are debounced: a push starts when no event has arrived for ``debounce`` seconds (1.5 s by
default), so an editor's save-rename-chmod dance or an agent writing ten notes in a row costs one
push, and each push is the same hash-diffing ``workspace_push``, so a spurious event costs one small
request. Events under hidden or vendor folders are ignored, and so are the "opened"/"closed without
writing" events that the push itself causes by reading the files (else it would wake itself up).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

CONTENT_EVENTS = frozenset({"created", "deleted", "modified", "moved", "closed"})
POLL_SECONDS = 0.05


class ChangeCollector:
    """A watchdog event handler that only remembers when the last relevant change happened."""

    def __init__(self, root: Path, excludes=None):
        self.root = os.path.abspath(root)
        self.excludes = excludes  # workspace.Excludes: changes to excluded files trigger no push
        self.lock = threading.Lock()
        self.last_change: float | None = None

    def relevant(self, event) -> bool:
        from memoryhub_client.workspace import is_ignored

        if event.event_type not in CONTENT_EVENTS:
            return False
        if event.is_directory and event.event_type == "modified":
            return False  # a folder's mtime changes with its files, which report themselves
        paths = [event.src_path, getattr(event, "dest_path", "") or ""]
        for raw in filter(None, paths):
            raw = os.fsdecode(raw)
            relative = os.path.relpath(os.path.abspath(raw), self.root)
            if not relative.startswith("..") and not is_ignored(relative, self.excludes):
                return True
        return False

    def dispatch(self, event) -> None:  # the watchdog handler interface
        if self.relevant(event):
            with self.lock:
                self.last_change = time.monotonic()

    def take_if_settled(self, debounce: float) -> bool:
        """True (and forget the change) once no event has come for ``debounce`` seconds."""
        with self.lock:
            if self.last_change is None or time.monotonic() - self.last_change < debounce:
                return False
            self.last_change = None
            return True


def workspace_watch(
    *,
    root: Path,
    push: Callable[[], None],
    debounce: float = 1.5,
    stop: threading.Event | None = None,
    on_ready: Callable[[], None] | None = None,
    exclude: tuple[str, ...] = (),
    gitignore: bool = True,
) -> None:
    """Run ``push`` now and after every settled change, until ``stop`` is set or Ctrl-C.

    ``push`` does its own reporting; an exception from it ends the watch (the CLI passes a ``push``
    that reports server errors and carries on, so a server restart does not end the watch).
    """
    from watchdog.observers import Observer  # optional dependency: the CLI checks it is installed

    stop = stop or threading.Event()
    from memoryhub_client.workspace import Excludes

    collector = ChangeCollector(root, Excludes.of_workspace(Path(root), exclude, gitignore=gitignore))
    observer = Observer()
    observer.schedule(collector, collector.root, recursive=True)
    observer.start()  # before the first push, so a change made while it runs is not missed
    try:
        push()
        if on_ready:
            on_ready()
        while not stop.wait(POLL_SECONDS):
            if collector.take_if_settled(debounce):
                push()
    finally:
        observer.stop()
        observer.join(timeout=5)
