"""Deleting an agent in the background (agents/deletion.py): the request only marks the agent, which is
gone for its users from then on; a task on the background queue deletes its rows in bounded batches, each
its own transaction, and a run stopped midway is finished by the next, or by the stuck-work sweep's."""

import threading
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents import deletion
from agents.deletion import agent_delete_here, agent_purge
from agents.models import Agent, AuditEvent
from agents.services import agent_delete, memory_grant_give
from indexing.maintenance import index_maintenance
from indexing.models import Chunk, EmbeddingBatch, EmbeddingCache, IndexJob, MemoryFile
from memoryhub.observability import background_queue_name
from memoryhub.usage.models import SearchEvent, UsageHour
from search.models import KeywordAgentStats, KeywordTermStats, MemoryLexeme, MemoryWord, MemoryWordsState
from tests.agents.test_agent_delete import deletion_tasks  # noqa: F401 (a fixture)
from tests.agents.test_team_admin import login
from tests.indexing.test_chunk_partitions import _chunks, _file

pytestmark = pytest.mark.django_db

FILES, CHUNKS_PER_FILE = 6, 5
# Keeps the agent's id on purpose (who did what to which agent outlives it): the only exception.
AUDIT_TABLE = AuditEvent._meta.db_table


def fill(member, other) -> None:
    """Rows in every table that references an agent: files and chunks, jobs, an embedding batch, its
    embedding cache, keyword stats, the memory's words for keyword expansion, usage rows, a token (the
    member's own) and grants both ways with ``other``."""
    agent = member.agent
    for number in range(FILES):
        _chunks(agent, _file(agent, number), CHUNKS_PER_FILE)
    jobs = [IndexJob.objects.create(agent=agent, trigger="upload", state="done") for _ in range(5)]
    MemoryFile.objects.filter(agent=agent).update(job=jobs[0])
    EmbeddingBatch.objects.create(agent=agent, job=jobs[1], provider="openai", model="m", dimensions=8, state="in_flight")
    EmbeddingCache.objects.bulk_create(
        EmbeddingCache(provider="fake", model="m", dimensions=3, agent_scope=agent.pk, text_hash=f"{i:064}", embedding=[1, 0, 0])
        for i in range(6)
    )
    KeywordAgentStats.objects.create(agent=agent, chunks=30, avg_tokens=3.0, refreshed_at=timezone.now())
    KeywordTermStats.objects.bulk_create(KeywordTermStats(agent=agent, lexeme=f"word{i}", df=1) for i in range(9))
    MemoryWord.objects.bulk_create(
        MemoryWord(agent=agent, word=f"word{i}", embedding_identity="fake:m:3", embedding=[1, 0, 0]) for i in range(8)
    )
    MemoryWordsState.objects.create(agent=agent, last_chunk_id=1, words=8, lexemes=4, chunks=1)
    MemoryLexeme.objects.bulk_create(MemoryLexeme(agent=agent, lexeme=f"word{i}", chunks=1) for i in range(4))
    SearchEvent.objects.bulk_create(SearchEvent(agent=agent, mode="hybrid", results=1, took_ms=1.0) for _ in range(7))
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    UsageHour.objects.bulk_create(UsageHour(agent=agent, hour=now - timedelta(hours=i)) for i in range(3))
    memory_grant_give(reader=agent, owner=other.agent)
    memory_grant_give(reader=other.agent, owner=agent)


def referencing_columns() -> list[tuple[str, str]]:
    """Every (table, column) of the database that names an agent: a foreign key to the agent table, or a
    column called agent_id (or agent_scope: the embedding cache's); read from the catalog, so a table
    added later is checked too."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT con.conrelid::regclass::text, a.attname FROM pg_constraint con
               JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = ANY(con.conkey)
               JOIN pg_class c ON c.oid = con.conrelid
               WHERE con.contype = 'f' AND con.confrelid = 'agents_agent'::regclass AND NOT c.relispartition
               UNION
               SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
               WHERE a.attname IN ('agent_id', 'agent_scope') AND NOT a.attisdropped AND c.relkind IN ('r', 'p')
                 AND NOT c.relispartition AND c.relnamespace = current_schema()::regnamespace"""
        )
        return sorted(cursor.fetchall())


def rows_naming(agent_id: int) -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table, column in referencing_columns():
            cursor.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}" = %s', [agent_id])
            counts[f"{table}.{column}"] = cursor.fetchone()[0]
    return counts


