"""Deleting an agent in the admin: the delete page and "Delete selected agents" go through agent_delete
for the agent's team admins and superusers (the read-only file, job and batch admins do not stand in the
way), and the confirmation page shows bounded counts naming the agent instead of every row it holds. The
request marks the agent; its rows go in the background (tests/agents/test_agent_background_delete.py)."""

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent, AgentToken, AuditEvent, MemoryGrant, TeamMembership
from agents.services import memory_grant_give
from indexing import selectors
from indexing.models import Chunk, EmbeddingBatch, IndexJob, MemoryFile
from indexing.selectors import agent_cascades, agent_holdings
from tests.agents.test_team_admin import login
from tests.indexing.test_chunk_partitions import _chunks, _file

pytestmark = pytest.mark.django_db

CHUNKS_PER_FILE = 3
# Tables whose rows belong to an agent: every statement of the confirmation page on them names it.
HOLDINGS = re.compile(r'\b(indexing_chunk|indexing_memoryfile|indexing_indexjob|indexing_embeddingbatch|agents_agenttoken)\b')


@pytest.fixture
def deletion_tasks(monkeypatch):
    """The deletion tasks the requests' commits publish, as (agent id, queue), instead of the broker's."""
    from agents.tasks import agent_delete_task

    sent = []
    monkeypatch.setattr(agent_delete_task, "apply_async", lambda args, queue, retry: sent.append((args[0], queue)))
    return sent


def deleted_in_the_background(agent_ids, sent) -> None:
    """Each agent's deletion went to the background queue; run it as the worker would."""
    from agents.tasks import agent_delete_task
    from memoryhub.observability import background_queue_name

    assert sorted(sent) == sorted((pk, background_queue_name()) for pk in agent_ids)
    for pk in agent_ids:
        assert Agent.objects.filter(pk=pk, deletion_requested_at__isnull=False).exists()
        assert agent_delete_task(pk)["finished"]


@pytest.fixture
def superuser(db):
    User.objects.create_superuser("root", "root@example.com", "pw")
    return "root"


def fill(agent, files: int) -> None:
    """``files`` files of CHUNKS_PER_FILE chunks each, an index job and a batch in flight."""
    start = MemoryFile.objects.filter(agent=agent).count()
    for number in range(start, start + files):
        _chunks(agent, _file(agent, number), CHUNKS_PER_FILE)
    job = IndexJob.objects.create(agent=agent, trigger="upload", state="done")
    EmbeddingBatch.objects.create(agent=agent, job=job, provider="openai", model="m", dimensions=8, state="in_flight")


