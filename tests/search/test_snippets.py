"""Snippets show the lines that match, fill the budget with their neighbours, and cite exactly the
lines they show (so memory_get can expand them); no line is shown whole twice in one answer, and a line
shown in part at a snippet's edge may be shown whole by a later one."""

import json
import os

import pytest

from search.services import memory_search
from search.snippets import ELLIPSIS, FileLines, snippet_build

FILLER = [
    "the weekly sync went over the roadmap and nothing else of note happened",
    "someone asked about the coffee machine on the third floor again",
    "lunch was pizza from the place around the corner, as usual",
    "the printer on level two is still jammed, facilities were told",
    "a reminder went out about filling in timesheets before friday",
]


def long_file(evidence_at: int, total: int = 60, evidence: str = "Caroline adopted a golden retriever named Biscuit.") -> str:
    lines = [f"{i + 1}: {FILLER[i % len(FILLER)]}" for i in range(total)]
    lines[evidence_at - 1] = f"{evidence_at}: {evidence}"
    return "\n".join(lines) + "\n"


def assert_shows_exact_lines(result, content: str):
    """Each snippet line is the cited file line (the last or first may be cut, ending in '…')."""
    file_lines = content.split("\n")
    shown = result["snippet"].split("\n")
    assert len(shown) == result["end_line"] - result["start_line"] + 1
    for offset, text in enumerate(shown):
        line = file_lines[result["start_line"] - 1 + offset]
        if text.endswith(ELLIPSIS) and text != line:
            assert offset in (0, len(shown) - 1)
            assert line.startswith(text[: -len(ELLIPSIS)])
        else:
            assert text == line


@pytest.fixture
def small_chunks(settings):
    settings.MEMORYHUB_CHUNK_TOKENS = 120
    settings.MEMORYHUB_CHUNK_OVERLAP = 20


def test_the_snippet_shows_the_matching_line_not_the_chunk_start(alice, index_files, search, small_chunks):
    content = long_file(evidence_at=27)
    index_files(alice, {"memory/log.md": content})
    code, body = search(alice, "What dog did Caroline adopt?")
    assert code == 200
    top = body["results"][0]
    assert "27: Caroline adopted a golden retriever" in top["snippet"]
    assert top["start_line"] <= 27 <= top["end_line"]
    assert_shows_exact_lines(top, content)


def test_the_snippet_fills_its_budget_with_neighbouring_lines(alice, index_files, search, small_chunks, settings):
    content = long_file(evidence_at=30)
    index_files(alice, {"memory/log.md": content})
    top = search(alice, "golden retriever Biscuit")[1]["results"][0]
    budget = settings.MEMORYHUB_SEARCH_SNIPPET_CHARS
    assert budget - 40 <= len(top["snippet"]) <= budget
    assert top["start_line"] < 30 < top["end_line"]  # lines on both sides
    assert_shows_exact_lines(top, content)


def test_snippets_respect_a_smaller_budget(alice, index_files, search, small_chunks, settings):
    settings.MEMORYHUB_SEARCH_SNIPPET_CHARS = 200
    content = long_file(evidence_at=12)
    index_files(alice, {"memory/log.md": content})
    top = search(alice, "golden retriever")[1]["results"][0]
    assert len(top["snippet"]) <= 200
    assert "Caroline adopted" in top["snippet"]
    assert_shows_exact_lines(top, content)


def test_memory_get_returns_the_lines_a_snippet_cites(alice, index_files, search, small_chunks):
    content = long_file(evidence_at=44)
    index_files(alice, {"memory/log.md": content})
    top = search(alice, "Biscuit the retriever")[1]["results"][0]
    got = alice.client.get(
        f"/api/v1/files/{top['path']}", {"from": top["start_line"], "lines": top["end_line"] - top["start_line"] + 1}
    ).json()
    expected = got["content"].split("\n")
    for shown, line in zip(top["snippet"].split("\n"), expected):
        assert shown == line or (shown.endswith(ELLIPSIS) and line.startswith(shown[:-1]))


def whole_lines(result) -> set[int]:
    """The lines a result shows whole: its cited range without a first or last line cut with '…'."""
    shown = result["snippet"].split("\n")
    first, last = result["start_line"], result["end_line"]
    if shown[0].endswith(ELLIPSIS) and first < last:
        first += 1
    if shown[-1].endswith(ELLIPSIS):
        last -= 1
    return set(range(first, last + 1))


