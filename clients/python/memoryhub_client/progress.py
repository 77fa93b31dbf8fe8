"""A one-line progress bar on stderr, redrawn at most ten times a second.

Only drawn when asked for: the CLI enables it on a terminal (or with --progress) and for pushes large
enough to take a while, so logs and pipes never fill up with carriage returns.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 28
REDRAW_SECONDS = 0.1


class Progress:
    def __init__(self, *, enabled: bool, stream: TextIO | None = None, minimum_total: int = 0):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.minimum_total = minimum_total  # below this many items a bar is noise
        self.label = ""
        self.total = 0
        self.done = 0
        self.done_bytes = 0
        self._active = False
        self._drawn_at = 0.0

    def start(self, *, label: str, total: int) -> None:
        self.label, self.total, self.done, self.done_bytes = label, total, 0, 0
        self._active = self.enabled and total > 0 and total >= self.minimum_total
        self._drawn_at = 0.0
        self._draw(force=True)

    def advance(self, files: int = 1, size: int = 0) -> None:
        self.done += files
        self.done_bytes += size
        self._draw(force=False)

    def finish(self) -> None:
        if self._active:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
        self._active = False

    def _draw(self, *, force: bool) -> None:
        if not self._active:
            return
        now = time.monotonic()
        if not force and now - self._drawn_at < REDRAW_SECONDS:
            return
        self._drawn_at = now
        filled = round(BAR_WIDTH * min(self.done, self.total) / self.total)
        size = f", {self.done_bytes / 1_048_576:.1f} MB" if self.done_bytes else ""
        line = f"\r{self.label:<9} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total} files{size}"
        self.stream.write(line)
        self.stream.flush()
