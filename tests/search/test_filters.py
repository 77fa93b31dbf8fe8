"""Filters: sources, path_prefix, modified_since / modified_until, in every mode."""

from datetime import datetime, timezone

import pytest

TEXT = "Weekly review of the greenhouse tomatoes and the irrigation schedule."


@pytest.fixture
def spread(alice, index_files):
    index_files(alice, {"memory/2026-01-05.md": TEXT}, mtime=datetime(2026, 1, 5, tzinfo=timezone.utc))
    index_files(alice, {"notes/garden.txt": TEXT}, mtime=datetime(2026, 3, 1, tzinfo=timezone.utc))
    index_files(alice, {"chats/talk.jsonl": '{"role": "user", "content": "%s"}\n' % TEXT},
                mtime=datetime(2026, 6, 1, tzinfo=timezone.utc))


def paths(search, member, **fields):
    code, body = search(member, "greenhouse tomatoes irrigation", min_score=0, **fields)
    assert code == 200, body
    return sorted(r["path"] for r in body["results"])


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_sources_filter(alice, spread, search, mode):
    assert paths(search, alice, mode=mode, sources=["session"]) == ["chats/talk.jsonl"]
    assert paths(search, alice, mode=mode, sources=["memory", "workspace"]) == ["memory/2026-01-05.md", "notes/garden.txt"]
    assert len(paths(search, alice, mode=mode, sources=[])) == 3


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_path_prefix_filter(alice, spread, search, mode):
    assert paths(search, alice, mode=mode, path_prefix="memory/") == ["memory/2026-01-05.md"]
    assert paths(search, alice, mode=mode, path_prefix="nothing/") == []


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_modified_filters_use_the_client_mtime(alice, spread, search, mode):
    assert paths(search, alice, mode=mode, modified_since="2026-02-01T00:00:00Z") == ["chats/talk.jsonl", "notes/garden.txt"]
    assert paths(search, alice, mode=mode, modified_until="2026-02-01T00:00:00Z") == ["memory/2026-01-05.md"]
    assert paths(search, alice, mode=mode, modified_since="2026-02-01T00:00:00Z",
                 modified_until="2026-04-01T00:00:00Z") == ["notes/garden.txt"]


def test_filters_combine(alice, spread, search):
    assert paths(search, alice, sources=["workspace"], path_prefix="memory/") == []


def test_an_inverted_date_range_is_a_400(alice, search):
    code, body = search(alice, "x", modified_since="2026-05-01T00:00:00Z", modified_until="2026-01-01T00:00:00Z")
    assert code == 400
    assert "modified_since" in body["error"]["message"]