def test_no_line_is_shown_whole_twice_in_one_answer(alice, index_files, search, small_chunks):
    content = "\n".join(f"{i}: the garden project needs watering and the garden beds need weeding" for i in range(1, 61))
    index_files(alice, {"memory/garden.md": content})
    results = search(alice, "garden watering weeding", max_results=50, min_score=0)[1]["results"]
    assert len(results) > 1
    seen: set[int] = set()
    for result in results:
        lines = whole_lines(result)
        assert not lines & seen
        seen |= lines


def test_a_line_shown_in_part_can_be_shown_whole_by_a_later_snippet():
    lines = ["a" * 100, "b" * 40, "the evidence " + "c" * 67, "d" * 30]
    file_lines = FileLines(lines=list(lines))
    shown: set[int] = set()
    # The first hit matches line 1: lines 1-2 fit the 200 characters whole, line 3 only in part.
    first = snippet_build(file_lines=file_lines, region=(0, 1), scores=[1.0, 0.0], shown=shown, budget=200)
    assert (first.first, first.last) == (0, 2)
    assert first.text.split("\n")[2] == lines[2][:57] + ELLIPSIS
    # A later hit on line 3 still shows it, whole, with the line after it.
    later = snippet_build(file_lines=file_lines, region=(2, 3), scores=[1.0, 0.0], shown=shown, budget=200)
    assert later is not None and later.text.split("\n") == lines[2:4]
    assert shown == {1, 2, 3, 4}


def test_overlapping_chunks_of_one_file_do_not_crowd_out_another_file(alice, index_files, search, small_chunks):
    from indexing.chunking import chunk_markdown

    # The matching line sits where two overlapping windows of one long paragraph meet: both chunks hit.
    for k in range(2, 40):
        content = long_file(evidence_at=k, total=40, evidence="the billing invoice reconciliation failed again")
        spans = chunk_markdown(content, max_tokens=120, overlap_tokens=20)
        if sum(span.start_line <= k <= span.end_line for span in spans) >= 2:
            break
    else:
        pytest.fail("no line shared by two chunks")
    index_files(alice, {"memory/billing.md": content, "memory/other.md": "One invoice question from Melanie."})
    results = search(alice, "billing invoice reconciliation", min_score=0)[1]["results"]
    # The best chunk may also show its other lines (a second snippet), but the other file still comes.
    assert results[0]["path"] == "memory/billing.md" and "memory/other.md" in [r["path"] for r in results]
    shown = [(r["path"], line) for r in results for line in whole_lines(r)]
    assert len(shown) == len(set(shown))


def test_transcript_snippets_cite_the_original_jsonl_lines(alice, index_files, search):
    records = [
        {"role": "user", "content": "Hi there, can you help me plan the week?"},
        {"type": "tool_use", "name": "calendar"},
        {"role": "assistant", "content": [{"type": "text", "text": "Sure. What matters most this week?"}]},
        "not json at all",
        {"role": "user", "content": "The dentist appointment on Thursday at 3pm is the big one."},
        {"type": "tool_result", "content": "ok"},
        {"role": "assistant", "content": "Noted: dentist on Thursday at 3pm."},
    ]
    raw = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"
    index_files(alice, {"sessions/2026-11-20.jsonl": raw})
    top = search(alice, "when is the dentist appointment?")[1]["results"][0]
    assert top["source"] == "session"
    shown = top["snippet"].split("\n")
    raw_lines = raw.split("\n")
    # The first and last lines shown are the messages of the cited JSONL lines.
    assert json.loads(raw_lines[top["start_line"] - 1]).get("role") in ("user", "assistant")
    assert shown[0].split(": ", 1)[1] in raw_lines[top["start_line"] - 1]
    assert shown[-1].split(": ", 1)[1] in raw_lines[top["end_line"] - 1]
    assert any("dentist appointment on Thursday" in line for line in shown)


