"""``memoryhub-client push`` against a live server: what is sent, what is skipped, what it costs."""

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from agents.services import agent_create, agent_token_create
from indexing import paths as server_paths
from indexing.embeddings import FakeProvider
from indexing.models import IndexJob, MemoryFile
from indexing.writes import file_ingest
from memoryhub_client import workspace
from tests.client.conftest import write


def server_files(agent) -> dict[str, MemoryFile]:
    return {f.path: f for f in MemoryFile.objects.filter(agent=agent)}


def make_workspace(root):
    write(root, "MEMORY.md", "# Memory\n\nThe user prefers green tea in the afternoon.\n")
    write(root, "memory/2026-03-01.md", "# 2026-03-01\n\nMet Dana about the garden project.\n")
    write(root, "sessions/chat.jsonl", '{"role": "user", "content": "Where is the spare key?"}\n')
    write(root, "notes/todo.txt", "buy seeds\nfix the fence\n")
    return root


def test_the_first_push_uploads_the_workspace_and_it_gets_indexed(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")

    outcome = hub("push", root)

    assert outcome.code == 0, outcome.err
    assert outcome.out.startswith("pushed 4 files: 4 uploaded")
    assert "0 unchanged, 0 deleted" in outcome.out
    files = server_files(hub.member.agent)
    assert {path: f.source for path, f in files.items()} == {
        "MEMORY.md": "memory",
        "memory/2026-03-01.md": "memory",
        "sessions/chat.jsonl": "session",
        "notes/todo.txt": "workspace",
    }
    for path, memory_file in files.items():
        raw = (root / path).read_bytes()
        assert memory_file.content == raw.decode()
        assert memory_file.content_hash == hashlib.sha256(raw).hexdigest()
        assert memory_file.state == MemoryFile.State.INDEXED
        assert memory_file.client_mtime is not None


def test_pushing_an_unchanged_workspace_uploads_and_embeds_nothing(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")
    assert hub("push", root).code == 0
    jobs, embedded = IndexJob.objects.count(), FakeProvider.texts_embedded

    outcome = hub("push", root, "--json")

    assert outcome.code == 0, outcome.err
    import json

    report = json.loads(outcome.out)
    assert (report["uploaded"], report["unchanged"], report["deleted"], report["jobs"]) == (0, 4, [], [])
    assert IndexJob.objects.count() == jobs
    assert FakeProvider.texts_embedded == embedded


def test_an_edited_file_is_uploaded_and_a_deleted_one_is_removed(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")
    assert hub("push", root).code == 0
    write(root, "notes/todo.txt", "buy seeds\nfix the fence\ncall the plumber\n")
    (root / "memory/2026-03-01.md").unlink()

    outcome = hub("push", root, "-v")

    assert outcome.code == 0, outcome.err
    assert "pushed 3 files: 1 uploaded" in outcome.out
    assert "2 unchanged, 1 deleted" in outcome.out
    assert "deleted  memory/2026-03-01.md" in outcome.err
    files = server_files(hub.member.agent)
    assert set(files) == {"MEMORY.md", "sessions/chat.jsonl", "notes/todo.txt"}
    assert files["notes/todo.txt"].content.endswith("call the plumber\n")
    assert files["notes/todo.txt"].state == MemoryFile.State.INDEXED


def test_it_skips_hidden_vendor_binary_oversized_and_unsupported_files(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")
    write(root, ".env", "OPENAI_API_KEY=sk-secret\n")
    write(root, ".git/config", "[core]\n")
    write(root, ".venv/lib/site.py", "print('x')\n")
    write(root, "notes/.draft.md", "half a thought\n")
    write(root, "node_modules/left-pad/index.js", "module.exports = 1;\n")
    write(root, "tools/__pycache__/x.py", "cached\n")
    write(root, "tools/run.py", "print('hello')\n")
    write(root, "photo.png", b"\x89PNG\r\n\x1a\n\x00\x00")
    write(root, "data/blob.txt", b"text with a \x00 NUL byte\n")
    write(root, "data/latin1.md", "caf\xe9\n".encode("latin-1"))
    write(root, "data/huge.md", "x" * 3000 + "\n")
    write(root, "caf\u00e9/na\u0308me.md", "decomposed name\n")  # NFD on disk → NFC on the server

    outcome = hub("push", root, "--max-file-bytes", "2000", "-v")

    assert outcome.code == 0, outcome.err
    assert set(server_files(hub.member.agent)) == {
        "MEMORY.md", "memory/2026-03-01.md", "sessions/chat.jsonl", "notes/todo.txt", "tools/run.py",
        "café/n\u00e4me.md",
    }
    assert "skipped 4 (1 binary, 1 not UTF-8, 1 too large, 1 unsupported type)" in outcome.out
    for line in ("photo.png  (unsupported type)", "data/blob.txt  (binary)", "data/latin1.md  (not UTF-8)",
                 "data/huge.md  (too large)"):
        assert line in outcome.err
    assert ".env" not in outcome.err and "node_modules" not in outcome.err  # never walked, never listed


def test_excluded_files_are_not_pushed_and_leave_the_server_when_newly_excluded(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")
    write(root, "drafts/idea.md", "not ready\n")
    write(root, "notes/private/diary.md", "dear diary\n")
    write(root, "notes/run.log.txt", "noise\n")
    assert hub("push", root).code == 0
    assert {"drafts/idea.md", "notes/private/diary.md", "notes/run.log.txt"} <= set(server_files(hub.member.agent))

    write(root, ".memoryhubignore", "# not for the agent\ndrafts/\nnotes/private/*\n")
    outcome = hub("push", root, "--exclude", "*.log.txt", "-v")

    assert outcome.code == 0, outcome.err
    assert set(server_files(hub.member.agent)) == {"MEMORY.md", "memory/2026-03-01.md", "sessions/chat.jsonl", "notes/todo.txt"}
    assert "3 deleted" in outcome.out
    assert "notes/run.log.txt  (excluded)" in outcome.err and "notes/private/diary.md  (excluded)" in outcome.err
    assert ".memoryhubignore" not in outcome.err  # hidden: never sent, never listed


@pytest.mark.parametrize(
    ("pattern", "path", "is_directory", "excluded"),
    [
        ("*.log", "a/b/run.log", False, True),  # no slash: a name at any depth
        ("drafts", "notes/drafts", True, True),
        ("drafts", "notes/drafts", False, True),
        ("drafts/", "notes/drafts", False, False),  # trailing slash: folders only
        ("drafts/", "notes/drafts", True, True),
        ("notes/private/*", "notes/private/a.md", False, True),  # a slash: from the workspace root
        ("notes/private/*", "old/notes/private/a.md", False, False),
        ("/scratch", "scratch", True, True),
        ("/scratch", "x/scratch", True, False),
        ("MEMORY.md", "memory/MEMORY.md.bak", False, False),
        ("notes/**/secret.md", "notes/a/b/secret.md", False, True),  # ** spans folders
        ("**/tmp", "x/y/tmp", True, True),
        ("doc/*.md", "doc/sub/a.md", False, False),  # * never crosses a /
        ("\\#not-a-comment.md", "#not-a-comment.md", False, True),
    ],
)
def test_exclude_patterns_follow_gitignore(pattern, path, is_directory, excluded):
    assert workspace.Excludes((pattern,)).match(path, is_directory=is_directory) is excluded


def test_a_negation_re_includes_and_the_last_matching_rule_wins():
    excludes = workspace.Excludes(("*.md", "!keep.md", "notes/keep.md"))
    assert excludes.match("a.md", is_directory=False)
    assert not excludes.match("keep.md", is_directory=False)
    assert excludes.match("notes/keep.md", is_directory=False)


def test_the_workspaces_gitignore_files_are_read_each_relative_to_its_folder(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")
    write(root, ".gitignore", "# build output\nout/\n*.csv\n")
    write(root, "out/report.md", "generated\n")
    write(root, "data/table.csv", "a,b\n")
    write(root, "notes/.gitignore", "scratch.md\n!important.csv\n")
    write(root, "notes/scratch.md", "scratch\n")
    write(root, "notes/important.csv", "x,y\n")
    write(root, "scratch.md", "only notes/.gitignore names scratch.md, and only in notes/\n")
    write(root, ".memoryhubignore", "!data/table.csv\n")  # .memoryhubignore overrides .gitignore

    outcome = hub("push", root, "-v")
    pushed = set(server_files(hub.member.agent))
    without_gitignore = hub("push", root, "--no-gitignore", "--keep-deleted")

    assert outcome.code == 0, outcome.err
    assert {"scratch.md", "notes/important.csv", "data/table.csv"} <= pushed
    assert not {"out/report.md", "notes/scratch.md"} & pushed
    assert "notes/scratch.md  (excluded)" in outcome.err
    assert without_gitignore.code == 0 and "2 uploaded" in without_gitignore.out


def test_watch_ignores_changes_inside_excluded_folders():
    excludes = workspace.Excludes(("drafts/", "*.tmp.md"))
    assert workspace.is_ignored("drafts/idea.md", excludes)
    assert workspace.is_ignored("drafts", excludes)
    assert workspace.is_ignored("notes/a.tmp.md", excludes)
    assert not workspace.is_ignored("notes/a.md", excludes)


def test_the_client_accepts_exactly_the_extensions_the_server_indexes():
    assert workspace.WORKSPACE_EXTENSIONS == server_paths.WORKSPACE_EXTENSIONS
    assert workspace.SESSION_EXTENSION == server_paths.SESSION_EXTENSION


def test_a_workspace_larger_than_one_sync_is_sent_in_several_requests(hub, tmp_path):
    root = tmp_path / "ws"
    for day in range(1, 8):
        write(root, f"memory/2026-01-0{day}.md", f"# Day {day}\n\nNote number {day}.\n")
    limits = ("--max-sync-files", "3", "--batch-files", "2")

    first = hub("push", root, *limits)
    (root / "memory/2026-01-02.md").unlink()
    (root / "memory/2026-01-05.md").unlink()
    second = hub("push", root, *limits)

    assert first.code == 0 and "pushed 7 files: 7 uploaded" in first.out, first.err
    assert second.code == 0 and "0 uploaded, 5 unchanged, 2 deleted" in second.out, second.err
    assert sorted(server_files(hub.member.agent)) == [f"memory/2026-01-0{d}.md" for d in (1, 3, 4, 6, 7)]


def test_a_prefix_keeps_two_workspaces_apart(hub, tmp_path):
    write(tmp_path / "a", "notes.md", "workspace a\n")
    write(tmp_path / "b", "notes.md", "workspace b\n")

    assert hub("push", tmp_path / "a", "--prefix", "agent-a").code == 0
    assert hub("push", tmp_path / "b", "--prefix", "agent-b/").code == 0

    files = server_files(hub.member.agent)
    assert {path: f.content for path, f in files.items()} == {"agent-a/notes.md": "workspace a\n", "agent-b/notes.md": "workspace b\n"}


def test_a_prefix_keeps_each_files_source(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")

    assert hub("push", root, "--prefix", "bulk/").code == 0

    assert {path: f.source for path, f in server_files(hub.member.agent).items()} == {
        "bulk/MEMORY.md": "memory",
        "bulk/memory/2026-03-01.md": "memory",
        "bulk/sessions/chat.jsonl": "session",
        "bulk/notes/todo.txt": "workspace",
    }


def test_a_file_stored_under_the_wrong_source_is_corrected_without_uploading_it(hub, tmp_path):
    """What an older client left behind: a prefixed daily note stored as a workspace file."""
    root = make_workspace(tmp_path / "ws")
    note = (root / "memory/2026-03-01.md").read_text()
    file_ingest(agent=hub.member.agent, path="bulk/memory/2026-03-01.md", content=note)
    assert server_files(hub.member.agent)["bulk/memory/2026-03-01.md"].source == "workspace"

    outcome = hub("push", root, "--prefix", "bulk", "--json")

    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out)["uploaded"] == 3  # the note's content was not sent again
    memory_file = server_files(hub.member.agent)["bulk/memory/2026-03-01.md"]
    assert (memory_file.source, memory_file.state) == ("memory", MemoryFile.State.INDEXED)
    assert memory_file.chunks.exists()


@pytest.mark.parametrize(
    "path",
    ["MEMORY.md", "memory.md", "memory/2024-01-01.md", "memory/deep/note.md", "memory/notes.txt", "notes/memory/x.md",
     "sessions/chat.jsonl", "memory/chat.jsonl", "src/app.py", "README.md"],
)
def test_the_client_classifies_a_workspace_path_as_the_server_does(path):
    assert workspace.source_of(path) == server_paths.source_infer(path)


def test_keep_deleted_and_an_empty_directory_delete_nothing(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")
    assert hub("push", root).code == 0
    (root / "MEMORY.md").unlink()
    (tmp_path / "empty").mkdir()

    kept = hub("push", root, "--keep-deleted")
    empty = hub("push", tmp_path / "empty")

    assert kept.code == 0 and "0 deleted" in kept.out
    assert empty.code == 0 and "nothing was deleted" in empty.err
    assert "MEMORY.md" in server_files(hub.member.agent)


def test_a_push_never_touches_another_agents_files(hub, bob, tmp_path):
    make_workspace(tmp_path / "alice")
    write(tmp_path / "bob", "MEMORY.md", "bob's memory\n")
    assert hub("push", tmp_path / "alice").code == 0

    assert hub("push", tmp_path / "bob", token=bob.raw_token).code == 0

    assert len(server_files(hub.member.agent)) == 4
    assert set(server_files(bob.agent)) == {"MEMORY.md"}


def test_the_progress_bar_is_drawn_when_asked_for(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")

    with_bar = hub("push", root, "--progress", "--keep-deleted")
    write(root, "notes/todo.txt", "changed\n")
    without = hub("push", root)  # not a terminal: no bar

    assert "\ruploading [" in with_bar.err and "4/4 files" in with_bar.err
    assert "\r" not in without.err


def test_a_webhook_secret_signs_the_sync(hub, tmp_path):
    hub.member.agent.webhook_secret = "s3cret"
    hub.member.agent.save(update_fields=["webhook_secret"])
    root = make_workspace(tmp_path / "ws")

    unsigned = hub("push", root)
    signed = hub("push", root, "--webhook-secret", "s3cret")

    assert unsigned.code == 1 and "401 invalid_signature" in unsigned.err
    assert signed.code == 0, signed.err


# --- Errors: exit codes and messages, never a traceback -----------------------------------------


def test_a_bad_token_exits_1_with_the_servers_message(hub, tmp_path):
    root = make_workspace(tmp_path / "ws")

    outcome = hub("push", root, token="mh_" + "x" * 43)

    assert outcome.code == 1
    assert outcome.err.startswith("memoryhub-client: POST sync: 401 ")
    assert "Traceback" not in outcome.err
    assert not MemoryFile.objects.exists()


def test_a_read_only_token_cannot_push(hub, make_member, tmp_path):
    reader = make_member("reader", scopes=["read"])

    outcome = hub("push", make_workspace(tmp_path / "ws"), token=reader.raw_token)

    assert outcome.code == 1 and "403 insufficient_scope" in outcome.err


def test_an_unreachable_server_exits_1(run_client, tmp_path):
    outcome = run_client("push", make_workspace(tmp_path / "ws"), url="http://127.0.0.1:9", token="mh_x")

    assert outcome.code == 1
    assert "cannot reach http://127.0.0.1:9" in outcome.err


def test_usage_and_configuration_errors_exit_2(run_client, tmp_path):
    no_token = run_client("push", tmp_path, url="http://127.0.0.1:9")
    no_directory = run_client("push", tmp_path / "missing", url="http://127.0.0.1:9", token="mh_x")
    bad_url = run_client("push", tmp_path, url="ftp://example.org", token="mh_x")
    bad_flag = run_client("push", tmp_path, "--batch-files", "0")

    assert (no_token.code, no_directory.code, bad_url.code, bad_flag.code) == (2, 2, 2, 2)
    assert "no agent token: pass --token or set MEMORYHUB_TOKEN" in no_token.err
    assert "not a directory" in no_directory.err
    assert "http://host:port" in bad_url.err
    assert "must be at least 1" in bad_flag.err


def test_url_and_token_come_from_the_environment(hub, run_client, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORYHUB_URL", hub.url + "/api/v1/")
    monkeypatch.setenv("MEMORYHUB_TOKEN", hub.member.raw_token)

    outcome = run_client("push", make_workspace(tmp_path / "ws"))

    assert outcome.code == 0, outcome.err
    assert len(server_files(hub.member.agent)) == 4


def test_python_dash_m_and_the_console_script_run_the_client(hub, tmp_path):
    entry_points = importlib.metadata.entry_points(group="console_scripts", name="memoryhub-client")
    assert [ep.value for ep in entry_points] == ["memoryhub_client.cli:main"]

    process = subprocess.run(
        [sys.executable, "-m", "memoryhub_client", "push", str(make_workspace(tmp_path / "ws")), "--url", hub.url],
        env={**os.environ, "MEMORYHUB_TOKEN": "mh_wrong"}, capture_output=True, text=True, timeout=60,
    )

    assert process.returncode == 1
    assert "401" in process.stderr and "Traceback" not in process.stderr


def test_a_workspace_inside_a_hidden_folder_is_pushed(hub, tmp_path):
    """Agents keep their workspace in places like ~/.openclaw/workspace: only hidden parts *inside* it are skipped."""
    root = make_workspace(tmp_path / ".openclaw" / "workspace")

    outcome = hub("push", root)

    assert outcome.code == 0 and "pushed 4 files: 4 uploaded" in outcome.out, outcome.err
