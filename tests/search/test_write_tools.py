"""memory_write, memory_append and memory_delete: through POST tools/<name>, in every definition
format, and through the official MCP SDK against a live server."""

import hashlib

import pytest

from indexing.models import Chunk, MemoryFile
from tests.search.test_mcp import mcp_session

WRITE_TOOLS = {"memory_write", "memory_append", "memory_delete"}
READ_TOOLS = {"memory_search", "memory_get"}


def run(member, name, arguments):
    return member.client.post(f"/api/v1/tools/{name}", arguments, format="json")


def found(member, query) -> list[str]:
    response = run(member, "memory_search", {"query": query})
    assert response.status_code == 200, response.content
    return [result["snippet"] for result in response.json()["data"]["results"]]


@pytest.fixture
def reader(make_member):
    return make_member("reader", scopes=["read"])


# --- Definitions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("format", ["openai", "anthropic", "mcp", "responses"])
def test_a_write_token_sees_the_write_tools_and_a_read_only_token_does_not(alice, reader, format):
    def names(member):
        tools = member.client.get(f"/api/v1/tools?format={format}").json()["tools"]
        return {tool["function"]["name"] if format == "openai" else tool["name"] for tool in tools}

    assert names(alice) == READ_TOOLS | WRITE_TOOLS
    assert names(reader) == READ_TOOLS


def test_the_responses_format_is_a_flat_function(alice):
    tools = {tool["name"]: tool for tool in alice.client.get("/api/v1/tools?format=responses").json()["tools"]}
    write = tools["memory_write"]
    assert set(write) == {"type", "name", "description", "parameters"} and write["type"] == "function"
    assert write["parameters"]["required"] == ["path", "content"]
    assert write["parameters"]["additionalProperties"] is False


# --- The agent's loop through POST tools/<name> ----------------------------------------------------


