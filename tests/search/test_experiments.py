"""benchmarks/experiments/observations_check.py: the second derivation of the dialogue shape that
docs/search.md quotes (LoCoMo-shaped observations as dated notes, stretches of dialogue as queries),
checked on a made-up conversation."""

from benchmarks.experiments.observations_check import observations_load, session_day


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
