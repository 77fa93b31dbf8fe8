"""What a push sends: the files of a local agent workspace that the server indexes, with their hashes.

The rules mirror the server (``indexing/paths.py``) so that one odd file never makes the server reject
a whole sync: a path is sent only if the server would accept it, as the same normalised string, and a
file only if it is UTF-8 text without NUL bytes and under the per-file size limit. Everything else is
skipped locally and counted with its reason. Hidden entries (``.git``, ``.env``, editor swap files)
and vendor folders are not even walked: they are where secrets and thousands of irrelevant files live.
The user's own exclusions (``.gitignore`` files, ``.memoryhubignore`` and ``--exclude``, see
``Excludes``) are treated the same way: excluded folders are not walked, excluded files are listed as
"excluded".
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memoryhub_client.errors import ConfigError
from memoryhub_client.limits import DEFAULT_MAX_FILE_BYTES
from memoryhub_client.progress import Progress


SESSION_EXTENSION = "jsonl"
# The same list as indexing.paths.WORKSPACE_EXTENSIONS (a test keeps the two equal).
WORKSPACE_EXTENSIONS = frozenset(
    """
    rs py js ts tsx jsx json go java kt swift c cpp h hpp rb lua
    toml yaml yml sh bash zsh vim conf cfg ini env xml csv
    md markdown txt html css scss sql
    """.split()
)
ACCEPTED_EXTENSIONS = WORKSPACE_EXTENSIONS | {SESSION_EXTENSION}
# As indexing.paths: MEMORY.md at the root and markdown under memory/ are the agent's memory.
MEMORY_ROOT_FILES = frozenset({"MEMORY.md", "memory.md"})
MEMORY_DIRECTORY = "memory"

# Dependency and build-cache folders: other people's code, not the agent's memory. Hidden folders
# (.git, .venv, .cache, .idea …) are skipped by the leading dot already.
VENDOR_DIRECTORIES = frozenset(
    {"node_modules", "bower_components", "jspm_packages", "__pycache__", "site-packages", "venv", "vendor"}
)

MAX_PATH_LENGTH = 1024  # characters, as the server
MAX_SEGMENT_BYTES = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Skip reasons, as shown in the summary and with --verbose.
UNSUPPORTED = "unsupported type"
BINARY = "binary"
NOT_UTF8 = "not UTF-8"
TOO_LARGE = "too large"
BAD_PATH = "bad path"
UNREADABLE = "unreadable"
DUPLICATE = "duplicate path"
EXCLUDED = "excluded"

IGNORE_FILE = ".memoryhubignore"  # in the workspace root: .gitignore syntax, one pattern per line
GITIGNORE_FILE = ".gitignore"  # in the root and any folder; --no-gitignore leaves them unread


@dataclass(frozen=True)
class LocalFile:
    path: str  # the server-side path: relative, '/'-separated, NFC
    absolute: Path
    size: int
    mtime: float
    hash: str  # sha256 of the bytes, as indexing.services.text_hash computes it from the text
    source: str  # memory | session | workspace, by the file's place in the local workspace (source_of)


@dataclass
class Scan:
    files: dict[str, LocalFile] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (local relative path, reason)
    pruned_directories: int = 0  # hidden or vendor folders not walked

    def skip_counts(self) -> Counter:
        return Counter(reason for _, reason in self.skipped)


class UnreadableFile(Exception):
    """A file that cannot be sent as it is now: its reason is one of the skip reasons above."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def is_ignored_directory(name: str) -> bool:
    return name.startswith(".") or name in VENDOR_DIRECTORIES


