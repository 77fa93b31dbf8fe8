"""JSONL transcripts: user and assistant text kept one message per line, noise dropped, lines mapped back."""

import json

import pytest

from indexing.chunking import chunk_markdown
from indexing.transcripts import chunk_transcript, map_lines, transcript_from_jsonl


def jsonl(*records) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def test_it_keeps_user_and_assistant_text_one_line_per_message():
    raw = jsonl(
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "Where is the   deploy key?\n\nI lost it."},
        {"role": "assistant", "content": [{"type": "text", "text": "In vault,"}, {"type": "text", "text": "path ops/deploy."}]},
    )
    transcript = transcript_from_jsonl(raw)
    assert transcript.text == "User: Where is the deploy key? I lost it.\nAssistant: In vault, path ops/deploy."
    assert transcript.line_map == [2, 3]
    assert transcript.messages == 2
    assert transcript.malformed_lines == 0


def test_it_drops_tool_calls_results_images_and_empty_messages():
    raw = jsonl(
        {"role": "user", "content": [{"type": "image", "source": {"data": "..."}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "secret output"}]},
        {"role": "tool", "content": "tool output"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Found it."}]},
        {"role": "assistant", "content": "   "},
        {"type": "session", "id": "abc"},
    )
    transcript = transcript_from_jsonl(raw)
    assert transcript.text == "Assistant: Found it."
    assert transcript.line_map == [5]
    assert "secret output" not in transcript.text


def test_it_unwraps_openclaw_and_claude_code_records():
    raw = jsonl(
        {"type": "session", "version": 3},
        {"type": "message", "id": "m1", "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "hi there"}]}},
    )
    transcript = transcript_from_jsonl(raw)
    assert transcript.text == "User: hello\nAssistant: hi there"
    assert transcript.line_map == [2, 3]


def test_malformed_lines_are_skipped_and_counted_never_fatal():
    raw = jsonl(
        {"role": "user", "content": "first"},
        "{not json",
        "[1, 2, 3]",
        '"just a string"',
        "",
        {"role": "assistant", "content": "second"},
    )
    transcript = transcript_from_jsonl(raw)
    assert transcript.text == "User: first\nAssistant: second"
    assert transcript.line_map == [1, 6]
    assert transcript.malformed_lines == 3


def test_an_empty_or_all_noise_transcript_has_no_text():
    assert transcript_from_jsonl("").text == ""
    transcript = transcript_from_jsonl(jsonl({"role": "system", "content": "x"}, "oops"))
    assert (transcript.text, transcript.line_map, transcript.messages, transcript.malformed_lines) == ("", [], 0, 1)


def test_chunk_ranges_map_back_to_the_jsonl_lines():
    records = []
    for i in range(120):
        records.append({"type": "tool_call", "name": "noop"})
        records.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} " + "words " * 30})
    transcript = transcript_from_jsonl(jsonl(*records))
    raw_lines = jsonl(*records).split("\n")
    chunks = chunk_markdown(transcript.text, max_tokens=200, overlap_tokens=40)
    assert len(chunks) > 3
    for chunk in chunks:
        first, last = map_lines(chunk.start_line, chunk.end_line, transcript.line_map)
        assert first == 2 * chunk.start_line and last == 2 * chunk.end_line
        first_message = json.loads(raw_lines[first - 1])["content"]
        assert chunk.text.split("\n")[0].endswith(" ".join(first_message.split()))


def test_map_lines_clamps_and_rejects_an_empty_map():
    assert map_lines(2, 99, [3, 5, 9]) == (5, 9)
    assert map_lines(0, 1, [3, 5, 9]) == (3, 3)
    with pytest.raises(ValueError):
        map_lines(1, 1, [])


def test_chunk_transcript_cites_jsonl_lines_and_appending_reuses_all_but_the_last_chunk():
    records = []
    for i in range(300):
        records.append({"type": "message", "message": {"role": "user" if i % 2 == 0 else "assistant",
                                                       "content": [{"type": "text", "text": f"turn {i} " + "talk " * 20}]}})
        records.append({"type": "tool_result", "content": "noise"})
    before = jsonl(*records[:400])
    after = before + jsonl(*records[400:])
    old, transcript = chunk_transcript(before)
    new, _ = chunk_transcript(after)
    assert transcript.messages == 200 and len(old) > 5
    for chunk in old:
        assert chunk.start_line % 2 == 1 and chunk.end_line % 2 == 1  # message records are the odd JSONL lines
        first_turn = int(chunk.text.split("\n")[0].split()[2])
        assert chunk.start_line == 2 * first_turn + 1
    assert new[: len(old) - 1] == old[:-1]
