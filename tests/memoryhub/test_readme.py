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


# Documents that live beside the checkout, not in it: a clone does not have them.
OUTSIDE_REFERENCE = re.compile(r"\.\./shared|DESIGN\.md|STYLE\.md|(?i:\bseed \d{3}\b|\bthe seeds\b|\bseeds')")
# The one allowed kind: the benchmark's default data folder, where the README names the data's origin.
BENCHMARK_DEFAULT = "../shared/data/"
BENCHMARK_FILES = {"README.md", "docs/search.md", "docs/benchmarks.md", "benchmarks/management/commands/bench_search.py"}
SKIPPED_DIRECTORIES = {".git", ".venv", "node_modules", "test-artifacts", ".pgdata", "__pycache__", "staticfiles"}
TEXT_SUFFIXES = {".py", ".md", ".html", ".toml", ".yml", ".yaml", ".ts", ".mjs", ".json", ".txt", ".example", ""}


def repository_text_files():
    for path in sorted(BASE_DIR.rglob("*")):
        relative = path.relative_to(BASE_DIR)
        if set(relative.parts) & SKIPPED_DIRECTORIES or any(p.endswith(".egg-info") for p in relative.parts):
            continue
        if path.is_file() and path.suffix in TEXT_SUFFIXES and path != Path(__file__):
            yield relative, path


def test_nothing_refers_to_files_outside_the_repository():
    found = []
    for relative, path in repository_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            match = OUTSIDE_REFERENCE.search(line)
            if not match:
                continue
            if str(relative) in BENCHMARK_FILES and BENCHMARK_DEFAULT in line and "DESIGN" not in line:
                continue
            found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "references to files a clone does not have:\n" + "\n".join(found)


def test_the_readme_names_where_the_benchmark_data_comes_from():
    benchmarks = section("Benchmarks")
    assert BENCHMARK_DEFAULT in benchmarks and "--data FILE" in benchmarks
    for origin in ("snap-research/LoCoMo", "Yale-LILY/QMSum", "etri/QMSum_SummaryEvidence"):
        assert origin in benchmarks, origin


def test_the_readme_fits_on_a_few_screens_and_its_links_lead_somewhere():
    assert len(README.splitlines()) <= 200, "the README is a front page; details go to docs/"
    documents = {"README.md": README, **{f"docs/{p.name}": p.read_text() for p in (BASE_DIR / "docs").glob("*.md")}}
    broken = []
    for name, text in documents.items():
        folder = (BASE_DIR / name).parent
        for target in re.findall(r"\]\(([^)#\s]+\.(?:md|png))(?:#[^)]*)?\)", text):
            if not target.startswith("http") and not (folder / target).exists():
                broken.append(f"{name} → {target}")
    assert not broken, broken
