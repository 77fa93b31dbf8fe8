"""Shared memory by grant: scope "own" (default, unchanged), "shared" and a list of memory names, through
the REST API, the tool endpoint and MCP; granted results name their owner and cite owner:path; memory_get
reads owner:path; nothing is writable through a grant; revocation counts from the next request."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agents.models import MemoryGrant
from agents.services import memory_grant_give
from indexing.models import MemoryFile

pytestmark = pytest.mark.django_db

POLICIES = "# Policies\n\nExpense reports are due on the fifth of each month.\nReceipts over 50 euros need a scan.\n"
OWN = "# My notes\n\nI met the auditors on Monday about the travel budget.\n"


def command(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def handbook(team_cast, index_files):
    """red-handbook holds the policies; red-writer its own notes; blue-agent a secret of its own."""
    index_files(team_cast.red_handbook, {"memory/policies.md": POLICIES})
    index_files(team_cast.red_writer, {"memory/notes.md": OWN})
    index_files(team_cast.blue_agent, {"memory/blue.md": "Expense reports of the blue team are secret.\n"})
    return team_cast


def tool(member, name, arguments):
    response = member.client.post(f"/api/v1/tools/{name}", arguments, format="json")
    return response.status_code, response.json()


def mcp_call(member, name, arguments):
    response = member.client.post(
        "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}},
        format="json",
    )
    assert response.status_code == 200
    return response.json()["result"]


def test_with_a_grant_the_reader_finds_and_cites_the_shared_note_and_loses_it_on_revocation(handbook, search):
    writer = handbook.red_writer
    assert "Granted: 'red-writer' may read 'red-handbook'" in command("grant_memory", "red-writer", "red-handbook")

    status, body = search(writer, "when are expense reports due", scope="shared")
    assert status == 200
    shared = [r for r in body["results"] if r.get("owner") == "red-handbook"]
    assert shared and shared[0]["path"] == "memory/policies.md"
    assert all("owner" not in r for r in body["results"] if r["path"] == "memory/notes.md")
    assert not any("blue" in r["path"] for r in body["results"])

    status, output = tool(writer, "memory_search", {"query": "expense reports due", "scope": ["red-handbook"]})
    assert status == 200
    cited = output["data"]["results"][0]["citation"]
    assert cited.startswith("red-handbook:memory/policies.md#L") and cited in output["content"]
    status, read = tool(writer, "memory_get", {"path": "red-handbook:memory/policies.md", "from": 3, "lines": 1})
    assert status == 200 and read["data"]["content"] == "Expense reports are due on the fifth of each month."
    assert read["data"]["owner"] == "red-handbook" and read["content"].startswith("red-handbook:memory/policies.md#L3")
    rest = writer.client.get("/api/v1/files/red-handbook:memory/policies.md")
    assert rest.status_code == 200 and rest.json()["owner"] == "red-handbook"
    result = mcp_call(writer, "memory_search", {"query": "expense reports due", "scope": "shared"})
    assert not result["isError"] and "red-handbook:memory/policies.md#L" in result["content"][0]["text"]

    assert "Revoked" in command("revoke_memory_grant", "red-writer", "red-handbook")
    status, body = search(writer, "when are expense reports due", scope="shared")
    assert status == 200 and not any(r.get("owner") for r in body["results"])
    status, refused = search(writer, "expense reports", scope=["red-handbook"])
    assert status == 400 and refused["error"]["code"] == "unknown_memory"
    assert writer.client.get("/api/v1/files/red-handbook:memory/policies.md").status_code == 404
    status, _ = tool(writer, "memory_get", {"path": "red-handbook:memory/policies.md"})
    assert status == 404
    result = mcp_call(writer, "memory_search", {"query": "expense reports due", "scope": "shared"})
    assert "red-handbook" not in result["content"][0]["text"]


def test_the_default_scope_is_the_agents_own_memory_even_with_a_grant(handbook, search):
    memory_grant_give(reader=handbook.red_writer.agent, owner=handbook.red_handbook.agent)
    status, body = search(handbook.red_writer, "expense reports due")
    assert status == 200 and all(r["path"] == "memory/notes.md" and "owner" not in r for r in body["results"])
    status, output = tool(handbook.red_writer, "memory_search", {"query": "expense reports due"})
    assert all("owner" not in r for r in output["data"]["results"])


def test_without_a_grant_another_memory_is_refused_in_the_same_words_as_a_missing_one(handbook, search):
    writer = handbook.red_writer
    _, ungranted = search(writer, "expense", scope=["red-handbook"])
    _, missing = search(writer, "expense", scope=["no-such-agent"])
    assert ungranted["error"]["code"] == missing["error"]["code"] == "unknown_memory"
    assert ungranted["error"]["message"].replace("red-handbook", "X") == missing["error"]["message"].replace("no-such-agent", "X")
    assert writer.client.get("/api/v1/files/red-handbook:memory/policies.md").status_code == 404
    status, body = search(writer, "expense", scope="bogus")
    assert status == 400


def test_a_shared_search_embeds_the_query_once_in_the_askers_own_cache(handbook, search):
    from indexing.embeddings import FakeProvider

    writer, owner = handbook.red_writer, handbook.red_handbook
    memory_grant_give(reader=writer.agent, owner=owner.agent)
    FakeProvider.reset_counts()
    status, body = search(writer, "when are expense reports due", scope="shared")
    assert status == 200 and any(r.get("owner") == "red-handbook" for r in body["results"])
    assert FakeProvider.queries_embedded == 1  # both memories searched with one query vector
    search(owner, "when are expense reports due")
    assert FakeProvider.queries_embedded == 2  # the owner learns nothing of what its readers asked


def test_a_grant_from_an_agent_being_deleted_gives_nothing_from_the_mark_on(handbook, search):
    """Its rows are still there until the background deletion reaches them; the reader sees none of them."""
    from agents.services import agent_delete

    writer, owner = handbook.red_writer, handbook.red_handbook
    memory_grant_give(reader=writer.agent, owner=owner.agent)
    status, body = search(writer, "when are expense reports due", scope="shared")
    assert status == 200 and any(r.get("owner") == "red-handbook" for r in body["results"])

    agent_delete(agent=owner.agent, actor=None)
    status, body = search(writer, "when are expense reports due", scope="shared")
    assert status == 200 and not any(r.get("owner") for r in body["results"])
    status, refused = search(writer, "expense reports", scope=["red-handbook"])
    assert status == 400 and refused["error"]["code"] == "unknown_memory"
    assert writer.client.get("/api/v1/files/red-handbook:memory/policies.md").status_code == 404
    assert MemoryGrant.objects.filter(owner=owner.agent).exists()  # its row is deleted with the agent's


def test_a_grant_is_never_a_way_to_write(handbook):
    memory_grant_give(reader=handbook.red_writer.agent, owner=handbook.red_handbook.agent)
    writer = handbook.red_writer
    tool(writer, "memory_write", {"path": "red-handbook:memory/policies.md", "content": "Overwritten."})
    writer.client.put("/api/v1/files/red-handbook:memory/policies.md", "Overwritten.", content_type="text/plain")
    writer.client.delete("/api/v1/files/red-handbook:memory/policies.md")
    tool(writer, "memory_delete", {"path": "red-handbook:memory/policies.md"})
    policies = MemoryFile.objects.get(agent=handbook.red_handbook.agent, path="memory/policies.md")
    assert policies.content == POLICIES


def test_a_write_to_a_granted_memorys_name_is_refused_not_stored_under_that_name(handbook):
    """Writing ``owner:path`` while ``owner`` is granted answers 403 read_only_memory, and the writer gets no
    file of its own by that name (memory_get of that name reads the granted memory, so it could never be
    read back). Without the grant a colon is an ordinary character of the writer's own path."""
    memory_grant_give(reader=handbook.red_writer.agent, owner=handbook.red_handbook.agent)
    writer, path = handbook.red_writer, "red-handbook:memory/policies.md"
    answers = [
        writer.client.put(f"/api/v1/files/{path}", "Overwritten.", content_type="text/plain"),
        writer.client.post(f"/api/v1/files/{path}/append", {"text": "more"}, format="json"),
        writer.client.delete(f"/api/v1/files/{path}"),
        writer.client.post("/api/v1/sync", {"files": [{"path": path, "content": "x"}]}, format="json"),
    ]
    status, output = tool(writer, "memory_write", {"path": path, "content": "Overwritten."})
    for response in answers:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "read_only_memory"
    assert status == 403, output
    assert not MemoryFile.objects.filter(agent=writer.agent, path__startswith="red-handbook:").exists()
    assert MemoryFile.objects.get(agent=handbook.red_handbook.agent, path="memory/policies.md").content == POLICIES

    other = handbook.blue_agent  # no grant: the same name is a path of its own
    assert other.client.put(f"/api/v1/files/{path}", "Mine.", content_type="text/plain").status_code == 201


