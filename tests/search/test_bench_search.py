"""`manage.py bench_search` end to end on a tiny conversation: live HTTP server, fake embeddings."""

import json

import pytest
from django.core.management import CommandError, call_command

from agents.models import Agent
from memoryhub.celery import app as celery_app

TINY = [
    {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound puppy called Biscuit yesterday."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Congratulations! Greyhounds are gentle dogs."},
            ],
            "session_2_date_time": "3:00 pm on 20 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "My pottery class starts next Tuesday."},
                {"speaker": "Ana", "dia_id": "D2:2", "text": "Show me your first bowl!", "blip_caption": "a clay bowl"},
            ],
        },
        "qa": [
            {"question": "What is the name of Ana's greyhound puppy?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
            {"question": "When does Ben's pottery class start?", "answer": "Tuesday", "evidence": ["D2:1"], "category": 2},
            {"question": "Adversarial", "answer": "", "evidence": ["D1:2"], "category": 5},
        ],
    }
]


@pytest.fixture
def tiny_data(tmp_path):
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps(TINY))
    return path


@pytest.fixture
def live_api(live_server, settings):
    """The live server thread indexes uploads itself (eager tasks) with the counting fake provider."""
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "fake"
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash"
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 64
    old = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield live_server.url
    celery_app.conf.task_always_eager = old


def test_it_reports_recall_of_every_question_through_the_live_api(live_api, tiny_data, tmp_path, capsys):
    details = tmp_path / "details.jsonl"
    call_command("bench_search", "--base-url", live_api, "--data", str(tiny_data), "--json", "--details", str(details))
    report = json.loads(capsys.readouterr().out)["sets"]["locomo"]

    assert report["questions"] == 2  # category 5 is left out
    assert report["evidence_turns"] == 2
    assert report["index"]["files"] == 2 and report["index"]["failed"] == 0
    # Two short sessions: whichever file ranks first, both fit in the six snippets the agent reads.
    assert report["evidence_recall"] == 1.0 and report["hit_rate"] == 1.0
    assert report["categories"]["4"]["questions"] == 1 and report["categories"]["2"]["questions"] == 1
    assert report["latency_ms"]["client_p95"] > 0
    lines = [json.loads(line) for line in details.read_text().splitlines()]
    assert [line["evidence"] for line in lines] == [{"D1:1": ["memory/session-01.md", 3]}, {"D2:1": ["memory/session-02.md", 3]}]
    assert not Agent.objects.filter(slug__startswith="bench-").exists()  # cleaned up
    assert set(report["parts"]) == {"tune"}  # a one-conversation set is all tune part


def test_text_output_names_the_figures(live_api, tiny_data, capsys):
    call_command("bench_search", "--base-url", live_api, "--data", str(tiny_data), "--mode", "keyword")
    out = capsys.readouterr().out
    assert "all      evidence recall 1.000" in out and "mode sent: keyword" in out and "answered: keyword" in out
    assert "server took_ms p50" in out


def test_settings_other_than_search_ones_are_refused(tiny_data):
    with pytest.raises(CommandError, match="MEMORYHUB_SEARCH_"):
        call_command("bench_search", "--data", str(tiny_data), "--set", "SECRET_KEY=x")
    with pytest.raises(CommandError, match="cannot change a --base-url server"):
        call_command("bench_search", "--data", str(tiny_data), "--base-url", "http://127.0.0.1:9", "--set", "MEMORYHUB_SEARCH_X=1")


MEETINGS = {
    "name": "tiny-meetings",
    "workspaces": [
        {
            "id": f"m{index}",
            "files": {f"meetings/m{index}.md": f"# Meeting {index}\n\nChair: we open.\nAna: the remote needs a {colour} case.\nBen: agreed, {colour} it is.\n"},
            "questions": [
                {"question": f"What colour case did they choose in meeting {index}?", "evidence": [[f"meetings/m{index}.md", 4], [f"meetings/m{index}.md", 5]], "category": "product"},
                {"question": "nothing", "evidence": [[f"meetings/m{index}.md", 99]], "category": "product"},  # no such line: skipped
            ],
        }
        for index, colour in enumerate(["yellow", "green", "blue", "red"])
    ],
}


