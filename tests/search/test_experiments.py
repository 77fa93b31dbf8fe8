"""benchmarks/experiments/: the derived checks docs/search.md quotes, on a made-up conversation.
observations_check.py: LoCoMo-shaped observations as dated notes, stretches of dialogue as queries;
daily_notes_check.py: the same observations as the lines of daily notes, LoCoMo's questions as queries;
single_file_check.py: a conversation's sessions joined into one file, its turns' lines moved with them;
candidate_stages.py: the speaker, centring and file-spread stages' arithmetic;
line_meaning.py: the lines of a snippet scored by meaning beside their query words;
common_words.py: a question without the words most of the memory's chunks hold;
word_neighbours.py: the memory's words nearest in meaning to a question's, as a second keyword query;
subwindow_vectors.py: a chunk at the best distance of its windows; fitted_fusion.py: its features and proxy;
vector_feedback.py: the query moved toward its nearest chunks, and two searches' hits merged;
date_within_file.py: a question without its dates, and two keyword runs' hits joined by file;
mixed_index.py: the share of chunks given another model's vector."""

import math

import pytest

from benchmarks.experiments.candidate_stages import (
    centred, file_spread, list_question, list_questions_recall, named_speakers, speaker_of, speaker_share,
)
from benchmarks.experiments.common_words import combined, stripped, word_shares
from benchmarks.experiments.daily_notes_check import daily_notes_load
from benchmarks.experiments.date_within_file import combined as date_combined, without_dates
from benchmarks.experiments.derived import session_day
from benchmarks.experiments.fitted_fusion import features, peak, proxy
from benchmarks.experiments.line_meaning import meaning_scores
from benchmarks.experiments.mixed_index import stale
from benchmarks.experiments.observations_check import observations_load
from benchmarks.experiments.single_file_check import PATH, single_file_load
from benchmarks.experiments.subwindow_vectors import best_window_hits
from benchmarks.experiments.vector_feedback import merged, moved
from benchmarks.experiments.word_neighbours import content_words, lifted, neighbours, vocabulary
from benchmarks.locomo import conversation_load


def turn(dia_id: str, speaker: str, text: str) -> dict:
    return {"dia_id": dia_id, "speaker": speaker, "text": text}


SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            turn("D1:1", "Ann", "I adopted a puppy."),
            turn("D1:2", "Bo", "What is her name?"),
            turn("D1:3", "Ann", "Coco. I also started drinking green tea."),
            turn("D1:4", "Bo", "Tea every morning?"),
            turn("D1:5", "Ann", "See you soon."),
        ],
        "session_2": [turn("D2:1", "Bo", "No date for this session.")],
    },
    "observation": {
        "session_1_observation": {
            "Ann": [["Ann adopted a puppy named Coco.", "D1:1"], ["Ann drinks   green tea.", ["D1:3", "D1:4"]]],
            "Bo": [["Bo asked about   the puppy.", "D1:2"]],
        },
        "session_2_observation": {"Bo": [["Bo has no date.", "D2:1"]]},  # no session date: left out
    },
    "qa": [
        {"question": "What is the puppy's name?", "answer": "Coco", "evidence": ["D1:1", "D1:3"], "category": 4},
        {"question": "What does Ann drink?", "answer": "tea", "evidence": ["D1:4"], "category": 1},
        {"question": "Who said goodbye?", "answer": "Ann", "evidence": ["D1:5"], "category": 4},  # no fact cites D1:5
        {"question": "Unanswerable?", "evidence": ["D1:1"], "category": 5},  # category 5: never asked
    ],
}


