"""Keyword stats of large agents (search/keyword_stats.py): built and dropped by a periodic task, and
searches that use them rank exactly like the query-time count of a small agent."""

import math

import pytest

from search.keyword import keyword_candidates, query_lexemes
from search.keyword_stats import keyword_stats_sync
from search.models import KeywordAgentStats, KeywordTermStats
from search.types import SearchFilters
from tests.search.conftest import gin_only_plan

FILES = {f"memory/filler-{i}.md": f"We talked about the weather again, day {i}." for i in range(8)}
FILES["memory/rare.md"] = "Melanie talked about the weather and pottery."
FILES["notes/b.md"] = "Caroline went to the support group; the weather was fine."


def ranked(member, query):
    result = keyword_candidates(agent_id=member.agent.pk, query=query, filters=SearchFilters(), limit=20)
    return [(h.chunk_id, pytest.approx(h.bm25)) for h in result.hits], result.idf


def test_stats_are_built_for_large_agents_only_and_a_second_run_keeps_them(alice, bob, index_files, settings):
    index_files(alice, FILES)
    index_files(bob, {"memory/a.md": "Bob likes chess."})
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3

    first = keyword_stats_sync()
    assert first.refreshed == [alice.agent.pk]
    stats = KeywordAgentStats.objects.get(agent=alice.agent)
    assert stats.chunks == len(FILES)
    weather = query_lexemes("weather")[0]
    assert KeywordTermStats.objects.get(agent=alice.agent, lexeme=weather).df == len(FILES)
    assert not KeywordTermStats.objects.filter(agent=bob.agent).exists()

    second = keyword_stats_sync()
    assert second.refreshed == [] and second.kept == [alice.agent.pk]

    # The agent shrinks back below the threshold: its stats go.
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 100
    third = keyword_stats_sync()
    assert third.dropped == [alice.agent.pk]
    assert not KeywordAgentStats.objects.exists() and not KeywordTermStats.objects.exists()


def test_search_with_stats_ranks_exactly_like_the_query_time_count(alice, index_files, settings):
    index_files(alice, FILES)
    queries = ["Melanie weather", "When did Caroline go to the support group?", "pottery", "nothing matches zzz"]
    exact = {query: ranked(alice, query) for query in queries}

    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    assert {query: ranked(alice, query) for query in queries} == exact


def test_words_written_after_the_refresh_are_found_and_counted(alice, index_files, settings):
    index_files(alice, FILES)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    index_files(alice, {"memory/new.md": "Caroline adopted a kitten.", "memory/new2.md": "The kitten sleeps."})
    with_stale_stats = ranked(alice, "kitten weather")

    KeywordAgentStats.objects.all().delete()
    KeywordTermStats.objects.all().delete()
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 10_000
    exact = ranked(alice, "kitten weather")
    kitten = query_lexemes("kitten")[0]
    stale_n = len(FILES)  # N comes from the stats until the next refresh; kitten's df (2) is counted live
    assert with_stale_stats[1][kitten] == pytest.approx(math.log(1 + (stale_n - 2 + 0.5) / (2 + 0.5)))
    assert [chunk for chunk, _ in with_stale_stats[0][:2]] == [chunk for chunk, _ in exact[0][:2]]


def test_the_periodic_task_refreshes_keyword_stats(alice, index_files, settings):
    from search.tasks import keyword_stats_task

    index_files(alice, FILES)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    index = f"chunk_gin_a{alice.agent.pk}"
    assert keyword_stats_task() == {
        "refreshed": [alice.agent.pk], "dropped": [], "kept": 0, "indexes_created": [index], "indexes_dropped": [], "skipped": "",
    }
    assert keyword_stats_task() == {
        "refreshed": [], "dropped": [], "kept": 1, "indexes_created": [], "indexes_dropped": [], "skipped": "",
    }


def test_large_agents_get_their_own_gin_index_and_searches_use_it(alice, bob, index_files, settings):
    from search.keyword_stats import keyword_indexes

    index_files(alice, FILES)
    index_files(bob, {"memory/a.md": "Bob likes chess."})
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    outcome = keyword_stats_sync()
    assert outcome.indexes_created == [f"chunk_gin_a{alice.agent.pk}"]
    assert keyword_indexes() == {f"chunk_gin_a{alice.agent.pk}": True}

    # The agent id reaches Postgres as a literal, so the planner can match the partial index's predicate.
    plan = gin_only_plan(lambda: ranked(alice, "Melanie weather"))
    assert f"chunk_gin_a{alice.agent.pk}" in plan and "chunk_search_vector_gin" not in plan, plan

    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 100
    dropped = keyword_stats_sync()
    assert dropped.indexes_dropped == [f"chunk_gin_a{alice.agent.pk}"] and keyword_indexes() == {}


