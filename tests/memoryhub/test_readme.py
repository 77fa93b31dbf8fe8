"""The README as a newcomer reads it: its commands work as written from the checkout, and "Run it" says
what search does out of the box and how to get vectors."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]
README = (BASE_DIR / "README.md").read_text()


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, flags=re.M | re.S)
    assert match, f"the README has no '## {title}' section"
    return match.group(1)


def code_lines() -> list[str]:
    """The README's indented command lines (its code blocks are indented by four spaces)."""
    return [line.strip() for line in README.splitlines() if line.startswith("    ") and line.strip()]


def test_every_sync_client_command_names_the_script_where_make_run_installs_it():
    commands = [line for line in code_lines() if re.search(r"(^|\s)\S*memoryhub-client\s", line)]
    assert commands, "the README shows no memoryhub-client command"
    for command in commands:
        assert command.startswith(".venv/bin/memoryhub-client "), command


@pytest.mark.skipif(
    Path(sys.prefix).resolve() != (BASE_DIR / ".venv").resolve(),
    reason="the suite is not running in the checkout's .venv (make test runs it there)",
)
def test_the_readmes_client_command_runs_from_the_checkout():
    result = subprocess.run(
        [".venv/bin/memoryhub-client", "--help"], cwd=BASE_DIR, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "push" in result.stdout and "watch" in result.stdout and "search" in result.stdout


def test_run_it_says_search_starts_keyword_only_and_how_to_get_vectors():
    run_it = section("Run it")
    assert "keyword-only" in run_it
    assert "OPENAI_API_KEY" in run_it
    assert "make install-local" in run_it and "MEMORYHUB_EMBEDDING_PROVIDER=local" in run_it


def test_run_it_names_the_port_setting_and_the_demo_token_rotation():
    run_it = section("Run it")
    assert "PORT=" in run_it
    assert "revokes the one the previous start" in run_it