class Excludes:
    """What the user keeps out of a push, read exactly as git reads ignore files (``pathspec``'s
    ``GitIgnoreSpec``): ``*.log``, ``drafts/``, ``/scratch``, ``notes/**/private``, ``!keep.md``.

    The rules come from, lowest precedence first: the workspace's ``.gitignore`` files (the root's and
    those in sub-folders, each relative to its folder, deeper ones winning), then ``.memoryhubignore``
    in the root, then ``--exclude``. The last rule that matches decides, so ``!notes/plan.md`` in
    ``.memoryhubignore`` sends a file that ``.gitignore`` hides. As in git, a file inside an excluded
    folder cannot be re-included (the folder is not walked). An excluded file counts as absent: a push
    that deletes missing files removes it from the server.
    """

    def __init__(self, patterns: tuple[str, ...] | list[str] = (), *, root: Path | None = None, gitignore: bool = False):
        self.root = root
        self.gitignore = gitignore and root is not None
        self._own = _spec(patterns)  # .memoryhubignore and --exclude, relative to the root
        self._gitignores: dict[str, object | None] = {}  # folder ("" for the root) → its .gitignore's spec

    @classmethod
    def of_workspace(cls, root: Path, extra: tuple[str, ...] | list[str] = (), *, gitignore: bool = True) -> Excludes:
        """``.memoryhubignore``'s patterns, then ``extra`` (from --exclude), and the .gitignore files."""
        return cls([*_pattern_lines(root / IGNORE_FILE), *extra], root=root, gitignore=gitignore)

    def match(self, relative: str, *, is_directory: bool) -> bool:
        """Whether this path (a folder when ``is_directory``) is excluded by a rule of its own; the
        folders it is in are checked by the walk, or by ``covers``."""
        relative = relative.replace(os.sep, "/").strip("/")
        excluded = None
        if self.gitignore:
            parts = relative.split("/")
            for depth in range(len(parts)):  # the root's .gitignore first, the deepest folder's last
                folder = "/".join(parts[:depth])
                spec = self._gitignore(folder)
                if spec is not None:
                    decision = _decide(spec, "/".join(parts[depth:]), is_directory)
                    excluded = decision if decision is not None else excluded
        if self._own is not None:
            decision = _decide(self._own, relative, is_directory)
            excluded = decision if decision is not None else excluded
        return bool(excluded)

    def covers(self, relative: str) -> bool:
        """Whether a path, or any folder it is in, is excluded (for watch events: file or folder)."""
        parts = relative.replace(os.sep, "/").strip("/").split("/")
        folders = ("/".join(parts[:i]) for i in range(1, len(parts)))
        leaf = "/".join(parts)
        return any(self.match(folder, is_directory=True) for folder in folders) or (
            self.match(leaf, is_directory=False) or self.match(leaf, is_directory=True)
        )

    def _gitignore(self, folder: str):
        if folder not in self._gitignores:
            self._gitignores[folder] = _spec(_pattern_lines(self.root / folder / GITIGNORE_FILE))
        return self._gitignores[folder]


def _pattern_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def _spec(lines):
    """A compiled ``GitIgnoreSpec`` of the lines, or None when they hold no pattern (only blank lines and
    ``#`` comments, which git ignores too; ``\\#name`` is a pattern)."""
    lines = [line for line in lines if line.strip() and not line.startswith("#")]
    if not lines:
        return None
    try:
        import pathspec  # only push and watch read ignore rules: search and pull start without it
    except ImportError:
        raise ConfigError("the ignore rules need the pathspec package, a dependency of memoryhub-client: pip install pathspec") from None

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _decide(spec, relative: str, is_directory: bool) -> bool | None:
    """True (excluded), False (re-included by a ``!`` rule) or None (no rule of ``spec`` matched)."""
    return spec.check_file(relative + "/" if is_directory else relative).include


def _extension(name: str) -> str:
    stem, dot, extension = name.rpartition(".")
    return extension.lower() if dot and stem else ""


def server_path(relative: str, *, prefix: str = "") -> str | None:
    """The path the server will store for a local relative path, or None when it would refuse it."""
    path = unicodedata.normalize("NFC", prefix + relative.replace(os.sep, "/"))
    if _CONTROL.search(path) or "\\" in path or len(path) > MAX_PATH_LENGTH:
        return None
    segments = path.split("/")
    if any(s in ("", ".", "..") or len(s.encode("utf-8", "surrogateescape")) > MAX_SEGMENT_BYTES for s in segments):
        return None
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a file name that is not valid UTF-8 on disk (surrogate escapes)
        return None
    return path


