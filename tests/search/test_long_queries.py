"""A query longer than the embedding model's window (a pasted stretch of dialogue) is read whole: every
window of it is embedded and a memory close to any window is found at that window's distance; and the
keyword half uses the query's words wherever they stand, not only its first 64 lexemes."""

from hypothesis import assume, given
from hypothesis import strategies as st

from indexing.chunking import chunk_markdown
from search.query_windows import query_windows
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