def test_a_meetings_set_is_scored_by_part_and_domain_next_to_locomo(live_api, tiny_data, tmp_path, capsys):
    meetings = tmp_path / "meetings.json"
    meetings.write_text(json.dumps(MEETINGS))
    call_command("bench_search", "--base-url", live_api, "--data", str(tiny_data), "--data", str(meetings), "--json")
    report = json.loads(capsys.readouterr().out)

    assert set(report["sets"]) == {"locomo", "meetings"}
    result = report["sets"]["meetings"]
    assert result["conversations"] == 4 and result["questions"] == 4 and result["skipped_questions"] == 4
    assert result["categories"]["product"]["questions"] == 4
    assert set(result["parts"]) == {"tune", "confirm"}  # workspace 3 (index 3 mod 7) is in the confirm part
    assert result["parts"]["confirm"]["questions"] == 1
    assert result["evidence_recall"] == 1.0


def test_part_selects_the_confirm_conversations_only(live_api, tmp_path, capsys):
    meetings = tmp_path / "meetings.json"
    meetings.write_text(json.dumps(MEETINGS))
    call_command("bench_search", "--base-url", live_api, "--data", str(meetings), "--part", "confirm", "--json")
    result = json.loads(capsys.readouterr().out)["sets"]["meetings"]
    assert result["conversations"] == 1 and set(result["parts"]) == {"confirm"}


def test_a_file_of_another_shape_is_refused(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"something": 1}')
    with pytest.raises(CommandError, match="neither a LoCoMo"):
        call_command("bench_search", "--data", str(other), "--base-url", "http://127.0.0.1:9")


def test_a_locomo_file_with_event_summaries_also_gives_the_dialogue_shaped_set(live_api, tiny_data, tmp_path, capsys):
    data = json.loads(tiny_data.read_text())
    data[0]["event_summary"] = {
        "events_session_1": {"Ana": ["Ana adopts a greyhound puppy named Biscuit."], "Ben": [], "date": "8 May, 2023"},
        "events_session_2": {"Ana": [], "Ben": ["Ben signs up for a pottery class."], "date": "20 June, 2023"},
        "events_session_3": {"Ana": ["A session that has no dialogue is no query."], "Ben": [], "date": "1 July, 2023"},
    }
    path = tmp_path / "events.json"
    path.write_text(json.dumps(data))
    details = tmp_path / "details.jsonl"
    call_command("bench_search", "--base-url", live_api, "--data", str(path), "--json", "--details", str(details))
    report = json.loads(capsys.readouterr().out)["sets"]

    assert set(report) == {"locomo", "dialogue"}
    dialogue = report["dialogue"]
    assert dialogue["questions"] == 2 and dialogue["evidence_turns"] == 2
    assert dialogue["index"]["files"] == 2  # one note per file; a session without dialogue is left out
    lines = [json.loads(line) for line in details.read_text().splitlines() if json.loads(line)["set"] == "dialogue"]
    # The query is the session's whole dialogue; its evidence is the note of that session's event, line 3.
    assert lines[0]["question"] == "Ana: I adopted a greyhound puppy called Biscuit yesterday.\nBen: Congratulations! Greyhounds are gentle dogs."
    assert list(lines[0]["evidence"].values()) == [["memory/events/2023-05-08-001.md", 3]]
    assert list(lines[1]["evidence"].values()) == [["memory/events/2023-06-20-002.md", 3]]


def test_no_dialogue_leaves_the_derived_set_out(live_api, tiny_data, tmp_path, capsys):
    data = json.loads(tiny_data.read_text())
    data[0]["event_summary"] = {"events_session_1": {"Ana": ["Ana adopts a puppy."], "date": "8 May, 2023"}}
    path = tmp_path / "events.json"
    path.write_text(json.dumps(data))
    call_command("bench_search", "--base-url", live_api, "--data", str(path), "--json", "--no-dialogue")
    assert set(json.loads(capsys.readouterr().out)["sets"]) == {"locomo"}


def test_the_dev_sets_are_found_beside_the_checkout_or_beside_a_worktrees_parent(tmp_path, settings):
    from benchmarks.management.commands.bench_search import _data_dir

    (tmp_path / "shared" / "data").mkdir(parents=True)
    for checkout in (tmp_path / "main", tmp_path / "wt" / "branch"):
        checkout.mkdir(parents=True)
        settings.BASE_DIR = checkout
        assert _data_dir() == tmp_path / "shared" / "data"