def test_write_find_append_delete_and_never_see_it_again(alice, index_files, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        written = run(alice, "memory_write", {"path": "falcon.md", "content": "The Falcon launch is in March.\n"})
    assert written.status_code == 200, written.content
    data = written.json()["data"]
    assert data["path"] == "memory/falcon.md" and data["action"] == "created"  # a bare name goes under memory/
    assert data["hash"] == hashlib.sha256(b"The Falcon launch is in March.\n").hexdigest()
    assert data["hash"] in written.json()["content"]
    assert run(alice, "memory_search", {"query": "Falcon launch"}).json()["data"]["pending"] == 0
    assert any("Falcon launch" in snippet for snippet in found(alice, "Falcon launch"))

    with django_capture_on_commit_callbacks(execute=True):
        appended = run(alice, "memory_append", {"path": "memory/falcon.md", "text": "Budget: 40k pelicans.", "expected_hash": data["hash"]})
    assert appended.status_code == 200, appended.content
    assert appended.json()["data"]["action"] == "appended"
    assert MemoryFile.objects.get(agent=alice.agent).content == "The Falcon launch is in March.\nBudget: 40k pelicans."
    assert any("pelicans" in snippet for snippet in found(alice, "pelicans budget"))

    deleted = run(alice, "memory_delete", {"path": "memory/falcon.md"})
    assert deleted.status_code == 200 and deleted.json()["data"]["action"] == "deleted"
    assert found(alice, "Falcon launch pelicans") == []
    assert not MemoryFile.objects.filter(agent=alice.agent).exists() and not Chunk.objects.exists()


def test_a_stale_expected_hash_is_412_and_writes_nothing(alice, index_files):
    index_files(alice, {"memory/falcon.md": "v1\n"})
    stale = hashlib.sha256(b"v0\n").hexdigest()
    for name, arguments in (
        ("memory_write", {"path": "memory/falcon.md", "content": "v2\n", "expected_hash": stale}),
        ("memory_append", {"path": "memory/falcon.md", "text": "v2\n", "expected_hash": stale}),
        ("memory_delete", {"path": "memory/falcon.md", "expected_hash": stale}),
        ("memory_write", {"path": "memory/falcon.md", "content": "v2\n", "expected_hash": ""}),
    ):
        response = run(alice, name, arguments)
        assert response.status_code == 412, (name, response.content)
        error = response.json()["error"]
        assert error["code"] == "hash_mismatch" and error["current_hash"] == hashlib.sha256(b"v1\n").hexdigest()
    assert MemoryFile.objects.get(agent=alice.agent).content == "v1\n"


def test_a_read_only_token_gets_403_and_nothing_is_written(alice, reader, index_files):
    index_files(reader, {"memory/keep.md": "keep me\n"})
    for name, arguments in (
        ("memory_write", {"path": "x.md", "content": "x"}),
        ("memory_append", {"path": "memory/keep.md", "text": "x"}),
        ("memory_delete", {"path": "memory/keep.md"}),
    ):
        response = run(reader, name, arguments)
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "insufficient_scope"
    assert list(MemoryFile.objects.filter(agent=reader.agent).values_list("path", "content")) == [("memory/keep.md", "keep me\n")]


def test_another_agents_token_gets_404_for_every_path(alice, bob, mallory, index_files):
    index_files(alice, {"memory/falcon.md": "secret\n"})
    for outsider in (bob, mallory):
        assert run(outsider, "memory_delete", {"path": "memory/falcon.md"}).status_code == 404
        assert run(outsider, "memory_get", {"path": "memory/falcon.md"}).status_code == 404
        assert outsider.client.delete("/api/v1/files/memory/falcon.md").status_code == 404
    assert MemoryFile.objects.get(agent=alice.agent).content == "secret\n"


@pytest.mark.parametrize(
    "name, arguments, code",
    [
        ("memory_write", {"path": "x.md", "content": "x", "overwrite": True}, "invalid_arguments"),
        ("memory_write", {"path": "x.md"}, "invalid_arguments"),
        ("memory_write", {"path": "x.md", "content": 5}, "invalid_arguments"),
        ("memory_write", {"path": "x.md", "content": "x", "expected_hash": "abc"}, "invalid_arguments"),
        ("memory_write", {"path": "x.md", "content": "x", "expected_hash": 7}, "invalid_arguments"),
        ("memory_write", {"path": "../x.md", "content": "x"}, "invalid_path"),
        ("memory_write", {"path": "x.exe", "content": "x"}, "unsupported_file_type"),
        ("memory_write", {"path": "x.md", "content": "a\x00b"}, "invalid_arguments"),
        ("memory_append", {"path": "x.md", "text": ["x"]}, "invalid_arguments"),
        ("memory_append", {"path": "x.md", "lines": "x"}, "invalid_arguments"),
        ("memory_delete", {"path": "x.md", "force": True}, "invalid_arguments"),
        ("memory_delete", {"path": ""}, "invalid_arguments"),
    ],
)
def test_bad_arguments_are_a_4xx_json_error_and_write_nothing(alice, name, arguments, code):
    response = run(alice, name, arguments)
    assert 400 <= response.status_code < 500, response.content
    assert response.json()["error"]["code"] == code
    assert not MemoryFile.objects.exists()


# --- The official MCP SDK ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_mcp_agent_writes_finds_appends_and_forgets_a_note(alice, live_server):
    url = f"{live_server.url}/mcp"

    async def work(client):
        steps = {"written": await client.call_tool("memory_write", {"path": "heron.md", "content": "The heron project ships in May.\n"})}
        steps["found"] = await client.call_tool("memory_search", {"query": "heron project"})
        steps["appended"] = await client.call_tool(
            "memory_append", {"path": "memory/heron.md", "text": "Owner: Melanie.", "expected_hash": steps["written"].structured_content["hash"]}
        )
        steps["stale"] = await client.call_tool(
            "memory_delete", {"path": "memory/heron.md", "expected_hash": steps["written"].structured_content["hash"]}
        )
        steps["deleted"] = await client.call_tool("memory_delete", {"path": "memory/heron.md"})
        steps["gone"] = await client.call_tool("memory_search", {"query": "heron project Melanie"})
        return steps

    steps = mcp_session(url, alice.raw_token, work)
    assert not steps["written"].is_error and steps["written"].structured_content["pending"] == 0
    assert steps["found"].structured_content["pending"] == 0
    assert steps["found"].structured_content["results"][0]["path"] == "memory/heron.md"
    assert not steps["appended"].is_error and steps["appended"].structured_content["action"] == "appended"
    assert steps["stale"].is_error and "current hash" in steps["stale"].content[0].text
    assert not steps["deleted"].is_error
    assert steps["gone"].structured_content["results"] == []
    assert not MemoryFile.objects.filter(agent=alice.agent).exists()


@pytest.mark.django_db(transaction=True)
def test_an_mcp_read_only_token_lists_only_the_read_tools_and_cannot_write(make_member, live_server):
    reader = make_member("reader", scopes=["read"])
    url = f"{live_server.url}/mcp"

    async def work(client):
        listed = await client.list_tools()
        called = await client.call_tool("memory_write", {"path": "x.md", "content": "x"})
        return listed, called

    listed, called = mcp_session(url, reader.raw_token, work)
    assert {tool.name for tool in listed.tools} == READ_TOOLS
    assert called.is_error and "write" in called.content[0].text
    assert not MemoryFile.objects.exists()
