"""The sync client against a live server (pytest-django ``live_server``, a real HTTP server in a thread).

Tasks run eagerly inside the server's request thread, on commit, with the counting fake embedding
provider, so a push returns with its files indexed and tests can count what was embedded.
"""

from dataclasses import dataclass
from pathlib import Path

import pytest

from memoryhub_client.cli import main


@pytest.fixture(autouse=True)
def eager_tasks(eager_tasks):  # tests/conftest.py's, for every test here
    return eager_tasks


@pytest.fixture(autouse=True)
def fake_embeddings(fake_embeddings):  # tests/conftest.py's, for every test here
    return fake_embeddings


@pytest.fixture(autouse=True)
def no_client_environment(monkeypatch):
    """The developer's own MEMORYHUB_URL / MEMORYHUB_TOKEN must not leak into the tests."""
    for name in ("MEMORYHUB_URL", "MEMORYHUB_TOKEN", "MEMORYHUB_WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture
def run_client(capsys):
    """run_client("push", dir, url=..., token=...) → Outcome(code, stdout, stderr), in this process."""

    def run(*args, url=None, token=None) -> Outcome:
        argv = [str(a) for a in args]
        if url:
            argv += ["--url", url]
        if token:
            argv += ["--token", token]
        capsys.readouterr()
        code = main(argv)
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


@pytest.fixture
def hub(live_server, alice, run_client):
    """The client's commands bound to alice's token on the live server."""

    class Hub:
        url = live_server.url
        member = alice

        def __call__(self, *args, token=None) -> Outcome:
            return run_client(*args, url=live_server.url, token=token or alice.raw_token)

    return Hub()


def write(root: Path, relative: str, content: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path
