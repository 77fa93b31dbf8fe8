"""The keyword half alone: natural-language questions match, BM25 ranks with this agent's IDF, any
text is safe, CJK is findable."""

import random

import pytest

from search.keyword import keyword_candidates, lexeme_tsquery, query_lexemes, reaching_sets
from search.keyword_stats import keyword_stats_sync
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
    # Fewer than ten chunks hold the rare word, so the common word's chunks could still enter the top ten:
    # they are read in the second pass, and the ranking is the exact one.
    assert paths_of(bounded) == paths_of(exact) and paths_of(bounded)[0] == "memory/rare.md"
    assert bounded.exact
    melanie = query_lexemes("Melanie")[0]
    assert bounded.idf[melanie] == exact.idf[melanie]
    # A query of common words only (the rarest is more common than the budget) is exact too ...
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 5)
    assert paths_of(hits(alice, "weather talked")) == paths_of(_exact_hits(alice, "weather talked", monkeypatch))
    # ... unless the search would read more than MAX_SCORED_ROWS chunks: it stops there, and says so.
    monkeypatch.setattr(keyword, "MAX_SCORED_ROWS", 7)
    capped = hits(alice, "weather talked")
    assert 5 <= len(capped.hits) <= 7 and not capped.exact
    # A word the agent never used (a typo) does not hide the common ones.
    monkeypatch.setattr(keyword, "MAX_SCORED_ROWS", 100)
    assert len(hits(alice, "wether weather").hits) == 9


def _exact_hits(member, query, monkeypatch):
    """The unbounded BM25 ranking: the small-agent path, which reads and scores every match."""
    from search import keyword

    real = keyword._lexemes_and_stats
    with monkeypatch.context() as patch:  # the query's lexemes, as if the agent had no stats and no chunks
        patch.setattr(keyword, "_lexemes_and_stats", lambda **kwargs: (real(**kwargs)[0], None, 0))
        return hits(member, query)


# Ten long notes hold the rare word once; twelve short ones repeat the common word. BM25 ranks the short
# ones first (term frequency, short length), though they hold only the more common word.
ZEBRA_APPLE = {
    **{f"memory/zebra-{i}.md": f"zebra seen near the river bank by {'one two three four five six seven eight nine ten ' * (1 + i % 3)}"
       for i in range(10)},
    **{f"memory/apple-{i}.md": "apple " * (1 + i % 4) + f"pie number {i}" for i in range(12)},
    **{f"memory/other-{i}.md": f"nothing to do with the query, note {i}" for i in range(8)},
}


def test_a_large_agents_budget_does_not_lose_a_top_ten_chunk_holding_only_common_words(alice, index_files, settings, monkeypatch):
    from search import keyword

    index_files(alice, ZEBRA_APPLE)
    exact = _exact_hits(alice, "zebra apple", monkeypatch)
    top_paths = paths_of(exact)
    assert any(path.startswith("memory/apple-") for path in top_paths)  # what a budget of the rare word's chunks missed

    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 10)  # a first pass of about the zebra notes' number
    pruned = hits(alice, "zebra apple")
    assert [h.chunk_id for h in pruned.hits] == [h.chunk_id for h in exact.hits]
    assert [h.bm25 for h in pruned.hits] == pytest.approx([h.bm25 for h in exact.hits])
    assert pruned.exact


def _notes(seed: int, count: int) -> dict[str, str]:
    """One-line notes of 3 to 30 made-up words drawn with Zipf-like frequencies, some repeated: a corpus
    where common words pair up, rare ones are few, and lengths and counts vary."""
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice("bdgklmnprstvz") + rng.choice("aeiou") for _ in range(3)) for _ in range(60)})
    weights = [1 / (rank + 1) for rank in range(len(words))]
    return {
        f"memory/note-{i:03d}.md": " ".join(rng.choices(words, weights, k=rng.randint(3, 30))) for i in range(count)
    }