def source_of(relative: str) -> str:
    """The source kind of a local file, by the server's rules (``indexing.paths.source_infer``) applied to
    its path inside the workspace. The client sends it with every file, because the server only sees the
    stored path: under ``--prefix bulk/``, ``memory/2024-01-01.md`` is stored as ``bulk/memory/2024-01-01.md``
    and is still the agent's memory, not a workspace file."""
    path = unicodedata.normalize("NFC", relative.replace(os.sep, "/"))
    extension = _extension(posixpath.basename(path))
    if extension == SESSION_EXTENSION:
        return "session"
    if path in MEMORY_ROOT_FILES or (path.startswith(MEMORY_DIRECTORY + "/") and extension == "md"):
        return "memory"
    return "workspace"


def is_indexed_path(relative: str) -> bool:
    """Whether the server indexes a file of this name (``indexing.paths.source_infer`` accepts it)."""
    return _extension(posixpath.basename(relative)) in ACCEPTED_EXTENSIONS


def is_ignored(relative: str, excludes: Excludes | None = None) -> bool:
    """Whether a local relative path is, or is inside, something hidden, a vendor folder or excluded
    (``watch``). The last part counts too: a watch event may name the folder itself (``node_modules``)."""
    if any(is_ignored_directory(part) for part in relative.replace(os.sep, "/").split("/")):
        return True
    return excludes is not None and excludes.covers(relative)


def read_text(absolute: Path, *, max_bytes: int) -> tuple[str, bytes]:
    """(text, raw bytes) of a file the server accepts, or UnreadableFile with the reason."""
    try:
        if absolute.stat().st_size > max_bytes:
            raise UnreadableFile(TOO_LARGE)
        raw = absolute.read_bytes()
    except OSError:
        raise UnreadableFile(UNREADABLE) from None
    if len(raw) > max_bytes:  # grew since stat
        raise UnreadableFile(TOO_LARGE)
    if b"\x00" in raw:
        raise UnreadableFile(BINARY)
    try:
        return raw.decode("utf-8"), raw
    except UnicodeDecodeError:
        raise UnreadableFile(NOT_UTF8) from None


def _candidates(root: Path, scan: Scan, excludes: Excludes) -> Iterator[tuple[str, Path]]:
    """(local relative path, absolute path) of every non-hidden, non-excluded file with an indexed extension."""
    for directory, subdirectories, names in os.walk(root, followlinks=False):
        relative_directory = os.path.relpath(directory, root)

        def inside(name: str) -> str:
            return name if relative_directory == "." else os.path.join(relative_directory, name)

        kept = sorted(
            d for d in subdirectories if not is_ignored_directory(d) and not excludes.match(inside(d), is_directory=True)
        )
        scan.pruned_directories += len(subdirectories) - len(kept)
        subdirectories[:] = kept  # os.walk descends only into what is left here
        for name in sorted(names):
            if name.startswith("."):
                continue  # hidden files (.env, swap files) are never sent and not worth reporting
            relative = inside(name)
            if excludes.match(relative, is_directory=False):
                scan.skipped.append((relative, EXCLUDED))
                continue
            if not is_indexed_path(name):
                scan.skipped.append((relative, UNSUPPORTED))
                continue
            yield relative, Path(directory) / name


def workspace_scan(
    *,
    root: Path,
    prefix: str = "",
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    progress: Progress | None = None,
    excludes: Excludes | None = None,
) -> Scan:
    """Walk ``root`` and hash every file a push would send."""
    scan = Scan()
    candidates = list(_candidates(root, scan, excludes or Excludes()))
    progress = progress or Progress(enabled=False)
    progress.start(label="hashing", total=len(candidates))
    for relative, absolute in candidates:
        progress.advance()
        path = server_path(relative, prefix=prefix)
        if path is None:
            scan.skipped.append((relative, BAD_PATH))
            continue
        if path in scan.files:  # two spellings that NFC makes one (possible on Linux file systems)
            scan.skipped.append((relative, DUPLICATE))
            continue
        try:
            stat = absolute.stat()
            _, raw = read_text(absolute, max_bytes=max_file_bytes)
        except UnreadableFile as exc:
            scan.skipped.append((relative, exc.reason))
            continue
        except OSError:
            scan.skipped.append((relative, UNREADABLE))
            continue
        scan.files[path] = LocalFile(
            path=path, absolute=absolute, size=len(raw), mtime=stat.st_mtime, hash=hashlib.sha256(raw).hexdigest(),
            source=source_of(relative),
        )
    progress.finish()
    return scan
