import pytest

from indexing.paths import path_normalize, prefix_normalize, source_infer, source_resolve
from memoryhub.domain import Inconsistent, InvalidInput, UnsupportedContent


@pytest.mark.parametrize(
    "raw, normal",
    [
        ("MEMORY.md", "MEMORY.md"),
        ("./memory/2026-01-02.md", "memory/2026-01-02.md"),
        ("memory/./notes.md", "memory/notes.md"),
        ("notes/cafe\u0301.md", "notes/caf\u00e9.md"),  # NFD and NFC spellings are one file
        ("a b/c d.txt", "a b/c d.txt"),
    ],
)
def test_it_normalises_equivalent_spellings(raw, normal):
    assert path_normalize(raw) == normal


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "/etc/passwd",
        "../secrets.md",
        "memory/../../x.md",
        "memory//a.md",
        "memory/",
        "a\x00b.md",
        "a\nb.md",
        "a\x7fb.md",
        "memory\\a.md",
        "C:/notes.md",
        ".",
        "x" * 256 + ".md",
        "/".join(["abcdefgh"] * 120) + ".md",
    ],
)
def test_it_refuses_paths_that_are_not_plain_relative_paths(raw):
    with pytest.raises(InvalidInput) as info:
        path_normalize(raw)
    assert info.value.code == "invalid_path"


@pytest.mark.parametrize(
    "path, source",
    [
        ("MEMORY.md", "memory"),
        ("memory.md", "memory"),
        ("memory/2026-01-02.md", "memory"),
        ("memory/projects/deep/x.md", "memory"),
        ("sessions/abc.jsonl", "session"),
        ("chat.JSONL", "session"),
        ("notes/todo.md", "workspace"),
        ("memory/data.json", "workspace"),
        ("src/main.py", "workspace"),
        ("docs/a.TXT", "workspace"),
    ],
)
def test_it_infers_the_source_from_the_path(path, source):
    assert source_infer(path) == source


@pytest.mark.parametrize("path", ["photo.png", "archive.tar.gz", "Makefile", "bin/tool.exe", ".bashrc"])
def test_other_file_types_are_unsupported(path):
    with pytest.raises(UnsupportedContent) as info:
        source_infer(path)
    assert info.value.code == "unsupported_file_type"


def test_an_explicit_source_is_accepted_when_consistent():
    assert source_resolve(path="notes/about-me.md", source="memory") == "memory"
    assert source_resolve(path="memory/x.md", source="workspace") == "workspace"
    assert source_resolve(path="log.jsonl", source="session") == "session"


@pytest.mark.parametrize("path, source", [("notes.md", "session"), ("chat.jsonl", "memory"), ("chat.jsonl", "workspace")])
def test_session_goes_with_jsonl_and_only_with_it(path, source):
    with pytest.raises(Inconsistent) as info:
        source_resolve(path=path, source=source)
    assert info.value.code == "inconsistent_source"


def test_prefixes_are_plain_string_prefixes():
    assert prefix_normalize("./memory/") == "memory/"
    assert prefix_normalize(None) == ""
    for bad in ["/abs", "../up", "a\x00"]:
        with pytest.raises(InvalidInput):
            prefix_normalize(bad)
