"""Files and jobs in the admin console: status and errors on the lists, content deferred there, the
numbered content view, "Re-index selected files" and "Retry selected failed jobs", and the dashboard."""

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent
from indexing.embeddings import ProviderPermanentError
from indexing.maintenance import file_reindex, index_job_retry
from indexing.models import IndexJob
from indexing.writes import SyncEntry, file_ingest, workspace_sync

pytestmark = pytest.mark.django_db

NOTES = "# Trip\n\nWe flew to Lisbon in May.\n\n# Food\n\nAlice liked the pastel de nata."


@pytest.fixture
def operator(client):
    User.objects.create_superuser("operator", "op@example.com", "pw")
    client.login(username="operator", password="pw")
    return client


@pytest.fixture
def failed_upload(alice, fake_embeddings, indexed):
    """A file whose embedding failed for good: failed file, failed job, chunks without vectors."""
    fake_embeddings.fail_next(ProviderPermanentError("the provider said no"), times=1)
    with indexed():
        memory_file, job = file_ingest(agent=alice.agent, path="memory/trip.md", content=NOTES)
    memory_file.refresh_from_db()
    job.refresh_from_db()
    assert (memory_file.state, job.state) == ("failed", "failed")
    return memory_file, job


def test_the_file_list_shows_status_and_error_without_loading_content(operator, alice, failed_upload):
    with CaptureQueriesContext(connection) as queries:
        page = operator.get("/admin/indexing/memoryfile/")
    html = page.content.decode()
    assert "memory/trip.md" in html and "mh-state-failed" in html and "the provider said no" in html
    listing = [q["sql"] for q in queries.captured_queries if 'FROM "indexing_memoryfile"' in q["sql"]]
    assert listing and all('"indexing_memoryfile"."content"' not in sql for sql in listing)


