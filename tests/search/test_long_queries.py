"""A query longer than the embedding model's window (a pasted stretch of dialogue) is read whole: every
window of it is embedded and a memory close to any window is found at that window's distance; and the
keyword half uses the query's words wherever they stand, not only its first 64 lexemes; its results are
spread over what it talks about."""

from hypothesis import assume, given
from hypothesis import strategies as st

from indexing.chunking import chunk_markdown
from search.query_windows import query_windows
from search.keyword import query_lexemes
from search.services import memory_search

FILLER = [f"Ben: we talked about topic{i} and nothing else today, word{i} and thing{i}." for i in range(40)]


def test_a_long_query_is_cut_into_windows_of_whole_lines_within_the_window():
    text = "\n".join(FILLER)
    windows = query_windows(text, max_tokens=40)
    assert len(windows) == 8  # capped: a 10,000-character query costs at most 8 embeddings
    assert all(window.split("\n")[0] in FILLER for window in windows)  # whole lines
    assert query_windows("a short question?", max_tokens=40) == ["a short question?"]


@given(st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), min_size=1, max_size=40))
def test_a_one_line_query_of_no_more_bytes_than_the_window_has_tokens_is_one_window(text):
    # query_windows answers such a query without tokenising it: the chunker agrees (a heading, a fence,
    # CJK or emoji included) that it is one window.
    assume(len(text.encode()) <= 40)
    assert len(chunk_markdown(text, max_tokens=40, overlap_tokens=0)) <= 1
    assert query_windows(text, max_tokens=40) == [text]


def test_a_memory_matching_the_end_of_a_long_query_is_found_by_meaning(alice, index_files, fake_embeddings, settings):
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 60
    index_files(alice, {
        "memory/events/2023-05-08-001.md": "# 8 May, 2023\n\nAna adopts a greyhound puppy called Biscuit.\n",
        "memory/events/2023-06-01-002.md": "# 1 June, 2023\n\nBen repaints the kitchen cupboards green.\n",
    })
    query = "\n".join(FILLER[:6] + ["Ana: Ana adopts a greyhound puppy called Biscuit."])
    fake_embeddings.reset_counts()
    response = memory_search(agent=alice.agent, query=query, mode="vector", explain=True)
    assert fake_embeddings.queries_embedded == len(query_windows(query, max_tokens=60)) > 1
    best = response.results[0]
    assert best.path == "memory/events/2023-05-08-001.md"
    # Its distance is that of the last window alone (nearly the same words), not of the whole query.
    assert best.explain["vector_score"] > 0.8


def test_the_keyword_half_reads_past_the_first_64_lexemes(alice, index_files):
    index_files(alice, {"memory/notes.md": "# Notes\n\nThe marmalade recipe needs Seville oranges.\n"})
    query = " ".join(f"filler{i}" for i in range(100)) + " marmalade"
    response = memory_search(agent=alice.agent, query=query, mode="keyword")
    assert [r.path for r in response.results] == ["memory/notes.md"]


# Two notes retell one event; a third is another event the same dialogue talks about.
RETOLD = {
    "memory/events/puppy-1.md": "Ana adopts a greyhound puppy called Biscuit at the shelter.",
    "memory/events/puppy-2.md": "Ana adopts a greyhound puppy called Biscuit from the shelter.",
    "memory/events/kitchen.md": "Ben repaints the kitchen cupboards green.",
    **{f"memory/events/other-{i}.md": f"Somebody mentions topic{i} once." for i in range(4)},
}
DIALOGUE = "\n".join(
    FILLER[:10] + ["Ana: I adopted a greyhound puppy at the shelter, Biscuit! The puppy Biscuit loves the shelter staff.",
                  "Ben: Lovely. My kitchen is a mess."]
)


def test_a_long_querys_results_spread_over_what_it_talks_about(alice, index_files, settings):
    index_files(alice, RETOLD)
    settings.MEMORYHUB_SEARCH_DIVERSITY = 1.0
    assert len(query_lexemes(DIALOGUE)) >= settings.MEMORYHUB_SEARCH_DIVERSITY_MIN_LEXEMES
    response = memory_search(agent=alice.agent, query=DIALOGUE, max_results=2, explain=True)
    first, second = response.results
    assert first.path.startswith("memory/events/puppy-") and not second.path.startswith("memory/events/puppy-")
    assert "diversity_penalty" not in first.explain and second.explain["diversity_penalty"] >= 0

    settings.MEMORYHUB_SEARCH_DIVERSITY = 0  # off: the retelling comes second
    plain = memory_search(agent=alice.agent, query=DIALOGUE, max_results=2, explain=True)
    assert sorted(r.path for r in plain.results) == ["memory/events/puppy-1.md", "memory/events/puppy-2.md"]
    assert all("diversity_penalty" not in r.explain for r in plain.results)


def test_a_question_is_not_spread_however_alike_its_best_results(alice, index_files, settings):
    index_files(alice, RETOLD)
    settings.MEMORYHUB_SEARCH_DIVERSITY = 1.0
    question = "Which greyhound puppy did Ana adopt at the shelter near her kitchen?"
    response = memory_search(agent=alice.agent, query=question, max_results=2)
    assert sorted(r.path for r in response.results) == ["memory/events/puppy-1.md", "memory/events/puppy-2.md"]
    # The same question counts as long once the threshold is its own number of words.
    settings.MEMORYHUB_SEARCH_DIVERSITY_MIN_LEXEMES = len(query_lexemes(question))
    spread = memory_search(agent=alice.agent, query=question, max_results=2)
    assert not spread.results[1].path.startswith("memory/events/puppy-")


def test_a_long_query_whose_similarities_run_out_of_time_keeps_the_fusions_order(alice, index_files, settings, monkeypatch):
    from search import services
    from search.deadline import SearchTimedOut

    index_files(alice, RETOLD)
    settings.MEMORYHUB_SEARCH_DIVERSITY = 1.0

    def too_slow(**kwargs):
        raise SearchTimedOut

    monkeypatch.setattr(services, "pairwise_similarity", too_slow)
    response = memory_search(agent=alice.agent, query=DIALOGUE, max_results=2, explain=True)
    assert sorted(r.path for r in response.results) == ["memory/events/puppy-1.md", "memory/events/puppy-2.md"]
    assert all("diversity_penalty" not in r.explain for r in response.results)
