"""Agent A never sees agent B's chunks, even with identical text, in every mode and with every filter."""

import pytest

from search.services import memory_search
from search.types import SearchFilters

SHARED = "The launch code for project Nightjar is hidden under the blue vase in the hallway."


@pytest.fixture
def twins(alice, bob, index_files):
    index_files(alice, {"memory/alice-only.md": SHARED, "memory/shared.md": SHARED})
    index_files(bob, {"memory/bob-only.md": SHARED, "memory/shared.md": SHARED + "\nBob's copy."})


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_agents_see_only_their_own_chunks(cast, twins, search, mode):
    alice_paths = {r["path"] for r in search(cast["alice"], "Nightjar launch code", mode=mode, min_score=0)[1]["results"]}
    bob_results = search(cast["bob"], "Nightjar launch code", mode=mode, min_score=0)[1]["results"]
    assert alice_paths == {"memory/alice-only.md", "memory/shared.md"}
    assert {r["path"] for r in bob_results} == {"memory/bob-only.md", "memory/shared.md"}
    assert any("Bob's copy" in r["snippet"] for r in bob_results)
    code, body = search(cast["mallory"], "Nightjar launch code", mode=mode, min_score=0)
    assert code == 200 and body["results"] == []


def test_filters_never_reach_into_another_agent(cast, twins):
    for filters in [SearchFilters(path_prefix="memory/bob"), SearchFilters(sources=("memory",), path_prefix="memory/bob-only.md")]:
        response = memory_search(agent=cast["alice"].agent, query="Nightjar", filters=filters, min_score=0)
        assert response.results == []


def test_snippets_come_from_the_searching_agents_file(cast, twins):
    for result in memory_search(agent=cast["alice"].agent, query="Nightjar vase", min_score=0).results:
        assert "Bob's copy" not in result.snippet


def test_pending_counts_only_the_agents_own_files(cast, twins, search):
    from indexing.writes import file_ingest

    file_ingest(agent=cast["bob"].agent, path="memory/new.md", content="pending for bob")
    assert search(cast["alice"], "Nightjar")[1]["pending"] == 0
    assert search(cast["bob"], "Nightjar")[1]["pending"] == 1


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_every_query_of_a_search_names_the_agent(cast, twins, settings, mode):
    """Each statement a search sends that reads chunks or files filters by the agent, once per table it
    reads: what a database distributed by agent needs to send it to one shard (docs/scale.md)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.MEMORYHUB_SEARCH_RECENCY_BOOST = 0.2  # its path lookup too
    for filters in [SearchFilters(), SearchFilters(path_prefix="memory/")]:
        with CaptureQueriesContext(connection) as captured:
            response = memory_search(agent=cast["alice"].agent, query="Nightjar launch code", mode=mode, filters=filters, min_score=0)
        assert response.results
        reading = [
            q["sql"] for q in captured.captured_queries
            if ("indexing_chunk" in q["sql"] or "indexing_memoryfile" in q["sql"]) and not q["sql"].startswith("INSERT")
        ]
        assert reading
        for sql in reading:
            tables = ("indexing_chunk" in sql) + ("indexing_memoryfile" in sql)
            assert sql.count("agent_id") >= tables, sql