@pytest.mark.parametrize("url", ["/admin/indexing/memoryfile/", "/admin/indexing/indexjob/"])
def test_file_and_job_lists_cost_the_same_queries_for_more_rows(operator, alice, url, django_assert_max_num_queries):
    file_ingest(agent=alice.agent, path="MEMORY.md", content="one")
    with django_assert_max_num_queries(10) as few:
        operator.get(url)
    for n in range(20):
        IndexJob.objects.filter(agent=alice.agent).update(state="done")  # else this upload joins the waiting job
        file_ingest(agent=alice.agent, path=f"memory/{n}.md", content=f"note {n}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = operator.get(url)
    assert page.status_code == 200 and len(page.context["cl"].result_list) == 21


def test_the_file_page_shows_the_numbered_content_and_its_chunks(operator, failed_upload):
    memory_file, _ = failed_upload
    html = operator.get(f"/admin/indexing/memoryfile/{memory_file.pk}/change/").content.decode()
    assert '<span class="mh-lineno">7</span>Alice liked the pastel de nata.' in html
    assert "2 chunks, 0 with a vector" in html
    assert "the provider said no" in html


def test_the_file_list_and_page_count_chunks_with_the_files_agent(operator, alice, failed_upload):
    """Each statement counting or listing a file's chunks names the file's agent, so it reads that agent's
    partition of the chunk table (the list's count per row is pruned when it runs)."""
    memory_file, _ = failed_upload
    for url in ["/admin/indexing/memoryfile/", f"/admin/indexing/memoryfile/{memory_file.pk}/change/"]:
        with CaptureQueriesContext(connection) as queries:
            assert operator.get(url).status_code == 200
        counting = [q["sql"] for q in queries.captured_queries if '"indexing_chunk"' in q["sql"]]
        assert counting, url
        for sql in counting:
            assert (
                f'"indexing_chunk"."agent_id" = {alice.agent.pk} ' in sql
                or 'U0."agent_id" = ("indexing_memoryfile"."agent_id")' in sql
            ), sql


def test_the_file_page_names_the_index_identity_of_its_vectors_once(operator, alice, fake_embeddings, indexed):
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/trip.md", content=NOTES)
    html = operator.get(f"/admin/indexing/memoryfile/{memory_file.pk}/change/").content.decode()
    assert "2 chunks, 2 with a vector (fake:fake-hash:64)" in html


def test_reindex_selected_files_indexes_them_again(operator, alice, failed_upload, indexed):
    memory_file, _ = failed_upload
    with indexed():
        response = operator.post(
            "/admin/indexing/memoryfile/",
            {"action": "reindex_selected", "_selected_action": [memory_file.pk]},
            follow=True,
        )
    assert "1 file(s) queued for re-indexing" in response.content.decode()
    memory_file.refresh_from_db()
    assert memory_file.state == "indexed" and memory_file.last_error == ""
    assert memory_file.chunks.exclude(embedding=None).count() == 2
    assert memory_file.job.trigger == "reindex" and memory_file.job.state == "done"


def test_file_and_job_pages_offer_reindex_and_retry_buttons(operator, failed_upload):
    memory_file, job = failed_upload
    assert 'id="reindex-this-file"' in operator.get(f"/admin/indexing/memoryfile/{memory_file.pk}/change/").content.decode()
    assert 'id="retry-this-job"' in operator.get(f"/admin/indexing/indexjob/{job.pk}/change/").content.decode()
    job.state = "done"
    job.save()
    assert 'id="retry-this-job"' not in operator.get(f"/admin/indexing/indexjob/{job.pk}/change/").content.decode()


def test_the_job_list_shows_counts_durations_and_errors(operator, failed_upload):
    html = operator.get("/admin/indexing/indexjob/").content.decode()
    assert "mh-state-failed" in html and "the provider said no" in html
    assert "1 / 1 / 0" in html  # files seen / changed / removed
    assert " ms" in html or " s<" in html  # a duration


def test_retry_selected_jobs_runs_a_failed_job_again(operator, failed_upload, bob, indexed):
    memory_file, job = failed_upload
    done = IndexJob.objects.create(agent=bob.agent, trigger="upload", state="done")
    with indexed():
        response = operator.post(
            "/admin/indexing/indexjob/", {"action": "retry_selected", "_selected_action": [job.pk, done.pk]}, follow=True
        )
    html = response.content.decode()
    assert f"1 job(s) queued again: {job.pk}" in html and "1 skipped" in html
    job.refresh_from_db()
    memory_file.refresh_from_db()
    assert (job.state, job.error, memory_file.state) == ("done", "", "indexed")
    assert job.attempts == 2 and job.chunks_embedded == 2


def test_index_job_retry_leaves_unfailed_jobs_alone(alice):
    for state in ("queued", "running", "done"):
        job = IndexJob.objects.create(agent=alice.agent, trigger="upload", state=state)
        assert index_job_retry(job=job) is False
        job.refresh_from_db()
        assert job.state == state


def test_files_and_jobs_cannot_be_edited_or_added_in_the_admin(operator, failed_upload):
    memory_file, job = failed_upload
    assert operator.get("/admin/indexing/memoryfile/add/").status_code == 403
    operator.post(f"/admin/indexing/memoryfile/{memory_file.pk}/change/", {"content": "changed"})
    memory_file.refresh_from_db()
    assert memory_file.content == NOTES


def test_the_dashboard_shows_totals_failures_and_the_cache_hit_rate(operator, alice, bob, fake_embeddings, indexed):
    with indexed():
        file_ingest(agent=alice.agent, path="memory/trip.md", content=NOTES)
    with indexed():
        file_ingest(agent=alice.agent, path="notes/trip-copy.md", content=NOTES)  # same text, same agent: reused
    IndexJob.objects.create(agent=bob.agent, trigger="sync", state="failed", error="the disk is on fire")
    page = operator.get("/admin/")
    stats = page.context["dashboard"]
    assert stats["agents"]["total"] == 2 and stats["files"]["total"] == 2 and stats["chunks"]["total"] == 4
    assert stats["jobs"]["hour"] == {"total": 3, "done": 2, "failed": 1}
    assert stats["cache"]["hit_rate_day"] == 0.5  # the copy's two chunks cost no embedding call
    html = page.content.decode()
    assert "50 %" in html and "the disk is on fire" in html and "jobs in the last hour" in html


def test_the_dashboard_counts_an_agent_being_deleted_apart_from_the_live_ones(operator, alice, bob):
    Agent.objects.filter(pk=bob.agent.pk).update(deletion_requested_at=timezone.now())  # its purge not yet run

    page = operator.get("/admin/")

    assert page.context["dashboard"]["agents"] == {"total": 1, "active": 1, "deleting": 1}
    assert "1 being deleted" in page.content.decode()


def test_the_dashboard_costs_the_same_queries_with_more_data(operator, make_member, django_assert_max_num_queries):
    with django_assert_max_num_queries(20) as few:
        operator.get("/admin/")
    for n in range(10):
        member = make_member(f"agent-{n}")
        file_ingest(agent=member.agent, path="MEMORY.md", content=f"note {n}")
        IndexJob.objects.create(agent=member.agent, trigger="sync", state="failed", error="x")
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert operator.get("/admin/").status_code == 200


def test_the_file_page_lists_each_chunk_with_its_lines_and_vector(operator, alice, fake_embeddings, indexed, failed_upload):
    without, _ = failed_upload
    with indexed():
        with_vectors, _ = file_ingest(agent=alice.agent, path="memory/other.md", content=NOTES.replace("Lisbon", "Porto"))

    for memory_file, vector in [(without, "none (keyword search only)"), (with_vectors, "fake:fake-hash:64 (64 dimensions)")]:
        html = operator.get(f"/admin/indexing/memoryfile/{memory_file.pk}/change/").content.decode()
        table = html[html.index('id="chunk-table"'):]
        chunks = list(memory_file.chunks.order_by("ordinal"))
        assert len(chunks) == 2 and table.count(vector) == 2
        for chunk in chunks:
            assert f"<td>{chunk.start_line}–{chunk.end_line}</td><td>{chunk.token_count}</td>" in table
        assert "Alice liked the pastel de nata." in table


def test_the_file_page_says_how_many_chunks_it_does_not_list(operator, failed_upload, monkeypatch):
    from indexing import admin as indexing_admin

    monkeypatch.setattr(indexing_admin, "CHUNK_VIEW_MAX", 1)
    memory_file, _ = failed_upload
    html = operator.get(f"/admin/indexing/memoryfile/{memory_file.pk}/change/").content.decode()
    assert "… and 1 more chunks (first 1 of 2 shown)." in html


def test_the_job_page_says_how_many_files_it_does_not_list_and_links_to_all(operator, alice, monkeypatch):
    from indexing import admin as indexing_admin

    monkeypatch.setattr(indexing_admin, "JOB_FILES_VIEW_MAX", 2)
    outcome = workspace_sync(
        agent=alice.agent, entries=[SyncEntry(path=f"memory/{n}.md", content=f"note {n}") for n in range(3)]
    )
    job = outcome.job
    html = operator.get(f"/admin/indexing/indexjob/{job.pk}/change/").content.decode()
    assert len(re.findall(r'href="/admin/indexing/memoryfile/\d+/change/"', html)) == 2
    link = f"/admin/indexing/memoryfile/?job__id__exact={job.pk}"
    assert f'… and 1 more: <a href="{link}">all 3 files of this job</a>' in html
    listed = operator.get(link)
    assert listed.status_code == 200
    assert sorted(f.path for f in listed.context["cl"].result_list) == ["memory/0.md", "memory/1.md", "memory/2.md"]


def test_an_older_jobs_page_explains_that_a_later_job_took_its_files(operator, alice, indexed):
    with indexed():
        memory_file, first_job = file_ingest(agent=alice.agent, path="memory/trip.md", content=NOTES)
        second_job = file_reindex(agent=alice.agent, file_ids=[memory_file.pk])

    older = operator.get(f"/admin/indexing/indexjob/{first_job.pk}/change/").content.decode()
    assert 'id="job-files-moved"' in older and "taken over by later jobs" in older
    newer = operator.get(f"/admin/indexing/indexjob/{second_job.pk}/change/").content.decode()
    assert "memory/trip.md" in newer and 'id="job-files-moved"' not in newer
