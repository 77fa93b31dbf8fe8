"""The isolation matrix: two teams, each with agents and operators. Every API endpoint, tool and MCP call
with the other team's token, and every admin page and action with the other team's login, without a
grant, with one, and after its revocation: nothing of the other side leaks (no object, count, path,
score or error text), and a grant opens reading only, never writing."""

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.test import Client

from agents.models import AgentToken, AuditEvent, MemoryGrant
from agents.services import memory_grant_give, memory_grant_revoke
from indexing.models import EmbeddingBatch, EmbeddingModelCheck, EmbeddingWindow, IndexJob, MemoryFile
from indexing.writes import files_remove

pytestmark = pytest.mark.django_db

SECRET = "The vault code is PELICAN-SEVEN-ORCHID."
MARKERS = ("PELICAN", "red-secret.md", "red-handbook", "red-writer")  # anything of the red team's


@pytest.fixture
def world(team_cast, index_files):
    index_files(team_cast.red_handbook, {"memory/red-secret.md": f"# Vault\n\n{SECRET}\n"})
    index_files(team_cast.blue_agent, {"memory/blue-notes.md": "# Blue\n\nThe blue team meets on Fridays.\n"})
    team_cast.red_job = IndexJob.objects.filter(agent=team_cast.red_handbook.agent).latest("id")
    team_cast.red_file = MemoryFile.objects.get(agent=team_cast.red_handbook.agent)
    return team_cast


