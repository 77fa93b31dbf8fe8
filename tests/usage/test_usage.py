"""Usage over time: searches and indexing jobs rolled up into hourly counters per agent, and the admin
page drawing them, at a fixed number of queries whatever the number of agents."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.services import agent_create, agent_delete
from indexing.embeddings import ProviderPermanentError
from indexing.models import IndexJob
from memoryhub.usage import services as usage_services
from memoryhub.usage.models import SearchEvent, UsageHour
from memoryhub.usage.services import hour_floor, usage_rollup
from tests.agents.test_agent_delete import deletion_tasks  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _tasks(eager_tasks, fake_embeddings):
    return fake_embeddings


def _put(member, path, content, capture):
    with capture(execute=True):
        response = member.client.generic("PUT", f"/api/v1/files/{path}", content.encode(), content_type="text/markdown")
    assert response.status_code == 201, response.content


def test_searches_writes_embeddings_and_failures_are_rolled_up_per_agent_and_hour(
    alice, bob, fake_embeddings, django_capture_on_commit_callbacks
):
    _put(alice, "memory/a.md", "alpha words about kettles\n", django_capture_on_commit_callbacks)
    _put(alice, "memory/b.md", "alpha words about kettles\n", django_capture_on_commit_callbacks)  # reuses a.md's vector
    fake_embeddings.fail_next(ProviderPermanentError("bad key"), times=1)
    _put(bob, "memory/c.md", "bob's only note\n", django_capture_on_commit_callbacks)
    for _ in range(3):
        assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    assert bob.client.post("/api/v1/search", {"query": "note"}, format="json").status_code == 200

    assert usage_rollup() >= 2
    hour = hour_floor(timezone.now())
    mine = UsageHour.objects.get(agent=alice.agent, hour=hour)
    assert (mine.searches, mine.writes, mine.chunks_embedded, mine.cache_hits, mine.failures) == (3, 2, 1, 1, 0)
    assert (mine.files, mine.bytes) == (2, 2 * len("alpha words about kettles\n"))
    theirs = UsageHour.objects.get(agent=bob.agent, hour=hour)
    assert (theirs.searches, theirs.writes, theirs.failures) == (1, 1, 1)

    # A second run recomputes rather than adds.
    usage_rollup()
    assert UsageHour.objects.get(agent=alice.agent, hour=hour).searches == 3


def test_search_events_keep_no_query_text_and_old_ones_are_pruned(alice):
    assert alice.client.post("/api/v1/search", {"query": "secret-words-xyzzy"}, format="json").status_code == 200
    event = SearchEvent.objects.get(agent=alice.agent)
    assert "xyzzy" not in str(vars(event))
    assert event.took_ms > 0 and event.mode in ("hybrid", "keyword", "vector")
    SearchEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - timedelta(days=3))
    usage_rollup()
    assert not SearchEvent.objects.exists()


def _usage_page(client) -> tuple[int, bytes]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/admin/usage/")
    assert response.status_code == 200
    return len(queries), response.content


def test_the_usage_page_draws_charts_at_a_fixed_number_of_queries(client, alice):
    operator = User.objects.create_superuser("operator", "op@example.com", "a-long-operator-password")
    client.force_login(operator)
    now = timezone.now()
    UsageHour.objects.create(agent=alice.agent, hour=hour_floor(now), searches=7, writes=2, files=3, bytes=2048)
    SearchEvent.objects.create(agent=alice.agent, mode="hybrid", results=4, took_ms=123.4)
    few, content = _usage_page(client)
    assert content.count(b'<svg class="mh-chart"') == 14  # 7 series, by hour and by day, drawn on the server
    assert b"<title>" + hour_floor(now).strftime("%d %b %H:00").encode() + b": 7</title>" in content  # this hour's bar
    assert b"123.4 ms" in content and b"alice" in content
    assert b"src=\"http" not in content  # nothing loaded from elsewhere

    for n in range(30):
        agent = agent_create(slug=f"agent-{n}")
        for hours in range(0, 24 * 20, 7):
            UsageHour.objects.create(agent=agent, hour=hour_floor(now) - timedelta(hours=hours), searches=n + 1)
        SearchEvent.objects.create(agent=agent, mode="keyword", results=1, took_ms=n)
    many, _ = _usage_page(client)
    assert many == few

    response = client.get(f"/admin/usage/?agent={alice.agent.pk}")
    assert response.status_code == 200 and b"Usage of alice" in response.content
    assert client.get("/admin/usage/?agent=999999").status_code == 404
    assert client.get("/admin/usage/?agent=abc").status_code == 404


def test_an_agent_being_deleted_is_neither_rolled_up_nor_on_the_usage_page(client, alice, bob, deletion_tasks):
    """Gone for its users from the mark on: the roll-up writes it no hour (its deletion would have them to
    delete again), and the usage page neither counts it, lists it nor shows its page."""
    operator = User.objects.create_superuser("operator", "op@example.com", "a-long-operator-password")
    client.force_login(operator)
    hour = hour_floor(timezone.now())
    for member, took in ((alice, 987.6), (bob, 12.3)):
        SearchEvent.objects.create(agent=member.agent, mode="hybrid", results=1, took_ms=took)
        IndexJob.objects.create(agent=member.agent, trigger="upload", state="failed")
    UsageHour.objects.create(agent=alice.agent, hour=hour - timedelta(hours=5), searches=40)
    assert b"987.6 ms" in _usage_page(client)[1]

    agent_delete(agent=alice.agent, actor=None)
    usage_rollup()
    assert list(UsageHour.objects.filter(hour=hour).values_list("agent__slug", "searches", "failures")) == [("bob", 1, 1)]
    _, content = _usage_page(client)
    assert b"987.6 ms" not in content and b"12.3 ms" in content
    assert b"<title>" + (hour - timedelta(hours=5)).strftime("%d %b %H:00").encode() + b": 0</title>" in content
    assert client.get(f"/admin/usage/?agent={alice.agent.pk}").status_code == 404
    assert client.get(f"/admin/usage/?agent={bob.agent.pk}").status_code == 200


def test_the_usage_page_is_for_staff_only(client, alice):
    response = client.get("/admin/usage/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_a_search_still_answers_when_its_usage_row_cannot_be_written(alice, monkeypatch):
    from django.db import DatabaseError

    def broken(**kwargs):
        raise DatabaseError("disk full")

    monkeypatch.setattr(SearchEvent.objects, "create", broken)
    assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    monkeypatch.undo()
    assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200  # the connection is fine
    assert SearchEvent.objects.count() == 1


def _rows_seen_by_another_connection(agent_id: int) -> list[tuple]:
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT agent_id, mode, results, took_ms, created_at FROM usage_searchevent WHERE agent_id = %s",
                [agent_id],
            )
            return cursor.fetchall()
    finally:
        other.close()


@pytest.fixture
def flusher():
    """The usage rows' flusher thread ended after the test, whatever the test left in the buffer."""
    yield usage_services
    usage_services.search_records_close()


