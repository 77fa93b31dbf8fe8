"""/mcp/<token>: MCP for clients that cannot send a header, with the official SDK client and no header.

A token in the URL only reads (the write tools are neither listed nor run), and it never reaches the
logs: they name the route.
"""

import logging

import pytest

from indexing.models import MemoryFile
from tests.search.test_mcp import FALCON, MCPError, leaves, mcp_session

READ_TOOLS = {"memory_search", "memory_get"}


@pytest.fixture
def falcon(alice, index_files, live_server):
    index_files(alice, {"memory/falcon.md": FALCON})
    return alice


@pytest.mark.django_db(transaction=True)
def test_the_sdk_client_searches_with_the_token_in_the_url(falcon, live_server, caplog):
    caplog.set_level(logging.INFO)

    async def work(client):
        tools = await client.list_tools()
        found = await client.call_tool("memory_search", {"query": "When is the Falcon launch?", "maxResults": 3})
        return tools, found

    tools, found = mcp_session(f"{live_server.url}/mcp/{falcon.raw_token}", None, work)

    assert {tool.name for tool in tools.tools} == READ_TOOLS  # alice's token may write; the URL may not
    assert not found.is_error and "memory/falcon.md#L" in found.content[0].text
    # The server's records (the test's own HTTP client, httpx, logs the URL it calls).
    logged = [str(vars(record)) for record in caplog.records if record.name.startswith(("memoryhub", "django", "celery"))]
    assert any("mcp-url" in line for line in logged)
    leaked = [line for line in logged if falcon.raw_token in line]
    assert not leaked, leaked


@pytest.mark.django_db(transaction=True)
def test_a_write_tool_called_through_the_url_is_refused_and_writes_nothing(falcon, live_server):
    async def work(client):
        return await client.call_tool("memory_write", {"path": "notes/x.md", "content": "sneaky"})

    result = mcp_session(f"{live_server.url}/mcp/{falcon.raw_token}", None, work)

    assert result.is_error
    assert not MemoryFile.objects.filter(agent=falcon.agent, path="notes/x.md").exists()


@pytest.mark.django_db(transaction=True)
def test_a_bad_url_token_is_refused_like_a_bad_header(falcon, live_server):
    async def work(client):
        return await client.list_tools()

    with pytest.raises(BaseException) as caught:
        mcp_session(f"{live_server.url}/mcp/mh_{'x' * 43}", None, work)
    errors = [error for error in leaves(caught.value) if isinstance(error, MCPError)]
    assert errors and errors[0].error.code == -32001 and "Unknown token" in errors[0].error.message


@pytest.mark.django_db
def test_a_url_that_holds_no_token_is_not_found(client):
    response = client.post("/mcp/not-a-token", data={"jsonrpc": "2.0", "id": 1, "method": "ping"}, content_type="application/json")

    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db(transaction=True)
def test_a_token_in_both_the_url_and_the_header_is_refused(falcon, client):
    response = client.post(
        f"/mcp/{falcon.raw_token}", data={"jsonrpc": "2.0", "id": 1, "method": "ping"}, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {falcon.raw_token}",
    )

    assert response.status_code == 400 and "not both" in response.json()["error"]["message"]