def test_after_the_admin_delete_the_token_is_refused_at_once_and_the_rows_wait_for_the_task(
    team_cast, deletion_tasks, django_capture_on_commit_callbacks
):
    red, writer = team_cast.red_handbook, team_cast.red_writer
    fill(red, writer)
    assert red.client.get("/api/v1/status").status_code == 200
    before = rows_naming(red.agent.pk)

    with django_capture_on_commit_callbacks(execute=True):
        response = login("red-admin").post(f"/admin/agents/agent/{red.agent.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302

    refused = red.client.get("/api/v1/status")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_token"
    assert red.client.post("/api/v1/search", {"query": "note"}, format="json").status_code == 401
    assert red.client.put("/api/v1/files/memory/new.md", {"content": "x"}, format="json").status_code == 401
    assert rows_naming(red.agent.pk) == {**before, f"{AUDIT_TABLE}.agent_id": before[f"{AUDIT_TABLE}.agent_id"] + 1}
    assert all(before.values())  # nothing deleted in the request, and there was something of every kind
    assert deletion_tasks == [(red.agent.pk, background_queue_name())]
    assert AuditEvent.objects.filter(agent_id=red.agent.pk, action=AuditEvent.Action.AGENT_DELETED).count() == 1


def test_the_task_deletes_every_row_naming_the_agent_in_batches_each_its_own_transaction(alice, bob, settings, monkeypatch):
    settings.MEMORYHUB_AGENT_DELETE_BATCH_ROWS = 4
    fill(alice, bob)
    fill(bob, alice)  # grants both ways twice: alice's and bob's
    bobs = rows_naming(bob.agent.pk)
    agent_delete(agent=alice.agent, actor=None)
    batches = []
    count = deletion.PurgeOutcome.count
    monkeypatch.setattr(deletion.PurgeOutcome, "count", lambda self, table, rows: (batches.append((table, rows)), count(self, table, rows)))

    with CaptureQueriesContext(connection) as captured:
        outcome = agent_purge(agent_id=alice.agent.pk)

    assert outcome.finished and not Agent.objects.filter(pk=alice.agent.pk).exists()
    assert outcome.deleted["indexing_chunk"] == FILES * CHUNKS_PER_FILE and outcome.deleted["indexing_memoryfile"] == FILES
    assert all(rows <= 4 for _, rows in batches)
    chunk_batches = [rows for table, rows in batches if table == "indexing_chunk"]
    assert len(chunk_batches) == -(-FILES * CHUNKS_PER_FILE // 4)  # 30 chunks: 8 batches
    assert [table for table, _ in batches].index("indexing_chunk") == 0  # chunks first
    # Each batch is one transaction (a savepoint inside the test's): every DELETE runs in a block of its
    # own batch, and there are as many blocks with a DELETE as batches, plus the agent row's.
    blocks, depth, current = [], 0, []
    for sql in (q["sql"] for q in captured.captured_queries):
        if sql.startswith("SAVEPOINT"):
            depth += 1
            current = [] if depth == 1 else current
        elif sql.startswith(("RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")):
            depth -= 1
            if depth == 0:
                blocks.append(current)
        elif sql.startswith("DELETE"):
            assert depth >= 1, sql
            current.append(sql)
    assert len([block for block in blocks if block]) == len(batches) + 1

    left = {column for column, count in rows_naming(alice.agent.pk).items() if count}
    assert left == {f"{AUDIT_TABLE}.agent_id"}  # its events, "agent deleted" among them
    # Bob's rows are all there, but for the grants between the two, which went with alice.
    assert rows_naming(bob.agent.pk) == {
        **bobs, "agents_memorygrant.owner_id": bobs["agents_memorygrant.owner_id"] - 1,
        "agents_memorygrant.reader_id": bobs["agents_memorygrant.reader_id"] - 1,
    }


def test_a_run_interrupted_after_some_batches_is_finished_by_the_next(alice, bob, settings, monkeypatch):
    settings.MEMORYHUB_AGENT_DELETE_BATCH_ROWS = 4
    fill(alice, bob)
    agent_delete(agent=alice.agent, actor=None)
    count = deletion.PurgeOutcome.count
    done = []

    def killed_in_the_third(self, table, rows):
        count(self, table, rows)
        done.append(table)
        if len(done) == 3:
            raise SystemExit("worker killed")  # inside the third batch: two committed, the third rolled back

    monkeypatch.setattr(deletion.PurgeOutcome, "count", killed_in_the_third)
    with pytest.raises(SystemExit):
        agent_purge(agent_id=alice.agent.pk)
    assert Chunk.objects.filter(agent=alice.agent).count() == FILES * CHUNKS_PER_FILE - 8
    assert Agent.objects.filter(pk=alice.agent.pk, deletion_requested_at__isnull=False).exists()
    assert alice.client.get("/api/v1/status").status_code == 401

    monkeypatch.setattr(deletion.PurgeOutcome, "count", count)
    assert agent_purge(agent_id=alice.agent.pk).finished
    assert not any(count for column, count in rows_naming(alice.agent.pk).items() if not column.startswith(AUDIT_TABLE))
    assert bob.client.get("/api/v1/status").status_code == 200 and rows_naming(bob.agent.pk)["agents_agenttoken.agent_id"] == 1


def test_a_run_past_its_time_budget_stops_between_batches_and_publishes_the_next(alice, bob, settings, deletion_tasks):
    from agents.tasks import agent_delete_task

    settings.MEMORYHUB_AGENT_DELETE_BATCH_ROWS = 4
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 0  # a budget of nothing: one check, then stop
    fill(alice, bob)
    agent_delete(agent=alice.agent, actor=None)
    result = agent_delete_task(alice.agent.pk)
    assert not result["finished"] and deletion_tasks == [(alice.agent.pk, background_queue_name())]
    assert Agent.objects.filter(pk=alice.agent.pk).exists()

    settings.CELERY_TASK_SOFT_TIME_LIMIT = 600
    assert agent_delete_task(alice.agent.pk)["finished"]


def test_a_second_run_while_another_session_deletes_the_agent_returns_at_once(alice, bob):
    from django.db import connections

    fill(alice, bob)
    agent_delete(agent=alice.agent, actor=None)
    other = connections.create_connection("default")  # another worker's session
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [deletion.ADVISORY_LOCK_CLASS, alice.agent.pk])
        outcome = agent_purge(agent_id=alice.agent.pk)
        assert outcome.skipped == "another run is deleting this agent" and not outcome.deleted
    finally:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
        other.close()
    assert agent_purge(agent_id=alice.agent.pk).finished


def test_the_sweep_publishes_again_a_deletion_whose_task_was_lost(alice, bob, mallory, deletion_tasks, settings):
    fill(alice, bob)
    agent_delete(agent=alice.agent, actor=None)  # its on-commit publish never runs here: lost
    agent_delete(agent=mallory.agent, actor=None)
    now = timezone.now()
    Agent.objects.filter(pk=alice.agent.pk).update(deletion_requested_at=now - timedelta(seconds=settings.MEMORYHUB_INDEX_STUCK_AFTER + 1))

    outcome = index_maintenance(now=now)
    assert outcome.deletions == [alice.agent.pk]  # mallory's was asked for just now: its task is on its way
    assert deletion_tasks == [(alice.agent.pk, background_queue_name())]
    assert agent_purge(agent_id=alice.agent.pk).finished
    assert index_maintenance(now=now).deletions == []


def test_nothing_of_an_agent_being_deleted_is_indexed_again(alice, bob, settings):
    """A job queued before the mark stops when it runs; the sweeps queue none of its files again."""
    from indexing.services import AGENT_BEING_DELETED, index_job_run

    files = [_file(alice.agent, number) for number in range(3)]
    job = IndexJob.objects.create(agent=alice.agent, trigger="upload")
    MemoryFile.objects.filter(pk__in=[f.pk for f in files]).update(job=job, state="pending")
    MemoryFile.objects.filter(pk=files[2].pk).update(state="failed", failures=1)
    agent_delete(agent=alice.agent, actor=None)

    stopped = index_job_run(job_id=job.pk)
    assert stopped.state == "failed" and stopped.error == AGENT_BEING_DELETED
    assert not Chunk.objects.filter(agent=alice.agent).exists()
    later = timezone.now() + timedelta(days=1)
    index_maintenance(now=later)
    assert list(IndexJob.objects.filter(agent=alice.agent)) == [job]


def test_a_write_that_authenticated_before_the_mark_is_refused_by_the_agent_lock(alice):
    from indexing.writes import file_ingest
    from memoryhub.domain import NotFound

    agent = Agent.objects.get(pk=alice.agent.pk)  # as the request loaded it, before the mark
    agent_delete(agent=alice.agent, actor=None)
    with pytest.raises(NotFound) as refused:
        file_ingest(agent=agent, path="memory/late.md", content="late")
    assert refused.value.code == "agent_deleted" and not MemoryFile.objects.filter(agent=agent).exists()


def test_in_the_admin_it_is_listed_as_being_deleted_read_only_and_its_slug_is_not_reused(team_cast):
    red = team_cast.red_handbook.agent
    agent_delete(agent=red, actor=None)
    admin = login("red-admin")

    listed = admin.get("/admin/agents/agent/").content.decode()
    assert "being deleted" in listed and "red-handbook" in listed
    page = admin.get(f"/admin/agents/agent/{red.pk}/change/")
    assert page.status_code == 200 and "can no longer be changed" in page.content.decode()
    assert admin.post(f"/admin/agents/agent/{red.pk}/change/", {"slug": "red-renamed", "team": team_cast.red.pk}).status_code == 403
    assert admin.post(f"/admin/agents/agent/{red.pk}/tokens/create/", {"label": "x", "scopes": ["read"]}).status_code == 403
    assert Agent.objects.get(pk=red.pk).slug == "red-handbook"

    again = admin.post("/admin/agents/agent/add/", {"slug": "red-handbook", "team": team_cast.red.pk, "overrides": "{}"})
    assert again.status_code == 200 and "is being deleted in the background" in again.content.decode()
    assert agent_purge(agent_id=red.pk).finished
    created = admin.post("/admin/agents/agent/add/", {"slug": "red-handbook", "team": team_cast.red.pk, "overrides": "{}"})
    assert created.status_code == 302 and Agent.objects.get(slug="red-handbook").pk != red.pk


def test_commands_naming_an_agent_being_deleted_refuse_it(alice, bob, tmp_path):
    _chunks(alice.agent, _file(alice.agent, 1), 2)
    agent_delete(agent=alice.agent, actor=None)
    export = tmp_path / "bob.jsonl"
    call_command("export_agent", "bob", "--output", str(export), stderr=StringIO())
    events = AuditEvent.objects.count()
    for args in (
        ["export_agent", "alice"], ["grant_memory", "bob", "alice"], ["grant_memory", "alice", "bob"],
        ["revoke_memory_grant", "bob", "alice"], ["create_agent", "alice", "--existing-ok"],
        ["import_agent", "alice", str(export)],
    ):
        with pytest.raises(CommandError, match="'alice' is being deleted"):
            call_command(*args, stdout=StringIO(), stderr=StringIO())
    assert AuditEvent.objects.count() == events and Agent.objects.get(slug="alice").is_being_deleted


@pytest.mark.django_db(transaction=True)
def test_a_command_deletes_its_agent_while_a_server_still_records_the_agents_searches(alice, bob, settings):
    """The benchmarks remove the agents they made while their web server may still write a search's usage
    row. Django's one-transaction ``agent.delete()`` then failed on that row's foreign key (a flaky
    benchmark test); ``agent_delete_here`` goes on until the agent's row is gone."""
    from django.db import connections

    from memoryhub.usage.services import search_record

    settings.MEMORYHUB_USAGE_FLUSH_SECONDS = 0  # each search's row written at once, in its own statement
    fill(alice, bob)
    agent_id = alice.agent.pk
    stop, recorded = threading.Event(), []

    def server() -> None:
        try:
            while not stop.is_set():
                search_record(agent_id=agent_id, mode="hybrid", results=1, took_ms=1.0)
                recorded.append(1)
                time.sleep(0.01)
        finally:
            connections["default"].close()

    writer = threading.Thread(target=server)
    writer.start()
    try:
        while len(recorded) < 20:  # the server writes before the deletion starts, and while it runs
            time.sleep(0.01)
        outcome = agent_delete_here(agent_id=agent_id)
        during = len(recorded)
    finally:
        stop.set()
        writer.join(timeout=30)

    assert outcome.finished and not Agent.objects.filter(pk=agent_id).exists()
    assert during > 20  # the server went on writing
    assert not any(count for column, count in rows_naming(agent_id).items() if not column.startswith(AUDIT_TABLE))
    assert bob.client.get("/api/v1/status").status_code == 200