def test_an_agent_being_deleted_loses_its_stats_and_index_at_the_next_run(alice, bob, index_files, settings):
    """Its chunks go in the background's batches meanwhile: no index or stats is kept or built for them."""
    from agents.services import agent_delete
    from search.keyword_stats import keyword_indexes

    index_files(alice, FILES)
    index_files(bob, FILES)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    assert keyword_stats_sync().indexes_created == [f"chunk_gin_a{alice.agent.pk}", f"chunk_gin_a{bob.agent.pk}"]

    agent_delete(agent=alice.agent, actor=None)
    outcome = keyword_stats_sync()
    assert outcome.dropped == [alice.agent.pk] and outcome.indexes_dropped == [f"chunk_gin_a{alice.agent.pk}"]
    assert keyword_indexes() == {f"chunk_gin_a{bob.agent.pk}": True}
    assert not KeywordAgentStats.objects.filter(agent=alice.agent).exists()
    assert KeywordTermStats.objects.filter(agent=bob.agent).exists()


def test_the_command_counts_now(alice, index_files):
    from io import StringIO

    from django.core.management import call_command

    index_files(alice, FILES)
    out = StringIO()
    call_command("keyword_stats", "--min-chunks", "3", stdout=out)
    assert "1 counted, 0 dropped, 0 kept" in out.getvalue()
    assert KeywordAgentStats.objects.filter(agent=alice.agent).exists()


def test_a_run_that_finds_the_task_lock_taken_does_nothing(alice, index_files, settings):
    """Both background syncs take their advisory lock (search/ddl.py); a second run, in another session,
    returns at once with the reason, and a run after the first one has finished does the work."""
    from django.db import connections

    from search import keyword_stats, vector_index
    from search.vector_index import vector_indexes_sync

    index_files(alice, FILES)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    other = connections.create_connection("default")  # another session, as another worker process would be
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s), pg_advisory_lock(%s)", [keyword_stats.ADVISORY_LOCK_KEY, vector_index.ADVISORY_LOCK_KEY])
        skipped = keyword_stats_sync()
        assert skipped.skipped == "another run is refreshing keyword stats" and skipped.refreshed == []
        assert vector_indexes_sync().skipped == "another run is building vector indexes"
        assert not KeywordAgentStats.objects.exists()
    finally:
        # Released before the session closes: a closed client's backend lets go of its locks a moment
        # later, and a loaded machine once ran the next line inside that moment.
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
        other.close()
    assert keyword_stats_sync().refreshed == [alice.agent.pk]


def test_stats_bound_each_words_count_in_one_chunk_and_catch_up_with_newer_chunks(alice, index_files, settings):
    index_files(alice, FILES)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    weather = query_lexemes("weather")[0]
    term = KeywordTermStats.objects.get(agent=alice.agent, lexeme=weather)
    assert term.max_tf == 1 and term.min_tokens >= 1
    stats = KeywordAgentStats.objects.get(agent=alice.agent)
    assert stats.last_chunk_id == alice.agent.chunks.order_by("-id").values_list("id", flat=True).first()

    # A chunk written since, within the drift (no full refresh), repeats the word: the next run widens
    # the word's bound and moves the last chunk id, so searches keep reading such chunks.
    settings.MEMORYHUB_SEARCH_KEYWORD_STATS_DRIFT = 1.0
    index_files(alice, {"memory/storm.md": "weather weather weather"})
    outcome = keyword_stats_sync()
    assert outcome.kept == [alice.agent.pk] and outcome.caught_up == [alice.agent.pk]
    term.refresh_from_db()
    assert term.max_tf == 3 and term.df == len(FILES)  # the df waits for the next full refresh
    assert KeywordAgentStats.objects.get(agent=alice.agent).last_chunk_id > stats.last_chunk_id
    assert keyword_stats_sync().caught_up == []


def test_stats_without_term_bounds_are_refreshed(alice, index_files, settings):
    index_files(alice, FILES)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    KeywordAgentStats.objects.update(last_chunk_id=None)  # as written before the bounds existed
    KeywordTermStats.objects.update(max_tf=None, min_tokens=None)
    assert keyword_stats_sync().refreshed == [alice.agent.pk]
    assert not KeywordTermStats.objects.filter(max_tf=None).exists()
