"""PUT / GET / DELETE files/<path>, GET files, GET jobs/<id>: behaviour, bad input and isolation."""

import hashlib

import pytest

from indexing.models import Chunk, IndexJob, MemoryFile

NOTE = "# Project Falcon\n\nThe launch is planned for March.\nBudget: 40k.\n"


def put_raw(client, path, body, content_type="text/markdown; charset=utf-8", **extra):
    return client.generic("PUT", f"/api/v1/files/{path}", body, content_type=content_type, **extra)


def error_code(response):
    return response.json()["error"]["code"]


@pytest.fixture
def alice_note(alice, fake_embeddings, indexed):
    with indexed():
        response = put_raw(alice.client, "memory/falcon.md", NOTE.encode())
    assert response.status_code == 201, response.content
    return response.json()


def test_a_raw_upload_is_stored_indexed_and_answered(alice, alice_note):
    assert alice_note["path"] == "memory/falcon.md"
    assert alice_note["hash"] == hashlib.sha256(NOTE.encode()).hexdigest()
    assert alice_note["size"] == len(NOTE.encode())
    assert alice_note["status"] == "pending"
    job = IndexJob.objects.get(pk=alice_note["job"])
    assert job.state == "done" and job.trigger == "upload" and job.chunks_added >= 1
    memory_file = MemoryFile.objects.get(agent=alice.agent, path="memory/falcon.md")
    assert memory_file.state == "indexed" and memory_file.source == "memory"
    assert Chunk.objects.filter(file=memory_file).exclude(embedding=None).count() == job.chunks_added


def test_a_json_upload_takes_content_source_and_mtime(alice, fake_embeddings, indexed):
    with indexed():
        response = alice.client.put(
            "/api/v1/files/notes/me.md",
            {"content": "I like tea.", "source": "memory", "mtime": 1767225600},
            format="json",
        )
    assert response.status_code == 201, response.content
    memory_file = MemoryFile.objects.get(agent=alice.agent, path="notes/me.md")
    assert memory_file.source == "memory"
    assert memory_file.client_mtime.year == 2026
    assert memory_file.content == "I like tea."


def test_re_uploading_the_same_content_answers_200_without_a_job(alice, alice_note, fake_embeddings, indexed):
    fake_embeddings.reset_counts()
    with indexed():
        response = put_raw(alice.client, "memory/falcon.md", NOTE.encode())
    assert response.status_code == 200
    assert response.json()["job"] is None
    assert response.json()["status"] == "indexed"
    assert fake_embeddings.calls == 0
    assert IndexJob.objects.filter(agent=alice.agent).count() == 1


def test_an_edit_answers_200_with_a_new_job(alice, alice_note, indexed):
    with indexed():
        response = put_raw(alice.client, "memory/falcon.md", (NOTE + "\nNew line.\n").encode())
    assert response.status_code == 200
    assert response.json()["job"] not in (None, alice_note["job"])


def test_an_empty_file_is_a_file(alice, fake_embeddings, indexed):
    with indexed():
        response = put_raw(alice.client, "memory/empty.md", b"")
    assert response.status_code == 201, response.content
    assert MemoryFile.objects.get(agent=alice.agent, path="memory/empty.md").state == "indexed"


@pytest.mark.parametrize(
    "path, status, code",
    [
        ("..%2Fescape.md", 400, "invalid_path"),
        ("a/../../escape.md", 400, "invalid_path"),
        ("memory//x.md", 400, "invalid_path"),
        ("bad%00name.md", 400, "invalid_path"),
        ("bad%0Aname.md", 400, "invalid_path"),
        ("x" * 300 + ".md", 400, "invalid_path"),
        ("picture.png", 415, "unsupported_file_type"),
    ],
)
def test_bad_paths_are_refused_and_nothing_is_stored(alice, path, status, code):
    response = put_raw(alice.client, path, b"hello")
    assert response.status_code == status, response.content
    assert error_code(response) == code
    assert not MemoryFile.objects.exists()


@pytest.mark.parametrize(
    "body, code",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary_content"),
        ("caf\u00e9".encode("latin-1"), "invalid_encoding"),
    ],
)
def test_binary_or_non_utf8_content_is_415(alice, body, code):
    response = put_raw(alice.client, "notes.txt", body, content_type="application/octet-stream")
    assert response.status_code == 415
    assert error_code(response) == code
    assert not MemoryFile.objects.exists()


def test_a_nul_inside_json_content_is_415(alice):
    response = alice.client.put("/api/v1/files/notes.txt", {"content": "a\u0000b"}, format="json")
    assert response.status_code == 415


def test_bad_json_is_400(alice):
    response = put_raw(alice.client, "notes.md", b'{"content": "unterminated', content_type="application/json")
    assert response.status_code == 400
    assert "error" in response.json()
    response = alice.client.put("/api/v1/files/notes.md", {"text": "no content field"}, format="json")
    assert response.status_code == 400
    response = alice.client.put("/api/v1/files/notes.md", {"content": 42}, format="json")
    assert response.status_code == 400


