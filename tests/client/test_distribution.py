"""clients/python is a distribution of its own: installed into a bare virtualenv (no Django, no server)
it gives a working ``memoryhub-client``; its README example runs against a live server.

The install is offline: pip builds the package with the setuptools wheel that ``make install`` keeps
in .venv/wheelhouse and takes pathspec from there too (``--no-index --find-links``).
"""

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.client.conftest import write

BASE_DIR = Path(__file__).resolve().parents[2]
CLIENT_DIR = BASE_DIR / "clients" / "python"
WHEELHOUSE = BASE_DIR / ".venv" / "wheelhouse"
EXAMPLE = CLIENT_DIR / "examples" / "quickstart.py"


def run(*command, env=None, timeout=300) -> subprocess.CompletedProcess:
    # Away from the checkout, whose memoryhub/ folder `python -c` would otherwise find in its working directory.
    return subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=timeout, env=env, cwd=CLIENT_DIR / "examples",
    )


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """A fresh virtualenv with only pip, and ``pip install ./clients/python`` in it."""
    if not any(WHEELHOUSE.glob("setuptools-*.whl")) or not any(WHEELHOUSE.glob("pathspec-*.whl")):
        pytest.fail(f"{WHEELHOUSE} lacks the setuptools and pathspec wheels: run `make install`")
    root = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(root, with_pip=True, clear=True)
    python = root / "bin" / "python"
    installed = run(
        python, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--find-links", WHEELHOUSE, CLIENT_DIR,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return root


def test_the_bare_install_has_the_client_and_no_django(bare_venv):
    python = bare_venv / "bin" / "python"
    django = run(python, "-c", "import django")
    server = run(python, "-c", "import memoryhub")
    listed = run(python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check")
    help_text = run(bare_venv / "bin" / "memoryhub-client", "--help")

    assert django.returncode != 0 and "No module named 'django'" in django.stderr
    assert server.returncode != 0 and "No module named 'memoryhub'" in server.stderr
    packages = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert packages <= {"memoryhub-client", "pathspec", "pip", "setuptools"}, packages
    assert help_text.returncode == 0 and "{push,watch,pull,search}" in help_text.stdout


@pytest.mark.django_db(transaction=True)
def test_the_bare_install_pushes_searches_and_pulls_against_a_live_server(bare_venv, live_server, alice, tmp_path):
    command = bare_venv / "bin" / "memoryhub-client"
    env = {**os.environ, "MEMORYHUB_URL": live_server.url, "MEMORYHUB_TOKEN": alice.raw_token}
    root = tmp_path / "ws"
    write(root, "MEMORY.md", "# Memory\n\nThe user prefers green tea in the afternoon.\n")
    write(root, ".gitignore", "drafts/\n")
    write(root, "drafts/idea.md", "not ready\n")

    pushed = run(command, "push", root, env=env)
    found = run(command, "search", "green tea", env=env)
    pulled = run(command, "pull", tmp_path / "back", env=env)
    watch = run(command, "watch", root, env=env)

    assert pushed.returncode == 0 and "pushed 1 files: 1 uploaded" in pushed.stdout, pushed.stderr
    assert found.returncode == 0 and found.stdout.startswith("MEMORY.md#L"), found.stderr
    assert pulled.returncode == 0 and (tmp_path / "back" / "MEMORY.md").exists(), pulled.stderr
    assert not (tmp_path / "back" / "drafts").exists()
    assert watch.returncode == 2 and "pip install 'memoryhub-client[watch]'" in watch.stderr


@pytest.mark.django_db(transaction=True)
def test_the_readme_example_runs_and_cites_its_note(live_server, alice):
    env = {**os.environ, "MEMORYHUB_URL": live_server.url, "MEMORYHUB_TOKEN": alice.raw_token}

    outcome = run(sys.executable, EXAMPLE, env=env, timeout=120)

    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    cited = re.search(r"^memory/2026-03-01\.md#L(\d+)-L(\d+) \(\d\.\d\d\): ", outcome.stdout, re.M)
    assert cited and int(cited.group(1)) <= 4 <= int(cited.group(2)), outcome.stdout
    assert "We chose Postgres for the billing service." in outcome.stdout
    assert re.search(r"memory/2026-03-01\.md#L\d+-L\d+", outcome.stdout.split("Dana owns the migration.")[0])


def test_no_module_of_the_client_imports_the_server_or_django():
    server = r"^\s*(from|import) (django|rest_framework|celery|memoryhub|agents|indexing|search|integrations|benchmarks)\b"
    offenders = [
        str(path.relative_to(BASE_DIR)) for path in (CLIENT_DIR / "memoryhub_client").rglob("*.py")
        if re.search(server, path.read_text(encoding="utf-8"), flags=re.M)
    ]
    assert not offenders, offenders


def test_both_clients_carry_one_version():
    import json
    import tomllib

    import memoryhub_client

    python_version = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]["version"]
    typescript_version = json.loads((BASE_DIR / "clients" / "typescript" / "package.json").read_text())["version"]

    assert python_version == memoryhub_client.__version__ == typescript_version
    # Versioned with the API: the major version is the API version the clients speak (/api/v1).
    from django.conf import settings

    assert python_version.split(".")[0] == settings.SPECTACULAR_SETTINGS["VERSION"] == "1"


def test_the_readme_shows_the_example_as_it_is():
    readme = (CLIENT_DIR / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    example = EXAMPLE.read_text(encoding="utf-8").split('"""\n', 1)[1].lstrip("\n")

    assert shown == example
