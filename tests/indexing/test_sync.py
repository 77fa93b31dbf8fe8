"""POST sync: the diff, delete_missing within a prefix, all-or-nothing validation, HMAC, limits."""

import hashlib
import hmac
import json
import time

import pytest

from agents.signatures import signature_header
from indexing.models import Chunk, IndexJob, MemoryFile


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def sync(client, payload, **headers):
    return client.generic("POST", "/api/v1/sync", json.dumps(payload).encode(), content_type="application/json", **headers)


@pytest.fixture
def workspace(alice, fake_embeddings, indexed):
    files = {
        "MEMORY.md": "# Me\n\nI am Alice.",
        "memory/2026-01-01.md": "New year notes.",
        "memory/2026-01-02.md": "Second day notes.",
        "notes/ideas.md": "Idea: a hub for memories.",
    }
    with indexed():
        response = sync(alice.client, {"files": [{"path": p, "content": c} for p, c in files.items()]})
    assert response.status_code == 200, response.content
    assert response.json()["changed"] == 4 and response.json()["needed"] == []
    return files


def test_a_first_sync_stores_and_indexes_everything(alice, workspace):
    assert MemoryFile.objects.filter(agent=alice.agent, state="indexed").count() == 4
    job = IndexJob.objects.get(agent=alice.agent)
    assert job.trigger == "sync" and job.state == "done" and job.files_seen == 4 and job.files_changed == 4


def test_hash_only_entries_are_compared_and_missing_content_is_needed(alice, workspace, fake_embeddings, indexed):
    fake_embeddings.reset_counts()
    with indexed():
        response = sync(
            alice.client,
            {
                "files": [
                    {"path": "MEMORY.md", "hash": sha(workspace["MEMORY.md"])},  # unchanged
                    {"path": "memory/2026-01-01.md", "hash": "sha256:" + sha("edited on the client")},  # changed
                    {"path": "memory/2026-01-03.md", "hash": sha("brand new")},  # new
                    {"path": "notes/ideas.md", "content": workspace["notes/ideas.md"]},  # unchanged, sent in full
                ]
            },
        )
    body = response.json()
    assert response.status_code == 200
    assert body["needed"] == ["memory/2026-01-01.md", "memory/2026-01-03.md"]
    assert body["unchanged"] == 2 and body["changed"] == 0
    assert body["job"] is None and body["deleted"] == []
    assert fake_embeddings.calls == 0
    # The server keeps the old version of a needed file until the client sends the content.
    assert MemoryFile.objects.get(agent=alice.agent, path="memory/2026-01-01.md").content == "New year notes."


def test_content_entries_are_upserted(alice, workspace, indexed):
    with indexed():
        body = sync(
            alice.client,
            {"files": [{"path": "memory/2026-01-01.md", "content": "Edited."}, {"path": "memory/new.md", "content": "New."}]},
        ).json()
    assert body["changed"] == 2 and body["job"]
    assert MemoryFile.objects.get(agent=alice.agent, path="memory/2026-01-01.md").content == "Edited."
    assert IndexJob.objects.get(pk=body["job"]).state == "done"
    assert alice.client.get(f"/api/v1/jobs/{body['job']}").json()["files_changed"] == 2


def test_delete_missing_removes_unlisted_files_within_the_prefix_only(alice, workspace, indexed):
    with indexed():
        body = sync(
            alice.client,
            {
                "files": [{"path": "memory/2026-01-02.md", "hash": sha(workspace["memory/2026-01-02.md"])}],
                "delete_missing": True,
                "prefix": "memory/",
            },
        ).json()
    assert body["deleted"] == ["memory/2026-01-01.md"]
    remaining = set(MemoryFile.objects.filter(agent=alice.agent).values_list("path", flat=True))
    assert remaining == {"MEMORY.md", "memory/2026-01-02.md", "notes/ideas.md"}
    assert not Chunk.objects.filter(file__path="memory/2026-01-01.md").exists()
    job = IndexJob.objects.get(pk=body["job"])
    assert job.files_removed == 1 and job.chunks_removed >= 1 and job.state == "done"


def test_delete_missing_without_prefix_mirrors_the_whole_workspace(alice, bob, workspace, indexed, fake_embeddings):
    with indexed():
        sync(bob.client, {"files": [{"path": "bob.md", "content": "Bob's."}]})
        body = sync(alice.client, {"files": [{"path": "MEMORY.md", "hash": sha(workspace["MEMORY.md"])}], "delete_missing": True}).json()
    assert sorted(body["deleted"]) == ["memory/2026-01-01.md", "memory/2026-01-02.md", "notes/ideas.md"]
    assert list(MemoryFile.objects.filter(agent=alice.agent).values_list("path", flat=True)) == ["MEMORY.md"]
    assert MemoryFile.objects.filter(agent=bob.agent, path="bob.md").exists()


def test_a_needed_file_is_not_deleted_by_delete_missing(alice, workspace, indexed):
    with indexed():
        body = sync(
            alice.client,
            {"files": [{"path": "notes/ideas.md", "hash": sha("newer text")}], "delete_missing": True, "prefix": "notes/"},
        ).json()
    assert body["needed"] == ["notes/ideas.md"] and body["deleted"] == []
    assert MemoryFile.objects.filter(agent=alice.agent, path="notes/ideas.md").exists()