@pytest.mark.django_db(transaction=True)
def test_a_search_outside_a_transaction_buffers_its_usage_row_off_the_answers_path(transactional_db, alice, flusher, settings):
    # The API runs in autocommit: the row waits in the process, and is written with the others of the
    # last MEMORYHUB_USAGE_FLUSH_SECONDS in one statement (without waiting for the WAL flush).
    settings.MEMORYHUB_USAGE_FLUSH_SECONDS = 60  # the background thread does not write it during this test
    response = alice.client.post("/api/v1/search", {"query": "kettles", "mode": "keyword"}, format="json")
    assert response.status_code == 200
    assert _rows_seen_by_another_connection(alice.agent.pk) == []  # the answer did not wait for it
    assert flusher.search_records_flush() == 1
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # set for the usage rows' own transaction only
    rows = _rows_seen_by_another_connection(alice.agent.pk)
    assert len(rows) == 1
    agent_id, mode, results, took_ms, created_at = rows[0]
    assert (agent_id, mode, results) == (alice.agent.pk, "keyword", len(response.json()["results"]))
    assert took_ms == response.json()["took_ms"] and created_at <= timezone.now()
    assert flusher.search_records_flush() == 0  # written once


@pytest.mark.django_db(transaction=True)
def test_the_background_flush_writes_every_buffered_search_and_the_roll_up_counts_them(transactional_db, alice, bob, flusher, settings):
    settings.MEMORYHUB_USAGE_FLUSH_SECONDS = 0.01
    for member, count in ((alice, 3), (bob, 2)):
        for _ in range(count):
            assert member.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    thread = flusher._buffer.thread
    if thread is not None:
        thread.join(timeout=30)  # it ends once a flush has left nothing to write
    assert flusher._buffer.thread is None and not flusher._buffer.rows
    assert len(_rows_seen_by_another_connection(alice.agent.pk)) == 3
    assert len(_rows_seen_by_another_connection(bob.agent.pk)) == 2
    usage_rollup()
    hour = hour_floor(timezone.now())
    assert UsageHour.objects.get(agent=alice.agent, hour=hour).searches == 3
    assert UsageHour.objects.get(agent=bob.agent, hour=hour).searches == 2


