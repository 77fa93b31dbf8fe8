"""``memoryhub-client watch``: a real process with watchdog, against the live server, stopped by Ctrl-C."""

import os
import signal
import subprocess
import sys
import time

import pytest

from indexing.models import MemoryFile
from tests.client.conftest import write

pytest.importorskip("watchdog", reason="watch needs the `client` extra (watchdog), which `.[dev]` installs")


def wait_for(condition, *, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def stop_or_explain(process, *, timeout=20.0) -> tuple[str, str]:
    """The stopped process's output; a process still running after ``timeout`` seconds fails the test
    with the stack of each of its threads (faulthandler on SIGABRT) instead of a bare timeout."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        out, err = process.communicate(timeout=timeout)
        pytest.fail(f"the watch did not stop within {timeout:g} s of Ctrl-C; its threads:\n{err}\nstdout:\n{out}")


def server_contents(agent) -> dict[str, str]:
    return dict(MemoryFile.objects.filter(agent=agent).values_list("path", "content"))


def test_watch_pushes_at_start_then_once_per_burst_of_changes_until_ctrl_c(hub, tmp_path):
    root = tmp_path / "ws"
    write(root, "MEMORY.md", "# Memory\n\nfirst version\n")
    process = subprocess.Popen(
        # -X faulthandler: if the process does not stop, SIGABRT makes it print every thread's stack
        [sys.executable, "-X", "faulthandler", "-m", "memoryhub_client", "watch", str(root), "--url", hub.url,
         "--debounce", "2"],
        env={**os.environ, "MEMORYHUB_TOKEN": hub.member.raw_token, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        agent = hub.member.agent
        assert wait_for(lambda: "MEMORY.md" in server_contents(agent)), "the first push never arrived"

        # One burst: an edit and a new note within the debounce window → one push with both. The
        # window is wide (2 s) so a test process stalled by a loaded machine cannot split the burst.
        write(root, "MEMORY.md", "# Memory\n\nsecond version\n")
        write(root, "memory/2026-03-02.md", "# 2026-03-02\n\nplanted tomatoes\n")
        assert wait_for(lambda: server_contents(agent) == {
            "MEMORY.md": "# Memory\n\nsecond version\n", "memory/2026-03-02.md": "# 2026-03-02\n\nplanted tomatoes\n",
        }), f"the change was not pushed: {server_contents(agent)}"

        # Changes under vendor or hidden folders do not wake the watcher up.
        write(root, "node_modules/pkg/index.js", "module.exports = 2;\n")
        write(root, ".git/HEAD", "ref: refs/heads/main\n")
        time.sleep(3)  # longer than the debounce: a push would have started by now
    finally:
        process.send_signal(signal.SIGINT)
        out, err = stop_or_explain(process)

    assert process.returncode == 0, err
    assert "watching" in err and "stopped" in err and "Traceback" not in err
    pushes = [line for line in out.splitlines() if "] pushed " in line]
    assert len(pushes) == 2, out
    assert "pushed 1 files: 1 uploaded" in pushes[0]
    assert "pushed 2 files: 2 uploaded" in pushes[1] and "0 unchanged" in pushes[1]


def test_watch_stops_at_once_on_a_bad_token(hub, run_client, tmp_path):
    write(tmp_path, "MEMORY.md", "memory\n")

    outcome = run_client("watch", tmp_path, url=hub.url, token="mh_" + "y" * 43)

    assert outcome.code == 1 and "401" in outcome.err