def test_a_cross_team_grant_works_only_once_both_teams_approved(handbook, search):
    blue = handbook.blue_agent
    grant = memory_grant_give(
        reader=blue.agent, owner=handbook.red_handbook.agent, approving_team_ids=frozenset({handbook.red.pk})
    )
    assert (grant.owner_team_approved, grant.reader_team_approved) == (True, False)
    _, body = search(blue, "expense reports due", scope="shared")
    assert not any(r.get("owner") for r in body["results"])
    memory_grant_give(reader=blue.agent, owner=handbook.red_handbook.agent, approving_team_ids=frozenset({handbook.blue.pk}))
    _, body = search(blue, "expense reports due", scope="shared")
    assert any(r.get("owner") == "red-handbook" for r in body["results"])


def test_grant_commands_refuse_unknown_agents_and_self_grants(handbook):
    with pytest.raises(CommandError, match="No agent 'ghost'"):
        command("grant_memory", "ghost", "red-handbook")
    with pytest.raises(CommandError, match="two different agents"):
        command("grant_memory", "red-writer", "red-writer")
    with pytest.raises(CommandError, match="has no grant"):
        command("revoke_memory_grant", "red-writer", "red-handbook")
    assert not MemoryGrant.objects.exists()


def test_an_own_search_costs_the_same_queries_with_or_without_grants(handbook, search):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    search(handbook.red_writer, "expense reports due")  # warm: the token's first use, the query's embedding
    with CaptureQueriesContext(connection) as before:
        search(handbook.red_writer, "expense reports due")
    memory_grant_give(reader=handbook.red_writer.agent, owner=handbook.red_handbook.agent)
    with CaptureQueriesContext(connection) as after:
        search(handbook.red_writer, "expense reports due")
    assert len(after.captured_queries) == len(before.captured_queries)
    assert not any("memorygrant" in query["sql"] for query in after.captured_queries)


def test_a_shared_search_says_each_thing_once(handbook, search):
    """Every memory searched has its own message; the answer says each sentence once."""
    from indexing.writes import file_ingest

    memory_grant_give(reader=handbook.red_writer.agent, owner=handbook.red_handbook.agent)
    # A file still waiting to be indexed in the granted memory: its message has a sentence more than the own one.
    file_ingest(agent=handbook.red_handbook.agent, path="memory/later.md", content="Not indexed yet.\n")
    status, body = search(handbook.red_writer, "xylophone quagmire", scope="shared", mode="keyword")
    assert status == 200 and body["results"] == []
    assert body["message"].count("Nothing matched.") == 1, body["message"]
    sentences = [s for s in body["message"].split(". ") if s]
    assert len(sentences) == len(set(sentences)), body["message"]
