"""POST files/<path>/append: only the new text is sent, and only the chunks it changed are embedded."""

import hashlib
import json

import pytest

from indexing.models import Chunk, IndexJob, MemoryFile

NOTE = "# Falcon\n\nThe launch is planned for March."


def append(client, path, text, **extra):
    return client.post(f"/api/v1/files/{path}/append", {"text": text}, format="json", **extra)


def test_an_append_adds_a_line_and_answers_the_new_hash(alice, fake_embeddings, indexed):
    with indexed():
        alice.client.put("/api/v1/files/memory/falcon.md", {"content": NOTE}, format="json")
        response = append(alice.client, "memory/falcon.md", "Budget: 40k.\n")
    assert response.status_code == 200, response.content
    expected = NOTE + "\nBudget: 40k.\n"  # the file had no final newline: the text starts a new line
    assert response.json()["hash"] == hashlib.sha256(expected.encode()).hexdigest()
    memory_file = MemoryFile.objects.get(agent=alice.agent, path="memory/falcon.md")
    assert memory_file.content == expected and memory_file.state == "indexed"
    assert "Budget" in Chunk.objects.filter(file=memory_file).order_by("-ordinal").first().text


def test_an_append_creates_a_missing_file_and_takes_a_raw_body(alice, fake_embeddings, indexed):
    line = json.dumps({"type": "message", "message": {"role": "user", "content": "hello"}}) + "\n"
    with indexed():
        response = alice.client.generic(
            "POST", "/api/v1/files/sessions/s1.jsonl/append", line.encode(), content_type="application/x-ndjson"
        )
    assert response.status_code == 201, response.content
    memory_file = MemoryFile.objects.get(agent=alice.agent, path="sessions/s1.jsonl")
    assert memory_file.content == line and memory_file.source == "session"


def test_an_empty_append_changes_nothing(alice, fake_embeddings, indexed):
    with indexed():
        alice.client.put("/api/v1/files/memory/falcon.md", {"content": NOTE}, format="json")
    jobs = IndexJob.objects.count()
    response = append(alice.client, "memory/falcon.md", "")
    assert response.status_code == 200 and response.json()["job"] is None
    assert IndexJob.objects.count() == jobs


def test_appending_one_line_to_a_5000_line_transcript_embeds_at_most_two_chunks(alice, fake_embeddings, indexed):
    turns = [
        json.dumps({"type": "message", "message": {"role": "user" if n % 2 else "assistant", "content": f"turn {n}: the falcon budget item {n * 7} was reviewed"}})
        for n in range(5000)
    ]
    transcript = "\n".join(turns) + "\n"
    with indexed():
        response = alice.client.put("/api/v1/files/sessions/long.jsonl", {"content": transcript}, format="json")
    assert response.status_code == 201, response.content
    memory_file = MemoryFile.objects.get(agent=alice.agent, path="sessions/long.jsonl")
    chunks_before = Chunk.objects.filter(file=memory_file).count()
    assert chunks_before > 20  # a real multi-chunk file, or the bound below says nothing

    fake_embeddings.reset_counts()
    new_turn = json.dumps({"type": "message", "message": {"role": "user", "content": "turn 5000: the launch moved to April"}}) + "\n"
    with indexed():
        response = append(alice.client, "sessions/long.jsonl", new_turn)
    assert response.status_code == 200, response.content
    assert fake_embeddings.texts_embedded <= 2
    job = IndexJob.objects.get(pk=response.json()["job"])
    assert job.state == "done" and job.chunks_embedded <= 2
    assert job.chunks_added <= 2 and job.chunks_removed <= 1  # only the tail's chunks changed
    memory_file.refresh_from_db()
    assert memory_file.content == transcript + new_turn and memory_file.state == "indexed"
    assert Chunk.objects.filter(file=memory_file).exclude(embedding=None).count() >= chunks_before


def test_an_append_to_another_agents_path_creates_its_own_file(alice, bob, fake_embeddings, indexed):
    with indexed():
        alice.client.put("/api/v1/files/memory/falcon.md", {"content": NOTE}, format="json")
        response = append(bob.client, "memory/falcon.md", "bob's line\n")
    assert response.status_code == 201
    assert MemoryFile.objects.get(agent=alice.agent, path="memory/falcon.md").content == NOTE
    assert MemoryFile.objects.get(agent=bob.agent, path="memory/falcon.md").content == "bob's line\n"


@pytest.mark.parametrize(
    "body",
    [{"text": 5}, {"text": "x", "source": "elsewhere"}, {}, {"text": "a\x00b"}],
    ids=["not-a-string", "bad-source", "missing-text", "nul"],
)
def test_bad_append_input_is_a_4xx_json_error_and_writes_nothing(alice, body):
    response = alice.client.post("/api/v1/files/memory/x.md/append", body, format="json")
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["code"]
    assert not MemoryFile.objects.filter(agent=alice.agent).exists()


def test_a_bad_path_and_a_read_only_token_are_refused(alice, make_member):
    assert append(alice.client, "../etc/passwd", "x").status_code in (400, 404)
    reader = make_member("reader", scopes=["read"])
    response = append(reader.client, "memory/x.md", "x")
    assert response.status_code == 403 and response.json()["error"]["code"] == "insufficient_scope"
    assert not MemoryFile.objects.exists()


def test_other_methods_on_an_append_url_still_mean_the_file_path(alice):
    # A path ending in "/append" names a file without an extension: PUT refuses its type, GET finds none.
    response = alice.client.put("/api/v1/files/notes/append", {"content": "x\n"}, format="json")
    assert response.status_code == 415 and response.json()["error"]["code"] == "unsupported_file_type"
    assert alice.client.get("/api/v1/files/notes/append").status_code == 404
