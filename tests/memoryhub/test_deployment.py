"""docker-compose.yml cannot run here (no Docker engine), so it is checked statically against the
settings module, the Dockerfile and .env.example, which must list every setting the code reads."""

import re
from pathlib import Path

import yaml

BASE_DIR = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ["memoryhub", "agents", "indexing", "search", "tests"]
# Read by the code but not MemoryHub settings: set by tools, not by operators.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE", "CI", "HOME", "PATH", "HF_HUB_OFFLINE", "TIKTOKEN_CACHE_DIR"}
# Read by the sync client (memoryhub/client/) on the agent's host, never by the server: .env.example is
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
    assert services["web"]["build"] == "."
    assert "celery -A memoryhub worker" in services["worker"]["command"]
    assert "celery -A memoryhub beat" in services["beat"]["command"]


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