@pytest.mark.parametrize("long_from", [0, 4])
def test_a_large_agents_two_passes_find_every_chunk_of_the_exact_top_ten(alice, index_files, settings, monkeypatch, long_from):
    """Whatever the first pass reads (a budget from one chunk to all of them), the second finds every
    chunk the first left out that belongs in the top ten: the ten best scores are exact BM25's, proven.
    With ``long_from`` 4, queries of 4 words or more score with the long queries' k1 and b, and the
    bounds must be theirs too."""
    from search import keyword

    settings.MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES = long_from
    notes = _notes(seed=14, count=120)
    index_files(alice, notes)
    rng = random.Random(15)
    vocabulary = sorted({word for text in notes.values() for word in text.split()})
    queries = [" ".join(rng.sample(vocabulary, rng.randint(2, 6))) for _ in range(12)]
    exact = {query: _exact_hits(alice, query, monkeypatch) for query in queries}

    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    # With at most 2 word sets per pass, long queries take the way round: the rarest words' chunks first,
    # then every chunk of a word the bar cannot rule out.
    for budget, sets in ((1, 64), (4, 64), (15, 64), (60, 64), (1000, 64), (4, 2), (60, 2)):
        monkeypatch.setattr(keyword, "SCORE_BUDGET", budget)
        monkeypatch.setattr(keyword, "MAX_REACHING_SETS", sets)
        for query in queries:
            pruned = hits(alice, query)
            assert [h.bm25 for h in pruned.hits] == pytest.approx([h.bm25 for h in exact[query].hits]), (budget, sets, query)
            assert pruned.exact


def test_a_large_agents_search_reads_the_query_as_query_lexemes_does(alice, index_files, settings):
    """A large agent's search reads the query's lexemes with its keyword stats, in one statement: the
    same lexemes, in the same order and as many, as query_lexemes (which snippets and the results use)."""
    from search.keyword import MAX_QUERY_LEXEMES

    index_files(alice, _notes(seed=16, count=12))
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    rng = random.Random(17)
    long_query = " ".join("".join(rng.choice("bdgklmnprstvz") + rng.choice("aeiou") for _ in range(4)) for _ in range(400))
    for query in ["When did Caroline go to the support group?", "東京で新しいプロジェクト 长期记忆", long_query]:
        assert hits(alice, query).lexemes == query_lexemes(query)
    assert len(query_lexemes(long_query)) == MAX_QUERY_LEXEMES


def test_a_large_agents_filtered_search_is_exact_among_the_files_it_keeps(alice, index_files, settings, monkeypatch):
    """The bar for pass 2 is the 10th best chunk that passes the filter, not the 10th best overall."""
    from search import keyword

    index_files(alice, ZEBRA_APPLE)
    only_zebra_notes = SearchFilters(path_prefix="memory/zebra-")
    large_from = settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 10**9
    exact = keyword_candidates(agent_id=alice.agent.pk, query="zebra apple", filters=only_zebra_notes, limit=10)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = large_from

    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    # Pass 1 reads the zebra notes; the apple notes pass 2 reads are all filtered out, and the search
    # still counts them against its row limit.
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 12)
    pruned = keyword_candidates(agent_id=alice.agent.pk, query="zebra apple", filters=only_zebra_notes, limit=10)
    assert [h.chunk_id for h in pruned.hits] == [h.chunk_id for h in exact.hits] and len(pruned.hits) == 10
    assert pruned.exact


def test_a_large_agents_second_pass_reads_its_own_chunks_only(alice, bob, index_files, settings, monkeypatch):
    """Pass 2 ORs one condition per word set; the agent's condition must hold for each of them."""
    from indexing.models import Chunk
    from search import keyword

    index_files(alice, ZEBRA_APPLE)
    index_files(bob, {f"memory/{i}.md": "zebra apple " * 3 for i in range(5)})
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    # A first pass aiming at one chunk reads those holding both words (none of alice's, all of bob's), so
    # nothing sets a bar and pass 2 reads each word's chunks.
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 1)
    pruned = hits(alice, "zebra apple", limit=50)
    assert pruned.exact and len(pruned.hits) == 22
    assert set(Chunk.objects.filter(pk__in=[h.chunk_id for h in pruned.hits]).values_list("agent_id", flat=True)) == {alice.agent.pk}