def test_session_dates_are_read_from_locomos_date_time():
    assert session_day("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08"
    assert session_day("10:04 am on 19 January,2024").isoformat() == "2024-01-19"


def test_each_dated_observation_is_a_note_and_each_stretch_a_query_of_the_notes_it_cites():
    conversation = observations_load(SAMPLE, "tune", stretch=2)

    assert conversation.part == "tune"
    assert sorted(conversation.files) == [
        "memory/observations/2023-05-08-0001.md", "memory/observations/2023-05-08-0002.md", "memory/observations/2023-05-08-0003.md",
    ]
    puppy, tea, asked = sorted(conversation.files)
    assert conversation.files[tea] == "# 8 May, 2023\n\nAnn drinks green tea.\n"  # whitespace folded
    assert conversation.turns[tea].line == 3 and conversation.turns[tea].text == "Ann drinks green tea."

    # Stretches of two turns: D1:1-2 cite the puppy and Bo's question, D1:3-4 the tea (once), D1:5 nothing.
    assert [q.evidence for q in conversation.questions] == [(puppy, asked), (tea,)]
    assert conversation.questions[0].text == "Ann: I adopted a puppy.\nBo: What is her name?"
    assert {q.category for q in conversation.questions} == {"events"}

    whole = observations_load(SAMPLE, "confirm", stretch=16)
    assert [q.evidence for q in whole.questions] == [(puppy, asked, tea)]


def test_daily_notes_hold_a_sessions_facts_as_lines_and_questions_ask_for_the_facts_citing_their_turns():
    conversation = daily_notes_load(SAMPLE, "confirm")

    assert conversation.files == {
        "memory/2023-05-08.md": (
            "# 8 May, 2023\n\n- Ann adopted a puppy named Coco.\n- Ann drinks green tea.\n- Bo asked about the puppy.\n"
        ),
    }
    puppy, tea, asked = "F1", "F2", "F3"
    assert conversation.turns[tea].path == "memory/2023-05-08.md"
    assert conversation.turns[tea].line == 4 and conversation.turns[tea].text == "- Ann drinks green tea."
    assert [(q.text, q.category, q.evidence) for q in conversation.questions] == [
        ("What is the puppy's name?", 4, (puppy, tea)),  # D1:3 is cited by the tea fact
        ("What does Ann drink?", 1, (tea,)),
    ]
    assert conversation.skipped_questions == 1
    assert asked not in {e for q in conversation.questions for e in q.evidence}


def test_a_query_names_speakers_whole_or_by_a_long_word_of_their_label():
    labels = {"Professor C", "Grad A", "Grad E", "PhD A", "Project Manager", "Melanie", "Caroline"}
    assert named_speakers("What did Melanie paint?", labels) == {"Melanie"}
    assert named_speakers("What did Grad E contribute?", labels) == {"Grad E"}  # whole: not Grad A
    assert named_speakers("What did the professor think about clustering?", labels) == {"Professor C"}
    assert named_speakers("Summarize the Project Manager's perspective", labels) == {"Project Manager"}
    assert named_speakers("Did a grad student speak?", labels) == {"Grad A", "Grad E"}
    assert named_speakers("What is the weather like?", labels) == set()
    assert named_speakers("Was there a PhD defence?", labels) == set()  # "phd a" does not stand whole
    assert speaker_of("Professor C: Other way.") == "Professor C"
    assert speaker_of("Five words or more before: a colon") is None
    assert speaker_of("no capital: no speaker") is None


def test_a_chunks_speaker_share_is_the_part_of_its_query_word_weight_in_the_named_speakers_lines():
    lines = ["Melanie: I painted a sunrise.", "Caroline: Painting is fun, I paint too.", "Melanie: Thanks!"]
    weights = {"paint": 2.0, "sunris": 1.0}
    # Melanie's line holds paint + sunrise (3.0), Caroline's paint (2.0)
    assert speaker_share(lines, {"Melanie"}, weights) == pytest.approx(3.0 / 5.0)
    # no query word in the chunk: the part of its spoken lines the named speaker says
    assert speaker_share(lines, {"Caroline"}, {"guitar": 1.0}) == pytest.approx(1 / 3)
    assert speaker_share(["no speakers here"], {"Melanie"}, {"guitar": 1.0}) == 1.0


def test_a_centred_query_is_the_query_minus_the_mean_of_unit_length():
    moved = centred([1.0, 0.0], [0.5, 0.5], 1.0)
    assert moved == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)])
    assert centred([0.6, 0.8], [0.1, 0.2], 0.0) == pytest.approx([0.6, 0.8])