def body(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def assert_no_leak(response, what: str, sent: str = ""):
    """No red marker in the answer, but for the caller's own words echoed back (a 404 names the path it
    was asked for; test_an_unknown_memory_and_an_ungranted_one_answer_alike shows such answers are the
    same for a thing that does not exist)."""
    text = body(response)
    leaked = [marker for marker in MARKERS if marker in text and marker not in sent]
    assert not leaked, f"{what} leaked {leaked}: {text[:500]}"


WRITES = ("DELETE", "append", "sync", "memory_write", "memory_append", "memory_delete")


def api_calls(world, *, kinds=("read", "write")):
    """Every agent-facing call, aimed at the red team's things, for the blue team's token: the reads first
    (a write through a red name creates a file of the writer's own with that literal name, which its
    export then shows)."""
    red_path = "memory/red-secret.md"
    red_owned = f"red-handbook:{red_path}"
    tool_calls = {
        "memory_search": [{"query": "vault code"}, {"query": "vault code", "scope": "shared"}],
        "memory_get": [{"path": red_path}, {"path": red_owned}],
        "memory_write": [{"path": red_owned, "content": "overwritten"}],
        "memory_append": [{"path": red_owned, "text": "more"}],
        "memory_delete": [{"path": red_path}, {"path": red_owned}],
    }
    calls = [
        ("GET", "/api/v1/status", None),
        ("GET", "/api/v1/files", None),
        ("GET", "/api/v1/files?prefix=memory/", None),
        ("GET", f"/api/v1/files/{red_path}", None),
        ("GET", f"/api/v1/files/{red_owned}", None),
        ("DELETE", f"/api/v1/files/{red_path}", None),
        ("DELETE", f"/api/v1/files/{red_owned}", None),
        ("POST", f"/api/v1/files/{red_owned}/append", {"text": "more"}),
        ("POST", "/api/v1/sync", {"files": [{"path": red_owned, "content": "overwritten"}]}),
        ("GET", f"/api/v1/jobs/{world.red_job.pk}", None),
        ("GET", "/api/v1/export", None),
        ("POST", "/api/v1/search", {"query": "vault code"}),
        ("POST", "/api/v1/search", {"query": "vault code", "scope": "shared"}),
        ("POST", "/api/v1/search", {"query": "vault code", "scope": ["red-handbook"]}),
        ("POST", "/api/v1/search", {"query": "vault code", "explain": True, "mode": "keyword"}),
        ("GET", "/api/v1/tools", None),
        *[("POST", f"/api/v1/tools/{name}", arguments) for name, many in tool_calls.items() for arguments in many],
        *[("MCP", name, arguments) for name, many in tool_calls.items() for arguments in many],
    ]
    is_write = [any(word in f"{method} {url}" for word in WRITES) for method, url, _ in calls]
    reads = [call for call, write in zip(calls, is_write) if not write]
    writes = [call for call, write in zip(calls, is_write) if write]
    return (reads if "read" in kinds else []) + (writes if "write" in kinds else [])


def run(member, method, url, data):
    client = member.client
    if method == "GET":
        return client.get(url)
    if method == "DELETE":
        return client.delete(url)
    if method == "MCP":
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": url, "arguments": data}}
        return client.post("/mcp", message, format="json")
    return client.post(url, data, format="json")


def red_untouched(world):
    red_file = MemoryFile.objects.get(pk=world.red_file.pk)
    assert red_file.content == f"# Vault\n\n{SECRET}\n"
    assert MemoryFile.objects.filter(agent=world.red_handbook.agent).count() == 1


def test_without_a_grant_no_api_tool_or_mcp_call_leaks_the_other_team(world):
    for method, url, data in api_calls(world):
        response = run(world.blue_agent, method, url, data)
        assert response.status_code < 500, (method, url, response.status_code)
        assert_no_leak(response, f"{method} {url} {data}", sent=f"{url} {data}")
    red_untouched(world)


def test_an_unknown_memory_and_an_ungranted_one_answer_alike(world):
    blue = world.blue_agent
    ungranted = blue.client.post("/api/v1/search", {"query": "x", "scope": ["red-handbook"]}, format="json")
    missing = blue.client.post("/api/v1/search", {"query": "x", "scope": ["nobody-at-all"]}, format="json")
    assert ungranted.status_code == missing.status_code == 400
    assert ungranted.json()["error"]["message"].replace("red-handbook", "?") == missing.json()["error"]["message"].replace("nobody-at-all", "?")
    # Another team's file, job or memory answers exactly like one that does not exist.
    for red, nothing in [
        ("/api/v1/files/red-handbook:memory/red-secret.md", "/api/v1/files/nobody-at-all:memory/red-secret.md"),
        ("/api/v1/files/memory/red-secret.md", "/api/v1/files/memory/no-such-file.md"),
        (f"/api/v1/jobs/{world.red_job.pk}", "/api/v1/jobs/999999999"),
    ]:
        answers = [blue.client.get(url) for url in (red, nothing)]
        assert answers[0].status_code == answers[1].status_code == 404
        normalized = [body(a).replace(u.rsplit("/", 1)[-1], "X").replace("red-handbook", "X").replace("nobody-at-all", "X")
                      .replace("memory/red-secret.md", "P").replace("memory/no-such-file.md", "P") for a, u in zip(answers, (red, nothing))]
        assert normalized[0] == normalized[1], normalized
    deleted = [blue.client.delete(f"/api/v1/files/{path}") for path in ("memory/red-secret.md", "memory/no-such-file.md")]
    assert [d.status_code for d in deleted] == [404, 404]
    assert body(deleted[0]).replace("red-secret", "X") == body(deleted[1]).replace("no-such-file", "X")


def test_a_grant_opens_reading_only_and_its_revocation_closes_it_on_the_next_request(world):
    blue = world.blue_agent
    red = world.red_handbook.agent
    # Approved by the red team only: not yet in force.
    memory_grant_give(reader=blue.agent, owner=red, approving_team_ids=frozenset({world.red.pk}))
    found = blue.client.post("/api/v1/search", {"query": "vault code", "scope": "shared"}, format="json")
    assert_no_leak(found, "half-approved grant")

    memory_grant_give(reader=blue.agent, owner=red, approving_team_ids=frozenset({world.blue.pk}))
    found = blue.client.post("/api/v1/search", {"query": "vault code", "scope": "shared"}, format="json").json()
    assert any(r.get("owner") == "red-handbook" and r["path"] == "memory/red-secret.md" for r in found["results"])
    assert blue.client.get("/api/v1/files/red-handbook:memory/red-secret.md").status_code == 200
    # Reading only: every write through the grant leaves the red memory as it was; the other red agent stays closed.
    for method, url, data in api_calls(world, kinds=("write",)):
        run(blue, method, url, data)
    red_untouched(world)
    # Blue's own, named after red's (with their chunks: nothing cascades from a file to its chunks).
    named_after_red = MemoryFile.objects.filter(agent=blue.agent, path__contains="red-").values_list("id", flat=True)
    files_remove(agent_id=blue.agent.pk, file_ids=list(named_after_red))
    assert blue.client.post("/api/v1/search", {"query": "x", "scope": ["red-writer"]}, format="json").status_code == 400
    # Own scope is unchanged by the grant.
    own = blue.client.post("/api/v1/search", {"query": "vault code"}, format="json")
    assert_no_leak(own, "own scope with a grant")

    memory_grant_revoke(reader=blue.agent, owner=red)
    for method, url, data in api_calls(world):
        response = run(blue, method, url, data)
        assert_no_leak(response, f"after revocation: {method} {url} {data}", sent=f"{url} {data}")
    assert not MemoryGrant.objects.exists()


def test_a_grant_to_one_agent_opens_nothing_for_its_teammates(world, make_member):
    blue_second = make_member("blue-second", team=world.blue)
    memory_grant_give(reader=world.blue_agent.agent, owner=world.red_handbook.agent)
    for method, url, data in api_calls(world):
        assert_no_leak(run(blue_second, method, url, data), f"teammate of the reader: {method} {url}", sent=f"{url} {data}")


# --- The admin ---------------------------------------------------------------------------------

def admin_object_urls(world) -> list[str]:
    """The change, delete and history pages of every red row of every registered model."""
    red_agent = world.red_handbook.agent
    memory_grant_give(reader=world.red_writer.agent, owner=red_agent)
    rows = {
        "agent": red_agent,
        "agenttoken": AgentToken.objects.filter(agent=red_agent).first(),
        "memoryfile": world.red_file,
        "indexjob": world.red_job,
        "team": world.red,
        "memorygrant": MemoryGrant.objects.get(owner=red_agent),
        "auditevent": AuditEvent.objects.filter(team_ids__contains=[world.red.pk]).first(),
        "embeddingbatch": EmbeddingBatch.objects.create(
            agent=red_agent, job=world.red_job, provider="openai", model="red-model", dimensions=8,
            state=EmbeddingBatch.State.IN_FLIGHT, remote_id="batch_red_secret", inputs=3,
        ),
        # The deployment's, not a team's: superusers only (no operator here is one).
        "embeddingwindow": EmbeddingWindow.objects.create(identity="openai:red-model:8", tokens=200, read_tokens=230, cut=True),
        "embeddingmodelcheck": EmbeddingModelCheck.objects.create(identity="openai:red-model:8", compared=8, differed=8),
    }
    registered = {model._meta.model_name for model in admin.site._registry if model not in (User, Group)}
    assert registered <= set(rows), f"a model without an isolation check: {registered - set(rows)}"
    urls = []
    for model, row in rows.items():
        app = row._meta.app_label
        for page in ("change", "delete", "history"):
            urls.append(f"/admin/{app}/{model}/{row.pk}/{page}/")
    tokens = rows["agenttoken"]
    urls += [
        f"/admin/agents/agent/{red_agent.pk}/search/?query=vault",
        f"/admin/agents/agent/{red_agent.pk}/tokens/{tokens.pk}/revoke/",
        f"/admin/agents/agent/{red_agent.pk}/tokens/{tokens.pk}/rotate/",
        f"/admin/usage/?agent={red_agent.pk}",
    ]
    return urls


LISTS = [
    "/admin/", "/admin/usage/", "/admin/agents/", "/admin/indexing/", "/admin/agents/agent/", "/admin/agents/agenttoken/",
    "/admin/agents/team/", "/admin/agents/memorygrant/", "/admin/agents/auditevent/", "/admin/indexing/memoryfile/",
    "/admin/indexing/indexjob/", "/admin/indexing/memoryfile/?q=red", "/admin/agents/agent/?q=red",
]


@pytest.mark.parametrize("username", ["blue-admin", "blue-viewer"])
def test_no_admin_page_or_action_of_the_other_team_answers(world, username):
    urls = admin_object_urls(world)
    client = Client()
    assert client.login(username=username, password="pw")
    nothing = client.get("/admin/agents/agent/999999999/change/")
    for url in urls:
        response = client.get(url)
        assert response.status_code == 404, (url, response.status_code)
        assert_no_leak(response, url)
        assert len(body(response)) == len(body(nothing)), url  # the same page as a row that never existed
    filtered = [
        f"/admin/indexing/memoryfile/?agent__id__exact={world.red_handbook.agent.pk}",
        f"/admin/agents/agent/?team__id__exact={world.red.pk}",
    ]
    for url in [*LISTS, *filtered]:
        response = client.get(url)
        assert response.status_code in (200, 403), (url, response.status_code)
        assert_no_leak(response, url)
    # Posting to the other team's pages and actions changes nothing.
    red_agent, red_token = world.red_handbook.agent, AgentToken.objects.filter(agent=world.red_handbook.agent).first()
    assert client.post(f"/admin/agents/agent/{red_agent.pk}/tokens/create/", {"label": "x", "scopes": ["read"]}).status_code == 404
    assert client.post(f"/admin/agents/agent/{red_agent.pk}/delete/", {"post": "yes"}).status_code == 404
    for changelist, action, pk in [
        ("/admin/agents/agenttoken/", "revoke_selected", red_token.pk),
        ("/admin/indexing/memoryfile/", "reindex_selected", world.red_file.pk),
        ("/admin/indexing/indexjob/", "retry_selected", world.red_job.pk),
        ("/admin/agents/agent/", "delete_selected", red_agent.pk),
        ("/admin/agents/memorygrant/", "delete_selected", MemoryGrant.objects.get().pk),
    ]:
        response = client.post(changelist, {"action": action, "_selected_action": [pk], "confirmed": "yes", "post": "yes"})
        assert response.status_code < 500
        assert_no_leak(response, f"{action} on {changelist}")
    red_token.refresh_from_db()
    assert red_token.revoked_at is None and MemoryGrant.objects.exists()
    assert AgentToken.objects.filter(agent=red_agent).count() == 1
    assert not AuditEvent.objects.filter(actor=username).exists()
    red_untouched(world)