def test_an_unknown_or_inconsistent_source_is_refused(alice):
    response = alice.client.put("/api/v1/files/notes.md", {"content": "x", "source": "diary"}, format="json")
    assert response.status_code == 400
    response = alice.client.put("/api/v1/files/notes.md", {"content": "x", "source": "session"}, format="json")
    assert response.status_code == 422
    assert error_code(response) == "inconsistent_source"


def test_a_file_over_the_size_limit_is_413_from_content_length(alice, settings):
    settings.MEMORYHUB_MAX_FILE_BYTES = 1000
    response = put_raw(alice.client, "big.md", b"x" * 1001)
    assert response.status_code == 413
    assert error_code(response) == "file_too_large"
    assert "1001" in response.json()["error"]["message"] and "1000" in response.json()["error"]["message"]
    # JSON bodies are allowed escaping room, but the content itself is held to the limit.
    response = alice.client.put("/api/v1/files/big.md", {"content": "y" * 1001}, format="json")
    assert response.status_code == 413
    assert not MemoryFile.objects.exists()


def test_the_default_limit_is_ours_not_djangos(alice, settings):
    # 6 MB: above Django's own default (2.5 MB) and above our 5 MB default — the 413 must be ours.
    response = put_raw(alice.client, "big.md", b"x" * (6 * 1024 * 1024))
    assert response.status_code == 413
    assert error_code(response) == "file_too_large"


def test_the_file_quota_is_413_with_the_numbers(alice, settings, indexed, fake_embeddings):
    settings.MEMORYHUB_MAX_FILES_PER_AGENT = 2
    with indexed():
        assert put_raw(alice.client, "a.md", b"a").status_code == 201
        assert put_raw(alice.client, "b.md", b"b").status_code == 201
        assert put_raw(alice.client, "a.md", b"a changed").status_code == 200  # replacing is not adding
        response = put_raw(alice.client, "c.md", b"c")
    assert response.status_code == 413
    assert error_code(response) == "file_quota_exceeded"
    message = response.json()["error"]["message"]
    assert "2 files" in message
    assert not MemoryFile.objects.filter(path="c.md").exists()


def test_the_byte_quota_is_413_with_the_numbers(alice, settings, indexed, fake_embeddings):
    settings.MEMORYHUB_MAX_BYTES_PER_AGENT = 10
    with indexed():
        assert put_raw(alice.client, "a.md", b"12345678").status_code == 201
        response = put_raw(alice.client, "b.md", b"123")
    assert response.status_code == 413
    assert error_code(response) == "byte_quota_exceeded"
    assert "8 bytes" in response.json()["error"]["message"] and "10 bytes" in response.json()["error"]["message"]
    assert MemoryFile.objects.filter(agent=alice.agent).count() == 1


def test_quotas_are_per_agent(alice, bob, settings, indexed, fake_embeddings):
    settings.MEMORYHUB_MAX_FILES_PER_AGENT = 1
    with indexed():
        assert put_raw(alice.client, "a.md", b"a").status_code == 201
        assert put_raw(bob.client, "a.md", b"a").status_code == 201


# --- memory_get ------------------------------------------------------------------------------------


def test_memory_get_returns_the_requested_lines(alice, alice_note):
    response = alice.client.get("/api/v1/files/memory/falcon.md", {"from": 3, "lines": 2})
    assert response.status_code == 200
    assert response.json() == {
        "path": "memory/falcon.md",
        "from": 3,
        "lines": 2,
        "total_lines": 4,
        "content": "The launch is planned for March.\nBudget: 40k.",
        "source": "memory",
    }


def test_memory_get_defaults_to_50_lines_from_the_start(alice, fake_embeddings, indexed):
    with indexed():
        put_raw(alice.client, "long.md", "\n".join(f"line {i}" for i in range(1, 121)).encode())
    body = alice.client.get("/api/v1/files/long.md").json()
    assert body["from"] == 1 and body["lines"] == 50 and body["total_lines"] == 120
    assert body["content"].splitlines()[-1] == "line 50"
    past_the_end = alice.client.get("/api/v1/files/long.md", {"from": 500}).json()
    assert past_the_end["lines"] == 0 and past_the_end["content"] == ""


@pytest.mark.parametrize("params", [{"from": 0}, {"from": -3}, {"from": "abc"}, {"lines": 0}, {"lines": 1001}, {"lines": "x"}])
def test_memory_get_refuses_bad_from_and_lines(alice, alice_note, params):
    response = alice.client.get("/api/v1/files/memory/falcon.md", params)
    assert response.status_code == 400
    assert error_code(response) == "invalid_request"
    assert list(params)[0] in response.json()["error"]["message"]


def test_memory_get_of_a_missing_file_is_a_json_404(alice):
    response = alice.client.get("/api/v1/files/memory/nothing.md")
    assert response.status_code == 404
    assert error_code(response) == "not_found"


# --- list ----------------------------------------------------------------------------------------


