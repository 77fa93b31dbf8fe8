"""Bad configuration must stop the process at start-up with a message naming the variable."""

import json
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
        ("MEMORYHUB_EMBEDDING_REVISION", "v2; DROP"),
        ("MEMORYHUB_EMBEDDING_CHECK_INTERVAL", "-1"),
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


def _connected_settings(**env) -> dict:
    """plan_cache_mode and search_path as a process started with ``env`` sees them on each alias."""
    code = (
        "import django, json; django.setup(); from django.db import connections; out = {}\n"
        "for alias in connections:\n"
        "    with connections[alias].cursor() as cursor:\n"
        "        cursor.execute('SELECT current_setting(%s), current_setting(%s)', ['plan_cache_mode', 'search_path'])\n"
        "        out[alias] = list(cursor.fetchone())\n"
        "    connections[alias].close()\n"
        "print(json.dumps(out))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, capture_output=True, text=True, timeout=60,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
def test_the_services_connections_plan_each_run_of_a_prepared_statement_for_its_values():
    """plan_cache_mode = force_custom_plan on every connection of the service (why: memoryhub/settings.py),
    given at connection start: the embedded server's, a DATABASE_URL's with start-up options of its own
    (kept), a replica's, pooled or not; MEMORYHUB_DB_FORCE_CUSTOM_PLANS=0 leaves the server's setting."""
    from django.conf import settings
    from django.db import connection

    if settings.DATABASE_URL:
        pytest.skip("connects to the embedded server by URL")
    params = connection.get_connection_params()
    url = f"postgresql://{params['user']}@/{params['dbname']}?host={params['host']}&port={params['port']}&options=-c%20search_path%3Dpublic"
    forced = ["force_custom_plan", "public"]
    assert _connected_settings(DATABASE_URL=url, DATABASE_REPLICA_URLS=url, MEMORYHUB_DB_POOL_SIZE="2") == {
        "default": forced, "replica_1": forced,
    }
    assert _connected_settings(DATABASE_URL=url, DATABASE_REPLICA_URLS=url, MEMORYHUB_DB_POOL_SIZE="0") == {
        "default": forced, "replica_1": forced,
    }
    embedded = _connected_settings(DATABASE_URL="", DATABASE_REPLICA_URLS="")
    assert embedded["default"][0] == "force_custom_plan"
    assert _connected_settings(DATABASE_URL=url, DATABASE_REPLICA_URLS="", MEMORYHUB_DB_FORCE_CUSTOM_PLANS="0") == {
        "default": ["auto", "public"],
    }


def test_the_model_check_runs_on_its_interval_and_not_at_all_when_it_is_0():
    code = (
        "import django, json; django.setup(); from django.conf import settings; "
        "entry = settings.CELERY_BEAT_SCHEDULE.get('indexing-model-check'); "
        "print(json.dumps(entry and [entry['task'], entry['schedule']]))"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], cwd=BASE_DIR, capture_output=True, text=True, timeout=60,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", **env},
        )
        for env in ({}, {"MEMORYHUB_EMBEDDING_CHECK_INTERVAL": "600"}, {"MEMORYHUB_EMBEDDING_CHECK_INTERVAL": "0"})
    ]
    assert [json.loads(run.stdout.strip().splitlines()[-1]) for run in runs] == [
        ["indexing.tasks.model_check_task", 3600.0], ["indexing.tasks.model_check_task", 600.0], None
    ], [run.stderr for run in runs]
