"""The LoCoMo protocol's arithmetic: files and line map, evidence matching, the snippet budget, metrics."""

import pytest

from benchmarks.locomo import (
    Question,
    conversation_files,
    conversation_load,
    normalise_evidence,
    percentile,
    question_score,
    scores_summary,
    snippets_within_budget,
)

SAMPLE = {
    "sample_id": "conv-test",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_2_date_time": "2:00 pm on 9 May, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "I adopted a puppy called Biscuit."},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Lovely!\nSend me\tpictures."},
        ],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben!"},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Look at my garden.", "blip_caption": "a photo of tomatoes"},
        ],
        "session_3_date_time": "a date without turns",  # LoCoMo lists dates of sessions that have no turns
    },
    "qa": [
        {"question": "What is the puppy called?", "answer": "Biscuit", "evidence": ["D2:1"], "category": 4},
        {"question": "What did Ben show and adopt?", "answer": "x", "evidence": ["D1:2", "D:2:1"], "category": 1},
        {"question": "Joined ids", "answer": "x", "evidence": ["D1:1; D2:02"], "category": 2},
        {"question": "Adversarial", "evidence": ["D1:1"], "category": 5},
        {"question": "Unknown evidence", "answer": "x", "evidence": ["D9:9", "D"], "category": 3},
    ],
}


def result(path, start, end, snippet):
    return {"path": path, "start_line": start, "end_line": end, "snippet": snippet, "score": 0.5, "source": "memory"}


def test_each_session_becomes_a_numbered_file_with_its_date_and_one_turn_per_line():
    files, turns = conversation_files(SAMPLE["conversation"])
    assert list(files) == ["memory/session-01.md", "memory/session-02.md"]
    assert files["memory/session-01.md"].splitlines() == [
        "# Session 1 (1:56 pm on 8 May, 2023)",
        "",
        "Ana: Hi Ben!",
        "Ben: Look at my garden. [shares a photo: a photo of tomatoes]",
    ]
    assert files["memory/session-02.md"].splitlines()[3] == "Ana: Lovely! Send me pictures."
    assert turns["D1:2"].path == "memory/session-01.md" and turns["D1:2"].line == 4
    assert turns["D2:1"].line == 3
    for turn in turns.values():
        assert files[turn.path].splitlines()[turn.line - 1] == turn.text


@pytest.mark.parametrize(
    "raw, expected",
    [("D3:5", ["D3:5"]), ("D:11:26", ["D11:26"]), ("D8:6; D9:17", ["D8:6", "D9:17"]), ("D03:05", ["D3:5"]), ("D", [])],
)
def test_malformed_evidence_ids_are_repaired_or_dropped(raw, expected):
    assert normalise_evidence(raw) == expected


def test_questions_keep_categories_one_to_four_with_known_evidence():
    conversation = conversation_load(SAMPLE)
    assert [(q.text, q.evidence) for q in conversation.questions] == [
        ("What is the puppy called?", ("D2:1",)),
        ("What did Ben show and adopt?", ("D1:2", "D2:1")),
        ("Joined ids", ("D1:1", "D2:2")),
    ]
    assert conversation.skipped_questions == 1


def test_a_turn_counts_only_in_a_snippet_of_its_own_file():
    conversation = conversation_load(SAMPLE)
    question = conversation.questions[0]
    line = conversation.turns["D2:1"].text
    elsewhere = question_score(question=question, turns=conversation.turns, results=[result("memory/other.md", 1, 1, line)])
    assert elsewhere.recall == 0 and not elsewhere.hit and elsewhere.reciprocal_rank == 0
    found = question_score(
        question=question, turns=conversation.turns,
        results=[result("memory/session-01.md", 3, 4, "Ana: Hi Ben!"), result("memory/session-02.md", 3, 3, line)],
    )
    assert found.recall == 1 and found.hit and found.reciprocal_rank == 0.5


def test_the_first_80_characters_of_the_line_must_be_shown():
    long_text = "x" * 200
    sample = {"conversation": {"session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": long_text}]},
              "qa": [{"question": "q", "evidence": ["D1:1"], "category": 4}]}
    conversation = conversation_load(sample)
    line = conversation.turns["D1:1"].text
    question = conversation.questions[0]
    cut = question_score(question=question, turns=conversation.turns, results=[result("memory/session-01.md", 3, 3, line[:79])])
    shown = question_score(question=question, turns=conversation.turns, results=[result("memory/session-01.md", 3, 3, line[:80])])
    assert cut.recall == 0 and shown.recall == 1


def test_snippets_beyond_the_4200_character_budget_are_not_read():
    snippets = [result(f"memory/{i}.md", 1, 1, "a" * 1000) for i in range(6)]
    shown = snippets_within_budget(snippets)
    assert [len(s.text) for s in shown] == [1000, 1000, 1000, 1000, 200]

    conversation = conversation_load(SAMPLE)
    line = conversation.turns["D2:1"].text
    late = snippets + [result("memory/session-02.md", 3, 3, line)]
    score = question_score(question=conversation.questions[0], turns=conversation.turns, results=late)
    assert score.recall == 0


def test_partial_recall_and_misses_next_to_a_shown_snippet_are_counted():
    conversation = conversation_load(SAMPLE)
    question = conversation.questions[1]  # D1:2 (session 1, line 4) and D2:1 (session 2, line 3)
    score = question_score(
        question=question, turns=conversation.turns,
        results=[result("memory/session-02.md", 3, 3, conversation.turns["D2:1"].text), result("memory/session-01.md", 3, 3, "Ana: Hi Ben!")],
    )
    assert score.recall == 0.5 and score.hit and score.reciprocal_rank == 1.0
    assert score.missed_in_shown_file == 1 and score.missed_near_snippet == 1


def test_summary_averages_over_questions_overall_and_per_category():
    turns = conversation_load(SAMPLE).turns
    q4 = Question(text="a", category=4, evidence=("D2:1",))
    q1 = Question(text="b", category=1, evidence=("D1:2", "D2:1"))
    hit = [result("memory/session-02.md", 3, 3, turns["D2:1"].text)]
    scores = [question_score(question=q4, turns=turns, results=hit), question_score(question=q1, turns=turns, results=[])]
    summary = scores_summary(scores)
    assert summary.questions == 2
    assert summary.evidence_recall == 0.5 and summary.hit_rate == 0.5 and summary.mrr == 0.5
    assert summary.evidence_turns == 3 and summary.evidence_found == 1
    assert summary.categories["4"]["evidence_recall"] == 1.0 and summary.categories["1"]["evidence_recall"] == 0.0
    assert summary.categories["2"]["questions"] == 0


def test_percentiles_use_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.95) == 95 and percentile([], 0.95) == 0