@pytest.mark.parametrize(
    "bad_entry, status",
    [
        ({"path": "../escape.md", "content": "x"}, 400),
        ({"path": "photo.png", "content": "x"}, 415),
        ({"path": "bin.txt", "content": "a\u0000b"}, 415),
        ({"path": "nothing.md"}, 400),
        ({"path": "bad-hash.md", "hash": "abc"}, 400),
        ({"path": "mismatch.md", "content": "x", "hash": sha("y")}, 400),
        ({"path": "MEMORY.md", "content": "duplicate"}, 400),
        ({"path": "chat.md", "content": "x", "source": "session"}, 422),
        ({"content": "no path"}, 400),
    ],
)
def test_one_bad_entry_rejects_the_whole_sync(alice, workspace, bad_entry, status, indexed):
    before = list(MemoryFile.objects.order_by("path").values_list("path", "content_hash"))
    jobs_before = IndexJob.objects.count()
    with indexed():
        response = sync(
            alice.client,
            {
                "files": [{"path": "MEMORY.md", "content": "changed first"}, {"path": "fresh.md", "content": "new"}, bad_entry],
                "delete_missing": True,
            },
        )
    assert response.status_code == status, response.content
    assert "error" in response.json()
    assert list(MemoryFile.objects.order_by("path").values_list("path", "content_hash")) == before
    assert IndexJob.objects.count() == jobs_before


@pytest.mark.parametrize("payload", [b"{not json", b"[]", b'{"files": "x"}', b'{"files": [1]}', b'{"files": [], "delete_missing": "perhaps"}'])
def test_malformed_sync_bodies_are_400(alice, payload):
    response = alice.client.generic("POST", "/api/v1/sync", payload, content_type="application/json")
    assert response.status_code == 400
    assert "error" in response.json()


def test_sync_limits_are_413(alice, settings):
    settings.MEMORYHUB_MAX_SYNC_FILES = 2
    response = sync(alice.client, {"files": [{"path": f"f{i}.md", "content": "x"} for i in range(3)]})
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_many_files"
    settings.MEMORYHUB_MAX_SYNC_BYTES = 100
    response = sync(alice.client, {"files": [{"path": "f.md", "content": "x" * 200}]})
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    settings.MEMORYHUB_MAX_FILE_BYTES = 10
    settings.MEMORYHUB_MAX_SYNC_BYTES = 10_000
    response = sync(alice.client, {"files": [{"path": "f.md", "content": "x" * 11}]})
    assert response.status_code == 413 and response.json()["error"]["code"] == "file_too_large"
    assert not MemoryFile.objects.exists()


def test_a_sync_over_the_quota_writes_nothing(alice, workspace, settings, indexed):
    settings.MEMORYHUB_MAX_FILES_PER_AGENT = 5
    with indexed():
        response = sync(alice.client, {"files": [{"path": f"n/{i}.md", "content": "x"} for i in range(2)]})
    assert response.status_code == 413
    assert "4 files" in response.json()["error"]["message"] and "5 files" in response.json()["error"]["message"]
    assert MemoryFile.objects.filter(agent=alice.agent).count() == 4
    # Deleting in the same sync makes room: the quota counts the result.
    with indexed():
        response = sync(
            alice.client,
            {"files": [{"path": f"n/{i}.md", "content": "x"} for i in range(2)], "delete_missing": True, "prefix": "memory/"},
        )
    assert response.status_code == 200, response.content


# --- HMAC ----------------------------------------------------------------------------------------


@pytest.fixture
def signed_alice(alice):
    alice.agent.webhook_secret = "s3cret-webhook-key"
    alice.agent.save()
    return alice


def signature(body: bytes, secret="s3cret-webhook-key", **overrides) -> str:
    return signature_header(**{"secret": secret, "method": "POST", "path": "/api/v1/sync", "body": body, **overrides})


BODY = json.dumps({"files": [{"path": "MEMORY.md", "content": "signed"}]}).encode()


def test_a_correctly_signed_sync_is_accepted(signed_alice, fake_embeddings, indexed):
    with indexed():
        response = signed_alice.client.generic(
            "POST", "/api/v1/sync", BODY, content_type="application/json", HTTP_X_MEMORYHUB_SIGNATURE=signature(BODY)
        )
    assert response.status_code == 200, response.content
    assert MemoryFile.objects.get(agent=signed_alice.agent).content == "signed"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "sha256=" + hmac.new(b"s3cret-webhook-key", BODY, hashlib.sha256).hexdigest(),  # the old, replayable form
        signature(BODY, secret="wrong-secret"),
        signature(BODY + b" "),
        signature(BODY, method="PUT"),
        signature(BODY, path="/api/v1/files/MEMORY.md"),
        signature(BODY, timestamp=int(time.time()) - 3600),
        signature(BODY).replace("v1=", "v2="),
    ],
)
def test_a_missing_or_wrong_signature_is_401(signed_alice, header):
    extra = {} if header is None else {"HTTP_X_MEMORYHUB_SIGNATURE": header}
    response = signed_alice.client.generic("POST", "/api/v1/sync", BODY, content_type="application/json", **extra)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert not MemoryFile.objects.exists()


def test_agents_without_a_secret_need_no_signature(alice, fake_embeddings, indexed):
    with indexed():
        response = alice.client.generic("POST", "/api/v1/sync", BODY, content_type="application/json")
    assert response.status_code == 200
