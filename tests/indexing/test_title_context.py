"""With MEMORYHUB_CHUNK_TITLE_CONTEXT (off by default: measured, docs/search.md), a file's title (a first line "# ...") is embedded and keyword-indexed with every later chunk, so a
turn of a dated session carries its date; the chunk's own text, lines and snippets stay unchanged, the
title and chunk together fit in the model's window, and each distinct text is still embedded once."""

from indexing.chunking import count_tokens
from indexing.models import Chunk
from indexing.writes import file_ingest
from search.services import memory_search

SESSION = "# Session 7 (1:56 pm on 8 May, 2023)\n\n" + "\n".join(
    f"{'Ana' if i % 2 else 'Ben'}: turn {i} about the garden, the invoice {i * 37} and the boat trip." for i in range(120)
) + "\n"


def test_later_chunks_are_indexed_with_the_files_title_but_keep_their_own_text(alice, fake_embeddings, indexed, settings):
    settings.MEMORYHUB_CHUNK_TITLE_CONTEXT = True
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 120
    with indexed():
        memory_file, _ = file_ingest(agent=alice.agent, path="memory/session-07.md", content=SESSION)
    chunks = list(Chunk.objects.filter(file=memory_file).order_by("ordinal"))
    assert len(chunks) > 5
    lines = SESSION.split("\n")
    for chunk in chunks:
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])  # citations unchanged
        if chunk.start_line > 1:
            assert chunk.search_text.startswith("# Session 7 (1:56 pm on 8 May, 2023)\n")
            assert count_tokens(chunk.search_text) <= 120  # title + chunk fit in the window
        else:
            assert chunk.search_text == chunk.text
    assert fake_embeddings.texts_embedded == len({chunk.text_hash for chunk in chunks})

    # The date is found in a turn that does not say it, and the snippet shows the turn, not the title.
    response = memory_search(agent=alice.agent, query="May 2023 turn 90", mode="keyword")
    best = response.results[0]
    assert best.start_line > 1 and "turn 90" in best.snippet and "Session 7" not in best.snippet


def test_an_append_embeds_only_the_tail_with_the_title_in_front(alice, fake_embeddings, indexed, settings):
    settings.MEMORYHUB_CHUNK_TITLE_CONTEXT = True
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 120
    with indexed():
        file_ingest(agent=alice.agent, path="memory/session-07.md", content=SESSION)
    fake_embeddings.reset_counts()
    with indexed():
        file_ingest(agent=alice.agent, path="memory/session-07.md", content=SESSION + "Ana: one more turn about the boat.\n")
    assert 1 <= fake_embeddings.texts_embedded <= 2


def test_without_a_title_or_with_the_setting_off_chunks_are_indexed_as_they_are(alice, fake_embeddings, indexed, settings):
    settings.MEMORYHUB_CHUNK_TITLE_CONTEXT = True
    settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS = 120
    body = SESSION.split("\n", 2)[2]
    with indexed():
        plain, _ = file_ingest(agent=alice.agent, path="memory/plain.md", content="Not a heading\n\n" + body)
    settings.MEMORYHUB_CHUNK_TITLE_CONTEXT = False
    with indexed():
        off, _ = file_ingest(agent=alice.agent, path="memory/off.md", content=SESSION)
    for memory_file in (plain, off):
        chunks = list(Chunk.objects.filter(file=memory_file))
        assert len(chunks) > 5 and all(chunk.search_text == chunk.text for chunk in chunks)
