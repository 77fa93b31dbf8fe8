"""The chunker: exact line ranges, token caps, headings, code fences, stability under appending."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexing.chunking import ChunkSpan, chunk_markdown, count_tokens, split_lines


def lines_of(text: str, chunk: ChunkSpan) -> str:
    return "\n".join(split_lines(text)[chunk.start_line - 1 : chunk.end_line])


def is_piece_of_long_line(text: str, chunk: ChunkSpan, max_tokens: int) -> bool:
    line = split_lines(text)[chunk.start_line - 1]
    return chunk.start_line == chunk.end_line and count_tokens(line) > max_tokens and chunk.text in line


def paragraph(words: int, seed: int) -> str:
    vocabulary = ["alpha", "beta", "gamma", "delta", "memory", "agent", "search", "vector", "token", "index"]
    return " ".join(vocabulary[(seed * 7 + i * 3) % len(vocabulary)] + str(i % 13) for i in range(words))


# --- basics -------------------------------------------------------------------------------------


def test_count_tokens_uses_cl100k_base():
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2
    # Special-token text is counted as plain text instead of raising.
    assert count_tokens("<|endoftext|>") > 1


@pytest.mark.parametrize("text", ["", "   ", "\n\n\n", " \t\n \r\n"])
def test_empty_or_blank_text_gives_no_chunks(text):
    assert chunk_markdown(text) == []


def test_a_short_file_is_one_chunk_with_its_exact_line_range():
    text = "\n\n# Notes\n\nThe deploy key lives in vault.\nRotate it monthly.\n\n"
    [chunk] = chunk_markdown(text)
    assert (chunk.start_line, chunk.end_line) == (3, 6)
    assert chunk.text == "# Notes\n\nThe deploy key lives in vault.\nRotate it monthly."
    assert chunk.token_count == count_tokens(chunk.text)


def test_each_heading_starts_a_new_chunk():
    text = "# One\nfirst section\n\n## Two\nsecond section\n### Three\nthird\n#### Four is not a split\nstill third"
    chunks = chunk_markdown(text)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 2), (4, 5), (6, 9)]
    assert chunks[2].text.startswith("### Three")


def test_a_hash_line_inside_a_code_fence_is_not_a_heading():
    text = "# Script\n```bash\n# install\npip install x\n```\nafter"
    assert [(c.start_line, c.end_line) for c in chunk_markdown(text)] == [(1, 6)]


def test_paragraphs_are_packed_until_the_cap_and_split_between_paragraphs():
    paragraphs = [paragraph(60, seed) for seed in range(6)]
    text = "\n\n".join(paragraphs)
    chunks = chunk_markdown(text, max_tokens=150, overlap_tokens=30)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.token_count <= 150
        # Natural boundaries: every chunk starts and ends on a paragraph boundary, no overlap needed.
        assert chunk.text.split("\n\n")[0] in paragraphs
        assert chunk.text.split("\n\n")[-1] in paragraphs
    assert sum(c.text.count("\n\n") + 1 for c in chunks) == len(paragraphs)


def test_a_code_block_that_fits_is_kept_whole_in_its_own_chunk():
    prose = paragraph(100, 1)
    code = "```python\n" + "\n".join(f"value_{i} = compute({i})\n" for i in range(12)) + "```"
    text = prose + "\n\n" + code + "\n\nafter the code"
    assert count_tokens(code) < 200 < count_tokens(prose + "\n\n" + code)
    chunks = chunk_markdown(text, max_tokens=200, overlap_tokens=40)
    assert any(code in c.text for c in chunks)
    assert not any(c.text.count("```") == 1 for c in chunks)


def test_a_long_paragraph_is_windowed_by_whole_lines_with_overlap():
    lines = [f"Line {i}: " + paragraph(12, i) for i in range(80)]
    text = "\n".join(lines)
    chunks = chunk_markdown(text, max_tokens=120, overlap_tokens=30)
    assert len(chunks) > 5
    for previous, following in zip(chunks, chunks[1:]):
        assert following.text == lines_of(text, following)
        assert following.start_line <= previous.end_line  # the windows overlap…
        overlap = "\n".join(lines[following.start_line - 1 : previous.end_line])
        assert count_tokens(overlap) <= 30  # …by at most overlap_tokens
        assert following.start_line > previous.start_line
    assert chunks[-1].end_line == len(lines)


def test_an_over_long_line_is_cut_into_pieces_of_that_line():
    long_line = " ".join(f"word{i}" for i in range(900)) + " " + "".join(chr(0x4E00 + 7 * i) for i in range(300))
    text = "before\n\n" + long_line + "\n\nafter"
    chunks = chunk_markdown(text, max_tokens=100, overlap_tokens=20)
    pieces = [c for c in chunks if c.start_line == 3]
    assert len(pieces) > 5
    assert all(p.end_line == 3 and p.text in long_line and p.token_count <= 100 for p in pieces)
    assert long_line.startswith(pieces[0].text) and long_line.endswith(pieces[-1].text)
    # Consecutive pieces overlap, so together they cover the whole line.
    position = 0
    for piece in pieces:
        start = long_line.index(piece.text, max(0, position - len(piece.text)))
        assert start <= position
        position = start + len(piece.text)
    assert position == len(long_line)
    assert chunks[0].text == "before" and chunks[-1].text == "after"


def test_sizes_are_validated():
    with pytest.raises(ValueError):
        chunk_markdown("x", max_tokens=0)
    with pytest.raises(ValueError):
        chunk_markdown("x", max_tokens=10, overlap_tokens=10)


# --- stability ------------------------------------------------------------------------------------


def test_appending_to_a_transcript_changes_only_its_last_chunk():
    turns = [f"{'User' if i % 2 else 'Assistant'}: message {i} " + paragraph(25, i) for i in range(200)]
    before = "\n".join(turns[:150]) + "\n"
    after = before + "\n".join(turns[150:]) + "\n"
    old = chunk_markdown(before)
    new = chunk_markdown(after)
    assert len(old) > 10
    assert new[: len(old) - 1] == old[:-1]
    reused = {c.text for c in old} & {c.text for c in new}
    assert len(reused) == len(old) - 1  # only the last chunk of the old version is re-embedded


markdown_lines = st.one_of(
    st.just(""),
    st.just("   "),
    st.sampled_from(["# Title", "## Section", "### Sub", "#### Deep", "```", "~~~", "```python", "    code"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=40),
    st.builds(lambda n, s: paragraph(n, s), st.integers(1, 60), st.integers(0, 50)),
)
markdown_texts = st.lists(markdown_lines, max_size=60).map("\n".join)
sizes = st.integers(8, 120).flatmap(lambda m: st.tuples(st.just(m), st.integers(0, m - 1)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=markdown_texts, size=sizes)
def test_chunks_cover_the_text_in_order_with_exact_lines(text, size):
    max_tokens, overlap = size
    chunks = chunk_markdown(text, max_tokens=max_tokens, overlap_tokens=overlap)
    lines = split_lines(text)
    covered = set()
    previous = (0, 0)
    for chunk in chunks:
        assert chunk.text.strip()
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        assert (chunk.start_line, chunk.end_line) >= previous
        previous = (chunk.start_line, chunk.end_line)
        assert chunk.token_count == count_tokens(chunk.text) <= max_tokens
        if chunk.text != lines_of(text, chunk):
            assert is_piece_of_long_line(text, chunk, max_tokens)
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    non_blank = {i + 1 for i, line in enumerate(lines) if line.strip()}
    assert non_blank <= covered


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head=markdown_texts, tail=markdown_texts, size=sizes)
def test_appending_keeps_every_chunk_but_the_last(head, tail, size):
    max_tokens, overlap = size
    before = head + "\n"
    old = chunk_markdown(before, max_tokens=max_tokens, overlap_tokens=overlap)
    new = chunk_markdown(before + tail, max_tokens=max_tokens, overlap_tokens=overlap)
    assert new[: max(len(old) - 1, 0)] == old[:-1]
