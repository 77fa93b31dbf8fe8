"""GET /api/v1/tools and POST /api/v1/tools/<name>: definitions in each framework's shape, and runs
with the tool's own arguments that answer text a model can cite."""

import pytest

from indexing.writes import file_ingest

NOTES = "\n".join(f"Line {number}: nothing special." for number in range(1, 121)) + "\n"
FALCON = "# Project Falcon\n\nThe launch is planned for March.\nBudget: 40k.\n"


def run(member, name, arguments, **extra):
    return member.client.post(f"/api/v1/tools/{name}", arguments, format="json", **extra)


@pytest.fixture
def alice_files(alice, index_files):
    return index_files(alice, {"memory/notes.md": NOTES, "memory/falcon.md": FALCON})


# --- Definitions ---------------------------------------------------------------------------------


ALL_TOOLS = {"memory_search", "memory_get", "memory_write", "memory_append", "memory_delete"}


def test_openai_format_lists_the_tools_as_functions_with_camel_case_argument_names(alice):
    response = alice.client.get("/api/v1/tools?format=openai")
    assert response.status_code == 200
    tools = {tool["function"]["name"]: tool for tool in response.json()["tools"]}
    assert set(tools) == ALL_TOOLS
    assert all(tool["type"] == "function" for tool in tools.values())
    search = tools["memory_search"]["function"]["parameters"]
    assert search["required"] == ["query"]
    assert set(search["properties"]) == {
        "query", "maxResults", "minScore", "sources", "path_prefix", "modified_since", "modified_until", "filters", "scope"
    }
    get = tools["memory_get"]["function"]["parameters"]
    assert get["required"] == ["path"] and set(get["properties"]) == {"path", "from", "lines"}


def test_openai_is_the_default_format(alice):
    assert alice.client.get("/api/v1/tools").json()["format"] == "openai"


def test_anthropic_and_mcp_formats_use_their_own_schema_keys(alice):
    anthropic = alice.client.get("/api/v1/tools?format=anthropic").json()["tools"]
    assert {tool["name"] for tool in anthropic} == ALL_TOOLS
    assert all(set(tool) == {"name", "description", "input_schema"} for tool in anthropic)
    mcp = alice.client.get("/api/v1/tools?format=mcp").json()["tools"]
    assert all(set(tool) == {"name", "description", "inputSchema", "annotations"} for tool in mcp)
    hints = {tool["name"]: tool["annotations"] for tool in mcp}
    assert hints["memory_search"]["readOnlyHint"] is True and hints["memory_get"]["readOnlyHint"] is True
    assert hints["memory_write"]["destructiveHint"] is True and hints["memory_delete"]["destructiveHint"] is True
    assert hints["memory_append"]["readOnlyHint"] is False and hints["memory_append"]["destructiveHint"] is False
    assert mcp[0]["inputSchema"] == anthropic[0]["input_schema"]


def test_an_unknown_format_is_a_400(alice):
    response = alice.client.get("/api/v1/tools?format=gemini")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_tools_need_a_token(anonymous_client):
    assert anonymous_client.get("/api/v1/tools").status_code == 401
    response = anonymous_client.post("/api/v1/tools/memory_get", {"path": "MEMORY.md"}, format="json")
    assert response.status_code == 401 and response.json()["error"]["code"] == "not_authenticated"


def test_a_read_only_token_may_run_tools(make_member, index_files):
    reader = make_member("reader", scopes=["read"])
    index_files(reader, {"MEMORY.md": "I prefer tea.\n"})
    response = run(reader, "memory_get", {"path": "MEMORY.md"})
    assert response.status_code == 200
    assert "I prefer tea." in response.json()["content"]


# --- memory_get ----------------------------------------------------------------------------------


def test_memory_get_returns_the_lines_with_a_citation_and_the_data(alice, alice_files):
    response = run(alice, "memory_get", {"path": "memory/notes.md", "from": 10, "lines": 3})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["content"].splitlines() == [
        "memory/notes.md#L10-L12 (lines 10-12 of 120)",
        "Line 10: nothing special.",
        "Line 11: nothing special.",
        "Line 12: nothing special.",
        "[108 more lines: memory_get with from=13]",
    ]
    assert body["data"] == {
        "path": "memory/notes.md",
        "from": 10,
        "lines": 3,
        "total_lines": 120,
        "content": "Line 10: nothing special.\nLine 11: nothing special.\nLine 12: nothing special.",
        "source": "memory",
    }


def test_memory_get_defaults_to_fifty_lines_from_the_first(alice, alice_files):
    data = run(alice, "memory_get", {"path": "memory/notes.md"}).json()["data"]
    assert (data["from"], data["lines"]) == (1, 50)


def test_memory_get_past_the_end_says_how_long_the_file_is(alice, alice_files):
    body = run(alice, "memory_get", {"path": "memory/falcon.md", "from": 99}).json()
    assert body["content"] == "memory/falcon.md has 4 lines; there is nothing from line 99."
    assert body["data"]["lines"] == 0