@pytest.mark.django_db(transaction=True)
def test_with_no_flush_interval_a_search_writes_its_row_before_it_answers(transactional_db, alice, flusher, settings):
    settings.MEMORYHUB_USAGE_FLUSH_SECONDS = 0
    response = alice.client.post("/api/v1/search", {"query": "kettles", "mode": "keyword"}, format="json")
    assert response.status_code == 200
    assert len(_rows_seen_by_another_connection(alice.agent.pk)) == 1
    assert flusher._buffer.thread is None and flusher.search_records_flush() == 0
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"


@pytest.mark.django_db(transaction=True)
def test_a_deleted_agents_buffered_searches_do_not_keep_the_others_from_being_written(transactional_db, alice, bob, flusher, settings):
    settings.MEMORYHUB_USAGE_FLUSH_SECONDS = 60
    for member in (alice, bob, alice):
        assert member.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    bob.agent.delete()
    assert flusher.search_records_flush() == 3
    assert len(_rows_seen_by_another_connection(alice.agent.pk)) == 2
    assert SearchEvent.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_buffer_is_bounded_and_says_what_it_dropped(transactional_db, alice, flusher, settings, monkeypatch, caplog):
    settings.MEMORYHUB_USAGE_FLUSH_SECONDS = 60
    monkeypatch.setattr(flusher, "BUFFER_MAX_ROWS", 2)
    for _ in range(4):
        assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    assert len(flusher._buffer.rows) == 2
    assert flusher.search_records_flush() == 2
    assert "2 searches were not recorded (the buffer was full)" in caplog.text
    assert SearchEvent.objects.count() == 2
    assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    assert flusher.search_records_flush() == 1  # room again


def test_inside_a_transaction_the_row_is_written_in_it_at_once(alice, flusher, settings):
    settings.MEMORYHUB_USAGE_FLUSH_SECONDS = 60
    assert connection.in_atomic_block  # the test's transaction, as a caller's
    assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    assert SearchEvent.objects.filter(agent=alice.agent).count() == 1
    assert not flusher._buffer.rows


@pytest.mark.django_db(transaction=True)
def test_a_search_outside_a_transaction_answers_when_its_usage_row_cannot_be_written(transactional_db, alice, flusher, caplog):
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE usage_searchevent ADD CONSTRAINT no_rows_now CHECK (false) NOT VALID")
    try:
        assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
        assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
        flusher.search_records_close()  # written (or refused) now, under the constraint: logged, not raised
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE usage_searchevent DROP CONSTRAINT no_rows_now")
    assert "could not be recorded" in caplog.text
    assert not SearchEvent.objects.exists()
    assert alice.client.post("/api/v1/search", {"query": "kettles"}, format="json").status_code == 200
    flusher.search_records_close()
    assert SearchEvent.objects.count() == 1  # the flushes' connection is fine
