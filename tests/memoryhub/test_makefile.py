"""The Makefile's install steps, read from `make -n` (a dry run: nothing is installed): `make run`
installs only what the service needs and says so, `make test` installs everything the suite needs."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands `make <target>` would run on a machine without a virtualenv yet."""
    # Not the environment of a `make test` that runs this suite: a nested make would print its level.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={tmp_path / 'venv'}"],
        cwd=BASE_DIR, capture_output=True, text=True, check=True, env=env,
    )
    return result.stdout.splitlines()


def pip_installs(commands: list[str]) -> list[str]:
    """The installs of the service (`pip install -e '.[extras]'`)."""
    return [c for c in commands if re.search(r"-m pip .*install -e '\.\[", c)]


def client_installs(commands: list[str]) -> list[str]:
    """The installs of the Python client, a distribution of its own (clients/python)."""
    return [c for c in commands if re.search(r"-m pip .*install -e '\./clients/python\[", c)]


def extras(command: str) -> set[str]:
    return set(re.search(r"'\.\[([^\]]*)\]'", command).group(1).split(","))


def test_make_run_installs_the_runtime_only_and_shows_progress(tmp_path):
    commands = dry_run("run", tmp_path)
    installs = pip_installs(commands)
    assert len(installs) == 1
    assert "dev" not in extras(installs[0])  # no playwright, schemathesis, hypothesis, numpy to run the service
    assert "--quiet" not in installs[0] and " -q" not in installs[0]
    announcement = commands.index(installs[0]) - 1
    assert "installing" in commands[announcement] and commands[announcement].startswith("echo")
    assert commands[-1].endswith("-m memoryhub.run")
    # .venv/bin/memoryhub-client (the README's command) comes from the client's own install, after the service's.
    [client] = client_installs(commands)
    assert commands.index(client) > commands.index(installs[0]) and "watch" in client


def test_make_test_installs_the_dev_extra_on_top_of_the_runtime(tmp_path):
    run_extras = extras(pip_installs(dry_run("run", tmp_path))[0])
    commands = dry_run("test", tmp_path)
    installs = pip_installs(commands)
    assert len(installs) == 1
    assert extras(installs[0]) >= run_extras | {"dev"}
    [client] = client_installs(commands)
    assert {"watch", "langchain", "llama-index"} <= set(re.search(r"python\[([^\]]*)\]", client).group(1).split(","))


def test_run_and_test_keep_separate_stamps(tmp_path):
    """A test install also satisfies `make run`; a run install alone does not satisfy `make test`."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch(mode=0o755)
    (venv / ".installed-run").touch()
    assert pip_installs(dry_run("run", tmp_path)) == []
    assert len(pip_installs(dry_run("test", tmp_path))) == 1


def test_the_local_embedder_is_installed_once_for_the_quality_benchmark(tmp_path):
    """`make bench-search` installs torch and the model the first time only (it reinstalled them on
    every run, and printed pip's output before a --json report)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch(mode=0o755)
    (venv / ".installed-run").touch()
    (venv / ".installed-test").touch()

    def torch_installs():
        return [c for c in dry_run("bench-search", tmp_path) if re.search(r"-m pip .*install torch", c)]

    assert len(torch_installs()) == 1
    (venv / ".installed-local").touch()
    assert torch_installs() == []
    assert pip_installs(dry_run("install-local", tmp_path)) == []


def test_the_quality_benchmark_does_not_echo_its_commands_before_a_json_report():
    """`make bench-search ARGS=--json > report.json` must hold the JSON alone: make echoed the migrate and
    bench_search command lines onto stdout before it."""
    makefile = (BASE_DIR / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(makefile) if line.startswith("bench-search:"))
    recipe = []
    for line in makefile[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line)
    assert recipe and all(line.startswith("\t@") for line in recipe)
