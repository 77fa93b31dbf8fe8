"""Snippets: what the agent actually reads, so they must show the lines that answer.

A snippet is a run of whole lines of the file (at most the budget, default 700 characters; the caller gives
a hit inside a stretch of matching text a larger one, search/services.py) built in
three steps:
1. score every line of the hit's chunk by the query lexemes it contains (weighted by their IDF);
2. take the run of lines within the chunk that holds the most score and fits the budget, trimmed to
   its first and last matching line (a chunk found by meaning only, with no matching line, starts at
   its first line);
3. fill the rest of the budget with the neighbouring lines of the file, alternately after and before
   (beyond the chunk too: evidence often sits a line or two away from the words of the question);
   when the next neighbour does not fit whole, its beginning is shown up to the budget with "…".

``start_line``/``end_line`` are exactly the first and last line shown. No line is shown whole twice in
one answer: lines already shown by a better hit of the same file are skipped and stop the extension. A
neighbour shown in part is not counted as shown: a later hit of the file may show it whole (counting it
hid the rest of that line from every later snippet; measured in docs/search.md).
Transcripts (source ``session``) are shown as their ``User: …`` / ``Assistant: …`` lines and cite the
JSONL lines those messages came from (indexing/transcripts.py keeps the map). A line longer than the
whole budget is shown cut around its first match, and is cut so before any work on it
(``FileLines.windowed``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from indexing.transcripts import transcript_from_jsonl

ELLIPSIS = "…"
# A neighbour shown in part must show at least this much to be worth its line.
MIN_PARTIAL_CHARS = 40


@dataclass
class FileLines:
    """The lines a file shows in snippets and the line number each of them cites."""

    lines: list[str]
    line_map: list[int] | None = None  # cited line of lines[i]; None: i + 1 + offset
    offset: int = 0

    @classmethod
    def of_file(cls, *, content: str, source: str) -> FileLines:
        if source == "session":
            transcript = transcript_from_jsonl(content)
            return cls(lines=transcript.text.split("\n") if transcript.line_map else [], line_map=transcript.line_map)
        lines = content.split("\n")
        if len(lines) > 1 and lines[-1] == "":
            lines.pop()  # as memory_get counts them: "a\nb\n" has two lines
        return cls(lines=lines)

    @classmethod
    def of_chunk(cls, *, text: str, start_line: int, end_line: int) -> FileLines:
        """Lines of the chunk text alone: for a file whose stored content changed since it was indexed."""
        lines = text.split("\n")
        line_map = [min(start_line + i, end_line) for i in range(len(lines))]
        if lines:
            line_map[-1] = end_line
        return cls(lines=lines, line_map=line_map)

    def windowed(self, *, budget: int, query_lexemes: list[str]) -> FileLines:
        """Each line longer than ``budget`` replaced by the at most ``budget`` characters of it a snippet
        can show (around its first query lexeme): what follows, lexemes from Postgres included, costs
        the budget whatever the length of the line (a 5 MB file can be one line)."""
        for i, line in enumerate(self.lines):
            if len(line) > budget:
                self.lines[i] = _cut_long_line(line, budget, query_lexemes)
        return self

    def cite(self, index: int) -> int:
        return self.line_map[index] if self.line_map is not None else index + 1 + self.offset

    def region(self, start_line: int, end_line: int) -> tuple[int, int] | None:
        """Indexes of the lines behind a chunk's cited range, or None when it is outside this file."""
        if not self.lines:
            return None
        if self.line_map is None:
            first, last = start_line - 1 - self.offset, end_line - 1 - self.offset
        else:
            first = bisect.bisect_left(self.line_map, start_line)
            last = bisect.bisect_right(self.line_map, end_line) - 1
        first, last = max(first, 0), min(last, len(self.lines) - 1)
        return (first, last) if first <= last else None


@dataclass(frozen=True)
class Snippet:
    first: int  # index into FileLines.lines
    last: int
    text: str


