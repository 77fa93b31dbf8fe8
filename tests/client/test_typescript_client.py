"""The TypeScript client (clients/typescript) against a live server: its own `npm test` (node's test
runner) and its README example, run with tokens of agents this test creates.

Where node or npm is missing the test is skipped with that reason; ``MEMORYHUB_REQUIRE_NODE_TESTS=1``
(set by .ci/run) turns the skip into a failure.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agents.services import agent_token_create

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "typescript"
NPM_TIMEOUT_SECONDS = 300


def npm_or_skip() -> str:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm and node:
        return npm
    reason = "node and npm are needed for the TypeScript client's tests (install Node.js 18 or newer)"
    if os.environ.get("MEMORYHUB_REQUIRE_NODE_TESTS") == "1":
        pytest.fail(f"{reason}; MEMORYHUB_REQUIRE_NODE_TESTS=1 makes that a failure")
    pytest.skip(reason)


def npm(npm_path: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [npm_path, *args, "--no-audit", "--no-fund"] if args[0] == "ci" else [npm_path, *args],
        cwd=CLIENT_DIR, env=env or os.environ.copy(), capture_output=True, text=True, timeout=NPM_TIMEOUT_SECONDS,
    )


@pytest.fixture(scope="module")
def built_client():
    """node_modules from the lock file (once per checkout), then the test and build scripts run."""
    npm_path = npm_or_skip()
    lock = CLIENT_DIR / "package-lock.json"
    installed = CLIENT_DIR / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        outcome = npm(npm_path, "ci")
        assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return npm_path


@pytest.fixture
def client_environment(live_server, alice, bob):
    _, read_token = agent_token_create(agent=alice.agent, scopes=["read"], label="read-only")
    return {
        **os.environ,
        "MEMORYHUB_URL": live_server.url,
        "MEMORYHUB_TOKEN": alice.raw_token,
        "MEMORYHUB_READ_TOKEN": read_token,
        "MEMORYHUB_OTHER_TOKEN": bob.raw_token,
    }


@pytest.mark.django_db(transaction=True)
def test_the_typescript_clients_own_tests_pass_against_a_live_server(built_client, client_environment):
    outcome = npm(built_client, "test", env=client_environment)

    output = outcome.stdout + outcome.stderr
    assert outcome.returncode == 0, output
    passed = int(re.search(r"^# pass (\d+)$", output, re.M).group(1))
    skipped = int(re.search(r"^# skipped (\d+)$", output, re.M).group(1))
    assert re.search(r"^# fail 0$", output, re.M), output
    assert skipped == 0 and passed >= 12, f"the live tests did not all run ({passed} passed, {skipped} skipped):\n{output}"


@pytest.mark.django_db(transaction=True)
def test_the_readme_example_runs_and_finds_its_note(built_client, client_environment):
    outcome = subprocess.run(
        [shutil.which("node"), "examples/quickstart.mjs"],
        cwd=CLIENT_DIR, env=client_environment, capture_output=True, text=True, timeout=120,
    )

    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    cited = re.search(r"^memory/2026-03-01\.md#L(\d+)-L(\d+) \(\d\.\d\d\): ", outcome.stdout, re.M)
    assert cited and int(cited.group(1)) <= 3 <= int(cited.group(2)), outcome.stdout
    assert "We chose Postgres for the billing service." in outcome.stdout
    assert re.search(r"^\[1\] memory/2026-03-01\.md#L\d+-L\d+ \(score", outcome.stdout, re.M), "the tool answer cites the note"
