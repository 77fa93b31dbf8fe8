"""/mcp: the official MCP Python SDK client against a live server, and the JSON-RPC edges by hand."""

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from integrations.mcp import PROTOCOL_VERSIONS

FALCON = "# Project Falcon\n\nThe launch is planned for March.\nBudget: 40k.\n"


def mcp_session(url: str, token: str | None, work, *, mode: str = "auto"):
    """Connect the SDK client to `url` with `token`, run `work(client)` and return what it returns."""

    async def main():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                return await work(client)

    return anyio.run(main)


@pytest.fixture
def live_alice(alice, index_files, live_server):
    index_files(alice, {"memory/falcon.md": FALCON})
    return alice, f"{live_server.url}/mcp"


# --- The SDK client against a live server ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_sdk_client_lists_the_tools(live_alice, mode):
    alice, url = live_alice

    async def work(client):
        return await client.list_tools()

    tools = {tool.name: tool for tool in mcp_session(url, alice.raw_token, work, mode=mode).tools}
    assert set(tools) == {"memory_search", "memory_get", "memory_write", "memory_append", "memory_delete"}
    assert tools["memory_search"].input_schema["required"] == ["query"]
    assert set(tools["memory_get"].input_schema["properties"]) == {"path", "from", "lines"}
    assert tools["memory_search"].annotations.read_only_hint is True


@pytest.mark.django_db(transaction=True)
def test_the_sdk_client_calls_memory_get_and_memory_search(live_alice):
    alice, url = live_alice

    async def work(client):
        got = await client.call_tool("memory_get", {"path": "memory/falcon.md", "from": 3, "lines": 1})
        found = await client.call_tool("memory_search", {"query": "When is the Falcon launch?", "maxResults": 3})
        return got, found

    got, found = mcp_session(url, alice.raw_token, work)
    assert not got.is_error
    assert got.content[0].text.startswith("memory/falcon.md#L3 (lines 3-3 of 4)\nThe launch is planned for March.")
    assert got.structured_content["total_lines"] == 4
    assert not found.is_error
    assert "memory/falcon.md#L" in found.content[0].text
    assert found.structured_content["results"][0]["path"] == "memory/falcon.md"


@pytest.mark.django_db(transaction=True)
def test_a_bad_tool_call_comes_back_to_the_model_as_an_error_result(live_alice):
    alice, url = live_alice

    async def work(client):
        return await client.call_tool("memory_get", {"path": "memory/none.md"})

    result = mcp_session(url, alice.raw_token, work)
    assert result.is_error
    assert "memory/none.md" in result.content[0].text


@pytest.mark.django_db(transaction=True)
def test_the_sdk_client_without_a_valid_token_is_refused(live_alice):
    _, url = live_alice

    async def work(client):
        return await client.list_tools()

    for token, says in ((None, "Authorization: Bearer"), ("mh_" + "x" * 43, "Unknown token")):
        with pytest.raises(BaseException) as caught:
            mcp_session(url, token, work)
        errors = [error for error in leaves(caught.value) if isinstance(error, MCPError)]
        assert errors and errors[0].error.code == -32001 and says in errors[0].error.message


def leaves(error: BaseException):
    """The exceptions inside (nested) anyio task-group exception groups."""
    for inner in getattr(error, "exceptions", None) or [error]:
        yield from (leaves(inner) if inner is not error else [inner])


def test_every_handshake_version_the_sdk_speaks_is_accepted():
    assert set(HANDSHAKE_PROTOCOL_VERSIONS) <= set(PROTOCOL_VERSIONS)


# --- JSON-RPC edges through the test client ---------------------------------------------------------


def rpc(member, payload, **headers):
    return member.client.post("/mcp", payload, format="json", **headers)


def call(member, method, params=None, id=1):
    message = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return rpc(member, message)


@pytest.mark.parametrize("version", PROTOCOL_VERSIONS)
def test_initialize_answers_the_version_the_client_asked_for(alice, version):
    response = call(alice, "initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["protocolVersion"] == version
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "memoryhub"


def test_initialize_with_an_unknown_version_answers_the_newest(alice):
    result = call(alice, "initialize", {"protocolVersion": "1999-01-01", "capabilities": {}}).json()["result"]
    assert result["protocolVersion"] == PROTOCOL_VERSIONS[0]


def test_an_unsupported_protocol_version_header_names_the_supported_ones(alice):
    response = rpc(alice, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, HTTP_MCP_PROTOCOL_VERSION="2099-01-01")
    assert response.status_code == 400
    assert response.json()["error"]["data"]["supported"] == list(PROTOCOL_VERSIONS)


def test_ping_answers_an_empty_result(alice):
    assert call(alice, "ping", id="abc").json() == {"jsonrpc": "2.0", "id": "abc", "result": {}}


def test_a_notification_is_accepted_without_a_body(alice):
    response = rpc(alice, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status_code == 202 and response.content == b""


def test_an_unknown_method_is_method_not_found(alice):
    assert call(alice, "resources/list").json()["error"]["code"] == -32601


def test_an_unknown_tool_is_invalid_params(alice):
    assert call(alice, "tools/call", {"name": "memory_forget", "arguments": {}}).json()["error"]["code"] == -32602


def test_bad_arguments_are_an_error_result_naming_the_argument(alice):
    result = call(alice, "tools/call", {"name": "memory_get", "arguments": {"path": "MEMORY.md", "lines": 0}}).json()["result"]
    assert result["isError"] is True
    assert "lines" in result["content"][0]["text"]


def test_a_batch_gets_one_answer_per_request(alice):
    response = rpc(
        alice,
        [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ],
    )
    answers = response.json()
    assert [answer["id"] for answer in answers] == [1, 2]
    assert len(answers[1]["result"]["tools"]) == 5


def test_malformed_json_is_a_parse_error(alice):
    response = alice.client.post("/mcp", "{nope", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def test_a_message_that_is_not_json_rpc_is_an_invalid_request(alice):
    response = rpc(alice, {"id": 1, "method": "ping"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_get_is_405(alice):
    response = alice.client.get("/mcp")
    assert response.status_code == 405
    assert response["Allow"] == "POST"


@pytest.mark.parametrize("authorization", [None, "Bearer nope", "Bearer mh_" + "x" * 43])
def test_without_a_valid_token_it_is_a_401_in_json_rpc_shape(anonymous_client, db, authorization):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = anonymous_client.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, format="json", **headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["message"]


def test_a_token_without_the_read_scope_is_a_403(make_member):
    writer = make_member("writer", scopes=["write"])
    assert call(writer, "ping").status_code == 403


def test_a_foreign_browser_origin_is_refused(alice):
    response = rpc(alice, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, HTTP_ORIGIN="https://evil.example")
    assert response.status_code == 403
    response = rpc(alice, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, HTTP_ORIGIN="http://localhost:6274")
    assert response.status_code == 200


def test_tools_are_isolated_per_agent(alice, bob, index_files):
    index_files(alice, {"memory/falcon.md": FALCON})
    params = {"name": "memory_get", "arguments": {"path": "memory/falcon.md"}}
    assert call(alice, "tools/call", params).json()["result"]["isError"] is False
    assert call(bob, "tools/call", params).json()["result"]["isError"] is True
    found = call(bob, "tools/call", {"name": "memory_search", "arguments": {"query": "Falcon launch"}}).json()["result"]
    assert found["structuredContent"]["results"] == []