def line_scores(line_lexemes: list[set[str]], idf: dict[str, float], query_lexemes: list[str]) -> list[float]:
    """Per line, the summed IDF of the query lexemes it contains (lexemes without an IDF weigh 1). Summed
    exactly (math.fsum): a set's order changes with the process's string hashing, and a float sum in
    another order can differ in its last bit, which chose another of two equal windows from one process
    to the next."""
    wanted = set(query_lexemes)
    return [math.fsum(idf.get(lexeme, 1.0) for lexeme in lexemes & wanted) for lexemes in line_lexemes]


def _cut_long_line(line: str, budget: int, query_lexemes: list[str]) -> str:
    """At most ``budget`` characters of one long line, around the first query lexeme found in it."""
    lowered = line.lower()
    positions = [lowered.find(lexeme) for lexeme in query_lexemes]
    positions = [p for p in positions if p >= 0]
    start = max(0, min(positions) - budget // 4) if positions else 0
    if start == 0:
        return line[: budget - 1] + ELLIPSIS if len(line) > budget else line
    text = line[start : start + budget - 1]
    if start + budget - 1 < len(line):
        return ELLIPSIS + text[:-1] + ELLIPSIS
    return ELLIPSIS + text


def snippet_build(
    *,
    file_lines: FileLines,
    region: tuple[int, int],
    scores: list[float],
    shown: set[int],
    budget: int,
    query_lexemes: list[str] = (),
) -> Snippet | None:
    """The snippet of one hit; ``scores`` has one value per line of ``region``; ``shown`` holds the
    cited line numbers of this file that earlier snippets showed (updated here). None when every line
    of the region was shown already."""
    lines = file_lines.lines
    a, b = region

    def free(i: int) -> bool:
        return 0 <= i < len(lines) and file_lines.cite(i) not in shown

    def cost(i: int) -> int:
        return len(lines[i]) + 1  # the line and its newline

    # 2. The run of free lines within the region holding the most score within the budget.
    best: tuple[float, int, int, int] | None = None  # (score, -chars, -start, ...)
    window = None
    for i in range(a, b + 1):
        if not free(i):
            continue
        total, chars = 0.0, -1
        for j in range(i, b + 1):
            if not free(j):
                break
            chars += cost(j)
            if chars > budget and j > i:
                break
            total += scores[j - a]
            key = (total, -chars, -i)
            if best is None or key > best:
                best, window = key, (i, j)
    if window is None:
        return None
    lo, hi = window
    if best[0] > 0:  # trim to the first and last matching line
        while scores[lo - a] <= 0:
            lo += 1
        while scores[hi - a] <= 0:
            hi -= 1
    else:
        hi = lo  # found by meaning only: start from the chunk's first free line

    if len(lines[lo]) > budget and lo == hi:
        text = _cut_long_line(lines[lo], budget, list(query_lexemes))
        shown.add(file_lines.cite(lo))
        return Snippet(lo, lo, text)

    # 3. Fill the budget with neighbours, after and before in turn.
    used = sum(cost(i) for i in range(lo, hi + 1)) - 1
    open_after, open_before = True, True
    while open_after or open_before:
        if open_after:
            if free(hi + 1) and used + cost(hi + 1) <= budget:
                hi += 1
                used += cost(hi)
            else:
                open_after = False
        if open_before:
            if free(lo - 1) and used + cost(lo - 1) <= budget:
                lo -= 1
                used += cost(lo)
            else:
                open_before = False
    for i in range(lo, hi + 1):
        shown.add(file_lines.cite(i))
    parts = lines[lo : hi + 1]
    room = budget - used - 1  # characters left after a newline
    if room >= MIN_PARTIAL_CHARS:  # a line shown in part stays free: a later hit may show it whole
        if free(hi + 1):
            hi += 1
            parts.append(lines[hi][: room - 1] + ELLIPSIS)
        elif free(lo - 1):
            lo -= 1
            parts.insert(0, lines[lo][: room - 1] + ELLIPSIS)
    return Snippet(lo, hi, "\n".join(parts))