def test_a_common_word_that_cannot_reach_the_top_ten_is_not_read(alice, index_files, settings, monkeypatch):
    """The bound at work: twelve short notes repeat the rare word, so the tenth best score is above what
    any chunk holding only the common word could reach, and the search answers exactly within a row
    limit that leaves no room to read the common word's chunks."""
    from search import keyword

    files = {f"memory/zebra-{i}.md": "zebra " * (2 + i % 3) + f"apple note {i}" for i in range(12)}
    files.update({f"memory/apple-{i}.md": f"apple seen by {'one two three four five six seven eight ' * 2} {i}" for i in range(15)})
    index_files(alice, files)
    exact = _exact_hits(alice, "zebra apple", monkeypatch)

    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 12)
    # A pass knows it read every chunk of its sets when it stops short of its row limit: 12 + 1.
    monkeypatch.setattr(keyword, "MAX_SCORED_ROWS", 13)
    pruned = hits(alice, "zebra apple")
    assert [h.chunk_id for h in pruned.hits] == [h.chunk_id for h in exact.hits]
    assert pruned.exact
    assert all(path.startswith("memory/zebra-") for path in paths_of(pruned))


def test_a_large_agents_search_stays_exact_for_chunks_written_since_its_keyword_stats(alice, index_files, settings, monkeypatch):
    """The stats bound "apple" by the old notes (once, in a long note), so pass 2 would skip a chunk
    holding only apple; one written since the stats, repeating it in a few words, outscores the zebra
    notes. Such chunks are read whatever the bounds: the top ten is exact, and says it is not when
    there are more of them than the search may read."""
    from search import keyword

    filler = "one two three four five six seven eight nine ten " * 2
    files = {f"memory/zebra-{i}.md": f"zebra seen by {filler}{i}" for i in range(12)}
    files.update({f"memory/apple-{i}.md": f"apple seen by {filler}{i}" for i in range(15)})
    files.update({f"memory/other-{i}.md": f"nothing to do with the query, note {i}" for i in range(40)})
    index_files(alice, files)
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 3
    keyword_stats_sync()
    monkeypatch.setattr(keyword, "SCORE_BUDGET", 12)  # a first pass of the zebra notes
    monkeypatch.setattr(keyword, "MAX_SCORED_ROWS", 20)
    assert hits(alice, "zebra apple").exact

    index_files(alice, {f"memory/new-apple-{i}.md": "apple " * 40 for i in range(3)})
    exact = _exact_hits(alice, "zebra apple", monkeypatch)
    assert paths_of(exact)[:3] == [f"memory/new-apple-{i}.md" for i in range(3)]
    pruned = hits(alice, "zebra apple")  # scored with the stats' IDF (the df waits for their next run)
    assert [h.chunk_id for h in pruned.hits] == [h.chunk_id for h in exact.hits]
    assert pruned.exact

    # More new chunks holding a query word than the search may read (with the zebra notes): not exact.
    index_files(alice, {f"memory/more-apple-{i}.md": "apple " * 40 for i in range(3, 12)})
    assert not hits(alice, "zebra apple").exact
    # Within the search's limit, those a first pass stopped before are read by the second.
    monkeypatch.setattr(keyword, "MAX_SCORED_ROWS", 100)
    monkeypatch.setattr(keyword, "FIRST_PASS_LIMIT", 1)
    exact = _exact_hits(alice, "zebra apple", monkeypatch)
    pruned = hits(alice, "zebra apple")
    assert [h.chunk_id for h in pruned.hits] == [h.chunk_id for h in exact.hits]
    assert pruned.exact


@pytest.mark.parametrize(
    ("bounds", "threshold", "expected"),
    [
        ([3.0, 1.0, 2.0], 0.0, [[0], [1], [2]]),  # nothing scored yet: any chunk of any word
        ([3.0, 1.0, 2.0], 2.5, [[0], [1, 2]]),  # 2 + 1 reaches past 2.5; 2 or 1 alone does not
        ([3.0, 1.0, 2.0], 3.0, [[0, 1], [0, 2]]),  # 1 + 2 is exactly the threshold, not above it
        ([3.0, 1.0, 2.0], 6.0, []),  # all three together stay below: nothing left to read
        ([1.0, 1.0, 1.0, 1.0], 1.5, None),  # six pairs, more than at_most
    ],
)
def test_reaching_sets_are_the_minimal_word_sets_that_could_score_above_the_threshold(bounds, threshold, expected):
    assert reaching_sets(bounds, threshold, at_most=5) == expected


def test_a_small_agent_is_read_through_its_own_rows_never_the_all_agent_gin_index(alice, index_files):
    """The all-agent GIN index holds every agent's chunks; for a common word its bitmap cost 50-100 ms at
    1M chunks (README, "Search at scale"), so the exact path reads the agent's rows instead."""
    index_files(alice, {"memory/a.md": "Caroline paints.", "notes/b.md": "Caroline runs."})
    plan = gin_only_plan(lambda: hits(alice, "Caroline"))
    assert "chunk_search_vector_gin" not in plan, plan