def chunk_rows(agent_id: int) -> int:
    """Straight from the chunk table (the ORM's rows and the table's agree only if nothing is left)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM indexing_chunk WHERE agent_id = %s", [agent_id])
        return cursor.fetchone()[0]


def assert_gone(agent_id: int, actor: str) -> None:
    assert not Agent.objects.filter(pk=agent_id).exists()
    for model in (MemoryFile, IndexJob, AgentToken, EmbeddingBatch):
        assert not model.objects.filter(agent_id=agent_id).exists(), model
    assert not MemoryGrant.objects.filter(reader_id=agent_id).exists()
    assert not MemoryGrant.objects.filter(owner_id=agent_id).exists()
    assert chunk_rows(agent_id) == 0
    event = AuditEvent.objects.get(agent_id=agent_id, action=AuditEvent.Action.AGENT_DELETED)
    assert event.actor == actor


@pytest.mark.parametrize("username", ["red-admin", "root"])
def test_an_agent_with_files_and_chunks_is_deleted_from_its_page(
    team_cast, superuser, username, deletion_tasks, django_capture_on_commit_callbacks
):
    red = team_cast.red_handbook.agent
    fill(red, 3)
    memory_grant_give(reader=team_cast.red_writer.agent, owner=red)
    fill(team_cast.red_writer.agent, 1)  # a neighbour's rows stay
    client = login(username)

    page = client.get(f"/admin/agents/agent/{red.pk}/delete/")
    html = page.content.decode()
    assert page.status_code == 200 and "Cannot delete" not in html, html[:2000]
    for shown in ("files: 3", "chunks: 9", "index jobs: 1", "tokens: 1", "grants to other agents to read its memory: 1",
                  "embedding batches in flight: 1", "Chunks: 9"):
        assert shown in html, shown
    assert "note 0" not in html  # no chunk is listed

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/agents/agent/{red.pk}/delete/", {"post": "yes"}, follow=True)
    assert response.redirect_chain[-1][1] == 302
    assert "red-handbook started" in response.content.decode() and "deleted successfully" not in response.content.decode()
    deleted_in_the_background([red.pk], deletion_tasks)
    assert_gone(red.pk, username)
    writer = team_cast.red_writer.agent
    assert MemoryFile.objects.filter(agent=writer).count() == 1 and chunk_rows(writer.pk) == CHUNKS_PER_FILE


@pytest.mark.parametrize("username", ["red-admin", "root"])
def test_delete_selected_deletes_agents_with_files_through_the_service(
    team_cast, superuser, username, deletion_tasks, django_capture_on_commit_callbacks
):
    agents = [team_cast.red_handbook.agent, team_cast.red_writer.agent]
    for agent in agents:
        fill(agent, 2)
    client = login(username)
    form = {"action": "delete_selected", "_selected_action": [a.pk for a in agents]}

    page = client.post("/admin/agents/agent/", form)
    html = page.content.decode()
    assert page.status_code == 200 and "Cannot delete" not in html, html[:2000]
    assert "Agents: 2" in html and "Chunks: 12" in html and html.count("files: 2") == 2

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/admin/agents/agent/", {**form, "post": "yes"}, follow=True)
    assert response.redirect_chain[-1][1] == 302
    assert "Deletion of 2 agents started" in response.content.decode()
    deleted_in_the_background([a.pk for a in agents], deletion_tasks)
    for agent in agents:
        assert_gone(agent.pk, username)
    assert chunk_rows(team_cast.blue_agent.agent.pk) == 0 and Agent.objects.filter(slug="blue-agent").exists()


def test_a_viewer_still_cannot_delete_and_another_teams_admin_finds_nothing(team_cast):
    red = team_cast.red_handbook.agent
    fill(red, 2)
    viewer = login("red-viewer")
    assert viewer.get(f"/admin/agents/agent/{red.pk}/delete/").status_code == 403
    assert viewer.post(f"/admin/agents/agent/{red.pk}/delete/", {"post": "yes"}).status_code == 403
    assert b"delete_selected" not in viewer.get("/admin/agents/agent/").content
    viewer.post("/admin/agents/agent/", {"action": "delete_selected", "_selected_action": [red.pk], "post": "yes"})

    blue_admin = login("blue-admin")
    assert blue_admin.get(f"/admin/agents/agent/{red.pk}/delete/").status_code == 404
    assert blue_admin.post(f"/admin/agents/agent/{red.pk}/delete/", {"post": "yes"}).status_code == 404
    blue_admin.post("/admin/agents/agent/", {"action": "delete_selected", "_selected_action": [red.pk], "post": "yes"})

    assert Agent.objects.filter(pk=red.pk).exists() and chunk_rows(red.pk) == 2 * CHUNKS_PER_FILE
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.AGENT_DELETED).exists()


def test_an_admin_of_one_team_viewing_another_cannot_delete_its_agents_in_a_selection(team_cast):
    """The selection holds agents of a team where the user is a viewer: the page says so, posting is a 403."""
    TeamMembership.objects.create(team=team_cast.red, user=team_cast.users["blue-admin"], role=TeamMembership.Role.VIEWER)
    red, blue = team_cast.red_handbook.agent, team_cast.blue_agent.agent
    client = login("blue-admin")
    form = {"action": "delete_selected", "_selected_action": [red.pk, blue.pk]}
    assert "Cannot delete" in client.post("/admin/agents/agent/", form).content.decode()
    assert client.post("/admin/agents/agent/", {**form, "post": "yes"}).status_code == 403
    assert Agent.objects.filter(pk__in=[red.pk, blue.pk]).count() == 2


def _page_queries(client, method, url, data=None) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url) if method == "GET" else client.post(url, data)
    assert response.status_code == 200 and "Cannot delete" not in response.content.decode()
    return [q["sql"] for q in captured.captured_queries]


def _assert_bounded_and_naming(statements: list[str], agent_ids: list[int]) -> None:
    """Every statement reading an agent's rows names the agent (the chunk table's partition is pruned) and
    stops at a LIMIT: none counts all the agent holds (as the agent list's columns do)."""
    reading = [sql for sql in statements if HOLDINGS.search(sql)]
    assert reading
    for sql in reading:
        assert "LIMIT" in sql and any(re.search(rf'_id" = {pk}\b', sql) for pk in agent_ids), sql


def test_the_delete_page_costs_the_same_queries_for_1_file_or_30(team_cast):
    red, writer = team_cast.red_handbook.agent, team_cast.red_writer.agent
    fill(red, 1)
    fill(writer, 30)
    client = login("red-admin")
    few = _page_queries(client, "GET", f"/admin/agents/agent/{red.pk}/delete/")
    many = _page_queries(client, "GET", f"/admin/agents/agent/{writer.pk}/delete/")
    assert len(many) == len(few), "\n".join(many)
    _assert_bounded_and_naming(many, [writer.pk])


def test_delete_selected_costs_the_same_queries_for_1_file_or_30_per_agent(team_cast):
    red, writer = team_cast.red_handbook.agent, team_cast.red_writer.agent
    fill(red, 1)
    fill(writer, 1)
    client = login("red-admin")
    form = {"action": "delete_selected", "_selected_action": [red.pk, writer.pk]}
    few = _page_queries(client, "POST", "/admin/agents/agent/", form)
    fill(red, 29)
    fill(writer, 29)
    many = _page_queries(client, "POST", "/admin/agents/agent/", form)
    assert len(many) == len(few), "\n".join(many)
    _assert_bounded_and_naming(many, [red.pk, writer.pk])


def test_counts_stop_at_the_cap(team_cast, monkeypatch):
    red = team_cast.red_handbook.agent
    fill(red, 2)
    counts, _ = agent_holdings(agent_id=red.pk, cap=4)
    assert dict(counts)["files"] == 2 and dict(counts)["chunks"] == 5  # 6 chunks: counting stops at 5
    monkeypatch.setattr(selectors, "AGENT_HOLDINGS_COUNT_CAP", 4)
    html = login("red-admin").get(f"/admin/agents/agent/{red.pk}/delete/").content.decode()
    assert "chunks: more than 4" in html and "Chunks: more than 4" in html and "files: 2" in html


def test_every_row_kind_going_with_an_agent_is_on_the_page():
    """The page names every model the agent's deletion cascades to, counted or not; and nothing cascades
    further from those (a second-level cascade would go unmentioned)."""
    cascades = agent_cascades()
    counted, uncounted = agent_holdings(agent_id=0)
    counted_models = {MemoryFile, Chunk, IndexJob, AgentToken, MemoryGrant, EmbeddingBatch}
    names = {str(rel.related_model._meta.verbose_name_plural) for rel in cascades if rel.related_model not in counted_models}
    assert set(uncounted) == names and names  # statistics and usage history
    assert {rel.related_model for rel in cascades} >= counted_models
    for rel in cascades:
        assert not [further.name for further in rel.related_model._meta.get_fields(include_hidden=True)
                    if further.auto_created and not further.concrete and (further.one_to_many or further.one_to_one)
                    and further.on_delete.__name__ == "CASCADE"], rel.related_model


def test_a_large_selection_counts_the_first_agents_and_names_the_others(team_cast, monkeypatch):
    from agents.admin import AgentAdmin

    monkeypatch.setattr(AgentAdmin, "DELETE_COUNTED_AGENTS", 1)
    agents = [team_cast.red_handbook.agent, team_cast.red_writer.agent]
    form = {"action": "delete_selected", "_selected_action": [a.pk for a in agents]}
    html = login("red-admin").post("/admin/agents/agent/", form).content.decode()
    assert "Agents: 2" in html and "and 1 more agent(s), not counted here" in html and html.count("files: 0") == 1


def test_an_agents_search_rows_are_deleted_through_an_index_naming_it(alice, bob):
    """Django cascades an agent's deletion to its search rows with ``DELETE … WHERE agent_id IN (…)``;
    searchevent_agent_idx serves it, instead of a read of every agent's last two days of searches."""
    from agents.deletion import agent_purge
    from agents.services import agent_delete
    from memoryhub.usage.models import SearchEvent

    for member in (alice, bob):
        SearchEvent.objects.bulk_create(
            SearchEvent(agent=member.agent, mode="hybrid", results=3, took_ms=5.0) for _ in range(5)
        )
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small would be read whole anyway
        cursor.execute(f"EXPLAIN DELETE FROM {SearchEvent._meta.db_table} WHERE agent_id IN (%s)", [alice.agent.pk])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "searchevent_agent_idx" in plan, plan
    agent_delete(agent=alice.agent, actor=None)
    assert agent_purge(agent_id=alice.agent.pk).finished
    assert list(SearchEvent.objects.values_list("agent_id", flat=True).distinct()) == [bob.agent.pk]


def test_every_table_that_references_an_agent_has_an_index_leading_with_that_column():
    """Deleting an agent deletes (or checks) the rows of every table that references it; each must be
    found through an index, or one agent's deletion reads every agent's rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT con.conrelid::regclass::text, a.attname FROM pg_constraint con
               JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
               WHERE con.contype = 'f' AND con.confrelid = 'agents_agent'::regclass
                 AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = con.conrelid AND i.indkey[0] = con.conkey[1])"""
        )
        assert cursor.fetchall() == []
