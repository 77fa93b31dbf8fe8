"""Paths of memory files: one normal form, strict validation, and the source kind a path implies.

A path names a file inside the agent's workspace: relative, POSIX separators, NFC-normalised Unicode,
no ``..``, no ``.`` or empty segments, no control or invisible formatting characters, bounded length. Two spellings of the same
file (``./memory/a.md`` and ``memory/a.md``) end up as one row; anything that could escape the workspace
or confuse a client is refused with 400 ``invalid_path`` rather than "fixed" silently.

Sources: ``memory`` (``MEMORY.md``, ``memory.md``, ``memory/**/*.md``), ``session`` (``*.jsonl``
transcripts), ``workspace`` (other text files: code, config and docs, ``WORKSPACE_EXTENSIONS``). Any other extension is
refused with 415 ``unsupported_file_type``: MemoryHub indexes text, not whatever a sync happens to send.
"""

import posixpath
import re
import unicodedata

from indexing.models import MemoryFile
from memoryhub.domain import Inconsistent, InvalidInput, UnsupportedContent

MAX_PATH_LENGTH = 1024  # characters; MemoryFile.path's column size
MAX_SEGMENT_BYTES = 255  # a file name on common file systems

Source = MemoryFile.Source

MEMORY_ROOT_FILES = frozenset({"MEMORY.md", "memory.md"})
MEMORY_DIRECTORY = "memory"
SESSION_EXTENSION = "jsonl"
# Text worth indexing: code, config and docs, plus markdown's long spelling.
WORKSPACE_EXTENSIONS = frozenset(
    """
    rs py js ts tsx jsx json go java kt swift c cpp h hpp rb lua
    toml yaml yml sh bash zsh vim conf cfg ini env xml csv
    md markdown txt html css scss sql
    """.split()
)

# C0 and C1 control characters and DEL; tab and newline have no business in a path either.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Invisible characters that make one path look like another in a citation: bidi overrides and
# isolates (U+202A-U+202E, U+2066-U+2069), zero-width spaces and joiners, the BOM, soft hyphens (all of
# Unicode's "format" category), line and paragraph separators, and lone surrogates.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Cs"})
# "C:" as a first segment is a Windows absolute path.
_DRIVE = re.compile(r"^[A-Za-z]:$")


def _invalid(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_path")


def _invisible(text: str) -> str | None:
    """The first invisible or direction-changing character of ``text``, as U+XXXX, if any."""
    for character in text:
        if not character.isascii() and unicodedata.category(character) in _INVISIBLE_CATEGORIES:
            return f"U+{ord(character):04X}"
    return None


def path_normalize(raw: str) -> str:
    """The stored form of a client-supplied path, or InvalidInput (invalid_path)."""
    if not isinstance(raw, str) or raw == "":
        raise _invalid("A path is required." if raw in ("", None) else "The path must be a string.")
    if _CONTROL.search(raw):
        raise _invalid("The path contains a NUL or control character.")
    if invisible := _invisible(raw):
        raise _invalid(f"The path contains an invisible or text-direction character ({invisible}).")
    if "\\" in raw:
        raise _invalid("Use '/' to separate folders; backslashes are not allowed in paths.")
    path = unicodedata.normalize("NFC", raw)
    if path.startswith("/"):
        raise _invalid(f"The path must be relative to the workspace, not absolute: {path!r}.")
    segments = path.split("/")
    if _DRIVE.match(segments[0]):
        raise _invalid(f"The path must be relative to the workspace, not absolute: {path!r}.")
    kept = []
    for segment in segments:
        if segment == "":
            raise _invalid(f"The path has an empty segment ('//' or a trailing '/'): {path!r}.")
        if segment == "..":
            raise _invalid(f"The path may not contain '..': {path!r}.")
        if segment == ".":
            continue
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise _invalid(f"A path segment is longer than {MAX_SEGMENT_BYTES} bytes.")
        kept.append(segment)
    if not kept:
        raise _invalid(f"The path names no file: {path!r}.")
    normal = "/".join(kept)
    if len(normal) > MAX_PATH_LENGTH:
        raise _invalid(f"The path is longer than {MAX_PATH_LENGTH} characters ({len(normal)}).")
    return normal


def prefix_normalize(raw: str | None) -> str:
    """A listing or sync prefix: plain string prefix of normalised paths ('' = everything).

    ``memory/`` selects a folder, ``memory`` also selects ``memory.md``: S3 semantics, said in the docs.
    """
    if raw is None or raw == "":
        return ""
    if not isinstance(raw, str):
        raise _invalid("The prefix must be a string.")
    if _CONTROL.search(raw) or "\\" in raw:
        raise _invalid("The prefix contains a control character or a backslash.")
    if invisible := _invisible(raw):
        raise _invalid(f"The prefix contains an invisible or text-direction character ({invisible}).")
    prefix = unicodedata.normalize("NFC", raw)
    if prefix.startswith("/"):
        raise _invalid("The prefix must be relative to the workspace, not absolute.")
    while prefix.startswith("./"):
        prefix = prefix[2:]
    if ".." in prefix.split("/"):
        raise _invalid("The prefix may not contain '..'.")
    if len(prefix) > MAX_PATH_LENGTH:
        raise _invalid(f"The prefix is longer than {MAX_PATH_LENGTH} characters.")
    return prefix


def _extension(path: str) -> str:
    name = posixpath.basename(path)
    stem, dot, extension = name.rpartition(".")
    return extension.lower() if dot and stem else ""


def source_infer(path: str) -> str:
    """The source kind a normalised path implies, or UnsupportedContent (unsupported_file_type)."""
    extension = _extension(path)
    if extension == SESSION_EXTENSION:
        return Source.SESSION
    if path in MEMORY_ROOT_FILES or (path.startswith(MEMORY_DIRECTORY + "/") and extension == "md"):
        return Source.MEMORY
    if extension in WORKSPACE_EXTENSIONS:
        return Source.WORKSPACE
    raise UnsupportedContent(
        f"{path!r} is not a file type MemoryHub indexes. Accepted: MEMORY.md, memory/**/*.md, "
        f"*.jsonl transcripts and text files ending in .{', .'.join(sorted(WORKSPACE_EXTENSIONS))}.",
        code="unsupported_file_type",
    )


def source_resolve(*, path: str, source: str | None) -> str:
    """The source of a file: inferred from the path, or the one given when it is consistent with it.

    A transcript is parsed as JSONL, so ``session`` and ``*.jsonl`` go together both ways; any other
    supported text file may be declared ``memory`` or ``workspace`` by the client.
    """
    inferred = source_infer(path)
    if not source:
        return inferred
    if source not in Source.values:
        raise InvalidInput(f"source must be one of: {', '.join(Source.values)}.", code="invalid_source")
    if (source == Source.SESSION) != (inferred == Source.SESSION):
        raise Inconsistent(
            f"source {source!r} does not fit {path!r}: 'session' is for *.jsonl transcripts, and only for them.",
            code="inconsistent_source",
        )
    return source
