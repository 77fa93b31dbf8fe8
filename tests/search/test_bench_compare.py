"""manage.py bench_compare: two runs' --details files compared question by question."""

import json

import pytest
from django.core.management import CommandError, call_command


def question(text, recall, results, *, set_name="locomo", part="tune"):
    return {
        "set": set_name, "conversation": "conv-1", "part": part, "question": text, "category": 1, "evidence": {},
        "score": {"recall": recall}, "results": [{"path": p, "start_line": s, "end_line": e, "score": 0.5} for p, s, e in results],
    }


def write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def run(*args):
    from io import StringIO

    out = StringIO()
    call_command("bench_compare", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_the_same_answers_show_no_change_and_other_answers_are_counted_won_and_lost(tmp_path):
    a = [question("q1", 1.0, [("m.md", 1, 3)]), question("q2", 0.0, [("m.md", 4, 6)]), question("q3", 0.5, [("n.md", 1, 2)])]
    before = write(tmp_path / "a.jsonl", a)
    out = run(before, write(tmp_path / "same.jsonl", list(reversed(a))))  # order does not matter
    assert "0 of 3 questions have other results" in out
    assert "locomo     tune             3        0     0     0  0.500 → 0.500" in out

    b = [question("q1", 0.0, [("m.md", 9, 9)]), question("q2", 1.0, [("m.md", 1, 3)]),
         question("q3", 0.5, [("n.md", 1, 2)]) | {"results": [{"path": "n.md", "start_line": 1, "end_line": 2, "score": 0.4}]}]
    out = run(before, write(tmp_path / "b.jsonl", b), "--list", "1")
    assert "locomo     tune             3        3     1     1  0.500 → 0.500" in out  # a score moved: changed, neither won nor lost
    assert "3 of 3 questions have other results" in out
    assert "-1.00  locomo conv-1: q1" in out and "q2" not in out.split("have other results")[1]  # the one that moved most first
    assert "  before m.md:" in out and "  after  m.md:" in out


def test_files_that_do_not_hold_the_same_questions_or_are_not_details_files_are_refused(tmp_path):
    before = write(tmp_path / "a.jsonl", [question("q1", 1.0, []), question("q2", 1.0, [])])
    with pytest.raises(SystemExit) as exited:
        run(before, write(tmp_path / "b.jsonl", [question("q1", 1.0, [])]))
    assert exited.value.code == 2
    with pytest.raises(CommandError, match="line 1: not a question"):
        run(before, write(tmp_path / "c.jsonl", [{"set": "locomo"}]))
    with pytest.raises(CommandError, match="cannot read"):
        run(before, str(tmp_path / "missing.jsonl"))
