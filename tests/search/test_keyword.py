"""The keyword half alone: natural-language questions match, BM25 ranks with this agent's IDF, any
text is safe, CJK is findable."""

import pytest

from search.keyword import keyword_candidates, lexeme_tsquery, query_lexemes, searched_terms
from search.types import SearchFilters
from tests.search.conftest import gin_only_plan

NO_FILTERS = SearchFilters()


def hits(member, query, limit=10):
    return keyword_candidates(agent_id=member.agent.pk, query=query, filters=NO_FILTERS, limit=limit)


def paths_of(result):
    from indexing.models import Chunk

    by_id = dict(Chunk.objects.filter(pk__in=[h.chunk_id for h in result.hits]).values_list("id", "file__path"))
    return [by_id[h.chunk_id] for h in result.hits]


def test_a_question_matches_a_chunk_holding_only_some_of_its_words(alice, index_files):
    index_files(alice, {"memory/a.md": "Caroline went to the LGBTQ support group on 7 May."})
    result = hits(alice, "When did Caroline go to the support group meeting last year?")
    assert paths_of(result) == ["memory/a.md"]
    assert result.hits[0].score == 1.0


def test_the_rarer_word_outranks_the_common_one(alice, index_files):
    files = {f"memory/filler-{i}.md": f"We talked about the weather again, day {i}." for i in range(8)}
    files["memory/rare.md"] = "Melanie talked about pottery."
    index_files(alice, files)
    result = hits(alice, "what did Melanie say about the weather")
    assert paths_of(result)[0] == "memory/rare.md"
    assert result.idf[query_lexemes("Melanie")[0]] > result.idf[query_lexemes("weather")[0]]


def test_more_occurrences_score_higher_at_equal_length(alice, index_files):
    index_files(alice, {
        "memory/once.md": "pottery class and some other unrelated words here",
        "memory/thrice.md": "pottery pottery pottery class and words here",
    })
    result = hits(alice, "pottery")
    assert paths_of(result) == ["memory/thrice.md", "memory/once.md"]
    assert 0 < result.hits[1].score < result.hits[0].score == 1.0


def test_idf_counts_this_agents_chunks_only(alice, bob, index_files):
    index_files(alice, {"memory/a.md": "Caroline paints.", "memory/b.md": "Melanie runs."})
    before = hits(alice, "Caroline").idf
    index_files(bob, {f"memory/{i}.md": f"Caroline note {i}" for i in range(10)})
    assert hits(alice, "Caroline").idf == before
    assert hits(bob, "Caroline").idf[query_lexemes("Caroline")[0]] < before[query_lexemes("Caroline")[0]]


def test_stemming_matches_other_forms_of_a_word(alice, index_files):
    index_files(alice, {"memory/a.md": "The deployment of the billing service failed."})
    assert paths_of(hits(alice, "deploying billing")) == ["memory/a.md"]


def test_only_stop_words_match_nothing(alice, index_files):
    index_files(alice, {"memory/a.md": "What is it and who was there?"})
    assert hits(alice, "what is it and who was there").hits == []


def test_chinese_and_japanese_words_are_found_inside_longer_runs(alice, index_files):
    index_files(alice, {
        "memory/zh.md": "我们决定使用向量数据库来保存长期记忆。",
        "memory/ja.md": "東京で新しいプロジェクトを始めました。",
        "memory/en.md": "Nothing to see here.",
    })
    assert paths_of(hits(alice, "长期记忆")) == ["memory/zh.md"]
    assert paths_of(hits(alice, "向量")) == ["memory/zh.md"]
    assert paths_of(hits(alice, "東京のプロジェクト")) == ["memory/ja.md"]


def test_operators_and_quotes_in_a_query_are_plain_text(alice, index_files):
    index_files(alice, {"memory/a.md": "O'Brien's backup runs nightly & never fails!"})
    for query in ["O'Brien", "backup & !fails", "'backup' | (nightly)", "backup:*", "\\'nightly\\'", "<-> backup"]:
        assert paths_of(hits(alice, query)) == ["memory/a.md"], query


