"""Conversation transcripts (JSONL) turned into searchable text, one message per line.

Each user or assistant message with text becomes one line ``User: …`` / ``Assistant: …`` (whitespace,
newlines included, collapsed to single spaces, so one message is one line). Tool calls, tool results,
images, system prompts and other records are dropped. ``line_map[i]`` is the 1-indexed JSONL line that
produced text line ``i + 1``, so a chunk's line range can be cited as JSONL lines (``map_lines``).

Recognised record shapes:
- ``{"role": "user" | "assistant", "content": "..." | [parts]}`` (OpenAI / Anthropic style);
- wrappers whose message sits under ``"message"``, e.g. OpenClaw ``{"type": "message", "message": {...}}``
  and Claude Code ``{"type": "user", "message": {...}}``;
- content parts ``{"type": "text" | "input_text" | "output_text", "text": "..."}`` or bare strings;
  ``tool_use``, ``tool_result``, ``image``, ``thinking`` and other part types are skipped.

Lines that are not valid JSON, or not a JSON object, are skipped and counted in ``malformed_lines``;
a transcript is never rejected for them. Blank lines are neither messages nor malformed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from indexing.chunking import ChunkSpan, chunk_markdown

_SPEAKERS = {"user": "User", "human": "User", "assistant": "Assistant", "ai": "Assistant", "model": "Assistant"}
_TEXT_PART_TYPES = {"text", "input_text", "output_text"}


@dataclass
class Transcript:
    text: str
    line_map: list[int] = field(default_factory=list)
    messages: int = 0
    malformed_lines: int = 0


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type", "text") in _TEXT_PART_TYPES:
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
    return " ".join(texts)


def _message_of(record: dict) -> dict | None:
    """The {role, content} object of a record, unwrapping ``"message"`` envelopes."""
    for _ in range(3):  # envelopes nest at most a couple of levels in the formats we know
        if "role" in record:
            return record
        inner = record.get("message")
        if not isinstance(inner, dict):
            return None
        record = inner
    return None


def _line_of(record: dict) -> str | None:
    message = _message_of(record)
    if message is None:
        return None
    role = message.get("role")
    speaker = _SPEAKERS.get(role.lower()) if isinstance(role, str) else None
    if speaker is None:
        return None
    text = _normalise(_content_text(message.get("content")))
    return f"{speaker}: {text}" if text else None


def transcript_from_jsonl(raw: str) -> Transcript:
    lines: list[str] = []
    line_map: list[int] = []
    malformed = 0
    for number, line in enumerate(raw.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            malformed += 1
            continue
        if not isinstance(record, dict):
            malformed += 1
            continue
        text = _line_of(record)
        if text is not None:
            lines.append(text)
            line_map.append(number)
    return Transcript(text="\n".join(lines), line_map=line_map, messages=len(lines), malformed_lines=malformed)


def map_lines(span_start: int, span_end: int, line_map: list[int]) -> tuple[int, int]:
    """The JSONL line range (1-indexed, inclusive) behind text lines span_start..span_end (1-indexed).

    Out-of-range text lines are clamped to the transcript, so a stale range still cites real lines.
    """
    if not line_map:
        raise ValueError("an empty transcript has no lines to map")
    first = min(max(span_start, 1), len(line_map))
    last = min(max(span_end, first), len(line_map))
    return line_map[first - 1], line_map[last - 1]


def chunk_transcript(raw: str, *, max_tokens: int = 400, overlap_tokens: int = 80) -> tuple[list[ChunkSpan], Transcript]:
    """Chunks of a JSONL transcript whose line ranges are JSONL lines of ``raw`` (what results cite).

    Each chunk's text is the ``User: …`` / ``Assistant: …`` lines it covers; ``start_line``/``end_line`` are
    the JSONL lines of its first and last message (records in between that were dropped, such as tool
    calls, fall inside the range). Appending records appends messages, so, as for markdown, only the last
    chunk changes and everything before it is reused.
    """
    transcript = transcript_from_jsonl(raw)
    chunks = []
    for chunk in chunk_markdown(transcript.text, max_tokens=max_tokens, overlap_tokens=overlap_tokens):
        start, end = map_lines(chunk.start_line, chunk.end_line, transcript.line_map)
        chunks.append(replace(chunk, start_line=start, end_line=end))
    return chunks, transcript