def test_hits_of_one_line_each_ask_postgres_for_no_line_lexemes(alice, index_files, search, small_chunks):
    from django.db import connection

    # Paragraphs of one long line each: every chunk is one line (two would not fit in 120 tokens).
    paragraphs = [" ".join(FILLER[(i + k) % len(FILLER)] for k in range(5)) for i in range(6)]
    paragraphs[3] = "Caroline adopted a golden retriever named Biscuit; " + paragraphs[3]
    content = "\n\n".join(paragraphs) + "\n"
    (stored,) = index_files(alice, {"memory/log.md": content})
    assert {(c.start_line, c.end_line) for c in stored.chunks.all()} == {(line, line) for line in range(1, 12, 2)}
    lexed = []

    def record(execute, sql, params, many, context):
        if "unnest(%s::text[])" in sql:  # search.keyword.lines_lexemes
            lexed.extend(params[1])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        code, body = search(alice, "golden retriever Biscuit", max_results=3)
    assert code == 200
    top = body["results"][0]
    assert top["start_line"] <= 7 <= top["end_line"] and "Caroline adopted" in top["snippet"]
    assert_shows_exact_lines(top, content)
    assert lexed == []  # a one-line region's snippet starts at its line whatever the line scores


# --- snippet_build alone ----------------------------------------------------------------------


@pytest.mark.parametrize("score", [0, 2.5])
def test_a_one_line_region_gives_the_same_snippet_whatever_its_score(score):
    lines = FileLines(lines=[f"line {i:02d}" for i in range(10)])
    shown = {3}
    snippet = snippet_build(file_lines=lines, region=(4, 4), scores=[score], shown=shown, budget=23)
    assert (snippet.first, snippet.last, snippet.text) == (3, 5, "line 03\nline 04\nline 05")
    assert shown == {3, 4, 5, 6}


def test_extension_alternates_after_and_before_within_the_budget():
    lines = FileLines(lines=[f"line {i:02d}" for i in range(20)])  # 7 characters + newline each
    snippet = snippet_build(file_lines=lines, region=(5, 14), scores=[0] * 4 + [2] + [0] * 5, shown=set(), budget=31)
    assert (snippet.first, snippet.last) == (8, 11)
    assert snippet.text == "line 08\nline 09\nline 10\nline 11"


def test_lines_already_shown_stop_the_extension():
    lines = FileLines(lines=[f"line {i:02d}" for i in range(10)])
    shown = {4}  # cited numbers are 1-indexed: line index 3
    snippet = snippet_build(file_lines=lines, region=(3, 6), scores=[0, 1, 0, 0], shown=shown, budget=1000)
    assert snippet.first == 4
    assert shown >= {5, 6, 7, 8, 9, 10}


def test_a_region_shown_entirely_gives_no_snippet():
    lines = FileLines(lines=["a", "b", "c"])
    assert snippet_build(file_lines=lines, region=(0, 2), scores=[1, 1, 1], shown={1, 2, 3}, budget=100) is None


def test_a_line_longer_than_the_budget_is_cut_around_its_match():
    line = "x" * 500 + " the keyword sits here " + "y" * 500
    lines = FileLines(lines=[line])
    snippet = snippet_build(file_lines=lines, region=(0, 0), scores=[1], shown=set(), budget=100, query_lexemes=["keyword"])
    assert len(snippet.text) <= 100
    assert "keyword" in snippet.text
    assert (snippet.first, snippet.last) == (0, 0)


def test_a_hit_found_by_meaning_only_starts_at_its_chunk():
    lines = FileLines(lines=[f"line {i:02d}" for i in range(10)])
    snippet = snippet_build(file_lines=lines, region=(4, 6), scores=[0, 0, 0], shown=set(), budget=15)
    assert snippet.text == "line 04\nline 05"


def test_transcript_lines_map_to_jsonl_lines():
    lines = FileLines(lines=["User: a", "Assistant: b", "User: c"], line_map=[1, 3, 7])
    assert lines.region(3, 7) == (1, 2)
    snippet = snippet_build(file_lines=lines, region=(1, 2), scores=[0, 1], shown=set(), budget=11)
    assert (lines.cite(snippet.first), lines.cite(snippet.last)) == (7, 7)


def stretch_file() -> str:
    """60 lines; lines 21-45 are one topic told over many turns: its middle (31-35) matches the question
    less than the lines around it, so the chunks there score below their neighbours."""
    lines = [f"{i + 1}: {FILLER[i % len(FILLER)]}" for i in range(60)]
    topics = ["pump", "valves", "timer", "hoses", "filter", "nozzles"]
    for i in range(20, 45):
        lines[i] = f"{i + 1}: the garden irrigation plan, the {topics[i % len(topics)]} and the watering schedule for the beds"
    for i in range(30, 35):
        lines[i] = f"{i + 1}: and for the {topics[i % len(topics)]} we agreed to ask the neighbours what they use"
    return "\n".join(lines) + "\n"


