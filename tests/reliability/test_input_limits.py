"""Hostile input gets a 400 in the JSON error shape and writes nothing: deep JSON, invisible characters
in paths, wrong types, impossible line numbers, oversized MCP batches; and every /api/ and /mcp URL
answers JSON, unknown routes included, in DEBUG as in production."""

import pytest

from indexing.models import MemoryFile
from memoryhub.parsers import MAX_JSON_DEPTH, JsonTooDeep, json_depth_check
from integrations.mcp import MAX_BATCH_MESSAGES

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


def assert_json_error(response, status: int, code: str | None = None):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    if code is not None:
        assert response.json()["error"]["code"] == code, response.json()


# --- Deep JSON -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["arrays", "objects"])
@pytest.mark.parametrize(
    "method,url",
    [
        ("PUT", "/api/v1/files/notes/a.md"),
        ("POST", "/api/v1/sync"),
        ("POST", "/api/v1/search"),
        ("POST", "/api/v1/tools/memory_search"),
        ("POST", "/api/v1/tools/memory_get"),
    ],
)
def test_deeply_nested_json_is_a_400_not_a_recursion_error(alice, method, url, body):
    response = alice.client.generic(method, url, body, content_type="application/json")
    assert_json_error(response, 400, "parse_error")
    assert "nests more than" in response.json()["error"]["message"]
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
def test_deeply_nested_json_to_mcp_is_a_json_rpc_parse_error(alice):
    response = alice.client.generic("POST", "/mcp", DEEP, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def test_the_depth_bound_is_exact():
    def nested(depth):
        value = 1
        for _ in range(depth):
            value = [value]
        return value

    json_depth_check(nested(MAX_JSON_DEPTH))
    with pytest.raises(JsonTooDeep):
        json_depth_check(nested(MAX_JSON_DEPTH + 1))


@pytest.mark.django_db
def test_nan_and_infinity_are_not_json(alice):
    response = alice.client.generic("POST", "/api/v1/search", b'{"query": "x", "min_score": NaN}', content_type="application/json")
    assert_json_error(response, 400, "parse_error")


# --- Paths that would spoof a citation ---------------------------------------------------------------

INVISIBLE = ["\u202e", "\u202a", "\u2066", "\u2069", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u2028"]


@pytest.mark.django_db
@pytest.mark.parametrize("character", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_paths_with_invisible_or_direction_characters_are_refused_everywhere(alice, character):
    path = f"memory/report{character}dm.md"
    assert_json_error(alice.client.put(f"/api/v1/files/{path}", "x", content_type="text/markdown"), 400, "invalid_path")
    sync = alice.client.post("/api/v1/sync", {"files": [{"path": path, "content": "x"}]}, format="json")
    assert_json_error(sync, 400)
    assert_json_error(alice.client.get("/api/v1/files", {"prefix": f"memory/{character}"}), 400, "invalid_path")
    search = alice.client.post("/api/v1/search", {"query": "x", "path_prefix": f"memory/{character}"}, format="json")
    assert_json_error(search, 400, "invalid_path")
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
def test_ordinary_unicode_paths_still_work(alice):
    response = alice.client.put("/api/v1/files/memory/café-日本.md", "x", content_type="text/markdown")
    assert response.status_code == 201, response.content


# --- Strict types --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("value", [42, 4.5, True, ["memory/a.md"], {"p": "memory/a.md"}], ids=repr)
def test_a_non_string_path_prefix_or_hash_is_refused_not_coerced(alice, value):
    for body in (
        {"files": [{"path": value, "content": "x"}]},
        {"files": [{"path": "memory/a.md", "hash": value}]},
        {"files": [], "prefix": value},
    ):
        assert_json_error(alice.client.post("/api/v1/sync", body, format="json"), 400, "invalid_request")
    for body in ({"query": value}, {"query": "x", "path_prefix": value}):
        assert_json_error(alice.client.post("/api/v1/search", body, format="json"), 400, "invalid_request")
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field,value", [("max_results", "3"), ("max_results", 2.5), ("max_results", True), ("min_score", "0.1"), ("explain", "yes"), ("explain", 1)])
def test_search_numbers_and_flags_must_have_their_json_type(alice, field, value):
    response = alice.client.post("/api/v1/search", {"query": "x", field: value}, format="json")
    assert_json_error(response, 400, "invalid_request")


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["from=" + "9" * 20, "from=100000001", "from=0", "lines=1001", "lines=0", "from=-3", "from=1e3"])
def test_memory_get_refuses_impossible_line_numbers(alice, query):
    alice.client.put("/api/v1/files/notes/a.md", "one\ntwo\n", content_type="text/markdown")
    response = alice.client.get(f"/api/v1/files/notes/a.md?{query}")
    assert_json_error(response, 400, "invalid_request")


@pytest.mark.django_db
@pytest.mark.parametrize("arguments", [{"path": "notes/a.md", "from": 10**20}, {"path": 7}, {"path": "notes/a.md", "lines": "5"}])
def test_the_memory_get_tool_refuses_the_same(alice, arguments):
    alice.client.put("/api/v1/files/notes/a.md", "one\ntwo\n", content_type="text/markdown")
    response = alice.client.post("/api/v1/tools/memory_get", arguments, format="json")
    assert_json_error(response, 400, "invalid_arguments")


# --- MCP batches -----------------------------------------------------------------------------------


def ping(i):
    return {"jsonrpc": "2.0", "id": i, "method": "ping"}


@pytest.mark.django_db
def test_an_mcp_batch_is_bounded(alice):
    ok = alice.client.post("/mcp", [ping(i) for i in range(MAX_BATCH_MESSAGES)], format="json")
    assert ok.status_code == 200 and len(ok.json()) == MAX_BATCH_MESSAGES
    too_many = alice.client.post("/mcp", [ping(i) for i in range(10_000)], format="json")
    assert too_many.status_code == 400
    assert too_many.json()["error"]["code"] == -32600
    assert f"at most {MAX_BATCH_MESSAGES}" in too_many.json()["error"]["message"]


# --- JSON on every API route, in every mode --------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("url", ["/api/v1/nope", "/api/v2/search", "/api/", "/mcp/anything", "/api/v1/jobs/not-a-number"])
def test_unknown_api_routes_answer_json_404_in_debug_and_production(alice, settings, debug, url):
    settings.DEBUG = debug
    response = alice.client.get(url)
    assert_json_error(response, 404, "not_found")


@pytest.mark.django_db
def test_the_admin_keeps_its_html_404(admin_client, settings):
    settings.DEBUG = False
    response = admin_client.get("/admin/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