def test_list_questions_ask_for_a_plural_and_the_file_spread_lowers_a_files_later_candidates():
    assert list_question("What books has John read?") and list_question("Which cities has John been to?")
    assert list_question("What kind of flowers does she grow?")
    assert not list_question("What is Caroline's identity?") and not list_question("What does Melanie do to destress?")
    assert not list_question("What class did she take?") and not list_question("When did she go camping?")

    class Candidate:
        def __init__(self, chunk_id, score):
            self.chunk_id, self.score = chunk_id, score

    files = {1: "a", 2: "a", 3: "b", 4: "a"}
    spread = file_spread([Candidate(1, 1.0), Candidate(2, 0.9), Candidate(3, 0.8), Candidate(4, 0.7)],
                         file_of=lambda c: files[c.chunk_id], factor=0.8)
    assert [(c.chunk_id, round(c.score, 3)) for c in spread] == [(1, 1.0), (3, 0.8), (2, 0.72), (4, 0.448)]


def test_the_list_questions_recall_reads_locomos_multi_hop_questions_of_a_details_file(tmp_path):
    import json

    rows = [
        ("locomo", 1, "What books has John read?", 0.5), ("locomo", 1, "Which cities has John been to?", 1.0),
        ("locomo", 1, "What does Melanie do to destress?", 0.25), ("locomo", 4, "What books did Ann lend?", 0.0),
        ("meetings", 1, "What topics were raised?", 0.0),
    ]
    details = tmp_path / "default.jsonl"
    details.write_text("".join(
        json.dumps({"set": s, "category": c, "question": q, "score": {"recall": r}}) + "\n" for s, c, q, r in rows
    ))
    assert list_questions_recall(str(details)) == "list questions 2, recall 0.750 | other questions 1, recall 0.250"


def test_a_conversation_in_one_file_keeps_every_turn_on_its_line():
    sessions = conversation_load(SAMPLE)
    joined = single_file_load(SAMPLE, "confirm")

    assert list(joined.files) == [PATH] and joined.part == "confirm"
    lines = joined.files[PATH].split("\n")
    for turn_id, turn in sessions.turns.items():
        moved = joined.turns[turn_id]
        assert moved.path == PATH and moved.text == turn.text
        assert lines[moved.line - 1] == turn.text  # the line the protocol looks for
    first, second = sorted(sessions.files)
    assert joined.files[PATH] == sessions.files[first] + "\n" + sessions.files[second]  # a blank line between
    assert joined.questions == sessions.questions


class UnitVectors:
    """A provider whose vector of a line is given by the test, counting what it embeds."""

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors, self.embedded = vectors, []

    def embed_documents(self, texts):
        self.embedded.extend(texts)
        return [self.vectors[t] for t in texts]


def test_the_lines_meaning_the_query_most_gain_up_to_w_of_every_query_word_and_others_nothing():
    provider = UnitVectors({"best": [1.0, 0.0], "near": [0.98, 0.199], "far": [0.0, 1.0], " ": [0.0, 1.0]})
    scores = meaning_scores(
        lines=["far", "best", "", "near"], keyword_scores=[2.0, 0.0, 0.0, 0.0], query_vector=[1.0, 0.0],
        idf_total=4.0, weight=0.5, margin=0.05, provider=provider,
    )
    assert scores[0] == 2.0 and scores[2] == 0.0  # far from the query, and an empty line: keyword score only
    assert scores[1] == pytest.approx(2.0)  # the best line: 0.5 x 4
    assert scores[3] == pytest.approx(2.0 * (0.98 - 1.0 + 0.05) / 0.05)  # within the margin: in proportion
    meaning_scores(lines=["best", "far"], keyword_scores=[0, 0], query_vector=[1.0, 0.0], idf_total=1.0,
                   weight=1.0, margin=0.05, provider=provider)
    assert sorted(provider.embedded) == [" ", "best", "far", "near"]  # each distinct line embedded once


