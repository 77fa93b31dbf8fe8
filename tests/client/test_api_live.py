"""``ApiClient``, one method per endpoint, and ``memoryhub-client pull``, against the live server."""

import os

import pytest

from indexing.models import MemoryFile
from memoryhub_client.api import ApiClient
from memoryhub_client.errors import ServerError
from tests.client.conftest import write


@pytest.fixture
def api(live_server, alice) -> ApiClient:
    return ApiClient(url=live_server.url, token=alice.raw_token, retry_delays=())


def test_files_are_written_appended_read_listed_and_deleted(api, alice):
    written = api.file_put(path="memory/falcon.md", content="# Falcon\n\nShips in May.", attributes={"project": "falcon"})
    appended = api.file_append(path="memory/falcon.md", text="Budget: 40k.")
    lines = api.file_get(path="memory/falcon.md", start=3, lines=2)
    listed = list(api.file_iter(prefix="memory/"))

    assert written["job"] and written["attributes"] == {"project": "falcon"}
    assert appended["hash"] != written["hash"]
    assert lines["content"] == "Ships in May.\nBudget: 40k." and lines["total_lines"] == 4
    assert [(item["path"], item["source"]) for item in listed] == [("memory/falcon.md", "memory")]
    assert api.job(written["job"])["state"] == "done"

    deleted = api.file_delete(path="memory/falcon.md")
    assert deleted["deleted"] is True and not MemoryFile.objects.filter(agent=alice.agent).exists()


def test_a_conditional_write_is_refused_when_the_file_changed_meanwhile(api):
    first = api.file_put(path="notes/plan.md", content="v1", expected_hash="")  # only if absent
    api.file_put(path="notes/plan.md", content="v2 from another writer")

    with pytest.raises(ServerError) as caught:
        api.file_put(path="notes/plan.md", content="v3", expected_hash=first["hash"])

    assert caught.value.status == 412 and caught.value.code == "hash_mismatch"
    assert api.file_get(path="notes/plan.md")["content"] == "v2 from another writer"


def test_search_passes_filters_on_attributes_and_sources(api):
    api.file_put(path="memory/falcon.md", content="The launch is in May.", attributes={"project": "falcon", "priority": 2})
    api.file_put(path="memory/heron.md", content="The launch is in June.", attributes={"project": "heron", "priority": 5})
    api.file_put(path="notes/launch.txt", content="The launch party is on Friday.")

    falcon = api.search("launch", filters={"type": "and", "filters": [
        {"type": "eq", "key": "project", "value": "falcon"}, {"type": "lte", "key": "priority", "value": 3}]})
    workspace = api.search("launch", sources=["workspace"], mode="keyword", explain=True)

    assert [r["path"] for r in falcon["results"]] == ["memory/falcon.md"]
    assert falcon["results"][0]["attributes"] == {"project": "falcon", "priority": 2}
    assert [r["path"] for r in workspace["results"]] == ["notes/launch.txt"]
    assert workspace["mode"] == "keyword" and "keyword_rank" in workspace["results"][0]["explain"]


def test_tools_are_listed_and_run(api):
    api.file_put(path="memory/falcon.md", content="# Falcon\n\nThe launch is planned for March.")

    definitions = api.tool_definitions(format="anthropic")
    answer = api.tool_run("memory_search", {"query": "when is the launch"})

    assert "memory_search" in {tool["name"] for tool in definitions["tools"]}
    assert "memory/falcon.md#L" in answer["content"] and answer["data"]["results"]


def test_export_streams_every_file_and_status_counts_them(api):
    api.sync(files=[{"path": "MEMORY.md", "content": "tea"}, {"path": "sessions/a.jsonl", "content": '{"role": "user", "content": "hi"}'}])

    exported = list(api.export())

    assert [(f["path"], f["source"], f["content"]) for f in exported] == [
        ("MEMORY.md", "memory", "tea"), ("sessions/a.jsonl", "session", '{"role": "user", "content": "hi"}'),
    ]
    assert api.status()["files"] == 2 and api.status()["pending"] == 0


def test_another_agents_token_sees_nothing(api, live_server, bob):
    api.file_put(path="MEMORY.md", content="alice's secret")
    other = ApiClient(url=live_server.url, token=bob.raw_token, retry_delays=())

    assert list(other.export()) == []
    with pytest.raises(ServerError) as caught:
        other.file_get(path="MEMORY.md")
    assert caught.value.status == 404


# --- pull ----------------------------------------------------------------------------------------


def test_pull_writes_the_agents_files_back_and_push_then_finds_nothing_to_send(hub, tmp_path):
    source = tmp_path / "ws"
    write(source, "MEMORY.md", "# Memory\n\ngreen tea\n")
    write(source, "memory/2026-03-01.md", "planted tomatoes\n")
    write(source, "sessions/chat.jsonl", '{"role": "user", "content": "hi"}\n')
    assert hub("push", source).code == 0

    restored = tmp_path / "restored"
    outcome = hub("pull", restored)
    again = hub("push", restored)

    assert outcome.code == 0, outcome.err
    assert "pulled 3 files: 3 written, 0 unchanged" in outcome.out
    for relative in ("MEMORY.md", "memory/2026-03-01.md", "sessions/chat.jsonl"):
        assert (restored / relative).read_bytes() == (source / relative).read_bytes()
    assert "0 uploaded, 3 unchanged, 0 deleted" in again.out


def test_pull_keeps_local_changes_unless_forced_and_reads_one_prefix(hub, tmp_path):
    source = tmp_path / "ws"
    write(source, "MEMORY.md", "server version\n")
    assert hub("push", source, "--prefix", "bulk/").code == 0
    restored = tmp_path / "restored"
    write(restored, "MEMORY.md", "local edit\n")
    write(restored, "mine.md", "only here\n")

    kept = hub("pull", restored, "--prefix", "bulk")
    content_after_kept = (restored / "MEMORY.md").read_text()
    forced = hub("pull", restored, "--prefix", "bulk", "--force")

    assert kept.code == 0 and "1 kept" in kept.out and content_after_kept == "local edit\n"
    assert forced.code == 0 and "1 written" in forced.out
    assert (restored / "MEMORY.md").read_text() == "server version\n"
    assert (restored / "mine.md").read_text() == "only here\n"  # pull never deletes
    assert not [name for name in os.listdir(restored) if name.startswith(".memoryhub-pull-")]


def test_pull_refuses_a_file_in_the_way(hub, tmp_path):
    (tmp_path / "file.txt").write_text("x")

    outcome = hub("pull", tmp_path / "file.txt")

    assert outcome.code == 2 and "not a directory" in outcome.err


def test_search_scope_reaches_a_granted_memory_with_its_owner(api, live_server, alice, bob):
    from agents.services import memory_grant_give

    handbook = ApiClient(url=live_server.url, token=bob.raw_token, retry_delays=())
    handbook.file_put(path="memory/policies.md", content="Expense reports are due on the fifth.")
    api.file_put(path="memory/own.md", content="My expense report is late.")
    assert all("owner" not in r for r in api.search("expense reports")["results"])
    memory_grant_give(reader=alice.agent, owner=bob.agent)

    shared = api.search("expense reports due", scope="shared")["results"]
    assert {(r["path"], r.get("owner")) for r in shared} == {("memory/policies.md", "bob"), ("memory/own.md", None)}
    assert [r["path"] for r in api.search("expense", scope=["bob"])["results"]] == ["memory/policies.md"]
    assert api.file_get(path="bob:memory/policies.md")["content"] == "Expense reports are due on the fifth."
