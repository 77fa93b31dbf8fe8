"""Bad configuration must stop the process at start-up with a message naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]


def start_django(**env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "variable, value",
    [
        ("MEMORYHUB_EMBEDDING_DIMENSIONS", "abc"),
        ("MEMORYHUB_EMBEDDING_PROVIDER", "bogus"),
        ("MEMORYHUB_CHUNK_TOKENS", "-5"),
        ("DEBUG", "maybe"),
        ("PORT", "99999"),
        ("DATABASE_URL", "mysql://localhost/memoryhub"),
        ("DATABASE_REPLICA_URLS", "postgres://r1/memoryhub,mysql://r2/memoryhub"),
        ("DATABASE_REPLICA_MAX_LAG_SECONDS", "-1"),
    ],
)
def test_a_bad_value_fails_at_start_up_naming_the_variable(variable, value):
    result = start_django(**{variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr


def test_production_mode_requires_a_secret_key():
    result = start_django(DEBUG="0", SECRET_KEY="")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_secrets_can_come_from_a_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", "SECRET_KEY_FILE": str(secret)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip() == "from-a-file", result.stderr


def test_each_replica_url_is_a_database_alias_searches_may_read_and_the_test_runner_mirrors():
    code = (
        "import django, json; django.setup(); from django.conf import settings; "
        "r = settings.DATABASES['replica_2']; "
        "print(json.dumps([settings.MEMORYHUB_DB_REPLICA_ALIASES, r['HOST'], r['PORT'], r['NAME'], r['USER'], "
        "r['TEST']['MIRROR'], r['OPTIONS']['pool']['max_size'], r['OPTIONS']['pool']['timeout'], "
        "r['OPTIONS']['connect_timeout'], r['OPTIONS']['sslmode'], settings.DATABASE_ROUTERS]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env={
            **os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", "MEMORYHUB_DB_POOL_SIZE": "4",
            "DATABASE_REPLICA_URLS": " postgres://reader@replica-a:5433/memoryhub , postgresql://reader:pw@replica-b:5434/memoryhub?sslmode=require",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    import json

    assert json.loads(result.stdout) == [
        # A search waits for a replica's pooled connection no longer than DATABASE_REPLICA_CONNECT_TIMEOUT.
        ["replica_1", "replica_2"], "replica-b", "5434", "memoryhub", "reader", "default", 4, 2, 2, "require",
        ["memoryhub.replicas.ReadReplicaRouter"],
    ]


def test_good_settings_start():
    result = start_django()
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_the_wsgi_module_loads_the_views_and_freezes_start_up_objects():
    import gc
    import importlib
    import sys

    sys.modules.pop("memoryhub.wsgi", None)
    gc.unfreeze()
    try:
        wsgi = importlib.import_module("memoryhub.wsgi")
        assert callable(wsgi.application)
        assert "search.apis" in sys.modules  # the views were imported before the freeze
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
