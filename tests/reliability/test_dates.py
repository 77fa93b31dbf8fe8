"""Client dates are kept within 1900..2200 UTC in every field that takes one, and the database holds
that range too: a date that Python cannot read back never reaches a row (it used to break the agent's
file list, memory_get, sync, its jobs and the admin for every operator)."""

from datetime import datetime, timezone

import pytest
from django.db import IntegrityError, connection, transaction

from indexing.models import MemoryFile

BAD_DATES = [
    "9999-12-31T23:59:59-14:00",  # year 10000 in UTC
    "0001-01-01T00:00:00+14:00",  # year 0 in UTC
    "0000-01-01T00:00:00Z",
    "2024-01-01T00:00:00+25:00",
    "2024-01-01T00:00:00+14:30",
    "2024-13-01T00:00:00Z",
    "1850-06-01T00:00:00Z",
    "2300-01-01T00:00:00Z",
    "99999999999999999999",
    1e20,
    -1e20,
    7258118400,  # 2200-01-01T00:00:00Z, the first second out of range (2199-12-31 is fine)
    True,
    [],
    {"year": 2024},
    "yesterday",
]
GOOD_DATES = [
    ("2024-05-01T10:00:00+14:00", datetime(2024, 4, 30, 20, 0, tzinfo=timezone.utc)),
    ("2024-05-01T10:00:00-12:00", datetime(2024, 5, 1, 22, 0, tzinfo=timezone.utc)),
    ("2024-05-01T10:00:00", datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)),
    (1714557600, datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)),
    ("1714557600.5", datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=timezone.utc)),
    (-2208988800, datetime(1900, 1, 1, tzinfo=timezone.utc)),
]


def assert_refused(response, field: str):
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert field in error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("mtime", BAD_DATES, ids=repr)
def test_a_put_with_an_impossible_mtime_is_refused_and_stores_nothing(alice, mtime):
    body = {"content": "hello", "mtime": mtime}
    response = alice.client.put("/api/v1/files/notes/a.md", body, format="json")
    assert_refused(response, "mtime")
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("mtime", [d for d in BAD_DATES if isinstance(d, str)], ids=repr)
def test_a_raw_put_with_an_impossible_mtime_in_the_query_is_refused(alice, mtime):
    response = alice.client.generic(
        "PUT", "/api/v1/files/notes/a.md", b"hello", content_type="text/markdown", QUERY_STRING=f"mtime={mtime}"
    )
    assert_refused(response, "mtime")
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("mtime", BAD_DATES, ids=repr)
def test_a_sync_with_an_impossible_mtime_is_refused_whole(alice, mtime):
    body = {"files": [{"path": "notes/ok.md", "content": "fine"}, {"path": "notes/a.md", "content": "x", "mtime": mtime}]}
    response = alice.client.post("/api/v1/sync", body, format="json")
    assert_refused(response, "mtime")
    assert not MemoryFile.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["modified_since", "modified_until"])
@pytest.mark.parametrize("value", ["0000-01-01T00:00:00Z", "2024-01-01T00:00:00+25:00", "9999-12-31T23:59:59-14:00", 1e20])
def test_search_date_filters_refuse_impossible_dates(alice, field, value):
    response = alice.client.post("/api/v1/search", {"query": "anything", field: value}, format="json")
    assert_refused(response, field)


@pytest.mark.django_db
@pytest.mark.parametrize("mtime,expected", GOOD_DATES, ids=repr)
def test_dates_in_range_are_stored_in_utc_and_read_back(alice, mtime, expected):
    response = alice.client.put("/api/v1/files/notes/a.md", {"content": "hello", "mtime": mtime}, format="json")
    assert response.status_code == 201, response.content
    assert MemoryFile.objects.get().client_mtime == expected
    listed = alice.client.get("/api/v1/files")
    assert listed.status_code == 200
    assert datetime.fromisoformat(listed.json()["results"][0]["mtime"]) == expected


@pytest.mark.django_db
def test_the_database_refuses_an_out_of_range_mtime_whatever_writes_it(alice):
    alice.client.put("/api/v1/files/notes/a.md", "hello", content_type="text/markdown")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {MemoryFile._meta.db_table} SET client_mtime = '9999-12-31T23:59:59-14:00'::timestamptz"
        )


@pytest.mark.django_db
def test_the_migration_repairs_rows_stored_before_validation(alice, admin_client):
    """A row written by the old code (constraint dropped for the test, restored by its rollback) is
    repaired by the migration's step, after which the agent's and the operators' pages answer again."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("indexing.migrations.0003_repair_out_of_range_dates")
    alice.client.put("/api/v1/files/notes/a.md", "hello", content_type="text/markdown")
    alice.client.put("/api/v1/files/notes/b.md", {"content": "kept", "mtime": 1714557600}, format="json")
    table = MemoryFile._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE waits for no deferred FK check
        cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT memoryfile_client_mtime_range")
        cursor.execute(
            f"UPDATE {table} SET client_mtime = '9999-12-31T23:59:59-14:00'::timestamptz WHERE path = 'notes/a.md'"
        )

    with connection.schema_editor() as schema_editor:
        migration.clear_out_of_range_mtimes(apps, schema_editor)

    assert MemoryFile.objects.get(path="notes/a.md").client_mtime is None
    assert MemoryFile.objects.get(path="notes/b.md").client_mtime == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    assert alice.client.get("/api/v1/files").status_code == 200
    assert alice.client.get("/api/v1/files/notes/a.md").status_code == 200
    assert admin_client.get("/admin/").status_code == 200
    assert admin_client.get("/admin/indexing/memoryfile/").status_code == 200


def test_client_datetime_refuses_every_bad_date_and_converts_the_good_ones_to_utc():
    from memoryhub.fields import client_datetime

    for value in BAD_DATES:
        with pytest.raises(ValueError):
            client_datetime(value)
    assert [client_datetime(value) for value, _ in GOOD_DATES] == [expected for _, expected in GOOD_DATES]