def test_a_question_loses_the_words_most_chunks_hold_or_only_the_capitalised_ones():
    chunks = ["Melanie: I went hiking.", "Caroline: Nice! Melanie, what else?", "Melanie: pottery, and the camp"]
    shares = word_shares(chunks)
    assert shares["melanie"] == 1.0 and shares["pottery"] == pytest.approx(1 / 3)
    question = "What activities does Melanie partake in?"
    assert stripped(question, shares, threshold=0.6, names_only=True) == "What activities does partake in?"
    assert stripped("Where did Caroline and Melanie go hiking?", shares, threshold=0.6, names_only=False) == (
        "Where did Caroline and go hiking?"
    )
    assert stripped("What about the camp?", shares, threshold=0.3, names_only=False) == "about ?"  # "what" is in one chunk too
    assert combined([1.0, 0.0], [0.0, 1.0]) == pytest.approx([math.sqrt(0.5), math.sqrt(0.5)])


def test_a_questions_content_words_bring_the_memorys_nearest_words_and_lift_the_keyword_scores():
    import numpy as np

    from search.keyword import KeywordHit, KeywordResult

    assert content_words("What activities does Melanie partake in with the Kids?") == ["activities", "partake"]
    assert vocabulary(["Hiking and pottery, more hiking", "Hiking again"]) == {"again": 0.5, "hiking": 1.0, "pottery": 0.5}
    words = ["activity", "hiking", "pottery", "taxes"]
    matrix = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
    query = np.array([1.0, 0.0])
    assert neighbours("activities", query, words, matrix, at_least=0.5, k=3) == ["hiking", "pottery"]  # "activ..." left out
    assert neighbours("activities", query, words, matrix, at_least=0.5, k=1) == ["hiking"]
    first = KeywordResult(hits=[KeywordHit(chunk_id=1, score=1.0, bm25=4.0), KeywordHit(chunk_id=2, score=0.5, bm25=2.0)],
                          lexemes=["activ"], idf={"activ": 2.0})
    second = KeywordResult(hits=[KeywordHit(chunk_id=2, score=1.0, bm25=3.0), KeywordHit(chunk_id=3, score=0.5, bm25=1.5)],
                           lexemes=["hike"], idf={"hike": 2.0})
    merged = lifted(first, second, weight=1.0)
    assert [(hit.chunk_id, round(hit.score, 3)) for hit in merged.hits] == [(2, 1.0), (1, 0.667), (3, 0.333)]
    assert merged.lexemes == ["activ"]  # the snippets still show the question's own words


def test_a_chunk_is_scored_by_the_best_of_its_windows_against_any_window_of_the_query():
    import numpy as np

    rows = [(7, 1, 1, 4, None), (7, 1, 1, 4, None), (8, 1, 5, 9, None)]  # chunk 7 has two windows
    matrix = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    hits = best_window_hits(rows, matrix, [[0.0, 2.0]], limit=5)
    assert [(hit.chunk_id, round(hit.distance, 3)) for hit in hits] == [(7, 0.0), (8, 0.2)]
    hits = best_window_hits(rows, matrix, [[0.0, -1.0], [0.6, 0.8]], limit=2)  # a query of two windows
    assert [(hit.chunk_id, round(hit.distance, 3), hit.start_line) for hit in hits] == [(8, 0.0, 5), (7, 0.2, 1)]
    assert len(best_window_hits(rows, matrix, [[0.0, -1.0], [0.6, 0.8]], limit=1)) == 1


def test_a_query_moved_toward_its_nearest_chunks_is_of_unit_length_and_two_searches_merge_at_the_better_distance():
    from search.vector import VectorHit

    assert moved([1.0, 0.0], [[0.0, 1.0], [0.0, 1.0]], 1.0) == pytest.approx([1 / math.sqrt(2), 1 / math.sqrt(2)])
    assert moved([1.0, 0.0], [[0.0, 1.0]], 0.5) == pytest.approx([2 / math.sqrt(5), 1 / math.sqrt(5)])
    assert moved([0.6, 0.8], [], 0.5) == [0.6, 0.8]
    def hit(chunk_id, distance):
        return VectorHit(chunk_id=chunk_id, distance=distance, file_id=1, start_line=1, end_line=2)

    both = merged([hit(1, 0.3), hit(2, 0.4)], [hit(2, 0.1), hit(3, 0.5)], limit=2)
    assert [(h.chunk_id, h.distance) for h in both] == [(2, 0.1), (1, 0.3)]


