"""Backup and restore with pg_dump / pg_restore (docs/operations.md): back up a database, drop it,
restore it, and the same searches give the same results.

The database dropped is a throwaway copy of the test database, never the test session's own.
"""

import json
import os
import subprocess
import sys
import uuid

import pytest
from django.db import connection
from pgserver._commands import POSTGRES_BIN_PATH

from indexing.models import MemoryFile
from tests.indexing.test_worker import BASE_DIR, test_database_url

FILES = {
    "memory/2026-03-01.md": "# Trip\n\nWe fly to Lisbon on the 3rd. The hotel is near the river.\n",
    "memory/people.md": "# People\n\nDana prefers tea; Omar is allergic to peanuts.\n\n## Work\n\nOmar leads the billing team.\n",
}
QUERIES = ["Lisbon flight", "peanut allergy", "who leads billing"]

# Run in a fresh process against DATABASE_URL: alice's answers to QUERIES as JSON.
SEARCH_SCRIPT = """
import json, sys, django
django.setup()
from agents.models import Agent
from search.services import memory_search
agent = Agent.objects.get(slug="alice")
answers = []
for query in json.loads(sys.argv[1]):
    response = memory_search(agent=agent, query=query)
    answers.append([[r.path, r.start_line, r.end_line, round(r.score, 6), r.snippet] for r in response.results])
print(json.dumps(answers))
"""


def _database_url(name: str) -> str:
    own = connection.settings_dict["NAME"]
    url = test_database_url()
    return url.replace(f"/{own}?", f"/{name}?", 1) if "?" in url else url.rsplit("/", 1)[0] + f"/{name}"


def _tool(name: str, *args: str) -> None:
    subprocess.run([str(POSTGRES_BIN_PATH / name), *args], check=True, timeout=120, capture_output=True)


def _searches(database_url: str) -> list:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
           "MEMORYHUB_EMBEDDING_PROVIDER": "fake", "MEMORYHUB_EMBEDDING_MODEL": "fake-hash",
           "MEMORYHUB_EMBEDDING_DIMENSIONS": "64"}
    result = subprocess.run([sys.executable, "-c", SEARCH_SCRIPT, json.dumps(QUERIES)], cwd=BASE_DIR, env=env,
                            check=True, timeout=120, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _execute(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


@pytest.mark.django_db(transaction=True)
def test_a_backup_restores_into_a_dropped_database_with_the_same_search_results(alice, eager_tasks, fake_embeddings, tmp_path):
    for path, content in FILES.items():
        response = alice.client.generic("PUT", f"/api/v1/files/{path}", content.encode(), content_type="text/markdown")
        assert response.status_code == 201, response.content
    assert set(MemoryFile.objects.filter(agent=alice.agent).values_list("state", flat=True)) == {"indexed"}

    # A copy of the test database plays the production one: it is the one backed up and dropped.
    name = f"test_memoryhub_backup_{uuid.uuid4().hex[:8]}"
    copy = tmp_path / "copy.dump"
    backup = tmp_path / "backup.dump"
    _tool("pg_dump", "--format=custom", f"--file={copy}", f"--dbname={test_database_url()}")
    _execute(f'CREATE DATABASE "{name}"')
    try:
        _tool("pg_restore", "--no-owner", f"--dbname={_database_url(name)}", str(copy))
        before = _searches(_database_url(name))
        assert all(before), before  # every query finds something, so the comparison means something

        _tool("pg_dump", "--format=custom", f"--file={backup}", f"--dbname={_database_url(name)}")
        _execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        _execute(f'CREATE DATABASE "{name}"')
        with pytest.raises(subprocess.CalledProcessError):
            _searches(_database_url(name))  # an empty database: nothing to search
        _tool("pg_restore", "--no-owner", f"--dbname={_database_url(name)}", str(backup))

        assert _searches(_database_url(name)) == before
    finally:
        _execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