def test_lexeme_literals_escape_quotes_and_backslashes():
    assert lexeme_tsquery("it's") == "'it''s'"
    assert lexeme_tsquery("a\\b") == "'a\\\\b'"


def test_filters_restrict_without_changing_the_idf(alice, index_files):
    index_files(alice, {"memory/a.md": "Caroline paints.", "notes/b.md": "Caroline runs."})
    unfiltered = hits(alice, "Caroline")
    filtered = keyword_candidates(
        agent_id=alice.agent.pk, query="Caroline", filters=SearchFilters(path_prefix="notes/"), limit=10
    )
    assert paths_of(filtered) == ["notes/b.md"]
    assert filtered.idf == unfiltered.idf


def test_large_agents_score_chunks_with_rare_words_and_keep_exact_rare_idf(alice, index_files, settings, monkeypatch):
    from search import keyword

    files = {f"memory/filler-{i}.md": f"We talked about the weather again, day {i}." for i in range(8)}
    files["memory/rare.md"] = "Melanie talked about the weather and pottery."
    index_files(alice, files)
    exact = hits(alice, "Melanie weather")
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    monkeypatch.setattr(keyword, "RARE_DF_CAP", 4)
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 4)
    bounded = hits(alice, "Melanie weather")
    assert paths_of(bounded) == ["memory/rare.md"]  # chunks with only the common word are not read
    melanie = query_lexemes("Melanie")[0]
    assert bounded.idf[melanie] == exact.idf[melanie]
    # A query of common words only still answers, from SCORE_BUDGET of the rarest word's chunks.
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 5)
    assert len(hits(alice, "weather talked").hits) == 5
    # A word the agent never used (a typo) does not hide the common ones.
    assert len(hits(alice, "wether weather").hits) == 5


@pytest.mark.parametrize(
    ("dfs", "budget", "expected"),
    [
        ([10, 3, 40], 100, ([0, 1, 2], False)),  # everything fits: exact BM25
        ([10, 3, 40], 20, ([0, 1], False)),  # rarest first while the sum fits
        ([900, 700], 500, ([1], True)),  # the rarest alone is too common: capped
        ([0, 900], 500, ([0, 1], True)),  # an absent word (df 0) never stands in for the rest
        ([0, 0], 500, ([0, 1], False)),
    ],
)
def test_searched_terms_take_the_rarest_words_within_the_budget(dfs, budget, expected):
    assert searched_terms(dfs, budget=budget) == expected


def test_a_small_agent_is_read_through_its_own_rows_never_the_all_agent_gin_index(alice, index_files):
    """The all-agent GIN index holds every agent's chunks; for a common word its bitmap cost 50-100 ms at
    1M chunks (README, "Search at scale"), so the exact path reads the agent's rows instead."""
    index_files(alice, {"memory/a.md": "Caroline paints.", "notes/b.md": "Caroline runs."})
    plan = gin_only_plan(lambda: hits(alice, "Caroline"))
    assert "chunk_search_vector_gin" not in plan, plan


def test_bm25_parameters_come_from_the_settings(alice, index_files, settings):
    index_files(alice, {
        "memory/short.md": "pottery class",
        "memory/long.md": "pottery class and a great many other words that make this chunk much longer than the short one",
        "memory/thrice.md": "pottery pottery pottery class and a great many other words that make this chunk much longer",
    })
    by_path = lambda result: dict(zip(paths_of(result), (h.score for h in result.hits)))  # noqa: E731
    default = by_path(hits(alice, "pottery"))
    assert default["memory/short.md"] > default["memory/long.md"]  # b = 0.75: the longer chunk is penalised

    settings.MEMORYHUB_SEARCH_BM25_B = 0  # no length normalisation: one occurrence scores the same anywhere
    flat = by_path(hits(alice, "pottery"))
    assert flat["memory/short.md"] == pytest.approx(flat["memory/long.md"])
    assert flat["memory/thrice.md"] > flat["memory/long.md"]

    settings.MEMORYHUB_SEARCH_BM25_K1 = 0  # saturated at once: repeating a word adds nothing
    saturated = by_path(hits(alice, "pottery"))
    assert saturated["memory/thrice.md"] == pytest.approx(saturated["memory/long.md"]) == pytest.approx(1.0)
