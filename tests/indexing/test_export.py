"""Export / import: one agent's files out as JSON Lines and into another agent, answering the same searches."""

import json

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from agents.models import Agent
from agents.services import agent_token_create
from indexing.models import MemoryFile
from tests.conftest import Member

pytestmark = pytest.mark.django_db

FILES = {
    "memory/2026-03-01.md": "# Trip\n\nWe fly to Lisbon on the 3rd. The hotel is near the river.\n",
    "memory/people.md": "# People\n\nDana prefers tea; Omar is allergic to peanuts.\n\n## Work\n\nOmar leads the billing team.\n",
    "notes/ideas.md": "Ideas: a garden on the roof, a café de Lisboa with pastéis de nata.\n",
}
SESSION = '{"type": "message", "message": {"role": "user", "content": "remind me about the Lisbon flight"}}\n'
QUERIES = ["Lisbon flight", "peanut allergy", "who leads billing", "pastéis garden"]


@pytest.fixture
def alice_memory(alice, indexed):
    with indexed():
        for path, content in FILES.items():
            response = alice.client.generic("PUT", f"/api/v1/files/{path}", content.encode(), content_type="text/markdown")
            assert response.status_code == 201, response.content
        response = alice.client.generic("PUT", "/api/v1/files/sessions/s1.jsonl", SESSION.encode(), content_type="text/plain")
        assert response.status_code == 201, response.content
    assert set(MemoryFile.objects.filter(agent=alice.agent).values_list("state", flat=True)) == {"indexed"}
    return alice


def _export(member) -> list[dict]:
    response = member.client.get("/api/v1/export")
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/x-ndjson"
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


def _searches(member) -> list:
    answers = []
    for query in QUERIES:
        response = member.client.post("/api/v1/search", {"query": query}, format="json")
        assert response.status_code == 200, response.content
        answers.append([(r["path"], r["start_line"], r["end_line"], round(r["score"], 6), r["snippet"]) for r in response.json()["results"]])
    return answers


def test_the_export_lists_each_file_with_its_attributes(alice_memory):
    header, *files = _export(alice_memory)
    assert header["format"] == "memoryhub-export" and header["agent"] == "alice" and header["files"] == 4
    assert [f["path"] for f in files] == sorted([*FILES, "sessions/s1.jsonl"])
    by_path = {f["path"]: f for f in files}
    assert by_path["memory/people.md"]["content"] == FILES["memory/people.md"]
    assert by_path["sessions/s1.jsonl"]["source"] == "session"
    stored = MemoryFile.objects.get(agent=alice_memory.agent, path="memory/people.md")
    assert by_path["memory/people.md"]["hash"] == stored.content_hash


def test_a_token_exports_only_its_own_agents_files(alice_memory, bob, indexed):
    with indexed():
        bob.client.generic("PUT", "/api/v1/files/memory/bob.md", b"bob's own note\n", content_type="text/markdown")
    header, *files = _export(bob)
    assert header["agent"] == "bob"
    assert [f["path"] for f in files] == ["memory/bob.md"]
    assert "Lisbon" not in json.dumps(files)


def test_export_needs_a_token(anonymous_client):
    response = anonymous_client.get("/api/v1/export")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


@pytest.mark.parametrize("accept", ["application/x-ndjson", "application/json", "*/*"])
def test_the_export_answers_a_client_that_asks_for_json_lines(alice_memory, accept):
    response = alice_memory.client.get("/api/v1/export", HTTP_ACCEPT=accept)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/x-ndjson"
    header, *files = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert header["agent"] == "alice" and len(files) == len(FILES) + 1


def test_an_export_error_for_a_json_lines_client_is_json(anonymous_client):
    response = anonymous_client.get("/api/v1/export", HTTP_ACCEPT="application/x-ndjson")
    assert response.status_code == 401
    assert json.loads(response.content)["error"]["code"] == "not_authenticated"


def test_an_export_imported_into_another_agent_answers_the_same_searches(alice_memory, tmp_path, indexed):
    export = tmp_path / "alice.jsonl.gz"
    call_command("export_agent", "alice", "--output", str(export))
    with indexed():
        call_command("import_agent", "carol", str(export))
    carol = Agent.objects.get(slug="carol")
    assert set(MemoryFile.objects.filter(agent=carol).values_list("state", flat=True)) == {"indexed"}
    carol_member = _member_with_token(carol)

    before = _searches(alice_memory)
    assert all(before), before  # every query finds something, so the comparison means something
    assert _searches(carol_member) == before
    carol_file = MemoryFile.objects.get(agent=carol, path="sessions/s1.jsonl")
    alice_file = MemoryFile.objects.get(agent=alice_memory.agent, path="sessions/s1.jsonl")
    assert (carol_file.source, carol_file.content_hash, carol_file.client_mtime) == (
        alice_file.source, alice_file.content_hash, alice_file.client_mtime)

    # Importing the same export again changes nothing and queues nothing.
    with indexed():
        call_command("import_agent", "carol", str(export))
    assert MemoryFile.objects.filter(agent=carol).count() == 4


def _member_with_token(agent) -> Member:
    token, raw = agent_token_create(agent=agent, label="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Member(agent=agent, token=token, raw_token=raw, client=client)


def test_import_refuses_a_file_that_is_not_an_export(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"path": "a.md", "content": "x"}\n')
    with pytest.raises(CommandError, match="not a MemoryHub export"):
        call_command("import_agent", "dave", str(bad))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"format": "memoryhub-export", "version": 1}\n{"path": "a.md"}\n')
    with pytest.raises(CommandError, match="line 2: each file needs"):
        call_command("import_agent", "dave", str(broken))
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text('{"format": "memoryhub-export", "version": 1}\n{"path": "a.md", "content": "x", "hash": "' + "0" * 64 + '"}\n')
    with pytest.raises(CommandError, match="hash"):
        call_command("import_agent", "dave", str(tampered))
    assert not MemoryFile.objects.filter(agent__slug="dave").exists()
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("import_agent", "dave", str(tmp_path / "missing.jsonl"))
    with pytest.raises(CommandError, match="No agent"):
        call_command("export_agent", "nobody")


def test_attributes_travel_with_an_export(alice_memory, tmp_path, indexed):
    MemoryFile.objects.filter(agent=alice_memory.agent, path="memory/people.md").update(attributes={"team": "core", "n": 2})
    export = tmp_path / "alice.jsonl"
    call_command("export_agent", "alice", "--output", str(export))
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert {f["path"]: f["attributes"] for f in lines[1:]}["memory/people.md"] == {"team": "core", "n": 2}
    with indexed():
        call_command("import_agent", "dora", str(export))
    dora = Agent.objects.get(slug="dora")
    assert MemoryFile.objects.get(agent=dora, path="memory/people.md").attributes == {"team": "core", "n": 2}