def test_a_small_agents_keyword_half_is_two_statements_and_a_large_one_without_stats_is_still_counted_large(
    alice, index_files, settings, monkeypatch
):
    """A small agent has no keyword stats: its size comes back with its query's lexemes (the first statement,
    not a round trip of its own), then one statement reads its matches. Above the threshold and before its
    stats exist, the same count sends the search down the large agents' path."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from search import keyword

    index_files(alice, {f"memory/n-{i}.md": f"Caroline paints the fence, day {i}." for i in range(5)})
    with CaptureQueriesContext(connection) as small:
        found = hits(alice, "Caroline fence")
    assert len(found.hits) == 5 and found.exact
    assert len(small.captured_queries) == 2, [q["sql"][:80] for q in small.captured_queries]

    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 4
    large_plans = []
    real = keyword._large_agent_plan
    monkeypatch.setattr(keyword, "_large_agent_plan", lambda **kw: large_plans.append(kw) or real(**kw))
    assert len(hits(alice, "Caroline fence").hits) == 5
    assert len(large_plans) == 1


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


def test_a_large_agents_bound_uses_the_scorings_bm25_parameters():
    """The bound that lets a large agent's search skip chunks is the scoring's own factor: with other
    k1 / b it would otherwise cut chunks that can still reach the top ten."""
    from search.keyword import tf_factor_bound

    assert tf_factor_bound(None, avgdl=10.0, k1=2.0, b=0.0) == pytest.approx(3.0)
    assert tf_factor_bound((2, 5), avgdl=10.0, k1=2.0, b=0.0) == pytest.approx(2 * 3.0 / (2 + 2.0))
    assert tf_factor_bound((2, 5), avgdl=10.0, k1=2.0, b=1.0) == pytest.approx(2 * 3.0 / (2 + 2.0 * 0.5))


def test_a_long_query_scores_with_the_long_bm25_parameters(alice, index_files, settings):
    """A pasted stretch of dialogue shares words with any long chunk by chance: from
    MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES distinct words on, the query scores with the LONG k1 and b
    (default b 1.0: length counts fully), a question with the others."""
    index_files(alice, {
        "memory/short.md": "pottery class",
        "memory/long.md": "pottery class and a great many other words that make this chunk much longer than the short one",
    })
    settings.MEMORYHUB_SEARCH_BM25_B = 0  # questions: no length normalisation
    by_path = lambda result: dict(zip(paths_of(result), (h.score for h in result.hits)))  # noqa: E731
    filler = " ".join(f"zq{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(45))  # words no chunk holds
    long_query = f"pottery {filler}"
    assert len(query_lexemes(long_query)) == 46

    question = by_path(hits(alice, "pottery"))
    assert question["memory/short.md"] == pytest.approx(question["memory/long.md"])
    long = by_path(hits(alice, long_query))
    assert long["memory/short.md"] > long["memory/long.md"] * 1.1

    settings.MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES = 47  # one word short of long: the questions' b
    flat = by_path(hits(alice, long_query))
    assert flat["memory/short.md"] == pytest.approx(flat["memory/long.md"])
    settings.MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES = 46
    assert by_path(hits(alice, long_query)) == pytest.approx(long)
    settings.MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES = 0  # off
    assert by_path(hits(alice, long_query)) == pytest.approx(flat)


def test_bm25_parameters_switch_at_the_long_query_threshold(settings):
    from search.keyword import bm25_parameters

    settings.MEMORYHUB_SEARCH_BM25_K1, settings.MEMORYHUB_SEARCH_BM25_B = 1.2, 0.75
    settings.MEMORYHUB_SEARCH_BM25_LONG_K1, settings.MEMORYHUB_SEARCH_BM25_LONG_B = 2.2, 1.0
    settings.MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES = 40
    assert bm25_parameters(1) == bm25_parameters(39) == (1.2, 0.75)
    assert bm25_parameters(40) == bm25_parameters(256) == (2.2, 1.0)
    settings.MEMORYHUB_SEARCH_BM25_LONG_QUERY_LEXEMES = 0
    assert bm25_parameters(256) == (1.2, 0.75)