def test_the_list_filters_by_prefix_and_source_and_paginates(alice, fake_embeddings, indexed):
    with indexed():
        for path in ["MEMORY.md", "memory/a.md", "memory/b.md", "notes/x.md", "chats/one.jsonl"]:
            put_raw(alice.client, path, b"hello")
    body = alice.client.get("/api/v1/files").json()
    assert body["count"] == 5
    assert [f["path"] for f in body["results"]] == ["MEMORY.md", "chats/one.jsonl", "memory/a.md", "memory/b.md", "notes/x.md"]
    assert {"path", "hash", "size", "status", "source", "mtime", "last_error", "indexed_at", "updated_at"} <= set(body["results"][0])
    assert "content" not in body["results"][0]
    assert [f["path"] for f in alice.client.get("/api/v1/files", {"prefix": "memory/"}).json()["results"]] == ["memory/a.md", "memory/b.md"]
    assert [f["path"] for f in alice.client.get("/api/v1/files", {"source": "session"}).json()["results"]] == ["chats/one.jsonl"]
    page = alice.client.get("/api/v1/files", {"limit": 2, "offset": 2}).json()
    assert [f["path"] for f in page["results"]] == ["memory/a.md", "memory/b.md"] and page["next"]
    assert alice.client.get("/api/v1/files", {"source": "nope"}).status_code == 400


# --- delete --------------------------------------------------------------------------------------


def test_delete_removes_the_file_and_its_chunks_now(alice, alice_note):
    response = alice.client.delete("/api/v1/files/memory/falcon.md")
    assert response.status_code == 200
    assert response.json()["deleted"] is True and response.json()["chunks_removed"] >= 1
    assert not MemoryFile.objects.exists() and not Chunk.objects.exists()
    job = alice.client.get(f"/api/v1/jobs/{response.json()['job']}").json()
    assert job["trigger"] == "delete" and job["files_removed"] == 1 and job["state"] == "done"
    assert alice.client.delete("/api/v1/files/memory/falcon.md").status_code == 404


def test_an_unsupported_method_is_a_json_405(alice):
    response = alice.client.post("/api/v1/files/memory/falcon.md", {})
    assert response.status_code == 405
    assert error_code(response) == "method_not_allowed"


# --- jobs ----------------------------------------------------------------------------------------


def test_a_job_reports_its_counts(alice, alice_note):
    body = alice.client.get(f"/api/v1/jobs/{alice_note['job']}").json()
    assert body["state"] == "done" and body["trigger"] == "upload"
    assert body["files_seen"] == 1 and body["files_changed"] == 1
    assert body["chunks_embedded"] == body["chunks_added"] >= 1
    assert body["duration_ms"] is not None and body["error"] == ""


def test_an_unknown_job_is_404(alice):
    assert alice.client.get("/api/v1/jobs/999999").status_code == 404


# --- scopes and isolation --------------------------------------------------------------------------


def test_a_read_only_token_cannot_write(make_member, alice_note):
    reader = make_member("reader", scopes=["read"])
    for response in [
        put_raw(reader.client, "x.md", b"x"),
        reader.client.delete("/api/v1/files/x.md"),
        reader.client.post("/api/v1/sync", {"files": []}, format="json"),
    ]:
        assert response.status_code == 403
        assert error_code(response) == "insufficient_scope"
    assert reader.client.get("/api/v1/files").status_code == 200
    assert not MemoryFile.objects.filter(agent=reader.agent).exists()


def test_without_a_token_nothing_is_reachable(anonymous_client):
    for response in [
        anonymous_client.get("/api/v1/files"),
        anonymous_client.get("/api/v1/files/MEMORY.md"),
        anonymous_client.generic("PUT", "/api/v1/files/MEMORY.md", b"x", content_type="text/plain"),
        anonymous_client.delete("/api/v1/files/MEMORY.md"),
        anonymous_client.post("/api/v1/sync", {"files": []}, format="json"),
        anonymous_client.get("/api/v1/jobs/1"),
    ]:
        assert response.status_code == 401


def test_outsiders_cannot_see_or_touch_alices_files_and_jobs(alice, bob, mallory, alice_note, indexed):
    for outsider in (bob, mallory):
        assert outsider.client.get("/api/v1/files/memory/falcon.md").status_code == 404
        assert outsider.client.get("/api/v1/files").json()["count"] == 0
        assert outsider.client.get(f"/api/v1/jobs/{alice_note['job']}").status_code == 404
        assert outsider.client.delete("/api/v1/files/memory/falcon.md").status_code == 404
        sync = outsider.client.post(
            "/api/v1/sync", {"files": [], "delete_missing": True}, format="json"
        ).json()
        assert sync["deleted"] == []
    # Bob writing the same path creates bob's own file; alice's is untouched.
    with indexed():
        assert put_raw(bob.client, "memory/falcon.md", b"bob's falcon").status_code == 201
    alice_file = MemoryFile.objects.get(agent=alice.agent, path="memory/falcon.md")
    assert alice_file.content == NOTE
    assert alice.client.get("/api/v1/files/memory/falcon.md").json()["content"].startswith("# Project Falcon")
    assert bob.client.get("/api/v1/files/memory/falcon.md").json()["content"] == "bob's falcon"
    assert Chunk.objects.filter(agent=bob.agent, file__agent=alice.agent).count() == 0