def test_the_fitted_fusions_features_and_proxy():
    from types import SimpleNamespace

    assert peak([1.0] * 9) == 0.0 and peak([1.0] + [0.5] * 8 + [0.25]) == pytest.approx(0.75)
    candidates = [SimpleNamespace(chunk_id=1, score=0.9), SimpleNamespace(chunk_id=2, score=0.5)]
    spans = {1: (10, 1, 5), 2: (10, 6, 9)}
    rows = features(candidates, spans, {"vector": {1: 0.8, 2: 0.4}, "keyword": {2: 1.0}, "fused": {1: 0.9, 2: 0.5}})
    assert rows[1]["vmm"] == 1.0 and rows[2]["vmm"] == 0.0 and rows[1]["has_k"] is False and rows[2]["k"] == 1.0
    assert rows[1]["nb"] == 0.5 / 2 and rows[2]["nb"] == 0.9 / 2  # the neighbour after / before, halved
    assert rows[1]["vrank"] == 1.0 and rows[2]["krank"] == 1.0
    question = {"set": "locomo", "n_ev": 2, "cands": [
        {"file": 10, "s": 1, "e": 5, "label": 1, "final": 0.9},
        {"file": 10, "s": 2, "e": 5, "label": 1, "final": 0.8},  # mostly inside the first: skipped
        {"file": 10, "s": 6, "e": 9, "label": 0, "final": 0.5},
    ]}
    assert proxy([question], lambda row: row["final"]) == {"locomo": 0.5}


def test_a_question_without_its_dates_and_the_two_keyword_runs_joined_by_file():
    from search.keyword import KeywordHit, KeywordResult

    assert without_dates("What did Maria plan on the evening of 7 July, 2023?") == "what did maria plan on the evening of ?"
    assert without_dates("What did John do in August 2023 and yesterday?") == "what did john do in and ?"
    assert without_dates("Where is the invoice?") == "where is the invoice?"

    def hit(chunk_id, file_id, bm25, best):
        return KeywordHit(chunk_id=chunk_id, score=bm25 / best, bm25=bm25, file_id=file_id)

    first = KeywordResult(hits=[hit(1, 10, 8.0, 8.0), hit(2, 10, 2.0, 8.0), hit(3, 20, 4.0, 8.0)], lexemes=["x"], idf={"x": 1.0})
    second = KeywordResult(hits=[hit(2, 10, 2.0, 2.0), hit(3, 20, 1.0, 2.0)], lexemes=["y"], idf={"y": 2.0})
    joined = date_combined(first, second, matched_files={10}, every=False, limit=10)
    # File 10 matched: its chunks take the second run's BM25 (chunk 1 matched only the date's words: gone);
    # file 20 keeps the first run's; scaled to the best again.
    assert [(h.chunk_id, h.score) for h in joined.hits] == [(3, 1.0), (2, 0.5)]
    assert joined.lexemes == ["x"] and joined.idf == {"x": 1.0, "y": 2.0}
    every = date_combined(first, second, matched_files={10}, every=True, limit=10)
    assert [(h.chunk_id, h.score) for h in every.hits] == [(2, 1.0), (3, 0.5)]


def test_the_share_of_chunks_given_another_models_vector_is_drawn_across_the_ids_and_grows_with_the_share():
    ids = range(1, 10_001)
    assert not any(stale(i, 0.0) for i in ids) and all(stale(i, 1.0) for i in ids)
    quarter = {i for i in ids if stale(i, 0.25)}
    assert abs(len(quarter) - 2500) < 100 and quarter <= {i for i in ids if stale(i, 0.5)}
    assert 0 < sum(stale(i, 0.25) for i in range(1, 41)) < 40  # not the first ids in a row