def test_memory_get_accepts_the_start_line_of_a_search_result(alice, alice_files):
    body = run(alice, "memory_get", {"path": "memory/falcon.md", "start_line": 3, "lines": 1}).json()
    assert body["content"].startswith("memory/falcon.md#L3 (lines 3-3 of 4)\nThe launch is planned for March.")


@pytest.mark.parametrize(
    "arguments, mentions",
    [
        ({}, "path"),
        ({"path": "memory/notes.md", "from": 0}, "from"),
        ({"path": "memory/notes.md", "lines": 5000}, "lines"),
        ({"path": "memory/notes.md", "lines": "many"}, "lines"),
        ({"path": "memory/notes.md", "from": True}, "from"),
        ({"path": "memory/notes.md", "from": 2.5}, "from"),
        ({"path": "memory/notes.md", "offset": 3}, "offset"),
    ],
)
def test_bad_memory_get_arguments_are_a_400_naming_the_argument(alice, alice_files, arguments, mentions):
    response = run(alice, "memory_get", arguments)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_arguments"
    assert mentions in error["message"]


def test_arguments_that_are_not_an_object_are_a_400(alice):
    response = alice.client.post("/api/v1/tools/memory_get", ["memory/notes.md"], format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_arguments"


def test_malformed_json_is_a_400(alice):
    response = alice.client.post("/api/v1/tools/memory_get", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "error" in response.json()


def test_a_path_that_escapes_the_workspace_is_a_400(alice):
    response = run(alice, "memory_get", {"path": "../etc/passwd"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_path"


def test_memory_get_of_a_missing_file_is_a_404(alice):
    response = run(alice, "memory_get", {"path": "memory/none.md"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_unknown_tool_is_a_404(alice):
    response = run(alice, "memory_forget", {"path": "MEMORY.md"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "unknown_tool"
    assert "memory_search" in error["message"]


def test_another_agents_file_is_not_there(alice, bob, mallory, alice_files):
    for outsider in (bob, mallory):
        response = run(outsider, "memory_get", {"path": "memory/falcon.md"})
        assert response.status_code == 404


# --- memory_search -------------------------------------------------------------------------------


def test_memory_search_answers_cited_snippets(alice, alice_files):
    response = run(alice, "memory_search", {"query": "When is the Falcon launch?"})
    assert response.status_code == 200, response.content
    body = response.json()
    first = body["data"]["results"][0]
    assert first["path"] == "memory/falcon.md"
    citation = f"memory/falcon.md#L{first['start_line']}-L{first['end_line']}"
    assert first["citation"] == citation
    assert f"[1] {citation} (score " in body["content"]
    assert "The launch is planned for March." in body["content"]
    assert {"mode", "pending", "took_ms", "message"} <= set(body["data"])


def test_memory_search_takes_max_results_in_either_spelling(alice, index_files):
    index_files(alice, {f"memory/2026-01-{day:02d}.md": f"Walked the dog on day {day}.\n" for day in range(1, 8)})
    camel = run(alice, "memory_search", {"query": "walked the dog", "maxResults": 2}).json()
    snake = run(alice, "memory_search", {"query": "walked the dog", "max_results": 3}).json()
    assert len(camel["data"]["results"]) == 2
    assert len(snake["data"]["results"]) == 3
    assert camel["content"].startswith("2 memory snippets for 'walked the dog':")


def test_memory_search_says_plainly_when_nothing_matched(alice, alice_files):
    body = run(alice, "memory_search", {"query": "zebra xylophone quasar", "minScore": 0.99}).json()
    assert body["data"]["results"] == []
    assert body["content"].startswith("Nothing matched")
    assert body["content"] == body["data"]["message"]


def test_memory_search_tells_the_model_that_files_are_still_being_indexed(alice, alice_files):
    file_ingest(agent=alice.agent, path="memory/new.md", content="Fresh news.\n")  # its job never runs here
    body = run(alice, "memory_search", {"query": "Falcon launch"}).json()
    assert body["data"]["pending"] == 1
    assert body["content"].startswith("1 memory snippet")
    assert "still being indexed" in body["content"].split("\n")[-1]


def test_memory_search_never_shows_another_agents_memory(alice, bob, alice_files):
    body = run(bob, "memory_search", {"query": "Falcon launch"}).json()
    assert body["data"]["results"] == []
    assert "falcon" not in body["content"].lower()


@pytest.mark.parametrize(
    "arguments",
    [{}, {"query": 42}, {"query": "tea", "maxResults": 0}, {"query": "tea", "maxResults": 51}, {"query": "tea", "minScore": 2}],
)
def test_bad_memory_search_arguments_are_a_400(alice, arguments):
    response = run(alice, "memory_search", arguments)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_arguments"


def test_an_empty_query_is_a_400_from_the_search(alice):
    response = run(alice, "memory_search", {"query": "   "})
    assert response.status_code == 400