@pytest.fixture
def garden_stretch(alice, index_files, small_chunks, settings):
    """stretch_file() indexed for alice, snippets of 200 characters: (its content, a question about its topic)."""
    settings.MEMORYHUB_SEARCH_SNIPPET_CHARS = 200
    content = stretch_file()
    index_files(alice, {"memory/garden.md": content})
    return content, "garden irrigation watering schedule"


def test_a_hit_inside_a_stretch_gets_a_wider_snippet_within_the_answers_room(alice, garden_stretch, settings):
    """A hit whose neighbouring chunks score as well as itself (fusion.neighbour_credit's in_stretch) may take
    up to MEMORYHUB_SEARCH_SNIPPET_STRETCH x the snippet budget; the answer's snippets never hold more than
    max_results x the budget in all."""
    content, query = garden_stretch

    settings.MEMORYHUB_SEARCH_SNIPPET_STRETCH = 1
    narrow = memory_search(agent=alice.agent, query=query, max_results=4, explain=True).results
    assert narrow and all(len(r.snippet) <= 200 for r in narrow)
    assert any(r.explain.get("in_stretch") for r in narrow)

    settings.MEMORYHUB_SEARCH_SNIPPET_STRETCH = 2
    wide = memory_search(agent=alice.agent, query=query, max_results=4, explain=True).results
    widened = [r for r in wide if len(r.snippet) > 200]
    assert widened and all(r.explain["in_stretch"] and len(r.snippet) <= 400 for r in widened)
    assert all(len(r.snippet) <= 200 for r in wide if not r.explain.get("in_stretch"))
    assert sum(len(r.snippet) for r in wide) <= 4 * 200
    for r in wide:
        assert_shows_exact_lines({"snippet": r.snippet, "start_line": r.start_line, "end_line": r.end_line}, content)

    settings.MEMORYHUB_SEARCH_SNIPPET_STRETCH = 10  # one stretch hit could fill the answer: the room still holds
    widest = memory_search(agent=alice.agent, query=query, max_results=4, explain=True).results
    assert sum(len(r.snippet) for r in widest) <= 4 * 200 and len(widest) < 4


def test_the_best_hit_of_a_long_run_of_matching_chunks_gets_a_wider_snippet(alice, garden_stretch, settings):
    """A topic told over many chunks: its best chunk scores above its neighbours, so neighbour_credit does
    not mark it, but it is the best of a run of at least MEMORYHUB_SEARCH_STRETCH_RUN touching chunks among
    the answer's 2 x max_results best (fusion.stretch_runs), and gets the wider snippet too."""
    content, query = garden_stretch

    settings.MEMORYHUB_SEARCH_STRETCH_RUN = 0
    before = memory_search(agent=alice.agent, query=query, max_results=4, explain=True).results
    assert before[0].explain["in_stretch"] is False and len(before[0].snippet) <= 200  # a peak of its stretch
    settings.MEMORYHUB_SEARCH_STRETCH_RUN = 50  # a run longer than the 8 best candidates: the same answer
    assert [(r.start_line, r.snippet) for r in memory_search(agent=alice.agent, query=query, max_results=4).results] == [
        (r.start_line, r.snippet) for r in before
    ]

    settings.MEMORYHUB_SEARCH_STRETCH_RUN = 3
    after = memory_search(agent=alice.agent, query=query, max_results=4, explain=True).results
    assert after[0].explain["in_stretch"] is True and 200 < len(after[0].snippet) <= 400
    assert sum(len(r.snippet) for r in after) <= 4 * 200
    for r in after:
        assert_shows_exact_lines({"snippet": r.snippet, "start_line": r.start_line, "end_line": r.end_line}, content)


def test_a_lines_score_is_the_same_in_every_process():
    """A line's lexemes are a set, whose order follows the process's string hashing; a float sum in another
    order can differ in its last bit, and two windows of equal score then won by turns from one process
    to the next. The sum is exact: every hash seed gives the same score."""
    import subprocess
    import sys

    code = (
        "from search.snippets import line_scores; "
        "print(repr(line_scores([set('abcdef')], dict(zip('abcdef', (0.1, 0.2, 0.3, 0.7, 1.1, 2.3))), list('abcdef'))))"
    )
    scores = {
        subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": str(seed)}, capture_output=True, text=True, check=True
        ).stdout
        for seed in range(12)
    }
    assert scores == {"[4.7]\n"}
